//! [`EtcdStore`]: the control plane's records in etcd (`serve --store etcd`), for running on a
//! distributed engine instead of one disk.
//!
//! Layout under the prefix (`/acoa/` by default), the same JSON records as the file store:
//! `{prefix}apps/{app}`, `{prefix}desired/{node}`, `{prefix}nodes/{node}`, `{prefix}history/{app}`,
//! `{prefix}meta`, and
//! `{prefix}leader` (the leadership key, see [`crate::store::leader`]).
//!
//! Invariants:
//! - [`Store::apply`] returns `Ok` only once etcd has committed the write (a quorum has it).
//! - With a [`Fence`] set, every write is one etcd transaction conditioned on the leadership
//!   key still having the fence's create revision: a replica that lost its leadership (its
//!   lease expired while it was paused or cut off) cannot change anything
//!   ([`StoreError::NotLeader`]).
//! - Every call is bounded by the configured time-out; losing etcd's quorum is a failed write
//!   ([`StoreError::Etcd`]), handled as the file store's full disk is (new definitions held,
//!   everything written again once [`Store::writable`] succeeds).
//!
//! The store's calls are blocking (the decision loop's contract): the etcd client runs on a
//! small runtime of its own and a call waits for its answer on a channel, so that it works
//! from inside the control plane's runtime and from plain threads alike.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, Txn, TxnOp};
use serde::de::DeserializeOwned;

use super::{BatchError, Meta, PersistOp, Snapshot, Store, StoreError};
use crate::records::{AppRecord, DesiredDoc, History, NodeInfo};

/// The default prefix of every key.
pub const DEFAULT_PREFIX: &str = "/acoa/";
/// How long one etcd call may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
/// The default TTL of the leadership lease: how long a leader that stopped answering keeps it.
pub const DEFAULT_LEASE_TTL_S: u64 = 5;
/// Records read per range request when loading.
const PAGE: i64 = 500;

/// How to reach etcd (the `serve --etcd-*` flags).
#[derive(Debug, Clone, PartialEq)]
pub struct EtcdConfig {
    /// `http://host:port` or `https://host:port`, at least one.
    pub endpoints: Vec<String>,
    /// Every key starts with it (ends with `/`).
    pub prefix: String,
    /// etcd's user name and password (etcd with authentication enabled).
    pub user: Option<(String, String)>,
    /// The CA that signed etcd's server certificates (PEM): TLS to etcd.
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key (PEM), for etcd's `--client-cert-auth`.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// The bound of every call.
    pub timeout: Duration,
    /// The TTL of a replica's leadership lease (see [`crate::store::leader`]).
    pub lease_ttl_s: u64,
}

impl EtcdConfig {
    /// The configuration of `endpoints` (comma-separated) with the defaults; an error names
    /// what is wrong with the list.
    pub fn new(endpoints: &str) -> Result<EtcdConfig, StoreError> {
        let list: Vec<String> = endpoints
            .split(',')
            .map(|e| e.trim().to_string())
            .filter(|e| !e.is_empty())
            .collect();
        if list.is_empty() {
            return Err(StoreError::Etcd("no etcd endpoint given".into()));
        }
        for e in &list {
            let rest = e
                .strip_prefix("http://")
                .or_else(|| e.strip_prefix("https://"))
                .ok_or_else(|| {
                    StoreError::Etcd(format!(
                        "etcd endpoint `{e}` must start with http:// or https://"
                    ))
                })?;
            if rest.is_empty() || rest.contains('/') {
                return Err(StoreError::Etcd(format!(
                    "etcd endpoint `{e}` must be http(s)://host:port"
                )));
            }
        }
        Ok(EtcdConfig {
            endpoints: list,
            prefix: DEFAULT_PREFIX.into(),
            user: None,
            ca_file: None,
            cert_file: None,
            key_file: None,
            timeout: DEFAULT_TIMEOUT,
            lease_ttl_s: DEFAULT_LEASE_TTL_S,
        })
    }

    /// The prefix, checked: not empty, ends with `/`.
    pub fn with_prefix(mut self, prefix: &str) -> Result<EtcdConfig, StoreError> {
        if prefix.is_empty() || !prefix.ends_with('/') {
            return Err(StoreError::Etcd(format!(
                "etcd prefix `{prefix}` must be non-empty and end with /"
            )));
        }
        self.prefix = prefix.into();
        Ok(self)
    }

    fn connect_options(&self) -> Result<ConnectOptions, StoreError> {
        let mut o = ConnectOptions::new()
            .with_timeout(self.timeout)
            .with_connect_timeout(self.timeout)
            .with_keep_alive(Duration::from_secs(2), self.timeout)
            // a member cut off from the others fails at once instead of waiting
            .with_require_leader(true);
        if let Some((name, password)) = &self.user {
            o = o.with_user(name.clone(), password.clone());
        }
        let tls = self.ca_file.is_some() || self.cert_file.is_some();
        if tls || self.endpoints.iter().any(|e| e.starts_with("https://")) {
            let mut t = etcd_client::TlsOptions::new();
            if let Some(ca) = &self.ca_file {
                t = t.ca_certificate(etcd_client::Certificate::from_pem(read(ca)?));
            }
            match (&self.cert_file, &self.key_file) {
                (Some(c), Some(k)) => {
                    t = t.identity(etcd_client::Identity::from_pem(read(c)?, read(k)?));
                }
                (None, None) => {}
                _ => {
                    return Err(StoreError::Etcd(
                        "an etcd client certificate needs its key and the other way round".into(),
                    ))
                }
            }
            o = o.with_tls(t);
        }
        Ok(o)
    }
}

fn read(p: &std::path::Path) -> Result<Vec<u8>, StoreError> {
    std::fs::read(p).map_err(|source| StoreError::Io {
        path: p.display().to_string(),
        source,
    })
}

/// The leadership a writer holds: the leadership key and the create revision it had when this
/// replica was elected (also the leader's term).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub key: String,
    pub create_revision: i64,
}

/// The control plane's records in etcd (see the module documentation).
pub struct EtcdStore {
    rt: Option<tokio::runtime::Runtime>,
    client: Client,
    prefix: String,
    timeout: Duration,
    fence: Arc<RwLock<Option<Fence>>>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        // may be dropped inside another runtime, where a blocking shutdown is refused
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl EtcdStore {
    /// Connects to etcd (the first answer within the time-out).
    pub fn connect(cfg: &EtcdConfig) -> Result<EtcdStore, StoreError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("etcd-client")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Etcd(format!("cannot start the etcd client: {e}")))?;
        let options = cfg.connect_options()?;
        let endpoints = cfg.endpoints.clone();
        let client = wait(&rt, cfg.timeout, async move {
            Client::connect(endpoints, Some(options)).await
        })
        .map_err(|e| StoreError::Etcd(format!("{}: {e}", cfg.endpoints.join(","))))?;
        Ok(EtcdStore {
            rt: Some(rt),
            client,
            prefix: cfg.prefix.clone(),
            timeout: cfg.timeout,
            fence: Arc::new(RwLock::new(None)),
        })
    }

    /// A client on the store's runtime (for leadership and watches).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The store's runtime, where the client's futures run.
    pub fn handle(&self) -> tokio::runtime::Handle {
        self.rt
            .as_ref()
            .expect("runtime until dropped")
            .handle()
            .clone()
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Every write from now on is conditioned on `fence` (None: unconditioned, one replica).
    pub fn set_fence(&self, fence: Option<Fence>) {
        *self.fence.write().unwrap_or_else(|e| e.into_inner()) = fence;
    }

    pub fn fence(&self) -> Option<Fence> {
        self.fence.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn key(&self, kind: &str, name: &str) -> String {
        // names were validated (letters, digits, `_`, `.`, `-`)
        format!("{}{kind}/{name}", self.prefix)
    }

    fn block<T: Send + 'static>(
        &self,
        f: impl Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
    ) -> Result<T, StoreError> {
        let rt = self.rt.as_ref().expect("runtime until dropped");
        wait(rt, self.timeout, f).map_err(StoreError::Etcd)
    }

    /// Every record of `kind` (`apps`, `desired`, `nodes`), in key order, a page at a time.
    fn load_kind<T: DeserializeOwned>(&self, kind: &str) -> Result<Vec<T>, StoreError> {
        let start = format!("{}{kind}/", self.prefix);
        let end = format!("{}{kind}0", self.prefix); // '0' follows '/'
        let mut from = start.clone().into_bytes();
        let mut out = Vec::new();
        loop {
            let mut c = self.client.clone();
            let (key, end2) = (from.clone(), end.clone());
            let resp = self.block(async move {
                c.get(
                    key,
                    Some(GetOptions::new().with_range(end2).with_limit(PAGE)),
                )
                .await
            })?;
            for kv in resp.kvs() {
                out.push(parse(kv.key(), kv.value())?);
            }
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return Ok(out),
            }
        }
    }

    /// The keys `op` writes (a deletion: no value).
    fn writes(&self, op: &PersistOp) -> Vec<Write> {
        let put = |key: String, value: Vec<u8>| Write {
            key,
            value: Some(value),
        };
        let delete = |key: String| Write { key, value: None };
        match op {
            PersistOp::PutApp(a) => vec![put(self.key("apps", &a.name), json(a.as_ref()))],
            PersistOp::DeleteApp(name) => vec![
                delete(self.key("apps", name)),
                delete(self.key("history", name)),
            ],
            PersistOp::PutHistory(h) => vec![put(self.key("history", &h.app), json(h.as_ref()))],
            PersistOp::PutDesired(d) => vec![put(self.key("desired", &d.node), json(d.as_ref()))],
            PersistOp::PutNode(n) => vec![put(self.key("nodes", &n.name), json(n.as_ref()))],
            PersistOp::PutMeta(m) => vec![put(format!("{}meta", self.prefix), json(m))],
        }
    }

    /// One transaction of a batch; its failure says how much of the batch was written.
    fn commit_chunk(&self, chunk: Chunk) -> Result<(), BatchError> {
        let written = chunk.first;
        self.commit(chunk.txn_ops())
            .map_err(|error| BatchError { written, error })
    }

    /// Writes `ops` as one transaction, conditioned on the fence when there is one.
    fn commit(&self, ops: Vec<TxnOp>) -> Result<(), StoreError> {
        let fence = self.fence();
        let mut txn = Txn::new();
        if let Some(f) = &fence {
            txn = txn.when([Compare::create_revision(
                f.key.clone(),
                CompareOp::Equal,
                f.create_revision,
            )]);
        }
        let mut c = self.client.clone();
        let resp = self.block(async move { c.txn(txn.and_then(ops)).await })?;
        match fence {
            Some(f) if !resp.succeeded() => Err(StoreError::NotLeader {
                term: f.create_revision as u64,
            }),
            _ => Ok(()),
        }
    }
}

/// Documents kept whole under one key (the node inventory): read with their revision and
/// written only if nobody wrote in between. Not fenced: they are written by the command line,
/// not by the leader.
impl EtcdStore {
    /// The value of `{prefix}{name}` and its mod revision (`None` and 0 when absent).
    pub fn get_doc(&self, name: &str) -> Result<(Option<Vec<u8>>, i64), StoreError> {
        let mut c = self.client.clone();
        let key = format!("{}{name}", self.prefix);
        let resp = self.block(async move { c.get(key, None).await })?;
        Ok(match resp.kvs().first() {
            Some(kv) => (Some(kv.value().to_vec()), kv.mod_revision()),
            None => (None, 0),
        })
    }

    /// The mod revision of `{prefix}{name}` (0 when absent), without its value.
    pub fn doc_revision(&self, name: &str) -> Result<i64, StoreError> {
        let mut c = self.client.clone();
        let key = format!("{}{name}", self.prefix);
        let resp =
            self.block(async move { c.get(key, Some(GetOptions::new().with_keys_only())).await })?;
        Ok(resp.kvs().first().map_or(0, |kv| kv.mod_revision()))
    }

    /// Writes `{prefix}{name}` if its mod revision is still `seen` (0: still absent); `false`
    /// when another writer came first (read it again).
    pub fn put_doc_if(&self, name: &str, value: Vec<u8>, seen: i64) -> Result<bool, StoreError> {
        let key = format!("{}{name}", self.prefix);
        let txn = Txn::new()
            .when([Compare::mod_revision(key.clone(), CompareOp::Equal, seen)])
            .and_then([TxnOp::put(key, value, None)]);
        let mut c = self.client.clone();
        Ok(self.block(async move { c.txn(txn).await })?.succeeded())
    }
}

/// Runs `f` on `rt` and waits for it (at most `timeout`) from any thread, inside a runtime or
/// not.
fn wait<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    timeout: Duration,
    f: impl Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let r = tokio::time::timeout(timeout, f).await;
        let _ = tx.send(r);
    });
    match rx.recv() {
        Ok(Ok(Ok(v))) => Ok(v),
        Ok(Ok(Err(e))) => Err(e.to_string()),
        Ok(Err(_)) => Err(format!("no answer within {} ms", timeout.as_millis())),
        Err(_) => Err("the etcd client stopped".into()),
    }
}

fn parse<T: DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(value).map_err(|e| StoreError::Corrupt {
        path: String::from_utf8_lossy(key).into_owned(),
        reason: e.to_string(),
    })
}

/// Keys one transaction writes at most: etcd's default `--max-txn-ops`.
pub const MAX_TXN_OPS: usize = 128;
/// Bytes one transaction writes at most, keys and values: under etcd's default
/// `--max-request-bytes` (1.5 MiB), with room for the request's framing.
pub const MAX_TXN_BYTES: usize = 1 << 20;

/// One key written (`None`: deleted).
struct Write {
    key: String,
    value: Option<Vec<u8>>,
}

impl Write {
    fn bytes(&self) -> usize {
        self.key.len() + self.value.as_ref().map_or(0, Vec::len)
    }
}

/// The writes of one transaction, from the batch's operation `first` on.
#[derive(Default)]
struct Chunk {
    writes: Vec<Write>,
    bytes: usize,
    first: usize,
}

impl Chunk {
    /// Each key once, with its last write, in the order of the last writes.
    fn txn_ops(self) -> Vec<TxnOp> {
        let mut seen = std::collections::HashSet::new();
        let mut ops: Vec<TxnOp> = self
            .writes
            .into_iter()
            .rev()
            .filter(|w| seen.insert(w.key.clone()))
            .map(|w| match w.value {
                Some(v) => TxnOp::put(w.key, v, None),
                None => TxnOp::delete(w.key, None),
            })
            .collect();
        ops.reverse();
        ops
    }
}

fn json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("records serialize")
}

impl Store for EtcdStore {
    fn load(&self) -> Result<Snapshot, StoreError> {
        let apps: Vec<AppRecord> = self.load_kind("apps")?;
        let desired: Vec<DesiredDoc> = self.load_kind("desired")?;
        let nodes: Vec<NodeInfo> = self.load_kind("nodes")?;
        let mut c = self.client.clone();
        let key = format!("{}meta", self.prefix);
        let resp = self.block(async move { c.get(key, None).await })?;
        let meta: Meta = match resp.kvs().first() {
            Some(kv) => parse(kv.key(), kv.value())?,
            None => Meta::default(),
        };
        let history: Vec<History> = self.load_kind("history")?;
        Ok(Snapshot::from_records(apps, desired, nodes, meta).with_history(history))
    }

    fn apply(&self, op: &PersistOp) -> Result<(), StoreError> {
        self.apply_batch(std::slice::from_ref(op))
            .map_err(|e| e.error)
    }

    /// One fenced transaction for the whole batch, or one per [`MAX_TXN_OPS`] keys or
    /// [`MAX_TXN_BYTES`] (etcd's default limits); within a transaction a key written twice
    /// is written once, with its last value (etcd refuses a key twice in one transaction).
    fn apply_batch(&self, ops: &[PersistOp]) -> Result<(), BatchError> {
        let mut chunk = Chunk::default();
        for (i, op) in ops.iter().enumerate() {
            let writes = self.writes(op);
            let bytes: usize = writes.iter().map(Write::bytes).sum();
            if !chunk.writes.is_empty()
                && (chunk.writes.len() + writes.len() > MAX_TXN_OPS
                    || chunk.bytes + bytes > MAX_TXN_BYTES)
            {
                self.commit_chunk(std::mem::take(&mut chunk))?;
                chunk.first = i;
            }
            chunk.writes.extend(writes);
            chunk.bytes += bytes;
        }
        if chunk.writes.is_empty() {
            return Ok(());
        }
        self.commit_chunk(chunk)
    }

    /// A small fenced write: etcd has its quorum and this replica still leads.
    fn writable(&self) -> Result<(), StoreError> {
        self.commit(vec![TxnOp::put(format!("{}probe", self.prefix), "", None)])
    }
}

/// The flags that choose the store (global: `serve` and the inventory commands take them).
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// Where the records are kept: files in the data directory, or etcd (--etcd-endpoints).
    #[arg(long, global = true, value_enum, default_value_t = StoreFlag::File)]
    pub store: StoreFlag,
    /// etcd's client URLs, comma-separated (http://host:2379 or https://...).
    #[arg(long, global = true, value_name = "URL[,URL...]")]
    pub etcd_endpoints: Option<String>,
    /// Every key of the control plane starts with this (ends with /).
    #[arg(long, global = true, default_value = DEFAULT_PREFIX)]
    pub etcd_prefix: String,
    /// etcd's user (with --etcd-password-file), when etcd's authentication is enabled.
    #[arg(long, global = true, requires = "etcd_password_file")]
    pub etcd_user: Option<String>,
    /// A file whose first line is the etcd user's password.
    #[arg(long, global = true, requires = "etcd_user")]
    pub etcd_password_file: Option<PathBuf>,
    /// The CA of etcd's server certificates (PEM): TLS to etcd.
    #[arg(long, global = true)]
    pub etcd_ca_file: Option<PathBuf>,
    /// A client certificate for etcd (PEM), with --etcd-key-file.
    #[arg(long, global = true, requires = "etcd_key_file")]
    pub etcd_cert_file: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, global = true, requires = "etcd_cert_file")]
    pub etcd_key_file: Option<PathBuf>,
    /// The bound of one etcd call, in milliseconds.
    #[arg(long, global = true, default_value_t = DEFAULT_TIMEOUT.as_millis() as u64)]
    pub etcd_timeout_ms: u64,
    /// With etcd: the TTL of the leadership lease, in seconds (a leader that stops renewing it
    /// leads this long at most; a standby takes over after it).
    #[arg(long, global = true, default_value_t = DEFAULT_LEASE_TTL_S)]
    pub lease_ttl_s: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreFlag {
    File,
    Etcd,
}

impl StoreArgs {
    /// The store chosen, or what is wrong with the flags.
    pub fn kind(self) -> Result<super::StoreKind, StoreError> {
        match (self.store, &self.etcd_endpoints) {
            (StoreFlag::File, None) => return Ok(super::StoreKind::File),
            (StoreFlag::File, Some(_)) => {
                return Err(StoreError::Etcd(
                    "--etcd-endpoints needs --store etcd".into(),
                ))
            }
            (StoreFlag::Etcd, None) => {
                return Err(StoreError::Etcd(
                    "--store etcd needs --etcd-endpoints".into(),
                ))
            }
            (StoreFlag::Etcd, Some(_)) => {}
        }
        let mut cfg = EtcdConfig::new(self.etcd_endpoints.as_deref().unwrap_or_default())?
            .with_prefix(&self.etcd_prefix)?;
        if let (Some(user), Some(file)) = (self.etcd_user, &self.etcd_password_file) {
            let text = String::from_utf8(read(file)?).map_err(|_| {
                StoreError::Etcd(format!("{}: the password is not UTF-8", file.display()))
            })?;
            let password = text.lines().next().unwrap_or_default().to_string();
            cfg.user = Some((user, password));
        }
        cfg.ca_file = self.etcd_ca_file;
        cfg.cert_file = self.etcd_cert_file;
        cfg.key_file = self.etcd_key_file;
        if self.etcd_timeout_ms == 0 {
            return Err(StoreError::Etcd("--etcd-timeout-ms must be above 0".into()));
        }
        cfg.timeout = Duration::from_millis(self.etcd_timeout_ms);
        if !(1..=3600).contains(&self.lease_ttl_s) {
            return Err(StoreError::Etcd(format!(
                "--lease-ttl-s must be 1 to 3600, not {}",
                self.lease_ttl_s
            )));
        }
        cfg.lease_ttl_s = self.lease_ttl_s;
        Ok(super::StoreKind::Etcd(cfg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_checked_and_named_when_wrong() {
        let c = EtcdConfig::new(" http://10.0.0.1:2379, https://e2:2379 ,").unwrap();
        assert_eq!(c.endpoints, ["http://10.0.0.1:2379", "https://e2:2379"]);
        assert_eq!(c.prefix, DEFAULT_PREFIX);
        for (bad, says) in [
            ("", "no etcd endpoint"),
            (" , ", "no etcd endpoint"),
            ("10.0.0.1:2379", "`10.0.0.1:2379` must start with http://"),
            ("http://", "must be http(s)://host:port"),
            ("http://e1:2379/v3", "`http://e1:2379/v3` must be"),
        ] {
            let e = EtcdConfig::new(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(c.clone().with_prefix("/acoa").is_err());
        assert!(c.clone().with_prefix("").is_err());
        assert_eq!(c.with_prefix("/prod/acoa/").unwrap().prefix, "/prod/acoa/");
    }

    fn args(store: StoreFlag, endpoints: Option<&str>) -> StoreArgs {
        StoreArgs {
            store,
            etcd_endpoints: endpoints.map(Into::into),
            etcd_prefix: DEFAULT_PREFIX.into(),
            etcd_user: None,
            etcd_password_file: None,
            etcd_ca_file: None,
            etcd_cert_file: None,
            etcd_key_file: None,
            etcd_timeout_ms: 2000,
            lease_ttl_s: DEFAULT_LEASE_TTL_S,
        }
    }

    #[test]
    fn the_store_flags_go_together() {
        assert_eq!(
            args(StoreFlag::File, None).kind().unwrap(),
            super::super::StoreKind::File
        );
        let e = args(StoreFlag::Etcd, None).kind().unwrap_err().to_string();
        assert!(e.contains("--store etcd needs --etcd-endpoints"), "{e}");
        let e = args(StoreFlag::File, Some("http://e:2379"))
            .kind()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--etcd-endpoints needs --store etcd"), "{e}");
        let mut a = args(StoreFlag::Etcd, Some("http://e:2379"));
        a.lease_ttl_s = 0;
        assert!(a.kind().unwrap_err().to_string().contains("--lease-ttl-s"));
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "s3cret\nignored\n").unwrap();
        let mut a = args(StoreFlag::Etcd, Some("http://e:2379"));
        a.etcd_user = Some("acoa".into());
        a.etcd_password_file = Some(pw);
        match a.kind().unwrap() {
            super::super::StoreKind::Etcd(c) => {
                assert_eq!(c.user, Some(("acoa".into(), "s3cret".into())));
            }
            k => panic!("{k:?}"),
        }
    }
}
