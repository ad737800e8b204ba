//! Node states from evidence: whether a node the control plane no longer hears is cut off from
//! the cloud only (`unreachable`: its peers' signed link reports show it answering their probes
//! after the control plane last heard it, or its whole datacenter went silent together while
//! its members still reached each other: a train in a tunnel) or gone (`lost`: its peers stop
//! reaching it too, or no one can tell). Or, as the timer-only baseline, lost after a fixed
//! silence.
//!
//! Invariant: pure. [`classify`] is a function of plain values (what the control plane last
//! heard of each node, the peers' latest samples and the time); the engine keeps those values
//! and acts on the [`Verdict`].

use std::collections::HashMap;

/// What the control plane makes of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeState {
    /// The control plane hears it.
    Online,
    /// Silent towards the control plane, but its peers still reach it: a partition between it
    /// and the cloud. Its components stay for the application's `disconnect.tolerate_s`.
    Unreachable,
    /// Silent and not reached by its peers either (a crash), or no one can tell: its
    /// components are placed elsewhere at once.
    Lost,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Online => "online",
            NodeState::Unreachable => "unreachable",
            NodeState::Lost => "lost",
        }
    }
}

impl std::fmt::Display for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How nodes are judged (`cloud-broker serve --liveness`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// From evidence: silence towards the control plane and the peers' link reports.
    Evidence,
    /// Timers only, as Kubernetes: lost after `lost_after_ms` of silence; never unreachable.
    Timer { lost_after_ms: u64 },
}

impl Liveness {
    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::Evidence => "evidence",
            Liveness::Timer { .. } => "timer",
        }
    }
}

/// What the control plane last heard of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heard {
    pub datacenter: String,
    /// When its last signed message came (ms, the control plane's clock).
    pub last_heard: u64,
    /// When its connection's signed last will came (the broker lost it), if after the last
    /// message.
    pub will_at: Option<u64>,
    /// When it was last heard again after a silence, and since when it had been silent.
    pub back: Option<Back>,
}

/// A node heard again after a silence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Back {
    /// When its first message after the silence came.
    pub at: u64,
    /// Its last message before the silence.
    pub silent_since: u64,
}

impl Heard {
    /// Silent at `now`: its connection's last will came, or nothing for the silence window.
    pub fn is_silent(&self, now: u64, w: &Windows) -> bool {
        self.will_at.is_some() || now.saturating_sub(self.last_heard) > w.silence_ms
    }

    /// What the control plane knows of a node after a message of it at `now`, given what it
    /// knew before (`prev`): a message after a silence (or after its last will) is a return.
    pub fn on_message(prev: Option<&Heard>, datacenter: &str, now: u64, w: &Windows) -> Heard {
        let back = match prev {
            Some(p) if p.is_silent(now, w) => Some(Back {
                at: now,
                silent_since: p.last_heard,
            }),
            Some(p) => p.back,
            None => None,
        };
        Heard {
            datacenter: datacenter.to_string(),
            last_heard: now,
            will_at: None,
            back,
        }
    }
}

/// A peer's latest sample about a node, as it reached the control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Witnessed {
    /// When the sample came (ms, control plane's clock).
    pub at: u64,
    /// When the node last answered the peer's probes (`at` minus the sample's
    /// `last_answer_ms`), if it ever did.
    pub answered_at: Option<u64>,
}

/// The windows of the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    /// Silence after which a node is judged (no will: the reports' period times three).
    pub silence_ms: u64,
    /// An answer counts as evidence for this long; a node no peer reached within it after
    /// the control plane last heard it is lost. Longer than a peer's probe rotation plus
    /// its report period.
    pub evidence_ms: u64,
    /// The members of a datacenter went silent "together" when their silences began within
    /// this of each other.
    pub together_ms: u64,
}

impl Default for Windows {
    fn default() -> Self {
        Windows {
            silence_ms: 3000,
            evidence_ms: 10_000,
            together_ms: 5000,
        }
    }
}

/// A decision and the evidence it rests on, for the log (one line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub state: NodeState,
    pub evidence: String,
}

/// The evidence the control plane keeps: what it heard of each node and, per node, its
/// witnesses' latest samples about it. Kept by the node they are about, so that judging a
/// node reads its own witnesses without an index of every sample (at 50,000 nodes the index
/// rebuilt on each tick was most of the decision loop).
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// Looked up for every witness of every silent node on each tick: hashed, not ordered.
    pub heard: HashMap<String, Heard>,
    /// Per node, the peers that measure it and their latest sample, in the order they came.
    about: HashMap<String, Vec<(String, Witnessed)>>,
}

fn secs(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// Who is in which datacenter, built once for a judgement of many nodes
/// ([`Evidence::index_about`]): without it each silent node's judgement scanned every node.
pub struct EvidenceIndex<'a> {
    /// Per datacenter of a node judged, its nodes (in name order).
    groups: HashMap<&'a str, Vec<&'a str>>,
}

impl EvidenceIndex<'_> {
    /// The nodes of `node`'s datacenter (itself included); `None` when it is not heard of.
    fn members_of(&self, ev: &Evidence, node: &str) -> Option<&[&str]> {
        let dc = ev.heard.get(node)?.datacenter.as_str();
        self.groups.get(dc).map(Vec::as_slice)
    }
}

impl Evidence {
    /// The index of this evidence (see [`EvidenceIndex`]).
    pub fn index(&self) -> EvidenceIndex<'_> {
        self.index_about(|_| true)
    }

    /// The index for judging the nodes `about` accepts: the datacenters of those only (what
    /// [`classify_indexed`] reads of the other nodes is their datacenter and what was heard of
    /// them). The engine judges only its silent nodes with it: in a quiet fleet it indexes
    /// nothing.
    pub fn index_about<'a>(&'a self, about: impl Fn(&str) -> bool) -> EvidenceIndex<'a> {
        let mut groups: HashMap<&str, Vec<&str>> = self
            .heard
            .iter()
            .filter(|(n, _)| about(n))
            .map(|(_, h)| (h.datacenter.as_str(), Vec::new()))
            .collect();
        for (n, h) in &self.heard {
            if let Some(g) = groups.get_mut(h.datacenter.as_str()) {
                g.push(n.as_str());
            }
        }
        for g in groups.values_mut() {
            g.sort_unstable();
        }
        EvidenceIndex { groups }
    }

    /// `by`'s latest sample about `of`.
    pub fn witness(&mut self, by: &str, of: &str, sample: Witnessed) {
        match self.about.get_mut(of) {
            Some(ws) => match ws.iter_mut().find(|(b, _)| b == by) {
                Some((_, s)) => *s = sample,
                None => ws.push((by.to_string(), sample)),
            },
            None => {
                self.about
                    .insert(of.to_string(), vec![(by.to_string(), sample)]);
            }
        }
    }

    /// The peers that measure `of`, with their latest samples.
    pub fn witnesses_of(&self, of: &str) -> &[(String, Witnessed)] {
        self.about.get(of).map(Vec::as_slice).unwrap_or_default()
    }

    /// `by`'s latest sample about `of`, if any.
    pub fn sample(&self, by: &str, of: &str) -> Option<&Witnessed> {
        self.witnesses_of(of)
            .iter()
            .find(|(b, _)| b == by)
            .map(|(_, s)| s)
    }

    /// How many samples are kept.
    pub fn samples(&self) -> usize {
        self.about.values().map(Vec::len).sum()
    }

    /// Whether `node` is silent at `now`, and since when (its last message).
    pub fn silent_since(&self, node: &str, now: u64, w: &Windows) -> Option<u64> {
        let h = self.heard.get(node)?;
        h.is_silent(now, w).then_some(h.last_heard)
    }

    /// Forgets a node and every sample by or about it.
    pub fn forget(&mut self, node: &str) {
        self.heard.remove(node);
        self.about.remove(node);
        self.about.retain(|_, ws| {
            ws.retain(|(by, _)| by != node);
            !ws.is_empty()
        });
    }
}

/// The state of `node` at `now`: `None` while the evidence cannot tell yet (silent, its
/// peers have measured it, none has reached it since, and the evidence window is not over:
/// the engine keeps the state it had).
pub fn classify(
    ev: &Evidence,
    node: &str,
    now: u64,
    mode: Liveness,
    w: &Windows,
) -> Option<Verdict> {
    classify_indexed(ev, &ev.index(), node, now, mode, w)
}

/// [`classify`] with the evidence's index built once for many nodes.
pub fn classify_indexed(
    ev: &Evidence,
    ix: &EvidenceIndex<'_>,
    node: &str,
    now: u64,
    mode: Liveness,
    w: &Windows,
) -> Option<Verdict> {
    let h = ev.heard.get(node)?;
    if let Liveness::Timer { lost_after_ms } = mode {
        let silent = now.saturating_sub(h.last_heard);
        return Some(if silent > lost_after_ms {
            Verdict {
                state: NodeState::Lost,
                evidence: format!(
                    "no message for {} (timer: lost after {})",
                    secs(silent),
                    secs(lost_after_ms)
                ),
            }
        } else {
            Verdict {
                state: NodeState::Online,
                evidence: format!("heard {} ago", secs(silent)),
            }
        });
    }
    let Some(since) = ev.silent_since(node, now, w) else {
        return Some(Verdict {
            state: NodeState::Online,
            evidence: format!("heard {} ago", secs(now.saturating_sub(h.last_heard))),
        });
    };
    let silent_for = secs(now.saturating_sub(since));
    let why_silent = match h.will_at {
        Some(_) => format!("its connection's last will came, last heard {silent_for} ago"),
        None => format!("silent for {silent_for}"),
    };
    // Peers the control plane hears that reached it after it went silent, recently.
    let mut reach: Vec<(&str, u64)> = Vec::new();
    let mut measured = false;
    for (by, s) in ev.witnesses_of(node) {
        let by = by.as_str();
        if by == node || ev.silent_since(by, now, w).is_some() {
            continue;
        }
        if !ev.heard.contains_key(by) {
            continue;
        }
        // a peer that never had an answer of it cannot tell
        measured |= s.answered_at.is_some();
        if let Some(t) = s.answered_at {
            if t > since && now.saturating_sub(t) <= w.evidence_ms {
                reach.push((by, t));
            }
        }
    }
    if !reach.is_empty() {
        reach.sort();
        let newest = reach.iter().map(|(_, t)| *t).max().unwrap_or(now);
        let names: Vec<&str> = reach.iter().map(|(n, _)| *n).collect();
        return Some(Verdict {
            state: NodeState::Unreachable,
            evidence: format!(
                "{why_silent}; {} reach it, last answer {} ago",
                names.join(", "),
                secs(now.saturating_sub(newest))
            ),
        });
    }
    if let Some(group) = silent_group(ev, ix, node, since, now, w) {
        return Some(Verdict {
            state: NodeState::Unreachable,
            evidence: format!("{why_silent}; {group}"),
        });
    }
    if measured && now.saturating_sub(since) <= w.evidence_ms {
        return None;
    }
    if returning_member(ev, ix, node, since, now, w) {
        // its group was cut off with it and a member is just back: the member's first samples
        // say whether it still answers (a train leaving a tunnel, its nodes back one by one)
        return None;
    }
    let evidence = if measured {
        format!(
            "{why_silent}; no peer reached it since (evidence window {})",
            secs(w.evidence_ms)
        )
    } else {
        format!("{why_silent}; no peer the control plane hears measures it")
    };
    Some(Verdict {
        state: NodeState::Lost,
        evidence,
    })
}

/// Whether a member of `node`'s datacenter went silent together with it (within the together
/// window of `since`) and came back within the evidence window: its samples are yet to come.
fn returning_member(
    ev: &Evidence,
    ix: &EvidenceIndex<'_>,
    node: &str,
    since: u64,
    now: u64,
    w: &Windows,
) -> bool {
    ix.members_of(ev, node).into_iter().flatten().any(|m| {
        let Some(h) = ev.heard.get(*m) else {
            return false;
        };
        *m != node
            && h.back.is_some_and(|b| {
                now.saturating_sub(b.at) <= w.evidence_ms
                    && b.silent_since.abs_diff(since) <= w.together_ms
            })
    })
}

/// Whether `node`'s whole datacenter (two nodes or more) went silent together while its
/// members still reached it: the evidence of a group cut off from the cloud.
fn silent_group(
    ev: &Evidence,
    ix: &EvidenceIndex<'_>,
    node: &str,
    since: u64,
    now: u64,
    w: &Windows,
) -> Option<String> {
    let dc = &ev.heard.get(node)?.datacenter;
    let members = ix.members_of(ev, node)?;
    if members.len() < 2 {
        return None;
    }
    let mut first = since;
    let mut last = since;
    for m in members {
        let s = ev.silent_since(m, now, w)?;
        first = first.min(s);
        last = last.max(s);
    }
    if last - first > w.together_ms {
        return None;
    }
    // A member's last sample before it went silent showed `node` answering.
    let mut reached_by: Vec<(&str, u64)> = Vec::new();
    for m in members {
        if *m == node {
            continue;
        }
        let Some(s) = ev.sample(m, node) else {
            continue;
        };
        let m_since = ev.heard[*m].last_heard;
        if let Some(t) = s.answered_at {
            if m_since.saturating_sub(t) <= w.evidence_ms {
                reached_by.push((m, m_since.saturating_sub(t)));
            }
        }
    }
    if reached_by.is_empty() {
        return None;
    }
    reached_by.sort();
    let (who, before) = reached_by[0];
    Some(format!(
        "its datacenter {dc} ({} nodes) went silent together (within {}) and {} reached it {} before {}",
        members.len(),
        secs(last - first),
        reached_by
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", "),
        secs(before),
        if reached_by.len() == 1 {
            "going silent".to_string()
        } else {
            format!("going silent ({who})")
        }
    ))
}

#[cfg(test)]
mod tests;
