//! `cloud-broker serve`: the thin async loop around the engine. MQTT in ([`crate::intake`]:
//! verified on several tasks), engine decisions, actions out ([`Outbox`]: store writes,
//! publications, placement jobs through a [`Placer`]).
//!
//! Invariants:
//! - The decisions are the engine's; this loop carries out its actions one after the other, in
//!   the order it gives them. A peer list ([`Action::PublishLatest`]) is only queued, per broker
//!   ([`crate::latest`]): the loop does not wait for it, and it may leave after what follows.
//! - A record (other than a node's static properties) is durable before the next action runs,
//!   so nothing is published that could not be made durable: after a failed write the rest of
//!   that event's writes and publications are dropped and the engine is told
//!   ([`Event::StoreFailed`]: it holds new definitions); the store is tried again every
//!   [`STORE_RETRY_MS`] ([`Event::StoreWritable`]: the engine writes everything again). The
//!   broker and what it holds keep being served meanwhile. Node records are written in their
//!   order by a thread of their own, off the critical path.
//! - Applications, placement results, ticks and inventory changes are handled before node
//!   telemetry, and every publication of ours leaves on the applications connection (the peer
//!   lists on a connection of their own), so a definition or a desired state never waits
//!   behind reports or a round of peer lists.
//! - There is a telemetry, an applications and a peer-lists connection to each broker
//!   ([`crate::brokers`]: several external brokers); every publication goes to all of them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use acoa_shared::topics::acl;
use ed25519_dalek::{SigningKey, VerifyingKey};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info, warn};

use crate::background_threads;
use crate::broker::{self, Logins, TlsListener};
use crate::brokers::{self, Loopback, Publishers};
use crate::conn::{self, Connection, Link};
use crate::dispatch::WorkersConfig;
use crate::engine::{Action, Engine, EngineConfig, Event};
use crate::identity::{DataDir, Login};
use crate::ingest::Keys;
use crate::intake::{spawn_inventory_watch, Apps, Telemetry};
use crate::store::{FileStore, PersistOp, Store, StoreKind};
use crate::workers::{Placer, Workers};

/// Events from applications, placement results, ticks and the inventory, queued.
const CONTROL_QUEUE: usize = 4096;
/// Verified node telemetry, queued.
const TELEMETRY_QUEUE: usize = 16_384;
/// Requests queued on the telemetry and the applications connection to each broker (the
/// peer-lists connection's: [`brokers::LISTS_QUEUE`]).
const CLIENT_QUEUE: usize = 10_000;

/// Everything `serve` is told. A new `serve` flag becomes a field here.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub data_dir: PathBuf,
    /// Where the embedded broker listens (ignored with `broker_urls`).
    pub listen: SocketAddr,
    /// External brokers instead of the embedded one (empty: the embedded one), as
    /// [`conn::parse_list`] reads them; scheduler workers use the first.
    pub broker_urls: Vec<String>,
    pub engine: EngineConfig,
    pub tick_ms: u64,
    /// How long to read retained desired states before republishing what the broker lacks.
    pub startup_wait_ms: u64,
    /// Placement jobs go to `scheduler worker` processes (None: computed in this process).
    pub workers: Option<WorkersConfig>,
    /// A TLS listener of the embedded broker besides `listen` (ignored with `broker_urls`).
    pub tls: Option<TlsListener>,
    /// How long one application definition may take to read before it is refused.
    pub definition_budget: Duration,
    /// Metrics and the web view (off by default).
    pub observe: crate::observe::ObserveOptions,
    /// Where the records are kept.
    pub store: crate::store::StoreKind,
}

/// Runs the control plane until a signal, or until a store write fails.
pub async fn serve(opts: ServeOptions) -> anyhow::Result<()> {
    let mut dd = DataDir::new(&opts.data_dir);
    let key = dd.signing_key()?;
    let login = dd.credentials()?.control_plane;
    let (store, etcd): (Arc<dyn Store>, _) = match &opts.store {
        StoreKind::File => {
            let (file_store, removed) = FileStore::open_cleaned(&opts.data_dir)?;
            if removed > 0 {
                info!("removed {removed} temporary files an interrupted write left");
            }
            (Arc::new(file_store), None)
        }
        StoreKind::Etcd(cfg) => {
            info!(
                "store: etcd at {} under {}",
                cfg.endpoints.join(","),
                cfg.prefix
            );
            let etcd = Arc::new(crate::store::etcd::EtcdStore::connect(cfg)?);
            let imported;
            (dd, imported) = dd.with_etcd(etcd.clone())?;
            if imported > 0 {
                info!("inventory.json imported into etcd: {imported} nodes and workers");
            }
            (
                etcd.clone() as Arc<dyn Store>,
                Some((etcd, cfg.lease_ttl_s)),
            )
        }
    };
    // a replica's own client ids: the broker would let two replicas' connections of one id
    // throw each other out (a deposed leader reconnecting, a standby listening)
    // (`acl::CONTROL_PLANE_CLIENT_PREFIX` and what the connection is for: reserved ids)
    let client_id = |what: &str| {
        let base = format!("{}{what}", acl::CONTROL_PLANE_CLIENT_PREFIX);
        match etcd {
            None => base,
            Some(_) => format!(
                "{base}-{}",
                crate::store::leader::replica_name().replace(':', "-")
            ),
        }
    };
    // etcd without its quorum: a replica starts anyway, the inventory's watch reads it later
    let inventory = match dd.inventory() {
        Ok(i) => i,
        Err(e) if etcd.is_some() => {
            warn!("the inventory cannot be read yet, it is read again until it can: {e}");
            Default::default()
        }
        Err(e) => return Err(e.into()),
    };
    let keys: Arc<RwLock<Keys>> = Arc::new(RwLock::new(inventory.keys()));
    let (ctl_tx, ctl_rx) = mpsc::channel::<Event>(CONTROL_QUEUE);
    let (ev_tx, mut ev_rx) = mpsc::channel::<Event>(TELEMETRY_QUEUE);
    // a standby with external brokers listens to the fleet while it waits (hot); with the
    // embedded broker it starts it only once it leads (cold)
    let hot = etcd.is_some() && !opts.broker_urls.is_empty();
    let mut started = None;
    let listen = |ev_tx: mpsc::Sender<Event>| -> anyhow::Result<_> {
        let urls = start_broker(&opts, &dd, &keys, &ctl_tx)?;
        announce(&opts, &urls.join(","), &key.verifying_key());
        // one set of ingest tasks for every broker: a copy through another broker is dropped
        // as not fresh by the same watermark
        let sinks = crate::intake::Sinks {
            events: ev_tx,
            control: ctl_tx.clone(),
        };
        let inbox = Telemetry::spawn(keys.clone(), key.verifying_key(), sinks, urls.len() > 1);
        let telemetry = urls
            .iter()
            .map(|u| connect_telemetry(u, &client_id(""), &login, inbox.clone()))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok((urls, telemetry))
    };
    if hot {
        started = Some(listen(ev_tx.clone())?);
    }
    let (leadership, handover) = match &etcd {
        None => (None, Vec::new()),
        Some((etcd, ttl_s)) => {
            let window = opts.engine.node_timeout_ms;
            let (l, h) = wait_to_lead(etcd, *ttl_s, hot.then_some(&mut ev_rx), window).await?;
            (Some(l), h)
        }
    };
    let term = leadership.as_ref().map_or(0, |l| l.term);
    let snapshot = match &leadership {
        Some(l) => load_as_leader(store.as_ref(), l.term).await,
        None => store.load()?,
    };
    let (urls, mut telemetry) = match started {
        Some(s) => s,
        None => listen(ev_tx)?,
    };
    let placer = placer(
        opts.workers.as_ref(),
        &urls[0],
        &client_id("-sched"),
        &login,
        &key,
        &ctl_tx,
    )?;
    let definitions = crate::definitions::spawn_reader(ctl_tx.clone(), opts.definition_budget);
    let mut apps = urls
        .iter()
        .map(|u| {
            let id = client_id("-apps");
            connect_apps(u, &id, &login, key.verifying_key(), definitions.clone())
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let lists = urls
        .iter()
        .map(|u| brokers::connect_lists(u, &client_id("-lists"), &login))
        .collect::<anyhow::Result<Vec<_>>>()?;
    spawn_ticks(opts.tick_ms, ctl_tx.clone());
    let ctl_tx_peers = ctl_tx.clone();
    brokers::spawn_republish(&mut apps, &urls, ctl_tx.clone());
    let subscribed = telemetry
        .iter_mut()
        .map(|t| std::mem::replace(&mut t.subscribed, oneshot::channel().1));
    spawn_startup(
        brokers::first_subscribed(subscribed.collect()),
        opts.startup_wait_ms,
        ctl_tx,
    );

    let outbox = Outbox {
        nodes: spawn_node_writer(store.clone())?,
        store,
        publisher: Publishers::new(&urls, &apps, &lists),
        loopback: Loopback::new(&telemetry),
        placer,
        events: ctl_tx_peers,
    };
    // the engine's time 0, and the wall clock then (the peers' rotation epochs count on it)
    let t0 = Instant::now();
    // the loopback through every broker: how far behind this process hears (`engine::loopback`)
    let cfg = crate::engine::EngineConfig {
        brokers: urls.len(),
        loopback_nonce: rand::random(),
        wall_clock_at_0_ms: crate::unix_ms(),
        ..opts.engine.clone()
    };
    let engine = Engine::new(cfg, key, snapshot, 0).with_term(term);
    let observer = crate::observe::Observer::start(&opts.observe).await?;
    run(t0, engine, handover, outbox, observer, ctl_rx, ev_rx).await?;
    // a clean stop after the last write: a standby need not wait for the lease to expire
    if let Some(l) = leadership {
        l.resign().await;
    }
    for c in telemetry.iter().chain(&apps).chain(&lists) {
        let _ = c.client.disconnect().await;
    }
    Ok(())
}

/// How long a new leader waits before it reads the store again after a failed read.
const LOAD_RETRY: Duration = Duration::from_millis(500);
/// How often the same failure to read the store is logged again.
const LOAD_LOG_AGAIN: Duration = Duration::from_secs(30);

/// The records of an etcd store, read by the replica that just won term `term`. etcd answers
/// its election and then may not answer a read (members rejoining after a lost quorum elect
/// again): the read is tried again until it succeeds. Meanwhile the lease is watched as ever,
/// so a leader that cannot keep it starts again as a standby instead of waiting here.
async fn load_as_leader(store: &dyn Store, term: u64) -> crate::records::Snapshot {
    let mut logged: Option<Instant> = None;
    loop {
        match store.load() {
            Ok(s) => {
                if logged.is_some() {
                    info!("leading (term {term}): the store is read");
                }
                return s;
            }
            Err(e) => {
                if logged.is_none_or(|at| at.elapsed() >= LOAD_LOG_AGAIN) {
                    warn!("leading (term {term}), but the store cannot be read yet: {e}; trying again");
                    logged = Some(Instant::now());
                }
                tokio::time::sleep(LOAD_RETRY).await;
            }
        }
    }
}

/// A replica of an etcd store waits until it leads: a hot standby (`telemetry` given) notes
/// what it hears of the fleet meanwhile and hands the fresh part (within `window_ms`) to the
/// engine it starts. Returns the leadership and that handover.
async fn wait_to_lead(
    etcd: &crate::store::etcd::EtcdStore,
    ttl_s: u64,
    mut telemetry: Option<&mut mpsc::Receiver<Event>>,
    window_ms: u64,
) -> anyhow::Result<(crate::store::leader::Leadership, Vec<Event>)> {
    let lead = crate::store::leader::lead(etcd, ttl_s);
    tokio::pin!(lead);
    let mut warm = crate::warm::Warm::new(window_ms);
    let t0 = Instant::now();
    let hot = telemetry.is_some();
    let leadership = loop {
        tokio::select! {
            l = &mut lead => break l?,
            Some(ev) = async { telemetry.as_mut()?.recv().await }, if hot => {
                warm.note(t0.elapsed().as_millis() as u64, ev);
            }
        }
    };
    if !hot {
        return Ok((leadership, Vec::new()));
    }
    let h = warm.take(t0.elapsed().as_millis() as u64);
    info!(
        "taking over warm: the latest reports of {} nodes ({} messages heard as a standby)",
        h.nodes,
        h.events.len()
    );
    Ok((leadership, h.events))
}

/// The brokers the control plane uses: the embedded one, started here with the inventory's
/// logins, or the external ones of `broker_urls`; the inventory is watched either way. Returns
/// their URLs, also written (comma-separated) to the data directory for the CLI.
fn start_broker(
    opts: &ServeOptions,
    dd: &DataDir,
    keys: &Arc<RwLock<Keys>>,
    ctl_tx: &mpsc::Sender<Event>,
) -> anyhow::Result<Vec<String>> {
    let (urls, logins) = match opts.broker_urls.as_slice() {
        [] => {
            let logins: Logins = Arc::new(RwLock::new(dd.logins()?));
            broker::start_with_tls(opts.listen, logins.clone(), opts.tls.clone())?;
            (vec![embedded_url(opts.listen)], Some(logins))
        }
        list => (conn::parse_list(&list.join(","))?, None),
    };
    let url = urls.join(",");
    spawn_inventory_watch(dd.clone(), keys.clone(), logins, ctl_tx.clone());
    // `node add` and `worker add` print a broker only when it is the embedded one, which
    // takes every login
    if let Err(e) = dd.mark_endpoint_external(!opts.broker_urls.is_empty()) {
        warn!("whether the brokers are external cannot be written for the command line: {e}");
    }
    // unchanged on a restart: not written again, so a full disk does not stop the start
    if dd.endpoint().as_deref() != Some(url.as_str()) {
        if let Err(e) = crate::store::write_atomic(&dd.endpoint_path(), url.as_bytes(), 0o644) {
            warn!("the broker's address cannot be written for the command line: {e}");
        }
    }
    Ok(urls)
}

/// The URL of the embedded broker listening on `listen` (loopback for an unspecified address).
fn embedded_url(listen: SocketAddr) -> String {
    let host = if listen.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        listen.ip().to_string()
    };
    format!("mqtt://{host}:{}", listen.port())
}

fn announce(opts: &ServeOptions, url: &str, cp_public: &VerifyingKey) {
    info!(
        "control plane starting: data in {}, broker {} ({}), key {}",
        opts.data_dir.display(),
        url,
        if !opts.broker_urls.is_empty() {
            "external"
        } else {
            "embedded"
        },
        acoa_shared::wire::keys::public_hex(cp_public)
    );
}

/// The node telemetry connection to `url` (heavy): every publication to the ingest task of its
/// node.
fn connect_telemetry(
    url: &str,
    client_id: &str,
    login: &Login,
    inbox: Telemetry,
) -> anyhow::Result<Connection> {
    let o = conn::mqtt_options(url, client_id, login)?;
    let link = Link {
        filters: acoa_shared::topics::NODES_TELEMETRY,
        purpose: None,
    };
    Ok(conn::spawn(o, CLIENT_QUEUE, link, inbox))
}

/// The applications connection to `url`: definitions in (to the `definitions` reader, off its
/// loop), and every publication of ours out.
fn connect_apps(
    url: &str,
    client_id: &str,
    login: &Login,
    cp_public: VerifyingKey,
    definitions: mpsc::Sender<(String, Vec<u8>)>,
) -> anyhow::Result<Connection> {
    let o = conn::mqtt_options(url, client_id, login)?;
    let link = Link {
        filters: &[acoa_shared::topics::APPS_WILDCARD],
        purpose: Some("applications"),
    };
    let inbox = Apps {
        definitions,
        control_plane: cp_public,
    };
    Ok(conn::spawn(o, CLIENT_QUEUE, link, inbox))
}

/// Where placement jobs are computed: by `scheduler worker` processes when `workers` is given
/// (their own connection), else in this process.
fn placer(
    workers: Option<&WorkersConfig>,
    url: &str,
    client_id: &str,
    login: &Login,
    key: &SigningKey,
    ctl_tx: &mpsc::Sender<Event>,
) -> anyhow::Result<Placer> {
    Ok(match workers {
        Some(cfg) => Placer::Workers(Workers::spawn(
            url,
            client_id,
            login,
            key.clone(),
            cfg.clone(),
            ctl_tx.clone(),
        )?),
        None => Placer::InProcess(ctl_tx.clone()),
    })
}

/// An [`Event::Tick`] every `tick_ms` (missed ticks skipped).
fn spawn_ticks(tick_ms: u64, tx: mpsc::Sender<Event>) {
    tokio::spawn(async move {
        let mut iv = tokio::time::interval(Duration::from_millis(tick_ms));
        iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            iv.tick().await;
            if tx.send(Event::Tick).await.is_err() {
                return;
            }
        }
    });
}

/// Start-up: once the telemetry is subscribed, the retained desired states are read for
/// `wait_ms`, then [`Event::StartupDone`] (the engine republishes what the broker lacks).
fn spawn_startup(subscribed: oneshot::Receiver<()>, wait_ms: u64, tx: mpsc::Sender<Event>) {
    tokio::spawn(async move {
        let _ = subscribed.await;
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        let _ = tx.send(Event::StartupDone).await;
    });
}

/// Node records are not on the critical path: written, in order, by a thread of their own.
fn spawn_node_writer(store: Arc<dyn Store>) -> anyhow::Result<std::sync::mpsc::Sender<PersistOp>> {
    let (tx, rx) = std::sync::mpsc::channel::<PersistOp>();
    std::thread::Builder::new()
        .name("node-records".into())
        .spawn(move || {
            // logged once per run of failures (a full disk fails every write)
            let mut failing = false;
            while let Ok(op) = rx.recv() {
                let batch = latest_records(op, &rx);
                match store.apply_nodes(&batch).map_err(|e| e.error) {
                    Err(e) if !failing => {
                        failing = true;
                        error!("store: node record not written: {e}");
                    }
                    Err(_) => {}
                    Ok(()) if failing => {
                        failing = false;
                        info!("store: node records written again");
                    }
                    Ok(()) => {}
                }
            }
        })?;
    Ok(tx)
}

/// At most this many node records are written together.
const NODE_RECORDS_BATCH: usize = 4096;

/// `first` and the records queued behind it (up to [`NODE_RECORDS_BATCH`]), the latest of each
/// node only, in the order of their latest.
fn latest_records(first: PersistOp, rx: &std::sync::mpsc::Receiver<PersistOp>) -> Vec<PersistOp> {
    let mut batch = vec![first];
    while batch.len() < NODE_RECORDS_BATCH {
        match rx.try_recv() {
            Ok(op) => batch.push(op),
            Err(_) => break,
        }
    }
    let name = |op: &PersistOp| match op {
        PersistOp::PutNode(n) => Some(n.name.clone()),
        _ => None,
    };
    let mut seen = std::collections::HashSet::new();
    let mut latest: Vec<PersistOp> = batch
        .into_iter()
        .rev()
        .filter(|op| name(op).is_none_or(|n| seen.insert(n)))
        .collect();
    latest.reverse();
    latest
}

/// Where the engine's actions go.
struct Outbox {
    store: Arc<dyn Store>,
    /// To the node-records thread.
    nodes: std::sync::mpsc::Sender<PersistOp>,
    /// The applications connections, and the peer-lists connections.
    publisher: Publishers,
    /// The telemetry connections: the loopback leaves on the connection it comes back on, so
    /// that it times the way in only (the applications connections queue the desired states
    /// going out, and the peer-lists connections thousands of lists at a fleet's join).
    loopback: Loopback,
    placer: Placer,
    /// The engine's control events (computations done off the loop come back there).
    events: mpsc::Sender<Event>,
}

/// How long the store is left alone after a failed write before it is tried again.
const STORE_RETRY_MS: u64 = 1000;

impl Outbox {
    /// Carries out one event's actions: first its records, written together
    /// ([`Store::apply_batch`]: one etcd transaction), then the rest in order. When the
    /// records cannot be written, nothing of the event is published (never publish what is
    /// not durable), placement jobs still go; returns the failure (the application it was
    /// about, the reason).
    async fn apply_all(&self, actions: Vec<Action>) -> Option<(Option<String>, String)> {
        let records: Vec<PersistOp> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Persist(op) if !matches!(op, PersistOp::PutNode(_)) => Some(op.clone()),
                _ => None,
            })
            .collect();
        let failed = match self.store.apply_batch(&records) {
            Ok(()) => None,
            Err(e) => {
                debug!("store: {e}");
                let app = records[e.written..].iter().find_map(|op| match op {
                    PersistOp::PutApp(a) => Some(a.name.clone()),
                    PersistOp::DeleteApp(a) => Some(a.clone()),
                    PersistOp::PutHistory(h) => Some(h.app.clone()),
                    _ => None,
                });
                Some((app, e.error.to_string()))
            }
        };
        for action in actions {
            match action {
                Action::Schedule(_) => self.apply(action).await,
                _ if failed.is_some() => {}
                action => self.apply(action).await,
            }
        }
        failed
    }

    /// Carries out one action (a node record sent to its writer, a publication, a job); the
    /// other records are `apply_all`'s.
    async fn apply(&self, action: Action) {
        match action {
            Action::Persist(op @ PersistOp::PutNode(_)) => {
                let _ = self.nodes.send(op);
            }
            // the event's records: written together, before (`apply_all`)
            Action::Persist(_) => {}
            Action::Publish {
                topic,
                payload,
                retain,
            } => {
                debug!("publish {topic} ({} bytes)", payload.len());
                self.publisher.publish(&topic, payload, retain).await;
            }
            Action::PublishLatest { topic, payload } => {
                self.publisher.publish_latest(&topic, payload);
            }
            Action::Schedule(job) => self.placer.submit(job).await,
            Action::Loopback { nonce, seq } => self.loopback.send(nonce, seq),
            Action::WarmModel(m) => {
                background_threads::spawn("acoa-model", move || {
                    let t = Instant::now();
                    m.derive_views();
                    debug!(
                        "live model's view derived ahead in {} ms",
                        t.elapsed().as_millis()
                    );
                });
            }
            Action::ComputePeers(job) => {
                let events = self.events.clone();
                background_threads::spawn("acoa-peer-lists", move || {
                    let t = Instant::now();
                    let r = job.run();
                    // the lists sent it holds are the engine's (shared): gone before the
                    // engine updates them with the result, else it copies them all (1.6
                    // million entries at 50,000 nodes) when the event comes first
                    drop(job);
                    debug!(
                        "peer lists of {} nodes computed in {} ms",
                        r.lists.len(),
                        t.elapsed().as_millis()
                    );
                    let _ = events.blocking_send(Event::PeersComputed(Box::new(r)));
                });
            }
        }
    }
}

/// The engine's loop: what a standby heard first (`handover`), then control events before
/// telemetry, until a signal.
async fn run(
    t0: Instant,
    mut engine: Engine,
    handover: Vec<Event>,
    outbox: Outbox,
    mut observer: Option<crate::observe::Observer>,
    mut ctl_rx: mpsc::Receiver<Event>,
    mut ev_rx: mpsc::Receiver<Event>,
) -> anyhow::Result<()> {
    let now = || t0.elapsed().as_millis() as u64;
    let mut shutdown = Box::pin(shutdown_signal());
    let mut store_retry_at = 0;
    let mut busy = LoopBusy::default();
    for ev in handover {
        let _ = outbox.apply_all(engine.handle(now(), ev)).await;
    }
    loop {
        let ev = tokio::select! {
            biased;
            _ = &mut shutdown => { info!("control plane stopping (signal)"); break; }
            ev = ctl_rx.recv() => match ev { Some(ev) => ev, None => break },
            ev = ev_rx.recv() => match ev { Some(ev) => ev, None => break },
        };
        let tick = matches!(ev, Event::Tick);
        // a definition is not taken into the engine when its record could not be written:
        // the store is tried first (definitions are rare), so the engine holds it instead
        let definition = matches!(ev, Event::AppChecked { .. } | Event::AppPublished { .. });
        if definition && !engine.store_full() {
            if let Err(e) = outbox.store.writable() {
                store_retry_at = now() + STORE_RETRY_MS;
                let full = Event::StoreFailed {
                    app: None,
                    reason: e.to_string(),
                };
                let _ = outbox.apply_all(engine.handle(now(), full)).await;
            }
        }
        let noted = observer.as_ref().map(|o| o.before(&ev));
        let t_ev = Instant::now();
        let actions = engine.handle(now(), ev);
        let t_out = Instant::now();
        let mut failed = outbox.apply_all(actions).await;
        busy.add(t_ev, t_out, now(), || outbox.publisher.latest_queued());
        if let (Some(o), Some(noted)) = (observer.as_mut(), noted) {
            o.after(&mut engine, noted, now());
        }
        if tick && failed.is_none() && engine.store_full() && now() >= store_retry_at {
            store_retry_at = now() + STORE_RETRY_MS;
            if outbox.store.writable().is_ok() {
                failed = outbox
                    .apply_all(engine.handle(now(), Event::StoreWritable))
                    .await;
            }
        }
        if let Some((app, reason)) = failed {
            store_retry_at = now() + STORE_RETRY_MS;
            let ev = Event::StoreFailed { app, reason };
            // only statuses: nothing to write
            let _ = outbox.apply_all(engine.handle(now(), ev)).await;
        }
    }
    Ok(())
}

/// How the decision loop spent each [`LOOP_BUSY_EVERY_MS`]: deciding (the engine's
/// `handle`) and carrying out the decisions (writes, publications, jobs handed out).
#[derive(Default)]
struct LoopBusy {
    since_ms: u64,
    deciding: Duration,
    carrying_out: Duration,
}

const LOOP_BUSY_EVERY_MS: u64 = 10_000;

impl LoopBusy {
    /// One event: decided from `t_ev` to `t_out`, carried out until now; `waiting` counts the
    /// peer lists still queued for the slowest broker (asked only when the line is due).
    fn add(&mut self, t_ev: Instant, t_out: Instant, now_ms: u64, waiting: impl FnOnce() -> usize) {
        self.deciding += t_out - t_ev;
        self.carrying_out += t_out.elapsed();
        let span = now_ms.saturating_sub(self.since_ms);
        if span >= LOOP_BUSY_EVERY_MS {
            let pct = |d: Duration| d.as_secs_f64() * 1e5 / span as f64;
            info!(
                "decision loop: {:.0} % deciding, {:.0} % carrying out (writes, publications) over {:.1} s; {} peer lists waiting for the slowest broker",
                pct(self.deciding),
                pct(self.carrying_out),
                span as f64 / 1e3,
                waiting()
            );
            *self = LoopBusy {
                since_ms: now_ms,
                ..LoopBusy::default()
            };
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("signal handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_records_queued_together_keep_each_nodes_latest_in_its_order() {
        let record = |name: &str, probe: &str| {
            PersistOp::PutNode(Box::new(crate::records::NodeInfo {
                name: name.into(),
                datacenter: "dc1".into(),
                layer: acoa_shared::model::Layer::Edge,
                arch: "x86_64".into(),
                hardware: vec![],
                software: vec![],
                capacity: Default::default(),
                probe_addr: probe.into(),
                position: None,
            }))
        };
        let (tx, rx) = std::sync::mpsc::channel();
        for op in [record("n2", "a"), record("n1", "b"), record("n2", "c")] {
            tx.send(op).unwrap();
        }
        let batch = latest_records(record("n1", "a"), &rx);
        let got: Vec<(String, String)> = batch
            .iter()
            .map(|op| match op {
                PersistOp::PutNode(n) => (n.name.clone(), n.probe_addr.clone()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(got, [("n1".into(), "b".into()), ("n2".into(), "c".into())]);
        assert!(rx.try_recv().is_err(), "everything queued was taken");
    }

    #[test]
    fn the_embedded_broker_is_reached_on_loopback_when_listening_everywhere() {
        assert_eq!(
            embedded_url("0.0.0.0:1884".parse().unwrap()),
            "mqtt://127.0.0.1:1884"
        );
        assert_eq!(
            embedded_url("10.1.2.3:1883".parse().unwrap()),
            "mqtt://10.1.2.3:1883"
        );
    }
}
