//! The thin async driver: MQTT session, reconciler loop, reporter, prober thread.

mod mqtt;
mod probe;
mod reconcile;
mod report;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use acoa_shared::topics;
use acoa_shared::wire::{self, Message};
use anyhow::Context;
use ed25519_dalek::SigningKey;
use rumqttc::{AsyncClient, QoS};
use tokio::sync::{oneshot, watch};
use tracing::{debug, info, warn};

use crate::config::{Config, RuntimeKind};
use crate::presence::Presence;
use crate::reconciler::Reconciler;
use crate::runtime::podman::PodmanRuntime;
use crate::store;

use mqtt::{brokers_line, mqtt_loop, mqtt_options, will};
use probe::start_prober;
use reconcile::{reconcile_loop, DesiredList, LoopParts};
use report::{report_loop, stats_advertise, usage_loop};

/// Largest MQTT packet accepted (a full desired state is well under 100 KiB).
pub const MAX_INCOMING_PACKET: usize = acoa_shared::topics::AGENT_MAX_PACKET;
pub const MAX_OUTGOING_PACKET: usize = 64 * 1024;
/// Requests queued towards the broker at most; past that, reports are dropped.
const REQUEST_QUEUE: usize = 64;
/// The actual state is published on change and at least this often.
const ACTUAL_PERIOD_MS: u64 = 10_000;

struct Shared {
    client: AsyncClient,
    key: SigningKey,
    node: String,
    /// This start's run counter: the `run` of every message the agent signs.
    run: u64,
    connected: AtomicBool,
    /// Broker connections so far (a node report goes out on each).
    sessions: AtomicU64,
    /// Link metrics messages published so far (a period without one: the report is the
    /// heartbeat).
    links_sent: AtomicU64,
    containers: AtomicU32,
    /// The signed presence frames of this run's connections.
    presence: std::sync::Mutex<Presence>,
}

impl Shared {
    /// Signs and queues a message; dropped (with a debug line) while disconnected or
    /// when the queue is full: reports are periodic, the next one follows.
    fn publish(&self, topic: String, qos: QoS, msg: &Message) {
        if !self.connected.load(Ordering::Relaxed) {
            return;
        }
        match wire::encode(msg, Some(&self.key)) {
            Ok(bytes) => {
                if let Err(e) = self.client.try_publish(topic, qos, false, bytes) {
                    debug!("{} not queued: {e}", msg.kind());
                }
            }
            Err(e) => warn!("cannot encode {}: {e}", msg.kind()),
        }
    }
}

pub fn run(cfg: Config) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(run_async(cfg))
}

async fn run_async(cfg: Config) -> anyhow::Result<()> {
    let (key, created) = store::node_key(&cfg.state_dir)
        .with_context(|| format!("node key in {}", cfg.state_dir.display()))?;
    info!(
        "node {} starting: public key {} ({}), broker {}, runtime {:?}",
        cfg.node,
        wire::keys::public_hex(&key.verifying_key()),
        if created {
            "created now: enroll it"
        } else {
            "loaded"
        },
        brokers_line(&cfg.broker.urls),
        cfg.runtime
    );
    // Before anything is published: every message of this start outnumbers those of earlier ones.
    let run = store::next_run(&cfg.state_dir)
        .with_context(|| format!("run counter in {}", cfg.state_dir.display()))?;
    info!("agent run {run}");

    // one set of options per broker of the list, all alike but for the address
    let brokers = cfg
        .broker
        .urls
        .iter()
        .map(|b| mqtt_options(&cfg, b))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut presence = Presence::new(&cfg.node, key.clone(), run)?;
    let mut first = brokers[0].clone();
    first.set_last_will(will(&cfg.node, &mut presence));
    let (client, eventloop) = AsyncClient::new(first, REQUEST_QUEUE);
    let shared = Arc::new(Shared {
        client,
        key: key.clone(),
        node: cfg.node.clone(),
        run,
        connected: AtomicBool::new(false),
        sessions: AtomicU64::new(0),
        links_sent: AtomicU64::new(0),
        containers: AtomicU32::new(0),
        presence: std::sync::Mutex::new(presence),
    });

    // The latest desired-state frame: a whole document, so when several arrive while the
    // reconciler is busy only the newest matters (a queue that drops the newest when full
    // could leave the node on an old state for good).
    let (desired_tx, desired_rx) = watch::channel::<Option<Vec<u8>>>(None);
    let (session_tx, session_rx) = watch::channel(0u64);
    let (peers_tx, peers_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(4);
    let (restored_tx, restored_rx) = oneshot::channel();
    // (spec name, app, component) of the current desired state, for the usage reports.
    let (desired_list_tx, desired_list_rx) = watch::channel(DesiredList::new());
    let stats_sock = match std::net::UdpSocket::bind(cfg.stats.listen) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(
                "stats.listen {}: {e}; no workload traffic stats on this node",
                cfg.stats.listen
            );
            None
        }
    };
    let stats_bound = stats_sock.as_ref().and_then(|s| s.local_addr().ok());
    let stats_port = stats_bound.map(|a| a.port());
    // CPU and memory per container: a second client of the same runtime.
    let usage_rt = match cfg.runtime {
        RuntimeKind::Podman => Some(PodmanRuntime::new(
            &cfg.podman_socket,
            &cfg.node,
            cfg.netns.clone(),
        )?),
        RuntimeKind::K3s => None,
    };

    // Containers first: restore from disk before any broker contact.
    let reconciler = Reconciler::new(
        &cfg.node,
        cfg.broker.control_plane_key,
        cfg.image_allowlist.clone(),
        cfg.netns.clone(),
        ACTUAL_PERIOD_MS,
    )
    .with_run(run);
    let parts = LoopParts {
        rec: reconciler,
        cfg: cfg.clone(),
        desired_rx,
        session_rx,
        shared: shared.clone(),
        restored_tx,
        tick: Duration::from_millis(cfg.report_period_ms),
        desired_list_tx,
    };
    match cfg.runtime {
        RuntimeKind::Podman => {
            let rt = PodmanRuntime::new(&cfg.podman_socket, &cfg.node, cfg.netns.clone())?;
            let advertise = match stats_port {
                Some(port) => stats_advertise(&cfg, port, &rt).await,
                None => None,
            };
            if let Some(a) = &advertise {
                info!(
                    "workload stats on udp {}; containers are told ACOA_AGENT_STATS={a}",
                    stats_bound.unwrap_or(cfg.stats.listen)
                );
            }
            let rt = rt.with_stats(advertise);
            tokio::spawn(reconcile_loop(rt, parts));
        }
        RuntimeKind::K3s => {
            #[cfg(feature = "k3s")]
            {
                let rt = crate::runtime::k3s::K3sRuntime::new(
                    cfg.kubeconfig.as_deref(),
                    &cfg.k3s_namespace,
                    &cfg.node,
                )
                .await?;
                let mut parts = parts;
                // the kubelet checks health (livenessProbe) and restarts
                parts.rec = parts.rec.with_runtime_health_checks(true);
                tokio::spawn(reconcile_loop(rt, parts));
            }
            #[cfg(not(feature = "k3s"))]
            {
                let _ = parts;
                anyhow::bail!("runtime: k3s needs a build with --features k3s");
            }
        }
    }
    match tokio::time::timeout(Duration::from_secs(60), restored_rx).await {
        Ok(_) => {}
        Err(_) => warn!("restoring containers takes over 60 s: connecting to the broker meanwhile"),
    }

    start_prober(&cfg, &key, shared.clone(), peers_rx)?;
    tokio::spawn(report_loop(cfg.clone(), shared.clone()));
    tokio::spawn(usage_loop(
        cfg.clone(),
        shared.clone(),
        stats_sock,
        usage_rt,
        desired_list_rx,
    ));

    tokio::select! {
        _ = mqtt_loop(cfg.clone(), eventloop, brokers, shared.clone(), desired_tx, peers_tx, session_tx) => {}
        _ = shutdown_signal() => {
            info!("shutting down: containers keep running");
            shared.connected.store(false, Ordering::Relaxed);
            let goodbye = shared.presence.lock().map(|p| p.goodbye()).unwrap_or_default();
            let _ = shared
                .client
                .try_publish(topics::online(&cfg.node), QoS::AtLeastOnce, true, goodbye);
            let _ = shared.client.try_disconnect();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
