//! Load shares through etcd (`server::cluster::load`) against a real etcd: replicas, each
//! with its own session through a proxy, follow what the leader of the `load` role
//! writes. Only the leader writes a step; every replica reads the same shares and
//! generation; a load pushed through any replica reaches the leader and goes when its
//! time to live ends; a new leader continues the generation and the shares it followed.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use common::*;
use steerdns::geo::World;
use steerdns::model::cluster::{ClusterSettings, EtcdSettings, Quorum};
use steerdns::model::health::HealthTable;
use steerdns::model::load::{EndpointLoad, Reading};
use steerdns::model::{Listen, Snapshot};
use steerdns::server::cluster::Session;
use steerdns::server::cluster::etcd;
use steerdns::server::cluster::leader::Leadership;
use steerdns::server::cluster::load::{self, ClusterLoad, LoadShareError};
use steerdns::server::load::pushed::PushedLoad;
use steerdns::server::load::{LoadEntry, LoadMap, Loads};
use tokio_util::sync::CancellationToken;

/// Longest wait for etcd to carry a change to every replica; generous for a loaded
/// 2-core runner.
const CATCH_UP: Duration = Duration::from_secs(30);

const LEASE: Duration = Duration::from_secs(2);

const WWW: &str = "www.tm.example.test.";

struct Member {
    proxy: Proxy,
    load: Arc<ClusterLoad>,
    loads: Arc<Loads>,
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
    let loads = Arc::new(Loads::default());
    let load = ClusterLoad::start(session, leadership, loads.clone(), shared, stop.clone());
    Member { proxy, load, loads, stop }
}

/// A step's map: `www`'s endpoints `eu` and `us` at these shares.
fn map(step: u64, eu: f64, us: f64) -> LoadMap {
    let entry = |endpoint: &str, share: f64| LoadEntry {
        profile: WWW.into(),
        endpoint: endpoint.into(),
        state: EndpointLoad {
            load: Some(930.0),
            utilisation: Some(0.93),
            target: share,
            share,
            stale: false,
            above_high: share < 0.5,
        },
        read_at_ms: Some(1_800_000_000_000 + step),
        error: None,
    };
    LoadMap {
        step,
        at_ms: 1_800_000_000_000 + step,
        entries: vec![entry("eu", eu), entry("us", us)],
    }
}

async fn one_leader(members: &[Member], among: &[usize]) -> usize {
    eventually(CATCH_UP, "one member leads", async || {
        among.iter().filter(|&&i| members[i].load.leads()).count() == 1
    })
    .await;
    *among.iter().find(|&&i| members[i].load.leads()).unwrap()
}

/// Waits until every member of `among` has applied `want`.
async fn all_apply(members: &[Member], among: &[usize], want: &LoadMap) {
    eventually(CATCH_UP, &format!("every member applies step {}", want.step), async || {
        among.iter().all(|&i| *members[i].loads.current() == *want)
    })
    .await;
}

#[tokio::test]
async fn every_replica_applies_the_leaders_step_and_a_new_leader_continues_it() {
    let Some(etcd) = Etcd::start() else { return };
    let mut members = Vec::new();
    for node in ["node-0", "node-1", "node-2"] {
        members.push(member(&etcd, node).await);
    }
    let first = one_leader(&members, &[0, 1, 2]).await;
    let follower = (first + 1) % 3;

    // Only the leader writes a step; every member applies it, the leader included, and
    // says who wrote it.
    let refused = members[follower].load.write(&map(1, 0.4, 1.0)).await;
    assert!(matches!(refused, Err(LoadShareError::NotLeader)), "{refused:?}");
    members[first].load.write(&map(1, 0.4, 1.0)).await.unwrap();
    all_apply(&members, &[0, 1, 2], &map(1, 0.4, 1.0)).await;
    members[first].load.write(&map(2, 0.3, 1.0)).await.unwrap();
    all_apply(&members, &[0, 1, 2], &map(2, 0.3, 1.0)).await;
    assert_eq!(members[follower].load.view().step.leader, format!("node-{first}"));

    // A load pushed through a follower reaches the leader's loop, fresh until its time to
    // live ends; cleared, it is gone.
    let push = |ttl: Duration| PushedLoad {
        load: 870.0,
        at: tokio::time::Instant::now(),
        at_wall: SystemTime::now(),
        ttl,
        by: "alice".into(),
    };
    let began = members[follower].load.push(WWW, "eu", &push(LEASE)).await.unwrap();
    assert!(began, "the first push begins a run");
    let reading = |m: &Member| m.loads.pushed.reading(WWW, "eu", tokio::time::Instant::now());
    eventually(CATCH_UP, "the leader reads the pushed load", async || {
        matches!(reading(&members[first]), (Reading::Fresh { load }, Some(p)) if load == 870.0 && p.by == "alice")
    })
    .await;
    eventually(CATCH_UP, "the pushed load goes stale", async || {
        reading(&members[first]).0 == Reading::Stale
    })
    .await;
    members[follower].load.push(WWW, "eu", &push(CATCH_UP)).await.unwrap();
    eventually(CATCH_UP, "pushed again", async || {
        matches!(reading(&members[first]).0, Reading::Fresh { .. })
    })
    .await;
    assert!(members[follower].load.clear(WWW, "eu").await.unwrap());
    eventually(CATCH_UP, "a cleared push is gone", async || {
        reading(&members[first]).0 == Reading::NoFeed
    })
    .await;

    // Cut off, the leader loses the role; the next one has applied the last step.
    members[first].proxy.cut();
    let rest: Vec<usize> = (0..3).filter(|&i| i != first).collect();
    let second = one_leader(&members, &rest).await;
    assert_eq!(*members[second].loads.current(), map(2, 0.3, 1.0));
    let refused = members[first].load.write(&map(3, 1.0, 1.0)).await;
    assert!(matches!(refused, Err(LoadShareError::NotLeader)), "{refused:?}");
    // A profile no longer fed is deleted.
    let emptied = LoadMap { step: 3, at_ms: 1_800_000_000_003, entries: vec![] };
    members[second].load.write(&emptied).await.unwrap();
    all_apply(&members, &rest, &emptied).await;

    members[first].proxy.restore();
    all_apply(&members, &[0, 1, 2], &emptied).await;
    for m in &members {
        m.stop.cancel();
    }
}
