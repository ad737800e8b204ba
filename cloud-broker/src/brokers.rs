//! The control plane on several brokers (`serve --broker-url URL[,URL...]`): it takes node
//! telemetry and definitions from every broker of its list and publishes everything of its own
//! on each of them, so that an agent reaches it through whichever broker it is connected to.
//!
//! Invariants:
//! - Every publication goes to every broker, in the engine's order on each, except the peer
//!   lists: the loop queues them without waiting ([`Publishers::publish_latest`]), and a task
//!   per broker publishes the latest list of each node ([`crate::latest`]) on a connection of
//!   their own, whose request queue is short ([`LISTS_QUEUE`]): a desired state never waits
//!   behind a round of peer lists, neither for room in a queue nor in one.
//! - A broker that is up gets it with back-pressure (the engine waits for room in that broker's
//!   queue, at most [`SLOW_BROKER`] when there are several); a broker that is down never holds
//!   the control plane up: what does not fit its queue is dropped (one log line per outage),
//!   and it gets every retained document again when it is back.
//! - Every accepted connection of a broker of a list, the first too, publishes the retained
//!   documents again ([`Event::BrokerReconnected`]): a broker that was down when the control
//!   plane started, or restarted without persistence, lacks them. With a single broker only
//!   reconnections do (the engine's start-up republishes what that broker lacked).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rumqttc::{AsyncClient, QoS};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info, warn};

use crate::conn::{self, Connection, Link};
use crate::engine::Event;
use crate::identity::Login;
use crate::latest::LatestQueue;

/// How long a publication waits for room in the queue of a broker that is up, when there are
/// several: past that the broker is treated as down for this publication.
pub const SLOW_BROKER: Duration = Duration::from_secs(2);

/// Requests queued on a broker's peer-lists connection. Short, so that a round of lists waits
/// in its [`LatestQueue`] (where a later list replaces a queued one) rather than in the
/// connection's queue.
pub const LISTS_QUEUE: usize = 64;

/// One broker the control plane publishes on.
struct Target {
    url: String,
    client: AsyncClient,
    /// Whether its connection is accepted ([`Connection::up`]).
    up: Arc<AtomicBool>,
    /// Whether publications to it are being dropped (logged once per outage).
    dropping: AtomicBool,
    /// The peer lists waiting for it, published by a task of its own on the broker's
    /// peer-lists connection.
    latest: Arc<LatestQueue>,
}

/// Where the control plane's publications go: every broker of its list.
pub struct Publishers {
    targets: Vec<Target>,
}

impl Publishers {
    /// The brokers `urls` through their connections `conns`, and a task per broker that
    /// publishes what [`Publishers::publish_latest`] queues on that broker's connection of
    /// `lists` (in a runtime; connected with [`LISTS_QUEUE`]). The three in the same order, of
    /// the same length.
    pub fn new(urls: &[String], conns: &[Connection], lists: &[Connection]) -> Publishers {
        assert!(
            conns.len() == urls.len() && lists.len() == urls.len(),
            "a connection and a peer-lists connection for each broker"
        );
        let targets = urls
            .iter()
            .zip(conns)
            .zip(lists)
            .map(|((url, c), l)| {
                let latest = Arc::new(LatestQueue::default());
                tokio::spawn(publish_queued(latest.clone(), l.client.clone()));
                Target {
                    url: url.clone(),
                    client: c.client.clone(),
                    up: c.up.clone(),
                    dropping: AtomicBool::new(false),
                    latest,
                }
            })
            .collect();
        Publishers { targets }
    }

    /// Queues a retained document of which only the latest counts (a peer list) for every
    /// broker, without waiting: each broker's task publishes it, unless a later one for the
    /// same topic replaces it first ([`LatestQueue`]).
    pub fn publish_latest(&self, topic: &str, payload: Vec<u8>) {
        if let [rest @ .., last] = self.targets.as_slice() {
            for t in rest {
                t.latest.put(topic.to_string(), payload.clone());
            }
            last.latest.put(topic.to_string(), payload);
        }
    }

    /// How many documents wait in the fullest broker's queue of [`Publishers::publish_latest`].
    pub fn latest_queued(&self) -> usize {
        self.targets
            .iter()
            .map(|t| t.latest.len())
            .max()
            .unwrap_or(0)
    }

    /// Publishes at least once on every broker.
    pub async fn publish(&self, topic: &str, payload: Vec<u8>, retain: bool) {
        if let [only] = self.targets.as_slice() {
            // one broker: the engine waits for it, as for any other back-pressure
            if let Err(e) = only
                .client
                .publish(topic, QoS::AtLeastOnce, retain, payload)
                .await
            {
                error!("cannot publish {topic}: {e}");
            }
            return;
        }
        for t in &self.targets {
            let sent = if t.up.load(Ordering::Relaxed) {
                let p = t
                    .client
                    .publish(topic, QoS::AtLeastOnce, retain, payload.clone());
                matches!(tokio::time::timeout(SLOW_BROKER, p).await, Ok(Ok(())))
            } else {
                t.client
                    .try_publish(topic, QoS::AtLeastOnce, retain, payload.clone())
                    .is_ok()
            };
            if !sent && !t.dropping.swap(true, Ordering::Relaxed) {
                warn!(
                    "broker {}: publications dropped while it is down or its queue is full; it gets the retained documents again when it is back",
                    t.url
                );
            } else if sent && t.up.load(Ordering::Relaxed) {
                t.dropping.store(false, Ordering::Relaxed);
            }
        }
    }

    /// Asks every broker to close the connection.
    pub async fn disconnect(&self) {
        for t in &self.targets {
            let _ = t.client.try_disconnect();
        }
    }
}

/// Where the loopback leaves ([`crate::engine::loopback`]): the telemetry connection of every
/// broker, the one it comes back on, so that it times the way in only.
pub struct Loopback {
    clients: Vec<AsyncClient>,
}

impl Loopback {
    /// The telemetry connections `conns`, one per broker, in the brokers' order.
    pub fn new(conns: &[Connection]) -> Loopback {
        Loopback {
            clients: conns.iter().map(|c| c.client.clone()).collect(),
        }
    }

    /// Publishes loopback `seq` of process `nonce` on every broker, each on its own topic, QoS 0
    /// as the fleet's telemetry; never waits (one that finds its queue full is not sent, and
    /// counts as late until it is given up).
    pub fn send(&self, nonce: u64, seq: u64) {
        let payload = crate::engine::loopback::payload::encode(nonce, seq);
        for (i, c) in self.clients.iter().enumerate() {
            let topic = acoa_shared::topics::loopback(i);
            let _ = c.try_publish(topic, QoS::AtMostOnce, false, payload.clone());
        }
    }
}

/// The peer-lists connection to `url` ([`Publishers::new`]'s `lists`): it only publishes, the
/// peer lists, with a request queue of [`LISTS_QUEUE`].
pub fn connect_lists(url: &str, client_id: &str, login: &Login) -> anyhow::Result<Connection> {
    let o = conn::mqtt_options(url, client_id, login)?;
    let link = Link {
        filters: &[],
        purpose: Some("peer lists"),
    };
    Ok(conn::spawn(o, LISTS_QUEUE, link, conn::PublishOnly))
}

/// Fires once the first of `subscribed` fires (the telemetry of any broker of the list is
/// subscribed); never if none does.
pub fn first_subscribed(subscribed: Vec<oneshot::Receiver<()>>) -> oneshot::Receiver<()> {
    let (tx, rx) = oneshot::channel();
    let (any_tx, mut any_rx) = mpsc::channel::<()>(1);
    for s in subscribed {
        let any = any_tx.clone();
        tokio::spawn(async move {
            if s.await.is_ok() {
                let _ = any.try_send(());
            }
        });
    }
    tokio::spawn(async move {
        if any_rx.recv().await.is_some() {
            let _ = tx.send(());
        }
    });
    rx
}

/// Publishes what `latest` queues on `client`, retained, QoS 1, waiting for room in the
/// connection's queue as long as it takes (a broker down holds only this task; its documents
/// keep being replaced by later ones meanwhile).
async fn publish_queued(latest: Arc<LatestQueue>, client: AsyncClient) {
    loop {
        let (topic, payload) = latest.next().await;
        if let Err(e) = client
            .publish(&topic, QoS::AtLeastOnce, true, payload)
            .await
        {
            // the connection's loop is gone: the control plane is stopping
            error!("cannot publish {topic}: {e}");
            return;
        }
    }
}

/// Every reconnection of an applications connection (the ones our publications leave on)
/// becomes an [`Event::BrokerReconnected`]: a broker restarted without persistence lacks the
/// retained documents, and a clean session says nothing about them, so they are published again
/// whatever `session_present` says. Of a list of several brokers, the first connection of each
/// counts too.
pub fn spawn_republish(apps: &mut [Connection], urls: &[String], tx: mpsc::Sender<Event>) {
    let several = apps.len() > 1;
    for (c, url) in apps.iter_mut().zip(urls) {
        let mut again = std::mem::replace(&mut c.reconnected, mpsc::unbounded_channel().1);
        let first = several.then(|| std::mem::replace(&mut c.subscribed, oneshot::channel().1));
        let (tx, url) = (tx.clone(), url.clone());
        tokio::spawn(async move {
            if let Some(first) = first {
                if first.await.is_ok() {
                    info!("connected to broker {url}: publishing the retained documents there");
                    if tx.send(Event::BrokerReconnected).await.is_err() {
                        return;
                    }
                }
            }
            while let Some(session) = again.recv().await {
                info!(
                    "reconnected to the broker{} (session {}): publishing the retained documents again",
                    if several { format!(" {url}") } else { String::new() },
                    if session { "kept" } else { "new" }
                );
                if tx.send(Event::BrokerReconnected).await.is_err() {
                    return;
                }
            }
        });
    }
}
