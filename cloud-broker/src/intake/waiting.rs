//! What waits for room in an ingest task's queue, off the broker connection: a connection
//! that blocked on a full queue stopped reading its socket, missed its keep-alive and was
//! dropped by the broker (seen at 50,000 nodes: every connection at once, then a storm of
//! reconnections and retained messages).
//!
//! Invariants:
//! - At most one publication waits per topic, the latest (presence, actual and desired states
//!   of a node each supersede the one before), so what waits is bounded by the fleet's topics
//!   (and by [`MAX_WAITING`] whatever comes). A loopback replaces none: each is timed
//!   (`engine::loopback`), one replaced would read as a control plane behind until given up.
//! - Order is kept: from the moment something waits until the drainer has handed the last of
//!   it to the queue, every publication of the task waits behind it ([`Waiting::busy`]); a
//!   publication that replaces a waiting one of its topic takes its turn at the back.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use rumqttc::Publish;
use tokio::sync::{mpsc, Notify};

/// The most publications that may wait for one ingest task (50,000 nodes with five telemetry
/// topics each); past it periodic telemetry is shed and the rest waits on the connection.
pub const MAX_WAITING: usize = 1 << 18;

/// What a waiting publication replaces: the one of its topic; a loopback none (its number
/// makes each its own).
fn key_of(p: &Publish) -> String {
    match super::loopback_seq(acoa_shared::topics::parse(&p.topic), &p.payload) {
        Some(seq) => format!("{}#{seq}", p.topic),
        None => p.topic.clone(),
    }
}

/// The latest publication per topic, in the order of their last arrival.
#[derive(Default)]
struct Queue {
    /// Arrival number → topic.
    order: BTreeMap<u64, String>,
    /// Topic → its arrival number and publication.
    latest: HashMap<String, (u64, Publish)>,
    next: u64,
    /// The drainer is handing one to the queue.
    in_flight: bool,
}

/// What waits for one ingest task (shared by every broker connection), and its drainer.
pub struct Waiting {
    q: Mutex<Queue>,
    wake: Notify,
}

/// What [`Waiting::offer`] did with a publication.
#[derive(Debug, PartialEq, Eq)]
pub enum Offer {
    /// It waits (`replaced`: in place of an older one of its topic, now dropped).
    Waits { replaced: bool },
    /// [`MAX_WAITING`] reached: the caller must deal with it itself.
    Full(Box<Publish>),
}

impl Waiting {
    /// An empty set and its drainer feeding `queue`.
    pub fn spawn(queue: mpsc::Sender<Publish>) -> Arc<Waiting> {
        let w = Arc::new(Waiting {
            q: Mutex::new(Queue::default()),
            wake: Notify::new(),
        });
        let d = w.clone();
        tokio::spawn(async move {
            loop {
                let Some(p) = d.take() else {
                    d.wake.notified().await;
                    continue;
                };
                if queue.send(p).await.is_err() {
                    return;
                }
                d.sent();
            }
        });
        w
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether publications of this task must wait behind others (to keep their order).
    pub fn busy(&self) -> bool {
        let q = self.lock();
        q.in_flight || !q.latest.is_empty()
    }

    /// Makes `p` wait, in place of the one of its topic that waits ([`key_of`]).
    pub fn offer(&self, p: Publish) -> Offer {
        let mut q = self.lock();
        let n = q.next;
        q.next += 1;
        let topic = key_of(&p);
        let replaced = match q.latest.insert(topic.clone(), (n, p)) {
            Some((old, _)) => {
                q.order.remove(&old);
                true
            }
            None if q.latest.len() > MAX_WAITING => {
                let (_, p) = q.latest.remove(&topic).expect("inserted above");
                return Offer::Full(Box::new(p));
            }
            None => false,
        };
        q.order.insert(n, topic);
        drop(q);
        self.wake.notify_one();
        Offer::Waits { replaced }
    }

    /// The next publication to hand to the queue (the drainer), marked in flight.
    fn take(&self) -> Option<Publish> {
        let mut q = self.lock();
        let (_, topic) = q.order.pop_first()?;
        let (_, p) = q.latest.remove(&topic).expect("ordered topics wait");
        q.in_flight = true;
        Some(p)
    }

    /// The publication in flight is in the queue.
    fn sent(&self) {
        self.lock().in_flight = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rumqttc::QoS;

    fn publish(topic: &str, body: &str) -> Publish {
        Publish::new(topic, QoS::AtLeastOnce, body.as_bytes().to_vec())
    }

    /// Nothing is read from the queue until the end: the connection never waits, the latest of
    /// each topic comes through, in the order of their last arrival.
    #[tokio::test]
    async fn a_full_queue_keeps_the_latest_per_topic_in_order_and_never_holds_the_caller() {
        let (tx, mut rx) = mpsc::channel::<Publish>(1);
        tx.try_send(publish("t/first", "in the queue")).unwrap();
        let w = Waiting::spawn(tx.clone());
        // the queue is full: everything waits, the caller does not
        assert_eq!(
            w.offer(publish("t/a", "a1")),
            Offer::Waits { replaced: false }
        );
        assert_eq!(
            w.offer(publish("t/b", "b1")),
            Offer::Waits { replaced: false }
        );
        assert_eq!(
            w.offer(publish("t/a", "a2")),
            Offer::Waits { replaced: true }
        );
        assert!(w.busy());
        let mut got = vec![];
        for _ in 0..3 {
            let p = tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv())
                .await
                .unwrap()
                .unwrap();
            got.push(String::from_utf8(p.payload.to_vec()).unwrap());
        }
        assert_eq!(got, ["in the queue", "b1", "a2"]);
        // all handed over: free again
        for _ in 0..100 {
            if !w.busy() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(!w.busy());
    }

    #[tokio::test]
    async fn loopbacks_waiting_replace_none_of_each_other() {
        let (tx, mut rx) = mpsc::channel::<Publish>(1);
        tx.try_send(publish("t/first", "in the queue")).unwrap();
        let w = Waiting::spawn(tx.clone());
        let topic = acoa_shared::topics::loopback(0);
        for seq in 1..=3 {
            let p = crate::engine::loopback::payload::encode(7, seq);
            let lb = Publish::new(topic.as_str(), QoS::AtMostOnce, p);
            assert_eq!(w.offer(lb), Offer::Waits { replaced: false });
        }
        let mut seqs = vec![];
        rx.recv().await.unwrap();
        for _ in 0..3 {
            let p = tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv())
                .await
                .unwrap()
                .unwrap();
            seqs.push(
                crate::engine::loopback::payload::decode(&p.payload)
                    .unwrap()
                    .1,
            );
        }
        assert_eq!(seqs, [1, 2, 3], "each comes back, in order");
    }
}
