//! `GET /api/v1/cluster`: this replica's place in the cluster (node name, whether it
//! reaches etcd, the profiles revision it serves, who leads the load role) and every
//! registered replica with the revision it serves. `{"cluster": null}` without
//! `cluster:`, so that one poller works for every replica.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Shared;
use crate::server::cluster::nodes;

/// How long the node list may take; past it the answer says etcd did not answer.
const LIST_WAIT: Duration = Duration::from_secs(2);

pub async fn show(State(c): State<Shared>) -> Response {
    let Some(session) = &c.cluster else {
        return Json(json!({ "cluster": null })).into_response();
    };
    let settings = &session.settings;
    let served = *c.served().borrow();
    let listed = tokio::time::timeout(LIST_WAIT, nodes::list(&session.client, &settings.etcd));
    let (nodes, error) = match listed.await {
        Ok(Ok(listed)) => {
            let nodes: Vec<Value> = listed
                .nodes
                .iter()
                .map(|n| {
                    let mut v = serde_json::to_value(n).expect("a node record serialises");
                    v["same_revision"] = json!(n.revision == served.revision);
                    v
                })
                .collect();
            let error = (!listed.unreadable.is_empty()).then(|| {
                let keys: Vec<String> =
                    listed.unreadable.iter().map(|(k, e)| format!("{k}: {e}")).collect();
                format!("unreadable registrations: {}", keys.join("; "))
            });
            (json!(nodes), error)
        }
        Ok(Err(e)) => (Value::Null, Some(e.at(&settings.etcd.endpoints.join(",")))),
        Err(_) => {
            let e = crate::server::cluster::etcd::EtcdError::Timeout(LIST_WAIT);
            (Value::Null, Some(e.at(&settings.etcd.endpoints.join(","))))
        }
    };
    let mut body = json!({
        "node": settings.node,
        "connected": session.connected(),
        "quorum": settings.quorum.to_string(),
        "profiles": if settings.profiles_from_etcd { "etcd" } else { "files" },
        "revision": served.revision,
        "generation": served.generation,
        "etcd": { "endpoints": settings.etcd.endpoints, "prefix": settings.etcd.prefix },
        "leaders": {
            "load": c.load.publisher().and_then(|p| p.leader()).flatten(),
            "notify": c.notify.get().and_then(|n| n.leader()),
        },
        "nodes": nodes,
    });
    if let Some(e) = error {
        body["nodes_error"] = json!(e);
    }
    Json(json!({ "cluster": body })).into_response()
}
