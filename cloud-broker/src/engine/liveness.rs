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

use super::linktable::insert_snug;
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

/// A witness's sample as the evidence holds it, in 16 bytes (1.6 million of them at 50,000
/// nodes): the witness's number, how long before `at` the node last answered it (the wire's
/// `last_answer_ms`; `NEVER`: it never did; an answer after `at` counts as at `at`, one older
/// than 49 days as 49 days old), and `at`.
#[derive(Debug, Clone, Copy)]
struct Sample {
    by: Id,
    ago: u32,
    at: u64,
}

impl Sample {
    const NEVER: u32 = u32::MAX;

    fn new(by: Id, w: Witnessed) -> Sample {
        let ago = match w.answered_at {
            Some(t) => u32::try_from(w.at.saturating_sub(t))
                .map_or(Sample::NEVER - 1, |a| a.min(Sample::NEVER - 1)),
            None => Sample::NEVER,
        };
        Sample { by, ago, at: w.at }
    }

    fn witnessed(&self) -> Witnessed {
        Witnessed {
            at: self.at,
            answered_at: (self.ago != Sample::NEVER).then(|| self.at - u64::from(self.ago)),
        }
    }
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

/// A node's place in the evidence's tables.
type Id = u32;

/// One node the evidence knows of.
#[derive(Debug, Clone, Default)]
struct Slot {
    name: String,
    heard: Option<Heard>,
    /// The peers that measure it and their latest sample, by the peer's number: found by a
    /// binary search (a cloud or a hub is measured by thousands of nodes, whose every link
    /// report a linear search would walk them all for).
    about: Vec<Sample>,
}

/// The evidence the control plane keeps: what it heard of each node and, per node, its
/// witnesses' latest samples about it. Kept by the node they are about, so that judging a
/// node reads its own witnesses without an index of every sample, and by a number per node
/// (looked up once per message): a witness is a number, judging a silent node's 32 witnesses
/// reads 32 slots of one table instead of hashing and comparing 64 names (at 50,000 nodes,
/// hashing and comparing names was most of the decision loop). The datacenters' members are
/// kept as the nodes are heard: no index is built to judge.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// Looked up once per message and per witness sample: a fast seeded hasher.
    ids: HashMap<String, Id, foldhash::fast::RandomState>,
    slots: Vec<Slot>,
    /// Slots of forgotten nodes, taken again first.
    free: Vec<Id>,
    /// Per datacenter, the nodes heard in it.
    groups: HashMap<String, Vec<Id>>,
}

fn secs(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

impl Evidence {
    fn id(&self, node: &str) -> Option<Id> {
        self.ids.get(node).copied()
    }

    fn intern(&mut self, node: &str) -> Id {
        if let Some(id) = self.id(node) {
            return id;
        }
        let slot = Slot {
            name: node.to_string(),
            ..Slot::default()
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = slot;
                id
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as Id
            }
        };
        self.ids.insert(node.to_string(), id);
        id
    }

    fn slot(&self, id: Id) -> &Slot {
        &self.slots[id as usize]
    }

    fn heard_of(&self, id: Id) -> Option<&Heard> {
        self.slot(id).heard.as_ref()
    }

    /// What was last heard of `node`.
    pub fn heard(&self, node: &str) -> Option<&Heard> {
        self.heard_of(self.id(node)?)
    }

    /// What was last heard of `node`, to change its times (its datacenter changes only
    /// through [`Evidence::hear`]: the datacenters' members follow it).
    pub fn heard_mut(&mut self, node: &str) -> Option<&mut Heard> {
        let id = self.id(node)?;
        self.slots[id as usize].heard.as_mut()
    }

    /// What is now known of `node` (replaces what was).
    pub fn hear(&mut self, node: &str, heard: Heard) {
        let id = self.intern(node);
        let slot = &mut self.slots[id as usize];
        let moved = slot
            .heard
            .as_ref()
            .is_none_or(|h| h.datacenter != heard.datacenter);
        if moved {
            if let Some(old) = slot.heard.as_ref().map(|h| h.datacenter.clone()) {
                self.leave_group(&old, id);
            }
            self.groups
                .entry(heard.datacenter.clone())
                .or_default()
                .push(id);
        }
        self.slots[id as usize].heard = Some(heard);
    }

    fn leave_group(&mut self, dc: &str, id: Id) {
        if let Some(g) = self.groups.get_mut(dc) {
            g.retain(|m| *m != id);
            if g.is_empty() {
                self.groups.remove(dc);
            }
        }
    }

    /// How many nodes were heard of.
    pub fn nodes_heard(&self) -> usize {
        self.slots.iter().filter(|s| s.heard.is_some()).count()
    }

    /// The nodes heard of that are silent at `now`, in no particular order.
    pub fn silent_nodes<'a>(&'a self, now: u64, w: &'a Windows) -> impl Iterator<Item = &'a str> {
        self.slots
            .iter()
            .filter(move |s| s.heard.as_ref().is_some_and(|h| h.is_silent(now, w)))
            .map(|s| s.name.as_str())
    }

    /// `by`'s latest sample about `of`.
    pub fn witness(&mut self, by: &str, of: &str, sample: Witnessed) {
        let by = self.intern(by);
        self.witness_id(by, of, sample);
    }

    /// `by`'s latest samples about the nodes named (`by` looked up once).
    pub fn witness_all<'s>(
        &mut self,
        by: &str,
        samples: impl IntoIterator<Item = (&'s str, Witnessed)>,
    ) {
        let by = self.intern(by);
        for (of, s) in samples {
            self.witness_id(by, of, s);
        }
    }

    fn witness_id(&mut self, by: Id, of: &str, sample: Witnessed) {
        let of = self.intern(of);
        let ws = &mut self.slots[of as usize].about;
        let sample = Sample::new(by, sample);
        match ws.binary_search_by_key(&by, |s| s.by) {
            Ok(i) => ws[i] = sample,
            Err(i) => insert_snug(ws, i, sample),
        }
    }

    /// Forgets the samples older than `max_age_ms` at `now`, except those by or about a node
    /// `kept` names (an unreachable node's last samples stand until it returns, as its links
    /// do): a peer that no longer lists a node (the random peers drawn again, an exploration
    /// over) stops being its witness, and the evidence does not grow with every peer a node
    /// ever had.
    pub fn forget_older_than(&mut self, now: u64, max_age_ms: u64, kept: impl Fn(&str) -> bool) {
        let kept: Vec<bool> = self.slots.iter().map(|s| kept(&s.name)).collect();
        for (of, slot) in self.slots.iter_mut().enumerate() {
            if kept[of] {
                continue;
            }
            slot.about
                .retain(|s| now.saturating_sub(s.at) <= max_age_ms || kept[s.by as usize]);
        }
    }

    /// The peers that measure `of`, with their latest samples.
    pub fn witnesses_of(&self, of: &str) -> impl Iterator<Item = (&str, Witnessed)> {
        self.id(of)
            .map(|id| self.slot(id).about.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|s| (self.slot(s.by).name.as_str(), s.witnessed()))
    }

    /// `by`'s latest sample about `of`, if any.
    pub fn sample(&self, by: &str, of: &str) -> Option<Witnessed> {
        self.sample_id(self.id(by)?, self.id(of)?)
    }

    fn sample_id(&self, by: Id, of: Id) -> Option<Witnessed> {
        let about = &self.slot(of).about;
        let i = about.binary_search_by_key(&by, |s| s.by).ok()?;
        Some(about[i].witnessed())
    }

    /// How many samples are kept.
    pub fn samples(&self) -> usize {
        self.slots.iter().map(|s| s.about.len()).sum()
    }

    /// Whether `node` is silent at `now`, and since when (its last message).
    pub fn silent_since(&self, node: &str, now: u64, w: &Windows) -> Option<u64> {
        self.silent_since_id(self.id(node)?, now, w)
    }

    fn silent_since_id(&self, id: Id, now: u64, w: &Windows) -> Option<u64> {
        let h = self.heard_of(id)?;
        h.is_silent(now, w).then_some(h.last_heard)
    }

    /// The nodes heard in `id`'s datacenter (itself included); `None` when it is not heard of.
    fn members_of(&self, id: Id) -> Option<&[Id]> {
        let dc = self.heard_of(id)?.datacenter.as_str();
        self.groups.get(dc).map(Vec::as_slice)
    }

    /// Forgets a node and every sample by or about it.
    pub fn forget(&mut self, node: &str) {
        let Some(id) = self.ids.remove(node) else {
            return;
        };
        if let Some(dc) = self.slot(id).heard.as_ref().map(|h| h.datacenter.clone()) {
            self.leave_group(&dc, id);
        }
        self.slots[id as usize] = Slot::default();
        for s in &mut self.slots {
            s.about.retain(|x| x.by != id);
        }
        self.free.push(id);
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
    let id = ev.id(node)?;
    let h = ev.heard_of(id)?;
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
    let Some(since) = ev.silent_since_id(id, now, w) else {
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
    for x in &ev.slot(id).about {
        let (by, s) = (x.by, x.witnessed());
        if by == id || ev.heard_of(by).is_none() || ev.silent_since_id(by, now, w).is_some() {
            continue;
        }
        // a peer that never had an answer of it cannot tell
        measured |= s.answered_at.is_some();
        if let Some(t) = s.answered_at {
            if t > since && now.saturating_sub(t) <= w.evidence_ms {
                reach.push((ev.slot(by).name.as_str(), t));
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
    if let Some(group) = silent_group(ev, id, since, now, w) {
        return Some(Verdict {
            state: NodeState::Unreachable,
            evidence: format!("{why_silent}; {group}"),
        });
    }
    if measured && now.saturating_sub(since) <= w.evidence_ms {
        return None;
    }
    if returning_member(ev, id, since, now, w) {
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
fn returning_member(ev: &Evidence, node: Id, since: u64, now: u64, w: &Windows) -> bool {
    ev.members_of(node).into_iter().flatten().any(|m| {
        let Some(h) = ev.heard_of(*m) else {
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
fn silent_group(ev: &Evidence, node: Id, since: u64, now: u64, w: &Windows) -> Option<String> {
    let dc = &ev.heard_of(node)?.datacenter;
    let members = ev.members_of(node)?;
    if members.len() < 2 {
        return None;
    }
    let mut first = since;
    let mut last = since;
    for m in members {
        let s = ev.silent_since_id(*m, now, w)?;
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
        let Some(s) = ev.sample_id(*m, node) else {
            continue;
        };
        let Some(m_since) = ev.heard_of(*m).map(|h| h.last_heard) else {
            continue;
        };
        if let Some(t) = s.answered_at {
            if m_since.saturating_sub(t) <= w.evidence_ms {
                reached_by.push((ev.slot(*m).name.as_str(), m_since.saturating_sub(t)));
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
