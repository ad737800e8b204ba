//! The reconciler: a pure state machine, event in, actions out.
//!
//! It owns trust decisions about desired states (signature, node, generation),
//! the image allowlist, and the comparison of what should run with what runs.
//! It does no I/O: the driver in `agent/reconcile.rs` feeds it events (frames from the wire,
//! observations of the runtime, ticks) and carries out the actions it returns
//! (create, start, remove containers, persist, publish, log).
//!
//! Level-triggered: every observation of the runtime is compared with the whole
//! desired document, so a missed message, a crash or a reboot heal on the next tick.

use std::collections::BTreeMap;

use acoa_shared::wire::{
    self, ActualState, ContainerSpec, ContainerState, ContainerStatus, DesiredState, HealthSpec,
    Message, MAX_CONTAINERS,
};
use ed25519_dalek::VerifyingKey;

mod health;
pub use health::{restart_backoff_ms, FORGIVE_AFTER_MS};

/// What the runtime says about one managed container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The spec name (`{app}.{component}`), without the `acoa-{node}-` prefix.
    pub name: String,
    pub image: String,
    /// Label `acoa.spec`: hash of the spec it was created from.
    pub spec_hash: String,
    pub generation: u64,
    pub state: RunState,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    Running,
    /// Created (or configured) but never started.
    Created,
    /// Exited or stopped, with the exit code when known.
    Exited(Option<i32>),
    Paused,
    Other(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A frame from the desired topic: untrusted bytes.
    DesiredFrame(Vec<u8>),
    /// The frame persisted by a previous run, read at start: verified again.
    Restored(Vec<u8>),
    /// The managed containers the runtime lists now.
    RuntimeObserved(Vec<Observed>),
    /// The runtime could not be asked.
    RuntimeUnavailable(String),
    /// An action on container `name` failed.
    ActionFailed { name: String, error: String },
    /// A health check of container `name` ended: `Ok` passed, `Err` failed with the reason.
    Checked {
        name: String,
        result: Result<(), String>,
    },
    /// Time passes; `now_ms` is a monotonic clock.
    Tick { now_ms: u64 },
    /// The broker session (re)started: publish the actual state again.
    Connected,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// List the managed containers and feed back `RuntimeObserved`.
    Observe,
    Create {
        spec: Box<ContainerSpec>,
        generation: u64,
        spec_hash: String,
    },
    Start {
        name: String,
    },
    /// Stop (briefly) and remove.
    Remove {
        name: String,
    },
    /// Stop (briefly) and start again: it runs but is unhealthy.
    Restart {
        name: String,
    },
    /// Run the health check of a running container once, within its timeout, and feed back
    /// `Checked`.
    Check {
        name: String,
        check: Box<HealthSpec>,
    },
    /// Write the accepted frame to disk (atomically).
    PersistDesired(Vec<u8>),
    PublishActual(Box<ActualState>),
    /// One line for the operator.
    Log(Level, String),
}

impl Action {
    /// The container an action is about, if any.
    pub fn container(&self) -> Option<&str> {
        match self {
            Action::Create { spec, .. } => Some(spec.name.as_str()),
            Action::Start { name }
            | Action::Remove { name }
            | Action::Restart { name }
            | Action::Check { name, .. } => Some(name),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Track {
    restarts: u32,
    /// Consecutive attempts without seeing it run.
    attempts: u32,
    next_attempt_ms: u64,
    error: Option<String>,
    health: health::HealthTrack,
}

/// Creates the container of `spec` (desired at `generation`, its spec hash `spec_hash`) and
/// starts it.
fn create(out: &mut Vec<Action>, spec: &ContainerSpec, generation: u64, spec_hash: String) {
    out.push(Action::Create {
        spec: Box::new(spec.clone()),
        generation,
        spec_hash,
    });
    out.push(Action::Start {
        name: spec.name.to_string(),
    });
}

/// Backoff before attempt `n + 1` after `n` attempts that did not get it running.
fn backoff_ms(attempts: u32) -> u64 {
    (1000u64 << attempts.min(5)).min(30_000)
}

pub struct Reconciler {
    node: String,
    key: VerifyingKey,
    allowlist: Vec<String>,
    netns: Option<String>,
    actual_period_ms: u64,
    /// The runtime checks health itself (k3s: the kubelet's probes): the agent runs no checks
    /// and reports no health.
    runtime_checks_health: bool,

    /// Boxed: a desired state is about 80 KB, and the reconciler is moved by value.
    desired: Option<Box<DesiredState>>,
    generation: u64,
    observed: Option<Vec<Observed>>,
    runtime_error: Option<String>,
    tracks: BTreeMap<String, Track>,
    now_ms: u64,
    seq: u64,
    /// The agent run its actual states are numbered in (0 until [`Reconciler::with_run`]).
    run: u64,
    last_published: Option<(u64, Vec<ContainerStatus>)>,
    last_publish_ms: u64,
    force_publish: bool,
}

/// FNV-1a, 64 bits: stable across builds and machines.
fn fnv1a(chunks: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for c in chunks {
        for b in *c {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The hash that decides whether a running container still matches its spec. A spec without a
/// health check hashes as before wire v4 (its fields in order, without the empty `health`), so
/// an agent that upgrades does not recreate its containers.
pub fn spec_hash(spec: &ContainerSpec, netns: Option<&str>) -> String {
    let body = match &spec.health {
        Some(_) => postcard::to_allocvec(spec),
        None => postcard::to_allocvec(&(
            &spec.name,
            &spec.app,
            &spec.component,
            &spec.image,
            spec.cpu_millis,
            spec.memory_mb,
            &spec.env,
        )),
    }
    .unwrap_or_default();
    format!(
        "{:016x}",
        fnv1a(&[&body, b"\0", netns.unwrap_or("").as_bytes()])
    )
}

/// Container names the runtimes accept: `[a-zA-Z0-9][a-zA-Z0-9_.-]*`.
pub fn valid_container_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
}

fn truncate<const N: usize>(s: &str) -> heapless::String<N> {
    let mut out = heapless::String::new();
    for c in s.chars() {
        if out.push(c).is_err() {
            break;
        }
    }
    out
}

impl Reconciler {
    pub fn new(
        node: &str,
        key: VerifyingKey,
        allowlist: Vec<String>,
        netns: Option<String>,
        actual_period_ms: u64,
    ) -> Self {
        Reconciler {
            node: node.to_owned(),
            key,
            allowlist,
            netns,
            actual_period_ms,
            runtime_checks_health: false,
            desired: None,
            generation: 0,
            observed: None,
            runtime_error: None,
            tracks: BTreeMap::new(),
            now_ms: 0,
            seq: 0,
            run: 0,
            last_published: None,
            last_publish_ms: 0,
            force_publish: false,
        }
    }

    /// The same reconciler numbering its actual states in agent run `run`.
    pub fn with_run(mut self, run: u64) -> Self {
        self.run = run;
        self
    }

    /// The same reconciler for a runtime that checks health itself (k3s): no `Check` or
    /// `Restart` actions, no health reported.
    pub fn with_runtime_health_checks(mut self, yes: bool) -> Self {
        self.runtime_checks_health = yes;
        self
    }

    /// The generation last applied (0 for none).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn desired(&self) -> Option<&DesiredState> {
        self.desired.as_deref()
    }

    /// Managed containers seen at the last observation.
    pub fn managed_count(&self) -> usize {
        self.observed.as_ref().map_or(0, Vec::len)
    }

    pub fn allowed(&self, image: &str) -> bool {
        self.allowlist.iter().any(|p| image.starts_with(p.as_str()))
    }

    pub fn handle(&mut self, event: Event) -> Vec<Action> {
        let mut out = Vec::new();
        match event {
            Event::DesiredFrame(bytes) => self.on_frame(bytes, false, &mut out),
            Event::Restored(bytes) => self.on_frame(bytes, true, &mut out),
            Event::RuntimeObserved(list) => {
                if let Some(e) = self.runtime_error.take() {
                    out.push(Action::Log(
                        Level::Info,
                        format!("container runtime reachable again (was: {e})"),
                    ));
                }
                self.observed = Some(list);
                self.converge(&mut out);
                self.maybe_publish(&mut out);
            }
            Event::RuntimeUnavailable(e) => {
                if self.runtime_error.as_deref() != Some(e.as_str()) {
                    out.push(Action::Log(
                        Level::Warn,
                        format!("container runtime unavailable: {e}"),
                    ));
                }
                self.runtime_error = Some(e);
                self.maybe_publish(&mut out);
            }
            Event::ActionFailed { name, error } => {
                out.push(Action::Log(
                    Level::Warn,
                    format!("container {name}: {error}"),
                ));
                let t = self.tracks.entry(name).or_default();
                t.error = Some(error);
                self.maybe_publish(&mut out);
            }
            Event::Checked { name, result } => {
                let spec = self
                    .desired
                    .as_ref()
                    .and_then(|d| d.containers.iter().find(|c| c.name.as_str() == name))
                    .and_then(|c| c.health.as_deref());
                if let (Some(spec), Some(t)) = (spec, self.tracks.get_mut(&name)) {
                    if t.health.checked(&name, spec, self.now_ms, result, &mut out) {
                        // restart it now (or say when), not at the next tick
                        out.push(Action::Observe);
                    }
                }
                self.maybe_publish(&mut out);
            }
            Event::Tick { now_ms } => {
                self.now_ms = now_ms;
                out.push(Action::Observe);
            }
            Event::Connected => {
                self.force_publish = true;
                out.push(Action::Observe);
            }
        }
        out
    }

    fn on_frame(&mut self, bytes: Vec<u8>, restored: bool, out: &mut Vec<Action>) {
        let what = if restored {
            "persisted desired state"
        } else {
            "desired state"
        };
        let env = match wire::open(&bytes) {
            Ok(env) => env,
            Err(e) => {
                out.push(Action::Log(
                    Level::Warn,
                    format!("dropped {what} ({} bytes): {e}", bytes.len()),
                ));
                return;
            }
        };
        if let Err(e) = env.verify(&self.key) {
            out.push(Action::Log(
                Level::Warn,
                format!("refused {what}: {e} (control plane key)"),
            ));
            return;
        }
        let ds = match env.message() {
            Ok(Message::DesiredState(ds)) => ds,
            Ok(other) => {
                out.push(Action::Log(
                    Level::Warn,
                    format!("refused {what}: it is a {}", other.kind()),
                ));
                return;
            }
            Err(e) => {
                out.push(Action::Log(Level::Warn, format!("dropped {what}: {e}")));
                return;
            }
        };
        if ds.node.as_str() != self.node {
            out.push(Action::Log(
                Level::Warn,
                format!(
                    "refused {what} generation {}: it is for node {:?}, this is {:?}",
                    ds.generation, ds.node, self.node
                ),
            ));
            return;
        }
        let term = self.desired.as_ref().map_or(0, |d| d.term);
        if !restored && ds.term < term {
            out.push(Action::Log(
                Level::Warn,
                format!(
                    "refused desired state generation {} of term {}: the control plane it follows leads in term {term} (orders of a deposed leader)",
                    ds.generation, ds.term
                ),
            ));
            return;
        }
        if !restored && ds.generation <= self.generation {
            if ds.generation == self.generation && self.desired.as_ref() == Some(&ds) {
                // The retained copy, delivered again on reconnect: nothing to do.
                return;
            }
            out.push(Action::Log(
                Level::Warn,
                format!(
                    "refused desired state generation {}: not newer than applied generation {}",
                    ds.generation, self.generation
                ),
            ));
            return;
        }
        let mut names: Vec<&str> = ds.containers.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            out.push(Action::Log(
                Level::Warn,
                format!(
                    "refused {what} generation {}: container name {:?} appears twice",
                    ds.generation, w[0]
                ),
            ));
            return;
        }
        out.push(Action::Log(
            Level::Info,
            format!(
                "{} desired state generation {}{} ({} containers)",
                if restored { "restored" } else { "accepted" },
                ds.generation,
                match ds.term {
                    0 => String::new(),
                    t => format!(" of term {t}"),
                },
                ds.containers.len()
            ),
        ));
        for c in &ds.containers {
            if let Some(reason) = self.refusal(c) {
                out.push(Action::Log(
                    Level::Warn,
                    format!("refused container {}: {reason}", c.name),
                ));
            }
        }
        // A spec that changed starts with a clean slate.
        if let Some(old) = &self.desired {
            for c in &ds.containers {
                if old.containers.iter().find(|o| o.name == c.name) != Some(c) {
                    self.tracks.remove(c.name.as_str());
                }
            }
        }
        self.tracks
            .retain(|k, _| ds.containers.iter().any(|c| c.name.as_str() == k));
        self.generation = ds.generation;
        self.desired = Some(ds);
        if !restored {
            out.push(Action::PersistDesired(bytes));
        }
        out.push(Action::Observe);
    }

    /// Why a container must not run, if it must not.
    fn refusal(&self, c: &ContainerSpec) -> Option<String> {
        if !valid_container_name(&c.name) {
            return Some(format!("{:?} is not a valid container name", c.name));
        }
        if !self.allowed(&c.image) {
            return Some(format!("image {} is outside the allowlist", c.image));
        }
        None
    }

    fn converge(&mut self, out: &mut Vec<Action>) {
        let (Some(desired), Some(observed)) = (&self.desired, &self.observed) else {
            // Without a desired state (nothing received, nothing persisted) the agent
            // leaves whatever runs alone.
            return;
        };
        let now = self.now_ms;
        for spec in &desired.containers {
            let name = spec.name.as_str();
            let seen = observed.iter().find(|o| o.name == name);
            if self.refusal(spec).is_some() {
                if seen.is_some() {
                    out.push(Action::Remove { name: name.into() });
                }
                continue;
            }
            let hash = spec_hash(spec, self.netns.as_deref());
            let track = self.tracks.entry(name.to_owned()).or_default();
            let attempt = |_: &mut Vec<Action>, track: &mut Track| {
                track.next_attempt_ms = now + backoff_ms(track.attempts);
                track.attempts += 1;
            };
            let checked = spec
                .health
                .as_deref()
                .filter(|_| !self.runtime_checks_health);
            let running_as_specified =
                seen.is_some_and(|o| o.spec_hash == hash && o.state == RunState::Running);
            if !running_as_specified {
                track.health.stopped();
            }
            match seen {
                None => {
                    if now >= track.next_attempt_ms {
                        out.push(Action::Log(
                            Level::Info,
                            format!("creating container {name} ({})", spec.image),
                        ));
                        create(out, spec, desired.generation, hash);
                        attempt(out, track);
                    }
                }
                Some(o) if o.spec_hash != hash => {
                    if now >= track.next_attempt_ms {
                        out.push(Action::Log(
                            Level::Info,
                            format!("recreating container {name}: its spec changed"),
                        ));
                        out.push(Action::Remove { name: name.into() });
                        create(out, spec, desired.generation, hash);
                        attempt(out, track);
                    }
                }
                Some(o) => match &o.state {
                    RunState::Running => {
                        track.attempts = 0;
                        track.error = None;
                        if let Some(h) = checked {
                            track.health.running(name, h, now, &mut track.restarts, out);
                        }
                    }
                    RunState::Paused => {}
                    RunState::Created => {
                        if now >= track.next_attempt_ms {
                            out.push(Action::Start { name: name.into() });
                            attempt(out, track);
                        }
                    }
                    RunState::Exited(_) | RunState::Other(_) => {
                        if now >= track.next_attempt_ms {
                            let how = match &o.state {
                                RunState::Exited(Some(code)) => format!("exited with code {code}"),
                                RunState::Exited(None) => "exited".into(),
                                RunState::Other(s) => format!("is {s}"),
                                _ => unreachable!(),
                            };
                            track.restarts += 1;
                            out.push(Action::Log(
                                Level::Warn,
                                format!(
                                    "container {name} {how}: restarting (restart {})",
                                    track.restarts
                                ),
                            ));
                            out.push(Action::Start { name: name.into() });
                            attempt(out, track);
                        }
                    }
                },
            }
        }
        for o in observed {
            if !desired.containers.iter().any(|c| c.name.as_str() == o.name) {
                out.push(Action::Log(
                    Level::Info,
                    format!(
                        "removing container {}: not in desired generation {}",
                        o.name, desired.generation
                    ),
                ));
                out.push(Action::Remove {
                    name: o.name.clone(),
                });
            }
        }
    }

    /// The container states to report now.
    pub fn actual(&self) -> Vec<ContainerStatus> {
        let Some(desired) = &self.desired else {
            return Vec::new();
        };
        let observed = self.observed.as_deref().unwrap_or(&[]);
        desired
            .containers
            .iter()
            .map(|spec| {
                let track = self.tracks.get(spec.name.as_str());
                let restarts = track.map_or(0, |t| t.restarts);
                let mut health = None;
                let (state, error) = if let Some(r) = self.refusal(spec) {
                    (ContainerState::Refused, r)
                } else {
                    let seen = observed.iter().find(|o| o.name == spec.name.as_str());
                    let hash_ok =
                        seen.is_some_and(|o| o.spec_hash == spec_hash(spec, self.netns.as_deref()));
                    match (seen.map(|o| &o.state), track.and_then(|t| t.error.clone())) {
                        (Some(RunState::Running), _) if hash_ok => {
                            if spec.health.is_some() && !self.runtime_checks_health {
                                health = track.and_then(|t| t.health.reported());
                            }
                            (ContainerState::Running, String::new())
                        }
                        (_, Some(e)) => (ContainerState::Failed, e),
                        (Some(RunState::Exited(code)), None) if hash_ok => (
                            ContainerState::Exited,
                            match code {
                                Some(c) => format!("exited with code {c}"),
                                None => "exited".into(),
                            },
                        ),
                        _ => (ContainerState::Pending, String::new()),
                    }
                };
                ContainerStatus {
                    name: spec.name.clone(),
                    image: spec.image.clone(),
                    state,
                    restarts,
                    error: truncate(&error),
                    health,
                }
            })
            .collect()
    }

    fn maybe_publish(&mut self, out: &mut Vec<Action>) {
        let now = self.current();
        let changed = self.last_published.as_ref() != Some(&(self.generation, now.clone()));
        let due = self.now_ms >= self.last_publish_ms + self.actual_period_ms;
        if !(changed || due || self.force_publish || self.last_published.is_none()) {
            return;
        }
        self.force_publish = false;
        self.seq += 1;
        self.last_publish_ms = self.now_ms;
        let mut containers = heapless::Vec::new();
        for c in now.iter().take(MAX_CONTAINERS) {
            let _ = containers.push(c.clone());
        }
        self.last_published = Some((self.generation, now));
        out.push(Action::PublishActual(Box::new(ActualState {
            node: truncate(&self.node),
            generation: self.generation,
            seq: self.seq,
            run: self.run,
            containers,
        })));
    }

    fn current(&self) -> Vec<ContainerStatus> {
        self.actual()
    }
}

#[cfg(test)]
mod tests;
