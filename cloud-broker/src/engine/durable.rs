//! What keeps the broker and the store in step with the engine: a store that cannot write
//! (full disk) and writes again, and a broker that may have lost its retained messages.
//!
//! Invariants:
//! - While the store cannot write, a new or changed definition is held, not applied: its status
//!   says `refused` with the reason, and it is applied as soon as the store writes again
//!   (deletions still go through: removing a record needs no space). The warning is logged
//!   once per outage.
//! - When the store writes again, every record the engine holds is written again before
//!   anything is published, so the store catches up with what was decided meanwhile.
//! - [`Engine::republish`] publishes again every retained document the control plane owns
//!   (desired states, the peer list, the statuses) at their current generations, so a broker
//!   that lost them (restarted without persistence) serves them again.
//! - At start-up no desired state lacks a container the restored records (placements,
//!   rollouts) put on its node, nor holds one no record names (an application deleted, a
//!   rolled-back revision's copy): a control plane stopped between a record's write and the
//!   desired states' write (a rollout's batch persists its history first) left them apart, and
//!   the records win ([`Engine::repair_desired`]). A desired state that only holds a named
//!   container the records now place elsewhere is left alone: it may be a cut-off node's, held
//!   until its return is settled ([`disconnect`](super::disconnect)), and the engine restored
//!   does not know which nodes were cut off.

use std::collections::{BTreeSet, HashSet};

use acoa_shared::topics;
use acoa_shared::wire::{self, Message};
use tracing::{info, warn};

use super::{Action, Engine};
use crate::records::PersistOp;
use crate::status::{digest, AppStatus};

impl Engine {
    /// Whether the store is known not to write (changes are held meanwhile).
    pub fn store_full(&self) -> bool {
        self.store_full.is_some()
    }

    /// A record could not be made durable (`app`: the application it was about, if any).
    pub(super) fn on_store_failed(
        &mut self,
        app: Option<String>,
        reason: String,
        out: &mut Vec<Action>,
    ) {
        if self.store_full.is_none() {
            warn!(
                "store cannot write ({reason}): new definitions are held until it can; what is published stays served"
            );
        }
        self.store_full = Some(reason);
        if let Some(app) = app {
            if let Some(a) = self.apps.get(&app) {
                let d = a.rec.digest.clone();
                self.refused_status(&app, &d, false, out);
            }
        }
    }

    /// The store writes again: everything is written again, published again, and the held
    /// definitions are applied.
    pub(super) fn on_store_writable(&mut self, out: &mut Vec<Action>) {
        if self.store_full.take().is_none() {
            return;
        }
        info!(
            "store writes again: {} applications and {} desired states written, {} held definitions applied",
            self.apps.len(),
            self.desired.len(),
            self.held.len()
        );
        out.push(Action::Persist(PersistOp::PutMeta(self.meta.clone())));
        for a in self.apps.values() {
            out.push(Action::Persist(PersistOp::PutApp(Box::new(a.rec.clone()))));
        }
        for d in self.desired.values() {
            out.push(Action::Persist(PersistOp::PutDesired(Box::new(d.clone()))));
        }
        self.republish(out);
        for (app, payload) in std::mem::take(&mut self.held) {
            self.on_app(app, payload, out);
        }
    }

    /// Holds a definition while the store cannot write, and says so in its status.
    pub(super) fn hold(&mut self, app: String, payload: Vec<u8>, out: &mut Vec<Action>) {
        let d = digest(&payload);
        let previous = self.apps.contains_key(&app);
        self.held.insert(app.clone(), payload);
        self.refused_status(&app, &d, previous, out);
    }

    fn refused_status(&mut self, app: &str, d: &str, previous: bool, out: &mut Vec<Action>) {
        let mut st = AppStatus::new(app, "refused", d);
        st.reason = Some(format!(
            "the control plane's store is full or cannot write ({}); the definition is applied once it can{}",
            self.store_full.as_deref().unwrap_or("unknown"),
            if previous {
                "; the previous definition stays deployed"
            } else {
                ""
            }
        ));
        self.send_status(app, &st, out);
    }

    /// Publishes again every retained document the control plane owns, unchanged.
    pub(super) fn republish(&mut self, out: &mut Vec<Action>) {
        for (n, d) in &self.desired {
            if let Ok(bytes) = d
                .to_wire()
                .and_then(|w| wire::encode(&Message::DesiredState(w), Some(&self.key)))
            {
                out.push(Action::Publish {
                    topic: topics::desired(n),
                    payload: bytes,
                    retain: true,
                });
            }
        }
        self.republish_peers(out);
        // what was last sent may not have left (a failed write drops the publications after
        // it): a placed application's status is computed again, any other sent again
        let sent = std::mem::take(&mut self.status_sent);
        for (app, json) in sent {
            match self.status_of(&app) {
                Some(st) => self.send_status(&app, &st, out),
                None => {
                    out.push(Action::Publish {
                        topic: topics::app_status(&app),
                        payload: json.clone().into_bytes(),
                        retain: true,
                    });
                    self.status_sent.insert(app, json);
                }
            }
        }
    }

    /// Gives every node whose desired state lacks a container the records put there (by name
    /// and image), or holds one no record names, its desired state made of the records, as a
    /// new generation (persisted, published). Returns the nodes whose desired state changed.
    pub(super) fn repair_desired(&mut self, out: &mut Vec<Action>) -> BTreeSet<String> {
        let mut nodes: BTreeSet<String> = self.desired.keys().cloned().collect();
        let mut named: HashSet<String> = HashSet::new();
        for a in self.apps.values() {
            if let Some(p) = &a.rec.placement {
                nodes.extend(p.assignment.values().cloned());
                named.extend(p.assignment.keys().map(|c| a.rec.container_name(c)));
            }
            if let Some(r) = a.history.rollout.as_ref().filter(|r| r.is_active()) {
                nodes.extend(r.nodes());
                let copies = r
                    .steps
                    .iter()
                    .flat_map(|s| s.old.iter().chain(s.new.iter()));
                named.extend(copies.map(|c| c.container.name.clone()));
            }
        }
        let mut changed = BTreeSet::new();
        for n in nodes {
            let stored = self.desired.get(&n).map_or(&[][..], |d| &d.containers[..]);
            // by name and image: a control plane of a later version that describes the same
            // container otherwise (a field added) does not restart the fleet's containers
            let lacks = self.desired_containers(&n).iter().any(|c| {
                !stored
                    .iter()
                    .any(|s| s.name == c.name && s.image == c.image)
            });
            let orphan = stored.iter().any(|c| !named.contains(&c.name));
            if !lacks && !orphan {
                continue;
            }
            let before = self.desired.get(&n).map(|d| d.generation);
            self.update_desired(&n, out);
            if self.desired.get(&n).map(|d| d.generation) != before {
                changed.insert(n);
            }
        }
        if !changed.is_empty() {
            let mut names: Vec<&str> = changed.iter().take(10).map(String::as_str).collect();
            let more = format!("and {} more", changed.len().saturating_sub(10));
            if changed.len() > 10 {
                names.push(&more);
            }
            warn!(
                "{} desired states disagreed with the stored placements and rollouts (the last run stopped between two writes): new generations for node {}",
                changed.len(),
                names.join(", ")
            );
        }
        changed
    }
}
