//! The thin async driver: MQTT session, reconciler loop, reporter, prober thread.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use acoa_shared::topics::{self, acl};
use acoa_shared::wire::{self, Message};
use anyhow::Context;
use ed25519_dalek::SigningKey;
use rumqttc::{AsyncClient, Event as MqttEvent, LastWill, MqttOptions, Packet, QoS};
use tokio::sync::{oneshot, watch};
use tracing::{debug, error, info, warn};

use crate::brokers::{Rotation, BACKOFF_MAX};
use crate::config::{BrokerUrl, Config, RuntimeKind};
use crate::presence::Presence;
use crate::prober::{self, ProbeIo, Prober};
use crate::reconciler::{Action, Event, Level, Reconciler};
use crate::report::{ReportGate, Reporter};
use crate::runtime::podman::PodmanRuntime;
use crate::runtime::Runtime;
use crate::stats::{self, CpuRates, Table};
use crate::store;

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

#[cfg(feature = "tls")]
fn tls_transport(cfg: &Config) -> anyhow::Result<rumqttc::Transport> {
    let path = cfg.broker.ca_file.as_ref().context(
        "broker.ca_file: mqtts:// needs the CA certificate (PEM) that signed the broker's",
    )?;
    let ca = std::fs::read(path).with_context(|| format!("broker.ca_file {}", path.display()))?;
    Ok(rumqttc::Transport::tls_with_config(
        rumqttc::TlsConfiguration::Simple {
            ca,
            alpn: None,
            client_auth: None,
        },
    ))
}

#[cfg(not(feature = "tls"))]
fn tls_transport(_cfg: &Config) -> anyhow::Result<rumqttc::Transport> {
    anyhow::bail!(
        "broker.url: mqtts:// needs TLS, which this build leaves out (build with --features tls)"
    )
}

/// The client options for `broker`: the agent's session (client id, last will, login, limits)
/// with that broker's address and transport.
fn mqtt_options(cfg: &Config, broker: &BrokerUrl) -> anyhow::Result<MqttOptions> {
    let mut opts = MqttOptions::new(
        format!("{}{}", acl::AGENT_CLIENT_PREFIX, cfg.node),
        broker.host.clone(),
        broker.port,
    );
    opts.set_keep_alive(Duration::from_secs(10));
    opts.set_clean_session(true);
    opts.set_max_packet_size(MAX_INCOMING_PACKET, MAX_OUTGOING_PACKET);
    opts.set_request_channel_capacity(REQUEST_QUEUE);
    opts.set_inflight(16);
    if let (Some(u), Some(p)) = (&cfg.broker.username, &cfg.broker.password) {
        opts.set_credentials(u.clone(), p.clone());
    }
    if broker.tls {
        opts.set_transport(tls_transport(cfg)?);
    }
    Ok(opts)
}

/// The last will of the agent's next connection: its signed `offline` presence.
fn will(node: &str, presence: &mut Presence) -> LastWill {
    LastWill::new(
        topics::online(node),
        presence.will_for_next(),
        QoS::AtLeastOnce,
        true,
    )
}

/// The broker list for a log line: `host:port`, or `host:port (then host:port, ...)`.
fn brokers_line(urls: &[BrokerUrl]) -> String {
    let mut line = urls.first().map(|u| u.to_string()).unwrap_or_default();
    if urls.len() > 1 {
        let rest: Vec<String> = urls[1..].iter().map(|u| u.to_string()).collect();
        line.push_str(&format!(" (then {})", rest.join(", ")));
    }
    line
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

/// The MQTT session: subscriptions and the online marker on every accepted connection, incoming
/// documents to the reconciler and the prober; on a failure the next broker of the list
/// (`brokers`, one set of options each) after the [`Rotation`]'s wait.
async fn mqtt_loop(
    cfg: Config,
    mut eventloop: rumqttc::EventLoop,
    brokers: Vec<MqttOptions>,
    shared: Arc<Shared>,
    desired_tx: watch::Sender<Option<Vec<u8>>>,
    peers_tx: std::sync::mpsc::SyncSender<Vec<u8>>,
    session_tx: watch::Sender<u64>,
) {
    let desired_topic = topics::desired(&cfg.node);
    let peers_topic = topics::peers(&cfg.node);
    let urls = &cfg.broker.urls;
    let mut rotation = Rotation::new(brokers.len());
    let mut down_since: Option<Instant> = None;
    let mut failures = 0u32;
    loop {
        match eventloop.poll().await {
            Ok(MqttEvent::Incoming(Packet::ConnAck(_))) => {
                rotation.connected();
                let broker = &urls[rotation.current()];
                match down_since.take() {
                    Some(t) => info!(
                        "broker connection back after {:.1} s ({failures} failed attempts), on broker {broker}",
                        t.elapsed().as_secs_f64()
                    ),
                    None => info!("connected to broker {broker}"),
                }
                failures = 0;
                let c = &shared.client;
                let online = shared
                    .presence
                    .lock()
                    .map(|p| p.online())
                    .unwrap_or_default();
                let _ = c.try_publish(topics::online(&cfg.node), QoS::AtLeastOnce, true, online);
                let _ = c.try_subscribe(desired_topic.clone(), QoS::AtLeastOnce);
                let _ = c.try_subscribe(peers_topic.clone(), QoS::AtLeastOnce);
                shared.connected.store(true, Ordering::Relaxed);
                shared.sessions.fetch_add(1, Ordering::Relaxed);
                session_tx.send_modify(|n| *n += 1);
            }
            Ok(MqttEvent::Incoming(Packet::Publish(p))) => {
                if p.topic == desired_topic {
                    // a newer frame replaces one the reconciler has not read yet
                    desired_tx.send_replace(Some(p.payload.to_vec()));
                } else if p.topic == peers_topic {
                    if peers_tx.try_send(p.payload.to_vec()).is_err() {
                        warn!("dropped a peer-list frame: the prober is busy with 4 already");
                    }
                } else {
                    debug!("ignored a message on {}", p.topic);
                }
            }
            Ok(MqttEvent::Incoming(Packet::SubAck(s))) => {
                if s.return_codes
                    .iter()
                    .any(|c| matches!(c, rumqttc::SubscribeReasonCode::Failure))
                {
                    warn!("broker refused a subscription (check its ACL for this node)");
                }
            }
            Ok(_) => {}
            Err(e) => {
                shared.connected.store(false, Ordering::Relaxed);
                failures += 1;
                let failed = &urls[rotation.current()];
                let next = rotation.failed();
                let then = if next.moved {
                    format!("moving to broker {}", urls[next.broker])
                } else {
                    "retrying".to_string()
                };
                if down_since.is_none() {
                    down_since = Some(Instant::now());
                    warn!(
                        "broker connection lost: {failed}: {e}; {then} with backoff up to {} s",
                        BACKOFF_MAX.as_secs()
                    );
                } else {
                    debug!(
                        "broker {failed} unreachable: {e}; {then} in {} ms",
                        next.wait.as_millis()
                    );
                }
                if next.moved {
                    // the same session options, another address: a clean session there, as
                    // after any reconnection
                    eventloop.mqtt_options = brokers[next.broker].clone();
                }
                // the next connection's will, signed for it
                if let Ok(mut p) = shared.presence.lock() {
                    let w = will(&cfg.node, &mut p);
                    eventloop.mqtt_options.set_last_will(w);
                }
                tokio::time::sleep(next.wait).await;
            }
        }
    }
}

/// `(spec name, app, component)` of every container of the current desired state.
type DesiredList = Vec<(String, String, String)>;

fn desired_list(rec: &Reconciler) -> DesiredList {
    rec.desired()
        .map(|d| {
            d.containers
                .iter()
                .map(|c| {
                    (
                        c.name.to_string(),
                        c.app.to_string(),
                        c.component.to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What containers are told as `ACOA_AGENT_STATS` (see `config::StatsConfig`).
async fn stats_advertise(cfg: &Config, port: u16, rt: &PodmanRuntime) -> Option<String> {
    if let Some(a) = &cfg.stats.advertise {
        return Some(a.clone());
    }
    let ip = cfg.stats.listen.ip();
    if ip.is_loopback() && cfg.netns.is_none() {
        warn!(
            "stats.listen {}: containers on Podman's bridge cannot reach a loopback address (they can when they join the agent's namespace, [podman] netns); set stats.listen = \"0.0.0.0:{port}\" for workload traffic stats",
            cfg.stats.listen
        );
    }
    if !ip.is_unspecified() {
        return Some(std::net::SocketAddr::new(ip, port).to_string());
    }
    match rt.default_gateway().await {
        Some(gw) => Some(std::net::SocketAddr::new(gw, port).to_string()),
        None => {
            warn!(
                "stats.listen {}: Podman's default network has no gateway to tell containers; set stats.advertise",
                cfg.stats.listen
            );
            None
        }
    }
}

/// What the reconcile loop works with, whatever the runtime.
struct LoopParts {
    rec: Reconciler,
    cfg: Config,
    desired_rx: watch::Receiver<Option<Vec<u8>>>,
    session_rx: watch::Receiver<u64>,
    shared: Arc<Shared>,
    restored_tx: oneshot::Sender<()>,
    tick: Duration,
    desired_list_tx: watch::Sender<DesiredList>,
}

async fn reconcile_loop<R: Runtime>(rt: R, parts: LoopParts) {
    let LoopParts {
        mut rec,
        cfg,
        mut desired_rx,
        mut session_rx,
        shared,
        restored_tx,
        tick,
        desired_list_tx,
    } = parts;
    let publish_list = |rec: &Reconciler| {
        let list = desired_list(rec);
        desired_list_tx.send_if_modified(|v| {
            let changed = *v != list;
            if changed {
                *v = list;
            }
            changed
        });
    };
    let epoch = Instant::now();
    let now_ms = move || epoch.elapsed().as_millis() as u64;
    match store::read(&cfg.state_dir, store::DESIRED) {
        Ok(Some(bytes)) => {
            let first = rec.handle(Event::Restored(bytes));
            execute(&rt, &mut rec, &cfg, &shared, first).await;
            publish_list(&rec);
        }
        Ok(None) => info!("no persisted desired state: waiting for one"),
        Err(e) => warn!("cannot read the persisted desired state: {e}"),
    }
    let _ = restored_tx.send(());
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut desired_open = true;
    loop {
        let ev = tokio::select! {
            _ = interval.tick() => Event::Tick { now_ms: now_ms() },
            r = desired_rx.changed(), if desired_open => {
                if r.is_err() { desired_open = false; continue; }
                match desired_rx.borrow_and_update().clone() {
                    Some(bytes) => Event::DesiredFrame(bytes),
                    None => continue,
                }
            },
            r = session_rx.changed() => {
                if r.is_err() { return; }
                Event::Connected
            }
        };
        let actions = rec.handle(ev);
        execute(&rt, &mut rec, &cfg, &shared, actions).await;
        publish_list(&rec);
    }
}

/// Carries out actions, feeding the results back, until the reconciler is done.
async fn execute<R: Runtime>(
    rt: &R,
    rec: &mut Reconciler,
    cfg: &Config,
    shared: &Shared,
    first: Vec<Action>,
) {
    let mut queue: std::collections::VecDeque<Action> = first.into();
    let mut failed: Vec<String> = Vec::new();
    let mut changed = false;
    let mut reobserved = false;
    let mut steps = 0;
    while let Some(action) = queue.pop_front() {
        steps += 1;
        if steps > 1000 {
            error!("reconciler produced over 1000 actions in one pass: stopping this pass");
            break;
        }
        if let Some(name) = action.container() {
            if failed.iter().any(|f| f == name) {
                continue;
            }
        }
        let result = match &action {
            Action::Observe => {
                let ev = match rt.list().await {
                    Ok(list) => {
                        shared
                            .containers
                            .store(list.len() as u32, Ordering::Relaxed);
                        Event::RuntimeObserved(list)
                    }
                    Err(e) => Event::RuntimeUnavailable(e.to_string()),
                };
                queue.extend(rec.handle(ev));
                None
            }
            Action::Create {
                spec,
                generation,
                spec_hash,
            } => Some(rt.create(spec, *generation, spec_hash).await),
            Action::Start { name } => Some(rt.start(name).await),
            Action::Remove { name } => Some(rt.remove(name).await),
            Action::Restart { name } => Some(rt.restart(name).await),
            Action::Check { name, check } => {
                // every check due in this pass runs at once: the pass waits for the slowest
                // (each bounded by its timeout), not for their sum
                let mut due = vec![(name.clone(), check.clone())];
                queue.retain(|a| match a {
                    Action::Check { name, check } if !failed.contains(name) => {
                        due.push((name.clone(), check.clone()));
                        false
                    }
                    _ => true,
                });
                let results =
                    futures_util::future::join_all(due.iter().map(|(n, c)| rt.check(n, c))).await;
                for ((name, _), result) in due.into_iter().zip(results) {
                    queue.extend(rec.handle(Event::Checked { name, result }));
                }
                None
            }
            Action::PersistDesired(bytes) => {
                if let Err(e) = store::write_atomic(&cfg.state_dir, store::DESIRED, bytes) {
                    error!("cannot persist the desired state: {e}");
                }
                None
            }
            Action::PublishActual(a) => {
                let summary: Vec<String> = a
                    .containers
                    .iter()
                    .map(|c| format!("{}={:?}", c.name, c.state))
                    .collect();
                debug!("actual state seq {}: {}", a.seq, summary.join(" "));
                shared.publish(
                    topics::actual(&shared.node),
                    QoS::AtLeastOnce,
                    &Message::ActualState(a.clone()),
                );
                None
            }
            Action::Log(Level::Info, m) => {
                info!("{m}");
                None
            }
            Action::Log(Level::Warn, m) => {
                warn!("{m}");
                None
            }
        };
        if let Some(r) = result {
            changed = true;
            if let Err(e) = r {
                let name = action.container().unwrap_or_default().to_owned();
                let error = format!("{} failed: {}", e.op().verb(), e.reason());
                failed.push(name.clone());
                queue.extend(rec.handle(Event::ActionFailed { name, error }));
            }
        }
        if queue.is_empty() && changed && !reobserved {
            // Report the result of what was just done without waiting for the next tick.
            reobserved = true;
            queue.push_back(Action::Observe);
        }
    }
}

async fn report_loop(cfg: Config, shared: Arc<Shared>) {
    let mut reporter = match Reporter::new(&cfg, shared.run) {
        Ok(r) => r,
        Err(e) => {
            error!("cannot read this machine's resources: {e}; no node reports");
            return;
        }
    };
    let mut interval = tokio::time::interval(Duration::from_millis(cfg.report_period_ms));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let topic = topics::report(&cfg.node);
    let mut gate = ReportGate::new(Duration::from_secs(cfg.report_max_interval_s));
    let mut links_seen = 0;
    loop {
        interval.tick().await;
        let r = reporter.report(shared.containers.load(Ordering::Relaxed));
        let links = shared.links_sent.load(Ordering::Relaxed);
        let why = gate.decide(
            &r,
            Instant::now(),
            shared.sessions.load(Ordering::Relaxed),
            links != links_seen,
        );
        links_seen = links;
        let Some(why) = why else { continue };
        debug!("node report {}: {why:?}", r.seq);
        shared.publish(
            topic.clone(),
            QoS::AtMostOnce,
            &Message::NodeReport(Box::new(r)),
        );
    }
}

/// Workload stats in, one usage message per report period out.
async fn usage_loop(
    cfg: Config,
    shared: Arc<Shared>,
    sock: Option<std::net::UdpSocket>,
    rt: Option<PodmanRuntime>,
    mut desired: watch::Receiver<DesiredList>,
) {
    let sock = sock.and_then(|s| {
        s.set_nonblocking(true).ok()?;
        tokio::net::UdpSocket::from_std(s).ok()
    });
    let node = wire::name(&cfg.node).unwrap_or_default();
    let topic = topics::usage(&cfg.node);
    let mut table = Box::new(Table::new());
    let mut cpu = CpuRates::new();
    let mut interval = tokio::time::interval(Duration::from_millis(cfg.report_period_ms));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut buf = [0u8; stats::MAX_DATAGRAM + 1];
    let mut seq = 0u64;
    let mut sent_empty = true;
    let mut last_tick = Instant::now();
    // dropped datagrams: one warning per 10 s at most
    let mut dropped = 0u64;
    let mut last_warn: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = interval.tick() => {
                let list = desired.borrow_and_update().clone();
                table.set_desired(list.iter().map(|(n, a, c)| (n.as_str(), a.as_str(), c.as_str())));
                let now = Instant::now();
                let period_ms = now.duration_since(last_tick).as_millis().min(u32::MAX as u128) as u32;
                last_tick = now;
                if list.is_empty() && sent_empty {
                    continue;
                }
                let runtime = match &rt {
                    Some(rt) => rt.usage().await.unwrap_or_else(|e| {
                        debug!("container stats unavailable: {e}");
                        Vec::new()
                    }),
                    None => Vec::new(),
                };
                let rates = cpu.update(&runtime);
                seq += 1;
                let components = stats::samples(&list, &rates, &runtime, &mut table, Instant::now());
                let msg = stats::usage_message(&node, shared.run, seq, period_ms, components);
                sent_empty = msg.components.is_empty();
                shared.publish(topic.clone(), QoS::AtMostOnce, &Message::ComponentUsage(Box::new(msg)));
            }
            r = recv_stats(sock.as_ref(), &mut buf) => {
                let Ok((n, from)) = r else { continue };
                if desired.has_changed().unwrap_or(false) {
                    let list = desired.borrow_and_update().clone();
                    table.set_desired(list.iter().map(|(n, a, c)| (n.as_str(), a.as_str(), c.as_str())));
                }
                if let Err(e) = table.receive(&buf[..n], Instant::now()) {
                    dropped += 1;
                    if last_warn.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                        warn!("{e} (from {from}; {dropped} dropped since the last such line)");
                        dropped = 0;
                        last_warn = Some(Instant::now());
                    }
                }
            }
        }
    }
}

async fn recv_stats(
    sock: Option<&tokio::net::UdpSocket>,
    buf: &mut [u8],
) -> std::io::Result<(usize, std::net::SocketAddr)> {
    match sock {
        Some(s) => s.recv_from(buf).await,
        None => std::future::pending().await,
    }
}

struct ThreadIo {
    peers_rx: std::sync::mpsc::Receiver<Vec<u8>>,
    shared: Arc<Shared>,
    state_dir: std::path::PathBuf,
    topic: String,
}

impl ProbeIo for ThreadIo {
    fn new_peers(&mut self) -> Option<Vec<u8>> {
        self.peers_rx.try_recv().ok()
    }
    fn persist_peers(&mut self, frame: &[u8]) {
        if let Err(e) = store::write_atomic(&self.state_dir, store::PEERS, frame) {
            warn!("cannot persist the peer list: {e}");
        }
    }
    fn publish(&mut self, metrics: wire::LinkMetrics) {
        self.shared.links_sent.fetch_add(1, Ordering::Relaxed);
        self.shared.publish(
            self.topic.clone(),
            QoS::AtMostOnce,
            &Message::LinkMetrics(Box::new(metrics)),
        );
    }
}

fn start_prober(
    cfg: &Config,
    _key: &SigningKey,
    shared: Arc<Shared>,
    peers_rx: std::sync::mpsc::Receiver<Vec<u8>>,
) -> anyhow::Result<()> {
    let sock = std::net::UdpSocket::bind(cfg.probe.listen)
        .with_context(|| format!("probe.listen {}", cfg.probe.listen))?;
    let mut prober = Box::new(
        Prober::new(
            &cfg.node,
            cfg.broker.control_plane_key,
            cfg.probe.window,
            cfg.probe.peers_per_period,
            cfg.probe.timeout_ms,
        )
        .with_clock(cfg.probe.clock)
        .with_run(shared.run),
    );
    match store::read(&cfg.state_dir, store::PEERS) {
        Ok(Some(frame)) => match prober.set_peers(&frame, true) {
            Ok(Some(line)) => info!("{line}"),
            Ok(None) => {}
            Err(line) => warn!("persisted {line}"),
        },
        Ok(None) => {}
        Err(e) => warn!("cannot read the persisted peer list: {e}"),
    }
    info!(
        "prober listening on {} (advertised {}), {} peers per {} ms, window {}, clock {}",
        cfg.probe.listen,
        cfg.probe.advertise,
        cfg.probe.peers_per_period,
        cfg.probe.period_ms,
        cfg.probe.window,
        cfg.probe.clock
    );
    let run_cfg = prober::RunConfig {
        node: wire::name(&cfg.node).unwrap_or_default(),
        period: Duration::from_millis(cfg.probe.period_ms),
        publish_period: Duration::from_millis(cfg.report_period_ms),
    };
    let io = ThreadIo {
        peers_rx,
        topic: topics::links(&cfg.node),
        shared,
        state_dir: cfg.state_dir.clone(),
    };
    std::thread::Builder::new()
        .name("prober".into())
        // The tables are fixed-size and live on this stack: 1 MiB of address space,
        // only what is touched becomes resident.
        .stack_size(1024 * 1024)
        .spawn(move || prober::run(sock, *prober, run_cfg, io))
        .context("cannot start the prober thread")?;
    Ok(())
}
