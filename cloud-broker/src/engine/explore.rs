//! Exploring around a placement that rested on estimates (issue 16): after an application's
//! targeted probes are measured, up to `explore_rounds` rounds of
//! `acoa_scheduler::explore::round` (a [`Purpose::Explore`] job each). A round moves the
//! placement only onto measured links (the best of the current placement, the last round's
//! candidate and the searches on the model and on the measured links alone) and names the
//! unmeasured pairs around the search's placement; those that fit are added to the peer lists
//! of their first nodes (targeted probes, beyond `k`, the pairs that decide most first:
//! `peerlists::fitting`), and when they are measured, or after [`EXPLORE_WAIT_MS`], the next
//! round runs. When the rounds are done or nothing is left to probe, the application's
//! targeted probes are its placement's own links (kept measured).
//!
//! `coords-sim --place-rules multi` runs the same rounds on a simulated fleet: there they take
//! the placements on 16 measured pairs per node plus estimates to within 1 % of the placement
//! on every measured pair at the median (BENCHMARKS.md).
//!
//! Invariants: an exploration never moves a placement onto an estimated link, nor while a
//! revision rolls out or a node the placement uses is unreachable (as the periodic
//! re-evaluation); a round's pairs stay in the peer lists only until the next round's (or the
//! exploration's end); the periodic re-evaluation leaves an application alone while its round
//! waits for links.

use std::collections::{BTreeMap, BTreeSet};

use tracing::{info, warn};

use super::{Action, Engine, JobOutcome, JobResult};
use crate::status::PlacementRecord;

/// How long a round waits for the links it asked for before it runs on what was measured (a
/// node that went silent never reports some of them; one whose list filled up since, with
/// another application's targets, may not).
pub const EXPLORE_WAIT_MS: u64 = 30_000;

/// Exploration rounds after a placement that rested on estimates, by default (`serve
/// --explore-rounds`). Five left a few applications of the 2,000- and 5,000-node fleets above
/// the 1 % goal with pairs still to probe; ten take them within it (BENCHMARKS.md, "Ten
/// exploration rounds").
pub const DEFAULT_EXPLORE_ROUNDS: u32 = 10;

/// An application's exploration since it was last placed.
#[derive(Debug, Clone, Default)]
pub(super) struct Exploration {
    /// Rounds run.
    pub(super) rounds: u32,
    /// The last round's candidate (the search's placement, its links being probed).
    pub(super) candidate: Option<BTreeMap<String, String>>,
    /// Since when the next round waits for the links it asked for, if it does.
    pub(super) waiting_since: Option<u64>,
    /// It ended (its rounds done, nothing left to probe, or a round failed).
    pub(super) ended: bool,
}

impl Engine {
    /// `app`'s exploration rounds run since it was last placed, and whether it goes on (a
    /// round waits for the links it asked for, or runs next) (for the benchmarks).
    pub fn exploration(&self, app: &str) -> Option<(u32, bool)> {
        let a = self.apps.get(app)?;
        let goes_on = !a.explore.ended && a.explore.rounds > 0;
        Some((a.explore.rounds, goes_on))
    }

    /// Whether a round of `app`'s exploration waits for the links it asked for.
    pub(super) fn exploring(&self, app: &str) -> bool {
        self.apps
            .get(app)
            .is_some_and(|a| a.explore.waiting_since.is_some())
    }

    /// Whether `app`'s next evaluation on measured targeted links is an exploration round: a
    /// `qos` application with rounds left.
    pub(super) fn explores(&self, app: &str) -> bool {
        self.apps.get(app).is_some_and(|a| {
            a.rec.application.scheduler == "qos"
                && !a.explore.ended
                && a.explore.rounds < self.cfg.explore_rounds
        })
    }

    /// The rounds that waited [`EXPLORE_WAIT_MS`] for their links run on what was measured.
    pub(super) fn explore_overdue(&mut self) {
        let now = self.now;
        let overdue: Vec<String> = self
            .apps
            .iter()
            .filter(|(_, a)| {
                a.explore
                    .waiting_since
                    .is_some_and(|t| now.saturating_sub(t) >= EXPLORE_WAIT_MS)
            })
            .map(|(n, _)| n.clone())
            .collect();
        for app in overdue {
            let left = self.probes.awaiting.remove(&app).map_or(0, |l| l.len());
            info!(
                "application {app}: {left} of the links its exploration asked for were not measured within {} s; the next round runs on those that were",
                EXPLORE_WAIT_MS / 1000
            );
            if let Some(a) = self.apps.get_mut(&app) {
                a.explore.waiting_since = None;
            }
            self.measured_now(app);
        }
    }

    /// The result of an exploration round: the placement moves if the round found a better
    /// one on measured links (and it fits), and the next round's links are asked for.
    pub(super) fn explored(&mut self, r: JobResult, out: &mut Vec<Action>) {
        let app = r.app.clone();
        let (Some(found), Some(a)) = (r.explored, self.apps.get_mut(&app)) else {
            return;
        };
        a.explore.rounds += 1;
        a.explore.waiting_since = None;
        let round = a.explore.rounds;
        let Some(cur) = a.rec.placement.clone() else {
            return;
        };
        let next = match r.outcome {
            JobOutcome::Placed(p) => p,
            JobOutcome::Infeasible(why) | JobOutcome::Error(why) => {
                warn!(
                    "application {app}: exploration round {round} failed, exploration ended: {why}"
                );
                a.explore.candidate = None;
                a.explore.ended = true;
                return;
            }
        };
        let application = a.rec.application.clone();
        if next.assignment != cur.assignment {
            if self.rolling(&app) || self.touches_unreachable(&app) {
                info!("application {app}: exploration round {round} found a better placement on measured links; it stays while a revision rolls out or a node it uses is unreachable");
            } else if !self.fits(&application, &next.assignment) {
                info!("application {app}: exploration round {round} found a better placement on measured links, but it does not fit next to the other applications now; it stays");
            } else if !self.committable(r.ledger_version, &application, &next.assignment) {
                self.stats.collisions += 1;
                warn!("application {app}: exploration round {round} collided with another commit on its nodes; it stays");
            } else {
                let moved: Vec<String> = next
                    .assignment
                    .iter()
                    .filter(|(c, n)| cur.assignment.get(*c) != Some(*n))
                    .map(|(c, n)| {
                        let from = cur.assignment.get(c).map_or("", String::as_str);
                        format!("{c} {from}→{n}")
                    })
                    .collect();
                info!(
                    "application {app} re-placed on measured links (exploration round {round}): {} (score {:.6} → {:.6})",
                    moved.join(", "),
                    r.current_score.unwrap_or(cur.score),
                    next.score
                );
                let rec = PlacementRecord {
                    feasible_deployments: cur.feasible_deployments,
                    ..next
                };
                self.apply_placement(&app, rec, &cur.assignment, out);
            }
        }
        let Some(a) = self.apps.get_mut(&app) else {
            return;
        };
        let assignment = a
            .rec
            .placement
            .as_ref()
            .map(|p| p.assignment.clone())
            .unwrap_or_default();
        let own: BTreeSet<(String, String)> = self
            .channel_pairs(&app, &assignment)
            .into_iter()
            .filter(|(_, x, y)| x != y)
            .map(|(_, x, y)| (x, y))
            .collect();
        // only what fits in the nodes' lists is asked for (and awaited): a pair left out would
        // hold the next round for `EXPLORE_WAIT_MS`
        let unmeasured = found
            .probe
            .into_iter()
            .filter(|(x, y)| !self.links.contains(x, y));
        let (ask, left_out) = self.fitting(&app, &own, unmeasured);
        let a = self.apps.get_mut(&app).expect("looked up above");
        let rounds = self.cfg.explore_rounds;
        if round < rounds && ask.is_empty() && left_out == 0 && found.candidate.is_some() {
            // the candidate's links were measured meanwhile: the next round at once
            a.explore.candidate = found.candidate;
            self.measured_now(app.clone());
        } else if round < rounds && (!ask.is_empty() || left_out > 0) {
            // (nothing fits now: the next round after `EXPLORE_WAIT_MS`, when other
            // applications' rounds may have made room)
            a.explore.candidate = found.candidate;
            a.explore.waiting_since = Some(self.now);
            let later = if left_out > 0 {
                format!(" ({left_out} more left for a later round: their nodes' lists are full)")
            } else {
                String::new()
            };
            info!(
                "application {app}: exploration round {round} of {rounds}: asking for {} unmeasured links around its best placement on estimates to be probed{later}",
                ask.len()
            );
            self.probes
                .targeted
                .insert(app.clone(), own.union(&ask).cloned().collect());
            self.probes.awaiting.insert(app.clone(), ask);
        } else {
            a.explore.candidate = None;
            a.explore.ended = true;
            info!(
                "application {app}: exploration ended after {round} rounds, score {:.6} on measured links",
                a.rec.placement.as_ref().map_or(0.0, |p| p.score)
            );
            self.probes.awaiting.remove(&app);
            if own.is_empty() {
                self.probes.targeted.remove(&app);
            } else {
                self.probes.targeted.insert(app.clone(), own);
            }
        }
        self.probes.targets_dirty = true;
        self.update_status(&app, out);
    }
}
