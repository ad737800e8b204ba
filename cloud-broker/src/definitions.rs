//! Application definitions are read here, off the decision loop and off the broker
//! connection's loop: each one on a blocking thread, within a time budget. A definition that
//! was refused is remembered by its application and digest (at most [`REJECTED_MEMO`], the
//! least recently seen forgotten first) and is not read again when it comes back (the broker
//! hands retained definitions over again after every reconnect).
//!
//! Invariants:
//! - Nothing a publisher sends makes the engine or a connection wait for a parse: the engine
//!   gets [`Event::AppChecked`] with the outcome, or [`Event::AppPublished`] for a deletion.
//! - At most [`MAX_OVERRUN`] reads that went over the budget run at once; the next read waits
//!   for one of them (a parse cannot be stopped, only left).
//! - Reading is a pure function of application name and text ([`validate`]), so a refusal
//!   remembered by digest is the refusal the same text would get again.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Semaphore};
use tracing::{info, warn};

use crate::engine::{validate, Event};
use crate::status::digest;

/// How long one definition may take to read before it is refused.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(2);
/// Refused definitions remembered.
pub const REJECTED_MEMO: usize = 512;
/// Reads over the budget that may still be running.
pub const MAX_OVERRUN: usize = 2;
/// Definitions queued for reading.
const QUEUE: usize = 256;

/// Refused definitions by (application, digest), with their reasons; least recently seen
/// first. Bounded: the oldest is forgotten when a new one comes past `cap`.
#[derive(Debug)]
pub struct RejectedMemo {
    cap: usize,
    order: VecDeque<(String, String)>,
    reasons: HashMap<(String, String), String>,
}

impl RejectedMemo {
    pub fn new(cap: usize) -> RejectedMemo {
        RejectedMemo {
            cap: cap.max(1),
            order: VecDeque::new(),
            reasons: HashMap::new(),
        }
    }

    /// The reason `digest` of `app` was refused, if it is remembered (then it is the most
    /// recently seen).
    pub fn get(&mut self, app: &str, digest: &str) -> Option<String> {
        let key = (app.to_string(), digest.to_string());
        let reason = self.reasons.get(&key)?.clone();
        if let Some(i) = self.order.iter().position(|k| *k == key) {
            self.order.remove(i);
        }
        self.order.push_back(key);
        Some(reason)
    }

    pub fn insert(&mut self, app: &str, digest: &str, reason: &str) {
        let key = (app.to_string(), digest.to_string());
        if self.reasons.insert(key.clone(), reason.into()).is_some() {
            self.order.retain(|k| *k != key);
        }
        self.order.push_back(key);
        while self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.reasons.remove(&old);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// Starts the reader; definitions (application, text) sent to the returned queue reach
/// `events` as [`Event::AppChecked`] (an empty text, a deletion, as [`Event::AppPublished`]).
pub fn spawn_reader(
    events: mpsc::Sender<Event>,
    budget: Duration,
) -> mpsc::Sender<(String, Vec<u8>)> {
    let (tx, mut rx) = mpsc::channel::<(String, Vec<u8>)>(QUEUE);
    tokio::spawn(async move {
        let mut memo = RejectedMemo::new(REJECTED_MEMO);
        let overrun = Arc::new(Semaphore::new(MAX_OVERRUN));
        while let Some((app, payload)) = rx.recv().await {
            // a deletion or a rollback request is no definition to read
            let ev = if crate::records::is_deletion(&app, &payload)
                || crate::records::is_rollback(&app, &payload).is_some()
            {
                Event::AppPublished { app, payload }
            } else {
                read(&mut memo, &overrun, budget, app, payload).await
            };
            if events.send(ev).await.is_err() {
                return;
            }
        }
    });
    tx
}

async fn read(
    memo: &mut RejectedMemo,
    overrun: &Arc<Semaphore>,
    budget: Duration,
    app: String,
    payload: Vec<u8>,
) -> Event {
    let d = digest(&payload);
    if let Some(reason) = memo.get(&app, &d) {
        info!(
            "application {app}: definition {d} was refused before, not read again ({} refusals remembered)",
            memo.len()
        );
        return Event::AppChecked {
            app,
            payload,
            checked: Err(reason),
        };
    }
    let permit = overrun
        .clone()
        .acquire_owned()
        .await
        .expect("the semaphore is never closed");
    let t = Instant::now();
    let job = {
        let (app, payload) = (app.clone(), payload.clone());
        tokio::task::spawn_blocking(move || {
            let r = validate(&app, &payload).map(Box::new);
            drop(permit);
            r
        })
    };
    // A read that finished but took longer than the budget is refused as well: whether the
    // timer or the read is seen first must not decide the outcome.
    let checked = match tokio::time::timeout(budget, job).await {
        Ok(Ok(r)) if t.elapsed() <= budget => r,
        Ok(Err(e)) => Err(format!("the definition could not be read: {e}")),
        Ok(Ok(_)) | Err(_) => {
            warn!(
                "application {app}: definition {d} ({} bytes) took longer than {} ms to read: refused",
                payload.len(),
                budget.as_millis()
            );
            Err(format!(
                "the definition took longer than {} ms to read",
                budget.as_millis()
            ))
        }
    };
    info!(
        "application {app}: definition {d} ({} bytes) read in {} ms",
        payload.len(),
        t.elapsed().as_millis()
    );
    if let Err(reason) = &checked {
        memo.insert(&app, &d, reason);
    }
    Event::AppChecked {
        app,
        payload,
        checked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memo_forgets_the_least_recently_seen_refusal_first() {
        let mut m = RejectedMemo::new(2);
        m.insert("a", "1", "bad a");
        m.insert("b", "2", "bad b");
        assert_eq!(m.get("a", "1").as_deref(), Some("bad a")); // a is now the newest
        m.insert("c", "3", "bad c");
        assert_eq!(m.len(), 2);
        assert_eq!(m.get("b", "2"), None);
        assert_eq!(m.get("a", "1").as_deref(), Some("bad a"));
        assert_eq!(m.get("c", "3").as_deref(), Some("bad c"));
        // the same text under another application's name is another definition
        assert_eq!(m.get("b", "1"), None);
        m.insert("c", "3", "bad c again");
        assert_eq!(m.len(), 2);
        assert_eq!(m.get("c", "3").as_deref(), Some("bad c again"));
    }

    #[test]
    fn a_refused_definition_is_read_once_and_a_slow_one_is_refused_on_time() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (etx, mut erx) = mpsc::channel(16);
            let tx = spawn_reader(etx, Duration::from_secs(5));
            let bad = b"application: other\ncomponents: [{name: a, image: i}]\n".to_vec();
            for _ in 0..2 {
                tx.send(("x".into(), bad.clone())).await.unwrap();
                match erx.recv().await.unwrap() {
                    Event::AppChecked { app, checked, .. } => {
                        assert_eq!(app, "x");
                        assert!(checked.unwrap_err().contains("differs from the topic"));
                    }
                    other => panic!("{other:?}"),
                }
            }
            let good = b"application: x\ncomponents: [{name: a, image: i}]\n".to_vec();
            tx.send(("x".into(), good)).await.unwrap();
            assert!(matches!(
                erx.recv().await.unwrap(),
                Event::AppChecked { checked: Ok(_), .. }
            ));
            tx.send(("x".into(), vec![])).await.unwrap();
            assert!(matches!(
                erx.recv().await.unwrap(),
                Event::AppPublished { .. }
            ));

            // a zero budget: even the smallest read is over it
            let (etx, mut erx) = mpsc::channel(16);
            let tx = spawn_reader(etx, Duration::ZERO);
            let doc = format!(
                "application: y\ncomponents:\n{}",
                "- {name: a, image: i}\n".repeat(200)
            );
            tx.send(("y".into(), doc.into_bytes())).await.unwrap();
            match erx.recv().await.unwrap() {
                Event::AppChecked { checked, .. } => {
                    assert!(checked.unwrap_err().contains("took longer than 0 ms"));
                }
                other => panic!("{other:?}"),
            }
        });
    }
}
