//! This replica's session with etcd: the etcd client, the lease its keys (registration,
//! health views) live under, and whether etcd is reachable. The lease is renewed every
//! third of its time to live; when renewal fails the replica counts as disconnected (one
//! warning), and it reconnects with backoff, keeping the same lease when it has not
//! expired meanwhile so that a short outage rewrites nothing.
//!
//! With a user (`cluster.etcd.username`) the session logs in before its first lease and
//! again at every reconnection: a restarted etcd has forgotten every token, and watches
//! opened with a forgotten token are refused without the client noticing (`follow` logs in
//! again when that happens). Until then the other parts' requests fail as if etcd were
//! down, and they retry.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use etcd_client::Client;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::etcd::{self, Backoff, EtcdError};
use crate::model::cluster::ClusterSettings;

pub struct Session {
    pub settings: Arc<ClusterSettings>,
    pub client: Client,
    connected: AtomicBool,
    /// `connected` for the parts that must act the moment it changes (leadership).
    connection: watch::Sender<bool>,
    /// Set once the first state is known, so that a replica that never reached etcd logs
    /// its first failure too.
    reported: AtomicBool,
    /// Whether `client` carries a token etcd knows, as far as known.
    logged_in: AtomicBool,
    /// The lease (`None` until the first is granted). It changes only when a new lease
    /// replaces an expired one: the keys written under the old one are gone and must be
    /// written again.
    lease: watch::Sender<Option<i64>>,
}

impl Session {
    pub fn new(settings: Arc<ClusterSettings>, client: Client) -> Arc<Session> {
        Arc::new(Session {
            settings,
            client,
            connected: AtomicBool::new(false),
            connection: watch::Sender::new(false),
            reported: AtomicBool::new(false),
            logged_in: AtomicBool::new(false),
            lease: watch::Sender::new(None),
        })
    }

    /// Whether the lease was renewed in time lately (`steerdns_cluster_connected`).
    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// `connected`, watched: a leader steps down the moment a renewal fails, before its
    /// lease can expire and another replica take over.
    pub fn connection(&self) -> watch::Receiver<bool> {
        self.connection.subscribe()
    }

    /// The lease this replica's keys are written under (see the field); whether it is
    /// being renewed right now is `connected`.
    pub fn lease(&self) -> watch::Receiver<Option<i64>> {
        self.lease.subscribe()
    }

    /// Logs in as `cluster.etcd.username` unless logged in already (nothing without a
    /// user).
    pub async fn log_in(&self) -> Result<(), EtcdError> {
        if self.settings.etcd.auth.is_none() || self.logged_in.load(Ordering::Relaxed) {
            return Ok(());
        }
        etcd::log_in(&self.client, &self.settings.etcd).await?;
        self.logged_in.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Logs in again even when logged in: etcd refused the token (it expired, or etcd
    /// restarted and forgot it).
    pub async fn log_in_again(&self) -> Result<(), EtcdError> {
        self.logged_in.store(false, Ordering::Relaxed);
        self.log_in().await
    }

    /// Records a change of connection state, logging only changes (and the first state).
    pub fn set_connected(&self, connected: bool, why: &str) {
        let was = self.connected.swap(connected, Ordering::Relaxed);
        self.connection.send_if_modified(|c| std::mem::replace(c, connected) != connected);
        let first = !self.reported.swap(true, Ordering::Relaxed);
        let endpoints = self.settings.etcd.endpoints.join(",");
        match (first || was != connected, connected) {
            (false, _) => {}
            (true, true) => {
                tracing::info!(%endpoints, node = %self.settings.node, "connected to etcd")
            }
            (true, false) => tracing::warn!(
                %endpoints,
                error = why,
                "etcd unreachable; serving the last configuration and this replica's own probes until it is back"
            ),
        }
    }

    /// Keeps the lease until `cancel`, then revokes it so that this replica's keys vanish
    /// at once on a clean shutdown (a killed replica's vanish when the lease expires).
    pub async fn run(self: Arc<Session>, cancel: CancellationToken) {
        let ttl = self.settings.lease_ttl;
        let mut backoff = Backoff::default();
        let mut lease = None;
        loop {
            let obtained = match self.log_in().await {
                Ok(()) => self.obtain(lease, ttl).await.map_err(EtcdError::from),
                Err(e) => Err(e),
            };
            let id = match obtained {
                Ok(id) => id,
                Err(e) => {
                    self.logged_in.store(false, Ordering::Relaxed);
                    self.set_connected(false, &e.to_string());
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(backoff.next_delay()) => continue,
                    }
                }
            };
            lease = Some(id);
            backoff.reset();
            self.lease.send_if_modified(|l| l.replace(id) != Some(id));
            self.set_connected(true, "");
            let why = tokio::select! {
                _ = cancel.cancelled() => {
                    let mut leases = self.client.lease_client();
                    let _ = tokio::time::timeout(Duration::from_secs(1), leases.revoke(id)).await;
                    return;
                }
                why = self.renew(id, ttl) => why,
            };
            self.set_connected(false, &why);
            // The lease stays: it may outlive the outage and be kept. The token may not.
            self.logged_in.store(false, Ordering::Relaxed);
        }
    }

    /// The lease to use: `previous` if etcd still has it, else a new one.
    async fn obtain(
        &self,
        previous: Option<i64>,
        ttl: Duration,
    ) -> Result<i64, etcd_client::Error> {
        let mut leases = self.client.lease_client();
        if let Some(id) = previous {
            // The client reads etcd's first answer itself and says "lease not found" when
            // the lease expired meanwhile (a cut longer than its time to live): a new one.
            match leases.keep_alive(id).await {
                Ok((mut keeper, mut stream)) => {
                    keeper.keep_alive().await?;
                    if let Some(resp) = stream.message().await?
                        && resp.ttl() > 0
                    {
                        return Ok(id);
                    }
                }
                Err(etcd_client::Error::LeaseKeepAliveError(e)) if e == "lease not found" => {}
                Err(e) => return Err(e),
            }
        }
        let secs = ttl.as_secs().max(1) as i64;
        Ok(leases.grant(secs, None).await?.id())
    }

    /// Renews `id` every third of `ttl` until a renewal fails; returns why.
    async fn renew(&self, id: i64, ttl: Duration) -> String {
        let mut leases = self.client.lease_client();
        let (mut keeper, mut stream) = match leases.keep_alive(id).await {
            Ok(pair) => pair,
            Err(e) => return EtcdError::from(e).to_string(),
        };
        let every = ttl / 3;
        loop {
            let renewed = async {
                keeper.keep_alive().await?;
                stream.message().await
            };
            match tokio::time::timeout(every, renewed).await {
                Ok(Ok(Some(resp))) if resp.ttl() > 0 => {}
                Ok(Ok(Some(_))) => return "the lease expired".into(),
                Ok(Ok(None)) => return "etcd closed the lease stream".into(),
                Ok(Err(e)) => return EtcdError::from(e).to_string(),
                Err(_) => return format!("no lease renewal within {every:?}"),
            }
            tokio::time::sleep(every).await;
        }
    }
}
