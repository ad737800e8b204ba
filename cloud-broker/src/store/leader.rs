//! One leader among the replicas that share an etcd store: an etcd lease and the leadership key
//! `{prefix}leader` created under it.
//!
//! Invariants:
//! - A replica leads from the moment its transaction created the leadership key (bound to its
//!   lease) until that lease ends; the key's create revision is the leader's term, strictly
//!   greater than every earlier term.
//! - Every write of the leader is fenced on that create revision ([`EtcdStore::set_fence`]), so
//!   once the lease has ended (the replica was paused or cut off past its TTL) nothing it
//!   writes lands, whatever it believes.
//! - A replica that finds its lease ended says so in its log and starts again as a standby
//!   (the same process, executed again from the start: it campaigns before it serves).
//! - A leader that stops cleanly (SIGTERM) revokes its lease ([`Leadership::resign`]) after its
//!   last write: a standby leads at once instead of after the TTL.

use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use tracing::{error, info, warn};

use super::etcd::{EtcdStore, Fence};
use super::StoreError;

/// How often a standby looks whether the leadership key is free.
const POLL: Duration = Duration::from_millis(250);

/// The name a replica writes into the leadership key: host and process.
pub fn replica_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}:{}", host.trim(), std::process::id())
}

/// This replica's leadership (from [`lead`]).
pub struct Leadership {
    pub term: u64,
    lease: i64,
    client: Client,
    rt: tokio::runtime::Handle,
    watch: tokio::task::JoinHandle<()>,
}

impl Leadership {
    /// A clean stop: the lease is no longer watched and is revoked (its leadership key goes
    /// with it), so that a standby leads at once. Nothing may be written after this.
    pub async fn resign(self) {
        self.watch.abort();
        let (mut c, lease) = (self.client, self.lease);
        let revoked = self
            .rt
            .spawn(async move {
                tokio::time::timeout(Duration::from_secs(2), c.lease_revoke(lease)).await
            })
            .await;
        match revoked {
            Ok(Ok(Ok(_))) => info!(
                "resigned: term {} ended, the lease revoked (a standby leads at once)",
                self.term
            ),
            Ok(Ok(Err(e))) => warn!(
                "the lease of term {} could not be revoked ({e}): a standby leads once it expires",
                self.term
            ),
            _ => warn!(
                "the lease of term {} could not be revoked in time: a standby leads once it expires",
                self.term
            ),
        }
    }
}

/// Waits until this replica leads; then fences every write of `store` on its term and
/// watches its lease (when it ends: logged, and the process starts again as a standby).
pub async fn lead(store: &EtcdStore, ttl_s: u64) -> Result<Leadership, StoreError> {
    let key = format!("{}leader", store.prefix());
    let me = replica_name();
    info!("standby: waiting to lead ({key}, lease {ttl_s} s) as {me}");
    let elected = store
        .handle()
        .spawn(campaign_until_elected(
            store.client(),
            key.clone(),
            me,
            ttl_s as i64,
        ))
        .await
        .map_err(|e| StoreError::Etcd(e.to_string()))?;
    let term = elected.term;
    store.set_fence(Some(Fence {
        key: key.clone(),
        create_revision: term as i64,
    }));
    info!("leading: term {term} ({key})");
    let (client, lease) = (elected.client.clone(), elected.lease);
    let watch = store.handle().spawn(async move {
        let why = elected.watch().await;
        error!("lost the leadership (term {term}): {why}; nothing more is written, starting again as a standby");
        restart_as_standby();
    });
    Ok(Leadership {
        term,
        lease,
        client,
        rt: store.handle(),
        watch,
    })
}

/// The replica won the leadership key under `lease`.
struct Elected {
    term: u64,
    client: Client,
    lease: i64,
    ttl: Duration,
}

/// How long a standby that cannot reach etcd waits before it tries again.
const RETRY: Duration = Duration::from_secs(1);
/// How often the same failure to reach etcd is logged again.
const LOG_AGAIN: Duration = Duration::from_secs(30);

/// [`campaign`] until it succeeds: etcd unreachable or without its quorum is logged once (again
/// every [`LOG_AGAIN`] while it lasts, with the last reason), and tried again every [`RETRY`].
async fn campaign_until_elected(client: Client, key: String, me: String, ttl_s: i64) -> Elected {
    let mut logged: Option<(String, Instant)> = None;
    loop {
        match campaign(client.clone(), key.clone(), me.clone(), ttl_s).await {
            Ok(e) => {
                if logged.is_some() {
                    info!("standby: etcd answers again");
                }
                return e;
            }
            Err(e) => {
                let why = e.to_string();
                let again = logged
                    .as_ref()
                    .is_none_or(|(_, at)| at.elapsed() >= LOG_AGAIN);
                if again {
                    warn!("standby: no decision can be made, etcd does not answer: {why}");
                    logged = Some((why, Instant::now()));
                }
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// Creates the leadership key under a new lease once it is free; returns when it did.
async fn campaign(
    mut client: Client,
    key: String,
    me: String,
    ttl_s: i64,
) -> Result<Elected, etcd_client::Error> {
    let mut holder_logged = String::new();
    loop {
        let held = client.get(key.clone(), None).await?;
        if let Some(kv) = held.kvs().first() {
            let holder = kv.value_str().unwrap_or("?").to_string();
            if holder != holder_logged {
                info!("standby: {holder} leads");
                holder_logged = holder;
            }
            tokio::time::sleep(POLL).await;
            continue;
        }
        let lease = client.lease_grant(ttl_s, None).await?.id();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                me.clone(),
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let r = client.txn(txn).await?;
        if r.succeeded() {
            let term = r.header().map(|h| h.revision()).unwrap_or_default() as u64;
            return Ok(Elected {
                term,
                client,
                lease,
                ttl: Duration::from_secs(ttl_s as u64),
            });
        }
        let _ = client.lease_revoke(lease).await;
    }
}

impl Elected {
    /// Keeps the lease alive; returns why it ended: etcd says it expired, or it could not be
    /// renewed for a whole TTL (then it has expired, or will before anyone could act on it).
    async fn watch(mut self) -> String {
        let period = self.ttl / 3;
        let mut renewed = Instant::now();
        let mut keeper = None;
        loop {
            tokio::time::sleep(period).await;
            // after a pause (SIGSTOP) the clock tells first
            if renewed.elapsed() >= self.ttl {
                return format!(
                    "its lease was not renewed for {} ms",
                    renewed.elapsed().as_millis()
                );
            }
            if keeper.is_none() {
                keeper = self.client.lease_keep_alive(self.lease).await.ok();
            }
            let Some((k, s)) = keeper.as_mut() else {
                continue;
            };
            let answer = tokio::time::timeout(period, async {
                k.keep_alive().await?;
                s.message().await
            })
            .await;
            match answer {
                Ok(Ok(Some(r))) if r.ttl() > 0 => renewed = Instant::now(),
                Ok(Ok(Some(_))) => return "its lease expired".into(),
                _ => keeper = None,
            }
        }
    }
}

/// Executes this program again with the same arguments: it starts as a standby.
fn restart_as_standby() -> ! {
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let program = std::env::current_exe()
        .ok()
        .or_else(|| args.next().map(Into::into));
    let rest: Vec<_> = std::env::args_os().skip(1).collect();
    if let Some(p) = program {
        let e = std::process::Command::new(p).args(rest).exec();
        error!("cannot start again as a standby: {e}");
    }
    std::process::exit(3)
}
