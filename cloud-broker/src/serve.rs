//! The thin async loop around the engine: MQTT in (decoded and verified on several workers),
//! engine decisions, actions out (store writes, publications, placement jobs on blocking tasks).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use acoa_shared::topics;
use rumqttc::{AsyncClient, Event as MqttEvent, MqttOptions, Packet, QoS};
use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};

use crate::broker::{self, Logins, MAX_PAYLOAD};
use crate::engine::{Action, Engine, EngineConfig, Event};
use crate::identity::{DataDir, Login};
use crate::ingest::{classify, Keys};
use crate::store::{FileStore, PersistOp, Store};
use crate::workers::{run_in_process, Workers, WorkersConfig};

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub data_dir: PathBuf,
    /// Where the embedded broker listens (ignored with `broker_url`).
    pub listen: SocketAddr,
    /// An external broker instead of the embedded one.
    pub broker_url: Option<String>,
    pub engine: EngineConfig,
    pub tick_ms: u64,
    /// How long to read retained desired states before republishing what the broker lacks.
    pub startup_wait_ms: u64,
    /// Placement jobs go to `scheduler worker` processes (None: computed in this process).
    pub workers: Option<WorkersConfig>,
    /// A TLS listener of the embedded broker besides `listen` (ignored with `broker_url`).
    pub tls: Option<crate::broker::TlsListener>,
}

/// `mqtt://host:port` (or `tcp://`, or plain `host:port`) → host, port.
pub fn parse_url(url: &str) -> anyhow::Result<(String, u16)> {
    use acoa_shared::topics::{broker_address, BrokerUrlError};
    broker_address(url).map_err(|e| match e {
        BrokerUrlError::Tls(_) => anyhow::anyhow!(
            "{url}: TLS brokers are not supported by this build of the control plane"
        ),
        e => anyhow::anyhow!("{e}"),
    })
}

/// Client options for `url` with `login`.
pub fn mqtt_options(url: &str, client_id: &str, login: &Login) -> anyhow::Result<MqttOptions> {
    let (host, port) = parse_url(url)?;
    let mut o = MqttOptions::new(client_id, host, port);
    o.set_credentials(&login.username, &login.password);
    o.set_keep_alive(Duration::from_secs(10));
    o.set_max_packet_size(MAX_PAYLOAD + 1024, MAX_PAYLOAD + 1024);
    o.set_clean_session(true);
    o.set_inflight(200);
    Ok(o)
}

fn mtime(p: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn node_of(topic: &str) -> &str {
    match topics::parse(topic) {
        Some(topics::Topic::Report(n))
        | Some(topics::Topic::Links(n))
        | Some(topics::Topic::Online(n))
        | Some(topics::Topic::Actual(n))
        | Some(topics::Topic::Desired(n)) => n,
        _ => topic,
    }
}

pub async fn serve(opts: ServeOptions) -> anyhow::Result<()> {
    let dd = DataDir::new(&opts.data_dir);
    let key = dd.signing_key()?;
    let cp_public = key.verifying_key();
    let creds = dd.credentials()?;
    let store = FileStore::open(&opts.data_dir)?;
    let snap = store.load()?;
    let keys: Arc<RwLock<Keys>> = Arc::new(RwLock::new(dd.inventory()?.keys()));

    // applications, placement results, ticks: handled first
    let (ctl_tx, mut ctl_rx) = mpsc::channel::<Event>(4096);
    let (url, embedded) = match &opts.broker_url {
        Some(u) => (u.clone(), false),
        None => {
            let logins: Logins = Arc::new(RwLock::new(dd.logins()?));
            broker::start_with_tls(opts.listen, logins.clone(), opts.tls.clone())?;
            spawn_inventory_watch(dd.clone(), keys.clone(), Some(logins), ctl_tx.clone());
            let host = if opts.listen.ip().is_unspecified() {
                "127.0.0.1".to_string()
            } else {
                opts.listen.ip().to_string()
            };
            (format!("mqtt://{host}:{}", opts.listen.port()), true)
        }
    };
    if !embedded {
        spawn_inventory_watch(dd.clone(), keys.clone(), None, ctl_tx.clone());
    }
    crate::store::write_atomic(&dd.endpoint_path(), url.as_bytes(), 0o644)?;
    info!(
        "control plane starting: data in {}, broker {} ({}), key {}",
        opts.data_dir.display(),
        url,
        if embedded { "embedded" } else { "external" },
        acoa_shared::wire::keys::public_hex(&cp_public)
    );

    // Two connections: node telemetry (heavy, verified on workers), and applications plus every
    // publication of ours, so that a definition or a desired state never waits behind reports.
    let mqtt = mqtt_options(&url, "acoa-control-plane", &creds.control_plane)?;
    let (client, mut eventloop) = AsyncClient::new(mqtt, 10_000);
    let mqtt_apps = mqtt_options(&url, "acoa-control-plane-apps", &creds.control_plane)?;
    let sched_workers = match &opts.workers {
        Some(cfg) => Some(Workers::spawn(
            &url,
            &creds.control_plane,
            key.clone(),
            cfg.clone(),
            ctl_tx.clone(),
        )?),
        None => None,
    };
    let (apps_client, mut apps_eventloop) = AsyncClient::new(mqtt_apps, 10_000);

    // node telemetry, verified
    let (ev_tx, mut ev_rx) = mpsc::channel::<Event>(16_384);

    // Ingest workers: decode and verify in parallel, one node always on the same worker.
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 8);
    let mut worker_tx = Vec::new();
    for _ in 0..workers {
        let (tx, mut rx) = mpsc::channel::<rumqttc::Publish>(4096);
        worker_tx.push(tx);
        let keys = keys.clone();
        let ev_tx = ev_tx.clone();
        tokio::spawn(async move {
            while let Some(p) = rx.recv().await {
                let r = {
                    let k = keys.read().expect("keys lock");
                    classify(&p.topic, &p.payload, &k, &cp_public)
                };
                match r {
                    Ok(Some(ev)) => {
                        if ev_tx.send(ev).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(d) => warn!("{d}"),
                }
            }
        });
    }

    // The telemetry event loop: (re)subscribe on every connection, hand publications to the workers.
    let sub_client = client.clone();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let mut backoff = 100u64;
        loop {
            match eventloop.poll().await {
                Ok(MqttEvent::Incoming(Packet::Publish(p))) => {
                    let mut h = DefaultHasher::new();
                    node_of(&p.topic).hash(&mut h);
                    let w = (h.finish() as usize) % worker_tx.len();
                    if worker_tx[w].send(p).await.is_err() {
                        return;
                    }
                }
                Ok(MqttEvent::Incoming(Packet::ConnAck(_))) => {
                    backoff = 100;
                    info!("connected to the broker");
                    let c = sub_client.clone();
                    tokio::spawn(async move {
                        if let Err(e) = c.subscribe(topics::NODES_WILDCARD, QoS::AtLeastOnce).await
                        {
                            error!("cannot subscribe to {}: {e}", topics::NODES_WILDCARD);
                        }
                    });
                }
                Ok(MqttEvent::Incoming(Packet::SubAck(_))) => {
                    if let Some(r) = ready.take() {
                        let _ = r.send(());
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    warn!("broker connection: {e}; retrying in {backoff} ms");
                    tokio::time::sleep(Duration::from_millis(backoff)).await;
                    backoff = (backoff * 2).min(5000);
                }
            }
        }
    });

    // The applications event loop (also carries every publication of ours).
    let sub_apps = apps_client.clone();
    let apps_tx = ctl_tx.clone();
    tokio::spawn(async move {
        let mut backoff = 100u64;
        loop {
            match apps_eventloop.poll().await {
                Ok(MqttEvent::Incoming(Packet::Publish(p))) => {
                    let r = classify(&p.topic, &p.payload, &Keys::new(), &cp_public);
                    match r {
                        Ok(Some(ev @ Event::AppPublished { .. })) => {
                            if apps_tx.send(ev).await.is_err() {
                                return;
                            }
                        }
                        Ok(_) => {}
                        Err(d) => warn!("{d}"),
                    }
                }
                Ok(MqttEvent::Incoming(Packet::ConnAck(_))) => {
                    backoff = 100;
                    debug!("connected to the broker for applications");
                    let c = sub_apps.clone();
                    tokio::spawn(async move {
                        if let Err(e) = c.subscribe(topics::APPS_WILDCARD, QoS::AtLeastOnce).await {
                            error!("cannot subscribe to {}: {e}", topics::APPS_WILDCARD);
                        }
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    warn!("broker connection (applications): {e}; retrying in {backoff} ms");
                    tokio::time::sleep(Duration::from_millis(backoff)).await;
                    backoff = (backoff * 2).min(5000);
                }
            }
        }
    });

    // Ticks.
    let tick_tx = ctl_tx.clone();
    let tick_ms = opts.tick_ms;
    tokio::spawn(async move {
        let mut iv = tokio::time::interval(Duration::from_millis(tick_ms));
        iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            iv.tick().await;
            if tick_tx.send(Event::Tick).await.is_err() {
                return;
            }
        }
    });

    // Start-up: once subscribed, read the retained desired states for a moment, then republish
    // what the broker lacks.
    let start_tx = ctl_tx.clone();
    let wait = opts.startup_wait_ms;
    tokio::spawn(async move {
        let _ = ready_rx.await;
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let _ = start_tx.send(Event::StartupDone).await;
    });

    // Node records are not on the critical path: written by a background thread.
    let (node_tx, node_rx) = std::sync::mpsc::channel::<PersistOp>();
    let node_store = store.clone();
    std::thread::Builder::new()
        .name("node-records".into())
        .spawn(move || {
            while let Ok(op) = node_rx.recv() {
                if let Err(e) = node_store.apply(&op) {
                    error!("store: {e}");
                }
            }
        })?;

    let t0 = Instant::now();
    let now = || t0.elapsed().as_millis() as u64;
    let mut engine = Engine::new(opts.engine.clone(), key, snap, now());
    let mut shutdown = Box::pin(shutdown_signal());
    loop {
        let ev = tokio::select! {
            biased;
            _ = &mut shutdown => { info!("control plane stopping (signal)"); break; }
            ev = ctl_rx.recv() => match ev { Some(ev) => ev, None => break },
            ev = ev_rx.recv() => match ev { Some(ev) => ev, None => break },
        };
        for action in engine.handle(now(), ev) {
            match action {
                Action::Persist(op @ PersistOp::PutNode(_)) => {
                    let _ = node_tx.send(op);
                }
                Action::Persist(op) => {
                    if let Err(e) = store.apply(&op) {
                        // never publish what could not be made durable
                        error!("store: {e}; stopping");
                        return Err(e.into());
                    }
                }
                Action::Publish {
                    topic,
                    payload,
                    retain,
                } => {
                    debug!("publish {topic} ({} bytes)", payload.len());
                    if let Err(e) = apps_client
                        .publish(topic.clone(), QoS::AtLeastOnce, retain, payload)
                        .await
                    {
                        error!("cannot publish {topic}: {e}");
                    }
                }
                Action::Schedule(job) => match &sched_workers {
                    Some(w) => w.submit(job).await,
                    None => run_in_process(job, ctl_tx.clone()),
                },
            }
        }
    }
    let _ = client.disconnect().await;
    let _ = apps_client.disconnect().await;
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("signal handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Reloads the inventory when its file changes: new logins for the broker, new keys for ingest.
fn spawn_inventory_watch(
    dd: DataDir,
    keys: Arc<RwLock<Keys>>,
    logins: Option<Logins>,
    removed_tx: mpsc::Sender<Event>,
) {
    tokio::spawn(async move {
        let path = dd.inventory_path();
        let mut last = mtime(&path);
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let m = mtime(&path);
            if m == last {
                continue;
            }
            last = m;
            match dd.inventory() {
                Ok(inv) => {
                    let new = inv.keys();
                    let removed: Vec<String> = {
                        let mut k = keys.write().expect("keys lock");
                        let gone = k
                            .keys()
                            .filter(|n| !new.contains_key(*n))
                            .cloned()
                            .collect();
                        *k = new;
                        gone
                    };
                    for n in removed {
                        info!("node {n} removed from the inventory");
                        let _ = removed_tx.send(Event::NodeRemoved(n)).await;
                    }
                    if let Some(l) = &logins {
                        if let Ok(m) = dd.logins() {
                            *l.write().expect("logins lock") = m;
                        }
                    }
                    info!("inventory reloaded: {} nodes", inv.nodes.len());
                }
                Err(e) => error!("inventory not reloaded: {e}"),
            }
        }
    });
}
