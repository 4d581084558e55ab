//! Load shares through etcd (`server::cluster::load`) against a real etcd: replicas, each
//! with its own session through a proxy, follow what the leader of the `load` role
//! writes. Only the leader writes a step; every replica reads the same shares and
//! generation; a load pushed through any replica reaches the leader and goes when its
//! time to live ends; a new leader continues the generation and the shares it followed.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use common::*;
use steerdns::geo::World;
use steerdns::model::cluster::{ClusterSettings, EtcdSettings, Quorum};
use steerdns::model::health::HealthTable;
use steerdns::model::load::EndpointLoad;
use steerdns::model::{Listen, Snapshot};
use steerdns::server::cluster::Session;
use steerdns::server::cluster::etcd;
use steerdns::server::cluster::leader::Leadership;
use steerdns::server::cluster::load::{self, ClusterLoad, LoadShareError, PushedRecord, Shares};
use tokio_util::sync::CancellationToken;

/// Longest wait for etcd to carry a change to every replica; generous for a loaded
/// 2-core runner.
const CATCH_UP: Duration = Duration::from_secs(30);

const LEASE: Duration = Duration::from_secs(2);

struct Member {
    proxy: Proxy,
    load: Arc<ClusterLoad>,
    stop: CancellationToken,
}

async fn member(etcd: &Etcd, node: &str) -> Member {
    let proxy = Proxy::start(etcd.client).await;
    let settings = ClusterSettings {
        node: node.into(),
        etcd: EtcdSettings {
            endpoints: vec![proxy.url.clone()],
            prefix: "/shares/".into(),
            tls: None,
            auth: None,
        },
        quorum: Quorum::Majority,
        lease_ttl: LEASE,
        profiles_from_etcd: false,
        cache_file: PathBuf::new(),
    };
    let client = etcd::client(&settings.etcd).await.unwrap();
    let session = Session::new(Arc::new(settings), client);
    let stop = CancellationToken::new();
    tokio::spawn(session.clone().run(stop.clone()));
    let leadership = Leadership::start(session.clone(), load::ROLE, stop.clone());
    let empty = Snapshot::new(
        Listen::default(),
        vec![],
        vec![],
        Arc::new(HealthTable::new([])),
        Arc::new(World::empty()),
    );
    let shared = Arc::new(ArcSwap::from_pointee(empty));
    let load = ClusterLoad::start(session, leadership, shared, stop.clone());
    Member { proxy, load, stop }
}

fn shares(eu: f64, us: f64) -> Shares {
    let ep = |s: f64| EndpointLoad {
        load: Some(930.0),
        utilisation: Some(0.93),
        target: s,
        share: s,
        stale: false,
        above_high: s < 0.5,
    };
    let endpoints = BTreeMap::from([("eu".to_string(), ep(eu)), ("us".to_string(), ep(us))]);
    BTreeMap::from([("www.tm.example.test.".to_string(), endpoints)])
}

async fn one_leader(members: &[Member], among: &[usize]) -> usize {
    eventually(CATCH_UP, "one member leads", async || {
        among.iter().filter(|&&i| members[i].load.is_leader()).count() == 1
    })
    .await;
    *among.iter().find(|&&i| members[i].load.is_leader()).unwrap()
}

async fn all_see(members: &[Member], among: &[usize], generation: u64, want: &Shares) {
    eventually(CATCH_UP, &format!("every member reads generation {generation}"), async || {
        among.iter().all(|&i| {
            let v = members[i].load.view();
            v.step.generation == generation && v.shares == *want
        })
    })
    .await;
}

#[tokio::test]
async fn every_replica_reads_the_leaders_step_and_a_new_leader_continues_it() {
    let Some(etcd) = Etcd::start() else { return };
    let mut members = Vec::new();
    for node in ["node-0", "node-1", "node-2"] {
        members.push(member(&etcd, node).await);
    }
    let first = one_leader(&members, &[0, 1, 2]).await;
    let follower = (first + 1) % 3;

    // Only the leader writes a step.
    let before = shares(0.4, 1.0);
    let refused = members[follower].load.publish(&before).await;
    assert!(matches!(refused, Err(LoadShareError::NotLeader)), "{refused:?}");
    let g1 = members[first].load.publish(&before).await.unwrap();
    assert_eq!(g1, 1);
    all_see(&members, &[0, 1, 2], g1, &before).await;
    let g2 = members[first].load.publish(&shares(0.3, 1.0)).await.unwrap();
    assert_eq!(g2, 2);
    all_see(&members, &[0, 1, 2], g2, &shares(0.3, 1.0)).await;
    let view = members[follower].load.view();
    assert_eq!(view.step.leader, format!("node-{first}"));

    // A load pushed through a follower reaches the leader, and goes with its lease.
    let pushed = PushedRecord {
        load: Some(870.0),
        utilisation: None,
        expires: "2026-12-02T07:00:30Z".into(),
        by: "alice".into(),
        at: "2026-12-02T07:00:00Z".into(),
    };
    let target = ("www.tm.example.test.".to_string(), "eu".to_string());
    let push = members[follower].load.push(&target.0, &target.1, &pushed, LEASE);
    push.await.unwrap();
    eventually(CATCH_UP, "the leader reads the pushed load", async || {
        members[first].load.view().pushed.get(&target) == Some(&pushed)
    })
    .await;
    eventually(CATCH_UP, "the pushed load expires", async || {
        members[first].load.view().pushed.is_empty()
    })
    .await;
    members[follower].load.push(&target.0, &target.1, &pushed, CATCH_UP).await.unwrap();
    eventually(CATCH_UP, "pushed again", async || !members[first].load.view().pushed.is_empty())
        .await;
    members[follower].load.clear(&target.0, &target.1).await.unwrap();
    eventually(CATCH_UP, "a cleared push is gone", async || {
        members[first].load.view().pushed.is_empty()
    })
    .await;

    // Cut off, the leader loses the role; the next one starts from what etcd holds.
    members[first].proxy.cut();
    let rest: Vec<usize> = (0..3).filter(|&i| i != first).collect();
    let second = one_leader(&members, &rest).await;
    let view = members[second].load.view();
    assert_eq!((view.step.generation, &view.shares), (g2, &shares(0.3, 1.0)));
    let refused = members[first].load.publish(&shares(1.0, 1.0)).await;
    assert!(matches!(refused, Err(LoadShareError::NotLeader)), "{refused:?}");
    // A profile no longer fed is deleted.
    let g3 = members[second].load.publish(&BTreeMap::new()).await.unwrap();
    assert_eq!(g3, g2 + 1);
    all_see(&members, &rest, g3, &BTreeMap::new()).await;

    members[first].proxy.restore();
    all_see(&members, &[0, 1, 2], g3, &BTreeMap::new()).await;
    for m in &members {
        m.stop.cancel();
    }
}
