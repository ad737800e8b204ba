//! Retained documents of which only the latest counts (a node's peer list), queued per topic
//! for one broker: the decision loop hands them over without waiting, a later document for a
//! topic still queued replaces the queued one in its place, and a task of the broker's
//! publishes them in the order their topics were queued ([`crate::brokers::Publishers`]).
//!
//! Why: a round of peer lists in a joining fleet of 50,000 nodes changes 35,000-47,000 lists,
//! and each goes to every broker. Published from the loop, they held it for seconds while the
//! brokers' queues drained, and the node reports it did not read meanwhile were shed.
//!
//! Invariants: at most one document per topic is queued, so the queue never holds more than
//! one per node; a document is never published after a later one for its topic.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use tokio::sync::Notify;

/// The documents waiting for one broker.
#[derive(Debug, Default)]
pub struct LatestQueue {
    pending: Mutex<Pending>,
    ready: Notify,
}

#[derive(Debug, Default)]
struct Pending {
    /// Topics in the order they were queued (each once).
    order: VecDeque<String>,
    docs: HashMap<String, Vec<u8>>,
}

impl LatestQueue {
    /// Queues `payload` for `topic`: in the place of the one queued for it, if any.
    pub fn put(&self, topic: String, payload: Vec<u8>) {
        let mut p = self.lock();
        match p.docs.get_mut(&topic) {
            Some(queued) => *queued = payload,
            None => {
                p.docs.insert(topic.clone(), payload);
                p.order.push_back(topic);
            }
        }
        drop(p);
        self.ready.notify_one();
    }

    /// The oldest topic queued and its latest document, if any.
    pub fn pop(&self) -> Option<(String, Vec<u8>)> {
        let mut p = self.lock();
        let topic = p.order.pop_front()?;
        let doc = p.docs.remove(&topic).unwrap_or_default();
        Some((topic, doc))
    }

    /// The next document, once there is one.
    pub async fn next(&self) -> (String, Vec<u8>) {
        loop {
            // registered before looking, so that a `put` in between is not missed
            let ready = self.ready.notified();
            if let Some(next) = self.pop() {
                return next;
            }
            ready.await;
        }
    }

    /// How many topics are queued.
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        // a panic while holding the lock leaves whole values behind: keep going
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(q: &LatestQueue, topic: &str, doc: &str) {
        q.put(topic.to_string(), doc.as_bytes().to_vec());
    }

    fn drain(q: &LatestQueue) -> Vec<(String, String)> {
        std::iter::from_fn(|| q.pop())
            .map(|(t, d)| (t, String::from_utf8(d).unwrap()))
            .collect()
    }

    #[test]
    fn a_later_document_replaces_the_queued_one_in_its_place() {
        let q = LatestQueue::default();
        put(&q, "a", "a1");
        put(&q, "b", "b1");
        put(&q, "a", "a2");
        assert_eq!(q.len(), 2, "one per topic");
        assert_eq!(
            drain(&q),
            [("a".into(), "a2".into()), ("b".into(), "b1".into())]
        );
        assert!(q.is_empty());
        // once published, a topic queues again at the back
        put(&q, "b", "b2");
        put(&q, "a", "a3");
        assert_eq!(
            drain(&q),
            [("b".into(), "b2".into()), ("a".into(), "a3".into())]
        );
    }

    #[tokio::test]
    async fn the_next_document_is_awaited_without_losing_one() {
        let q = std::sync::Arc::new(LatestQueue::default());
        let waiting = {
            let q = q.clone();
            tokio::spawn(async move { q.next().await })
        };
        tokio::task::yield_now().await;
        put(&q, "n1", "list");
        let (topic, doc) = waiting.await.unwrap();
        assert_eq!((topic.as_str(), doc.as_slice()), ("n1", &b"list"[..]));
        // queued before anyone waits: taken at once
        put(&q, "n2", "list");
        assert_eq!(q.next().await.0, "n2");
    }
}
