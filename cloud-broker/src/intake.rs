//! What comes into the control plane, turned into engine events: node telemetry (decoded and
//! verified by [`classify`] on a pool of tasks), application definitions, and changes of the
//! inventory (its file, or its etcd key).
//!
//! Invariants:
//! - Nothing reaches the engine from the broker without passing [`classify`]; a dropped
//!   publication is one log line with the reason.
//! - Publications on one topic always go to the same ingest task, so they reach the engine in
//!   the order the broker delivered them; a node's reports, link metrics, online marker, actual
//!   and desired states share one task.
//! - The ingest tasks verify against the inventory's keys as last read: a node removed from
//!   the inventory is dropped from the keys before its [`Event::NodeRemoved`] is sent.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use acoa_shared::topics;
use ed25519_dalek::VerifyingKey;
use rumqttc::Publish;
use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};

use crate::broker::Logins;
use crate::conn::Inbox;
use crate::engine::Event;
use crate::identity::DataDir;
use crate::ingest::{classify, classify_all, periodic, Freshness, Keys};

mod waiting;
use waiting::{Offer, Waiting};

/// Publications queued for one ingest task.
const INGEST_QUEUE: usize = 4096;
/// The most publications an ingest task takes from its queue at once, their signatures
/// checked in one batch (`ingest::classify_all`): about 25 µs a signature from 16 on, against
/// 46 one by one (BENCHMARKS.md, "Signatures verified in batches"). A quiet queue gives
/// batches of one.
const VERIFY_BATCH: usize = 32;
/// The most ingest tasks (one per core up to this).
const MAX_INGEST_TASKS: usize = 8;
/// With several brokers, how often the ingest tasks log how many copies they dropped.
pub const COPIES_LOG: Duration = Duration::from_secs(60);
/// How often the inventory's version (file modification time, etcd revision) is looked at.
const INVENTORY_POLL: Duration = Duration::from_millis(500);

/// The node a topic is about (the topic itself when it names none), which picks its task.
fn node_of(topic: &str) -> &str {
    node_in(topics::parse(topic), topic)
}

/// [`node_of`] with `topic` parsed already (`parsed`).
fn node_in<'a>(parsed: Option<topics::Topic<'a>>, topic: &'a str) -> &'a str {
    match parsed {
        Some(topics::Topic::Report(n))
        | Some(topics::Topic::Links(n))
        | Some(topics::Topic::Online(n))
        | Some(topics::Topic::Actual(n))
        | Some(topics::Topic::Usage(n))
        | Some(topics::Topic::Desired(n))
        | Some(topics::Topic::Peers(n)) => n,
        _ => topic,
    }
}

/// The ingest task of a publication (of `tasks`): its node's, so that a node's messages stay in
/// order; a loopback's turns with its number, so that loopbacks measure every task's backlog.
fn task_of(p: &Publish, tasks: usize) -> usize {
    let parsed = topics::parse(&p.topic);
    if let Some(seq) = loopback_seq(parsed, &p.payload) {
        return (seq % tasks as u64) as usize;
    }
    let mut h = DefaultHasher::new();
    node_in(parsed, &p.topic).hash(&mut h);
    (h.finish() as usize) % tasks
}

/// The number of a loopback (`parsed`: its topic, parsed), if it is one: what routes it to a
/// task and keeps it from replacing another while it waits ([`waiting`]).
fn loopback_seq(parsed: Option<topics::Topic<'_>>, payload: &[u8]) -> Option<u64> {
    match parsed {
        Some(topics::Topic::Loopback(_)) => {
            crate::engine::loopback::payload::decode(payload).map(|(_, seq)| seq)
        }
        _ => None,
    }
}

/// Node telemetry: each publication to the ingest task of its node. A clone feeds the same
/// tasks (the connections to several brokers share them, and so their freshness watermarks).
///
/// Shedding, when the engine is behind: an ingest task that finds the engine's queue full
/// sheds verified, fresh periodic telemetry ([`crate::ingest::periodic`]) and tells the engine on its
/// control queue which nodes it heard that way ([`Event::HeardShed`]: a node whose messages
/// are shed is not judged silent for it). Periodic telemetry that waits for room in a task's
/// own queue (verifying is behind) and is replaced by its node's next message of the kind is
/// shed unverified ([`crate::ingest::sheddable`]), which proves nothing about its node. Either
/// way the broker connection keeps being read.
///
/// A publication that finds its task's queue full waits off the connection ([`Waiting`]: the
/// latest per topic, in order; a periodic one it replaces counts as shed), and so does every
/// later one of that task until the queue took them all.
#[derive(Clone)]
pub struct Telemetry {
    tasks: Vec<mpsc::Sender<Publish>>,
    /// Per task, what waits for room in its queue.
    waiting: Vec<Arc<Waiting>>,
    shed: Arc<ShedLog>,
}

/// How often a line says how many messages were shed.
const SHED_LOG: Duration = Duration::from_secs(10);
/// How often an ingest task that sheds tells the engine which nodes it heard meanwhile.
const HEARD_SHED_EVERY: Duration = Duration::from_millis(250);

/// A count of like events logged as one line at most every `every`: [`Tally::add`] counts one
/// and, when a line is due, gives the count and the seconds it covers (then starts again).
struct Tally {
    count: u64,
    since: std::time::Instant,
    every: Duration,
}

impl Tally {
    /// `first_at_once`: the first event gets its line at once (else after `every`).
    fn new(every: Duration, first_at_once: bool) -> Tally {
        let now = std::time::Instant::now();
        let since = if first_at_once {
            now.checked_sub(every).unwrap_or(now)
        } else {
            now
        };
        Tally {
            count: 0,
            since,
            every,
        }
    }

    fn add(&mut self) -> Option<(u64, u64)> {
        self.count += 1;
        if self.since.elapsed() < self.every {
            return None;
        }
        let line = (self.count, self.since.elapsed().as_secs());
        *self = Tally::new(self.every, false);
        Some(line)
    }
}

/// The messages shed, shared by the connections to every broker.
struct ShedLog(std::sync::Mutex<Tally>);

impl ShedLog {
    fn shed(&self, d: &crate::ingest::Dropped) {
        crate::observe::count_drop(d);
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((n, secs)) = g.add() {
            warn!("{n} messages shed in {secs} s: {d}");
        }
    }
}

impl Telemetry {
    /// Starts the ingest tasks (one per core, 1 to 8): they verify against `keys` and the
    /// control plane's own key, and send what is valid to `events`. With `copies` (several
    /// brokers), a message that is not newer than the last accepted is most likely the copy that
    /// came through another broker: counted and logged in a line every [`COPIES_LOG`], not
    /// warned about one by one as a replay.
    pub fn spawn(
        keys: Arc<RwLock<Keys>>,
        control_plane: VerifyingKey,
        sinks: Sinks,
        copies: bool,
    ) -> Telemetry {
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .clamp(1, MAX_INGEST_TASKS);
        // the first line comes with the first message shed
        let shed = Arc::new(ShedLog(std::sync::Mutex::new(Tally::new(SHED_LOG, true))));
        let tasks: Vec<mpsc::Sender<Publish>> = (0..n)
            .map(|_| {
                let (keys, sinks, shed) = (keys.clone(), sinks.clone(), shed.clone());
                spawn_ingest_task(keys, control_plane, sinks, shed, copies)
            })
            .collect();
        let waiting = tasks.iter().map(|t| Waiting::spawn(t.clone())).collect();
        Telemetry {
            tasks,
            waiting,
            shed,
        }
    }
}

/// Where the ingest tasks send what they verified.
#[derive(Clone)]
pub struct Sinks {
    /// The engine's telemetry queue.
    pub events: mpsc::Sender<Event>,
    /// The engine's control queue (read before telemetry): the nodes heard through shed
    /// messages ([`Event::HeardShed`]).
    pub control: mpsc::Sender<Event>,
}

/// The nodes an ingest task heard through messages it shed, sent to the engine at most every
/// [`HEARD_SHED_EVERY`]. Bounded: only nodes of the inventory (their messages were verified).
struct HeardShed {
    nodes: std::collections::HashSet<String>,
    sent_at: std::time::Instant,
}

impl HeardShed {
    fn new() -> HeardShed {
        HeardShed {
            nodes: Default::default(),
            sent_at: std::time::Instant::now(),
        }
    }

    /// When the nodes heard are due to be sent.
    fn due(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.sent_at + HEARD_SHED_EVERY)
    }

    /// Sends the nodes heard when due; when the control queue is full they wait for the next
    /// time (nothing blocks).
    fn flush(&mut self, control: &mpsc::Sender<Event>) {
        if self.nodes.is_empty() || self.sent_at.elapsed() < HEARD_SHED_EVERY {
            return;
        }
        let nodes: Vec<String> = self.nodes.iter().cloned().collect();
        if control.try_send(Event::HeardShed(nodes)).is_ok() {
            self.nodes.clear();
        }
        self.sent_at = std::time::Instant::now();
    }
}

fn spawn_ingest_task(
    keys: Arc<RwLock<Keys>>,
    control_plane: VerifyingKey,
    sinks: Sinks,
    shed: Arc<ShedLog>,
    copies: bool,
) -> mpsc::Sender<Publish> {
    let (tx, mut rx) = mpsc::channel::<Publish>(INGEST_QUEUE);
    let Sinks { events, control } = sinks;
    tokio::spawn(async move {
        let mut fresh = Freshness::default();
        // with several brokers: the copies dropped since the last line
        let mut copies_log = Tally::new(COPIES_LOG, false);
        let mut heard = HeardShed::new();
        loop {
            // the nodes heard are sent when due even when nothing more comes
            let p = if heard.nodes.is_empty() {
                rx.recv().await
            } else {
                tokio::select! {
                    p = rx.recv() => p,
                    _ = tokio::time::sleep_until(heard.due()) => {
                        heard.flush(&control);
                        continue;
                    }
                }
            };
            let Some(p) = p else { return };
            heard.flush(&control);
            // what waits behind it too, its signatures checked in one batch
            let mut batch = vec![p];
            while batch.len() < VERIFY_BATCH {
                match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(_) => break,
                }
            }
            let results = {
                let items: Vec<(&str, &[u8])> = batch
                    .iter()
                    .map(|p| (p.topic.as_str(), p.payload.as_ref()))
                    .collect();
                let k = keys.read().expect("keys lock");
                classify_all(&items, &k, &control_plane)
            };
            for r in results {
                // a node's first report of an agent run is how it joins (or returns after a
                // restart): never shed
                let joins = matches!(&r, Ok(Some(ev @ Event::Report(_))) if fresh.first_of_run(ev));
                let r = match r {
                    Ok(Some(ev)) => match fresh.check(&ev) {
                        Ok(()) => Ok(Some(ev)),
                        Err(d) if copies => {
                            debug!("{d}");
                            if let Some((n, secs)) = copies_log.add() {
                                info!(
                                    "{n} messages not newer than the last accepted dropped in {secs} s (copies through another broker, or replays); the last: {d}"
                                );
                            }
                            continue;
                        }
                        Err(d) => {
                            crate::observe::count_drop(&d);
                            warn!("{d} ({} replays dropped by this ingest task)", fresh.stale);
                            continue;
                        }
                    },
                    other => other,
                };
                match r {
                    Ok(Some(ev)) if periodic(&ev).is_some() && !joins => {
                        match events.try_send(ev) {
                            Ok(()) => {}
                            Err(mpsc::error::TrySendError::Closed(_)) => return,
                            Err(mpsc::error::TrySendError::Full(ev)) => {
                                let (kind, node) = periodic(&ev).expect("periodic, matched above");
                                shed.shed(&crate::ingest::Dropped::Shed {
                                    kind,
                                    node: node.to_string(),
                                    queue: events.max_capacity(),
                                });
                                heard.nodes.insert(node.to_string());
                            }
                        }
                    }
                    Ok(Some(ev)) => {
                        if events.send(ev).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(d) => {
                        crate::observe::count_drop(&d);
                        warn!("{d}");
                    }
                }
            }
        }
    });
    tx
}

impl Inbox for Telemetry {
    async fn publish(&mut self, p: Publish) -> bool {
        let t = task_of(&p, self.tasks.len());
        // behind what waits, or straight into the queue when it has room
        let p = if self.waiting[t].busy() {
            p
        } else {
            match self.tasks[t].try_send(p) {
                Ok(()) => return true,
                Err(mpsc::error::TrySendError::Closed(_)) => return false,
                Err(mpsc::error::TrySendError::Full(p)) => p,
            }
        };
        let shed = |topic: &str| {
            let kind = crate::ingest::sheddable(topic)?;
            self.shed.shed(&crate::ingest::Dropped::Shed {
                kind,
                node: node_of(topic).to_string(),
                queue: INGEST_QUEUE,
            });
            Some(())
        };
        let topic = p.topic.clone();
        match self.waiting[t].offer(p) {
            Offer::Waits { replaced } => {
                if replaced {
                    shed(&topic);
                }
                true
            }
            // more waits than the fleet's topics: periodic telemetry is shed, the rest waits
            // on the connection
            Offer::Full(p) => shed(&topic).is_some() || self.tasks[t].send(*p).await.is_ok(),
        }
    }
}

/// Application definitions (checked by [`classify`], then read by
/// [`crate::definitions::spawn_reader`] off this connection's loop; our own publications on
/// this connection come back and are ignored).
pub struct Apps {
    /// To the definitions reader.
    pub definitions: mpsc::Sender<(String, Vec<u8>)>,
    pub control_plane: VerifyingKey,
}

impl Inbox for Apps {
    async fn publish(&mut self, p: Publish) -> bool {
        match classify(&p.topic, &p.payload, &Keys::new(), &self.control_plane) {
            Ok(Some(Event::AppPublished { app, payload })) => {
                self.definitions.send((app, payload)).await.is_ok()
            }
            Ok(_) => true,
            Err(d) => {
                warn!("{d}");
                true
            }
        }
    }
}

/// Reloads the inventory when it changes (its file, or its etcd key): new keys for ingest, new logins for the
/// embedded broker (`logins`), and an [`Event::NodeRemoved`] for each node gone.
pub fn spawn_inventory_watch(
    dd: DataDir,
    keys: Arc<RwLock<Keys>>,
    logins: Option<Logins>,
    removed_tx: mpsc::Sender<Event>,
) {
    tokio::spawn(async move {
        // read once at once: it may have changed since the keys were read (a standby waits long)
        let mut last = None;
        loop {
            if last.is_some() {
                tokio::time::sleep(INVENTORY_POLL).await;
            }
            let m = match off_runtime(&dd, DataDir::inventory_version).await {
                Ok(v) => v,
                Err(e) => {
                    debug!("inventory version not read: {e}");
                    tokio::time::sleep(INVENTORY_POLL).await;
                    continue;
                }
            };
            if last == Some(m) {
                continue;
            }
            let first = last.is_none();
            match off_runtime(&dd, DataDir::inventory).await {
                Ok(inv) => {
                    // only a version whose inventory was read is done with: one that could
                    // not be read (etcd losing its quorum between the two reads) is read
                    // again, or the keys stay as they were for good
                    last = Some(m);
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
                        if let Ok(m) = off_runtime(&dd, DataDir::logins).await {
                            *l.write().expect("logins lock") = m;
                        }
                    }
                    if !first {
                        info!("inventory reloaded: {} nodes", inv.nodes.len());
                    }
                }
                Err(e) => {
                    error!(
                        "inventory not reloaded: {e}; read again in {} ms",
                        INVENTORY_POLL.as_millis()
                    );
                    tokio::time::sleep(INVENTORY_POLL).await;
                }
            }
        }
    });
}

/// `f(dd)` on a blocking thread (etcd's calls block), its error as text.
async fn off_runtime<T: Send + 'static>(
    dd: &DataDir,
    f: fn(&DataDir) -> Result<T, crate::identity::IdentityError>,
) -> Result<T, String> {
    let dd = dd.clone();
    match tokio::task::spawn_blocking(move || f(&dd)).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_messages_keep_one_task_and_loopbacks_turn_through_every_task() {
        let publish =
            |topic: &str, payload: Vec<u8>| Publish::new(topic, rumqttc::QoS::AtMostOnce, payload);
        let tasks = 3;
        let of_node: std::collections::BTreeSet<usize> = [
            topics::report("n7"),
            topics::links("n7"),
            topics::online("n7"),
            topics::actual("n7"),
        ]
        .iter()
        .map(|t| task_of(&publish(t, vec![1]), tasks))
        .collect();
        assert_eq!(
            of_node.len(),
            1,
            "one node, one task: its messages stay in order"
        );
        let turned: std::collections::BTreeSet<usize> = (1..=6u64)
            .map(|seq| {
                let p = crate::engine::loopback::payload::encode(1, seq);
                task_of(&publish(&topics::loopback(0), p), tasks)
            })
            .collect();
        assert_eq!(turned.len(), tasks, "every task's backlog is timed");
        // a malformed one goes to a task all the same (and is dropped there, named)
        assert!(task_of(&publish(&topics::loopback(0), vec![0xde]), tasks) < tasks);
    }

    /// The watch reads the inventory's version, then the inventory: when the second read
    /// fails (etcd losing its quorum in between; here a file that cannot be parsed) the same
    /// version is read again until its inventory comes, not taken as done (CI: a replica that
    /// led after the quorum came back dropped every node's messages as unknown).
    #[tokio::test]
    async fn an_inventory_that_could_not_be_read_is_read_again_at_the_same_version() {
        use crate::identity::{Inventory, NodeEntry};
        let dir = tempfile::tempdir().unwrap();
        let dd = DataDir::new(dir.path());
        let mut inv = Inventory::default();
        let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        inv.nodes.insert(
            "n1".into(),
            NodeEntry {
                password: "pw".into(),
                public_key: Some(acoa_shared::wire::keys::public_hex(&key.verifying_key())),
            },
        );
        dd.save_inventory(&inv).unwrap();
        let path = dd.inventory_path();
        let good = std::fs::read(&path).unwrap();
        let at = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let write = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(at).unwrap(); // the same version both times
        };
        write(b"{ not json");
        let keys = Arc::new(RwLock::new(Keys::new()));
        let (tx, _rx) = mpsc::channel(16);
        spawn_inventory_watch(dd.clone(), keys.clone(), None, tx);
        tokio::time::sleep(INVENTORY_POLL * 2).await;
        assert!(keys.read().unwrap().is_empty());
        write(&good);
        let t = std::time::Instant::now();
        while !keys.read().unwrap().contains_key("n1") {
            assert!(
                t.elapsed() < INVENTORY_POLL * 10,
                "the inventory was not read again"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Ingest for the enrolled `nodes` (all with one key, returned) in front of an engine that
    /// reads nothing until the test does: room for one event, and its control queue.
    fn ingest_for(
        nodes: &[&str],
    ) -> (
        Telemetry,
        mpsc::Receiver<Event>,
        mpsc::Receiver<Event>,
        ed25519_dalek::SigningKey,
    ) {
        let node_key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let cp = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
        let mut keys = Keys::new();
        for n in nodes {
            keys.insert(n.to_string(), Some(node_key.verifying_key()));
        }
        let (events, engine) = mpsc::channel::<Event>(1);
        let (control, engine_control) = mpsc::channel::<Event>(16);
        let t = Telemetry::spawn(
            Arc::new(RwLock::new(keys)),
            cp.verifying_key(),
            Sinks { events, control },
            false,
        );
        (t, engine, engine_control, node_key)
    }

    #[test]
    fn a_nodes_topics_go_to_one_task_and_other_topics_by_themselves() {
        for t in [
            topics::report("n7"),
            topics::links("n7"),
            topics::online("n7"),
            topics::actual("n7"),
            topics::desired("n7"),
            topics::peers("n7"),
        ] {
            assert_eq!(node_of(&t), "n7", "{t}");
        }
        assert_eq!(node_of("elsewhere/x"), "elsewhere/x");
    }

    /// Presences are never shed, and a connection never waits for them either: with every
    /// queue full they wait off the connection, the latest per node, and reach the engine in
    /// order once it reads.
    #[tokio::test]
    async fn a_full_ingest_queue_never_holds_the_connection_and_keeps_the_latest_presence() {
        use acoa_shared::wire::{self, Message, Presence};
        let (mut t, mut engine, _engine_control, node_key) = ingest_for(&["n1"]);
        let last = INGEST_QUEUE as u64 + 2000;
        let all = tokio::time::timeout(Duration::from_secs(30), async {
            for conn in 1..=last {
                let m = Message::Presence(Presence {
                    node: wire::name("n1").unwrap(),
                    run: 1,
                    conn,
                    online: conn % 2 == 0,
                });
                let payload = wire::encode(&m, Some(&node_key)).unwrap();
                let p = Publish::new(topics::online("n1"), rumqttc::QoS::AtLeastOnce, payload);
                assert!(t.publish(p).await);
            }
        })
        .await;
        assert!(all.is_ok(), "the connection waited on a full queue");
        let mut conns = vec![];
        while let Ok(Some(ev)) =
            tokio::time::timeout(Duration::from_millis(1000), engine.recv()).await
        {
            if let Event::Online { conn, .. } = ev {
                conns.push(conn);
            }
        }
        assert_eq!(
            conns.last(),
            Some(&last),
            "the latest presence did not come"
        );
        assert!(conns.windows(2).all(|w| w[0] < w[1]), "out of order");
    }

    /// A node joins by its first report of an agent run: that one waits for room in the
    /// engine's queue instead of being shed; the node's next report is periodic again.
    #[tokio::test]
    async fn a_nodes_first_report_of_a_run_is_never_shed() {
        use acoa_shared::wire::{self, Message};
        let c = crate::testkit::engine::railway();
        let names: Vec<&str> = c.nodes.iter().map(|n| n.name.as_str()).collect();
        let (mut t, mut engine, _engine_control, node_key) = ingest_for(&names);
        let report = |n: &acoa_shared::model::Node, seq: u64| {
            let mut r = crate::testkit::engine::first_report(n);
            r.seq = seq;
            let payload = wire::encode(&Message::NodeReport(Box::new(r)), Some(&node_key)).unwrap();
            Publish::new(topics::report(&n.name), rumqttc::QoS::AtMostOnce, payload)
        };
        // the engine's room taken by the first node's report; every node's first report then
        // waits, and each node's second one is shed
        for n in &c.nodes {
            assert!(t.publish(report(n, 1)).await);
            assert!(t.publish(report(n, 2)).await);
        }
        let mut first = std::collections::BTreeSet::new();
        while let Ok(Some(ev)) =
            tokio::time::timeout(Duration::from_millis(500), engine.recv()).await
        {
            if let Event::Report(r) = ev {
                if r.seq == 1 {
                    first.insert(r.node.to_string());
                }
            }
        }
        assert_eq!(
            first.len(),
            c.nodes.len(),
            "a first report was shed: {first:?}"
        );
    }

    /// An engine that does not keep up must not stall the broker connection: with the
    /// engine's queue full, verified link metrics are shed (the connection goes on being read)
    /// and the engine is told on its control queue that their node was heard; a presence is
    /// never shed, it waits for room.
    #[tokio::test]
    async fn a_full_engine_queue_sheds_periodic_telemetry_says_who_was_heard_and_waits_for_the_rest(
    ) {
        use acoa_shared::wire::{self, LinkMetrics, Message, Presence};
        let (mut t, mut engine, mut engine_control, node_key) = ingest_for(&["n1", "n2"]);
        let links = |node: &str, seq: u64| {
            let l = LinkMetrics {
                node: wire::name(node).unwrap(),
                seq,
                run: 1,
                links: Default::default(),
                coord: None,
            };
            let payload =
                wire::encode(&Message::LinkMetrics(Box::new(l)), Some(&node_key)).unwrap();
            Publish::new(topics::links(node), rumqttc::QoS::AtMostOnce, payload)
        };
        // far more than every queue holds: every call returns at once
        let all = tokio::time::timeout(Duration::from_secs(30), async {
            for seq in 1..=(INGEST_QUEUE as u64 * 2 + 10) {
                assert!(t.publish(links("n1", seq)).await);
            }
        })
        .await;
        assert!(all.is_ok(), "publishing blocked on a full queue");
        // n1 was heard, though what it said was shed; n2 too, once its message is verified
        tokio::time::sleep(HEARD_SHED_EVERY).await;
        assert!(t.publish(links("n1", INGEST_QUEUE as u64 * 3)).await);
        assert!(t.publish(links("n2", 1)).await);
        let mut heard = std::collections::BTreeSet::new();
        while heard.len() < 2 {
            let ev = tokio::time::timeout(Duration::from_secs(5), engine_control.recv()).await;
            match ev {
                Ok(Some(Event::HeardShed(nodes))) => heard.extend(nodes),
                other => panic!("expected the nodes heard, got {other:?}"),
            }
        }
        assert_eq!(heard, ["n1".to_string(), "n2".to_string()].into());
        // one message took the engine's room: the first one, not shed
        match engine.recv().await {
            Some(Event::Links(l)) => assert_eq!((l.node.as_str(), l.seq), ("n1", 1)),
            other => panic!("expected the first link metrics, got {other:?}"),
        }
        // a presence is not shed: it waits for room, and gets it
        let presence = Presence {
            node: wire::name("n1").unwrap(),
            run: 1,
            conn: 1,
            online: true,
        };
        let payload = wire::encode(&Message::Presence(presence), Some(&node_key)).unwrap();
        let p = Publish::new(topics::online("n1"), rumqttc::QoS::AtLeastOnce, payload);
        assert!(t.publish(p).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut presence_came = false;
        while let Ok(Some(ev)) =
            tokio::time::timeout(Duration::from_millis(500), engine.recv()).await
        {
            presence_came |= matches!(ev, Event::Online { online: true, .. });
        }
        assert!(presence_came, "a presence was shed");
    }
}
