//! The binary messages that cross MQTT, separate from the domain model.
//!
//! A frame on the wire is postcard of `(version, body, signature)`: the version comes
//! first, so a frame of another version is recognised before anything else is read;
//! `body` is postcard of a [`Message`]; `signature` is an ed25519 signature over
//! `SIGNING_CONTEXT || body` (empty when unsigned). Decoding never panics: a frame
//! that does not decode is a [`WireError`].
//!
//! Sizes are bounded: names and images are `heapless` strings, per-node lists are
//! `heapless` vectors (the peer list too, since v5: it is per node, at most
//! [`MAX_PEERS_PER_NODE`] peers).

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

use crate::model::Layer;

/// The wire version this build speaks. Version 2 added `run` beside `seq` in every message an
/// agent signs (replay protection: `(run, seq)` strictly increases over a node's whole life).
/// Version 3 added the signed [`Presence`] (the agent's `online` marker and its last will, bound
/// to one connection) and [`LinkSample::last_answer_ms`] (how long ago the peer last answered).
/// Version 4 adds the leader's [`DesiredState::term`] (fencing between control-plane replicas)
/// and health checks: [`ContainerSpec::health`] (what the agent checks) and
/// [`ContainerStatus::health`] (what it found).
/// Version 5 adds the node's network coordinate ([`LinkMetrics::coord`]) and makes the peer
/// list per node ([`PeerList::node`], at most [`MAX_PEERS_PER_NODE`] peers, each marked
/// [`Peer::group`]), retained on the node's own topic: no fleet-wide list any more.
/// Version 6 adds, per component sample, the container it was measured in
/// ([`ComponentSample::container`]: two copies of a component run side by side during a
/// rollout) and the workload's own service time per message ([`ComponentSample::service`]).
/// Version 7 adds a fixed node's position on the map ([`NodeReport::position`]), which its
/// peer list's nearest on the map come from ([`crate::geo`]).
pub const VERSION: u16 = 7;
/// The versions before, each with what it lacks: [`open`] refuses them by name.
pub const OLD_VERSIONS: &[(u16, &str)] = &[
    (1, "the agents' run counter"),
    (2, "signed presence markers"),
    (3, "the leader's term in desired states and health checks"),
    (4, "network coordinates and per-node peer lists"),
    (
        5,
        "the containers' names and service times in usage messages",
    ),
    (6, "the nodes' positions on the map"),
];
/// Domain separation for signatures: a signature over ACOA v1 bodies means nothing elsewhere.
pub const SIGNING_CONTEXT: &[u8] = b"acoa/v1 signed message\0";

/// Node, component and application names (model.md allows 63 characters).
pub type Name = heapless::String<64>;
/// Container image references.
pub type ImageRef = heapless::String<256>;
/// A node's hardware or software labels.
pub type Labels = heapless::Vec<Name, 16>;

pub const MAX_CONTAINERS: usize = 32;
pub const MAX_LINKS_PER_MESSAGE: usize = 64;
/// Most peers of one node's peer list: the neighbour set (`k`, 32 by default, at most this)
/// and the links a placement uses that are only estimated (targeted probes).
pub const MAX_PEERS_PER_NODE: usize = 64;
pub const MAX_ENV: usize = 8;
/// Most arguments of a health check command (the model's `MAX_HEALTH_ARGS`).
pub const MAX_HEALTH_ARGS: usize = crate::model::limits::MAX_HEALTH_ARGS;
/// One argument of a health check command, or an HTTP check's path.
pub type HealthArg = heapless::String<128>;
/// The workload stats datagram's version and limits (a file of its own: the workloads'
/// reporter includes it by path).
pub mod stats_datagram;
pub use stats_datagram::MAX_DOWNSTREAM;
/// The network coordinate on the wire (v5).
pub mod coord;
pub use coord::{WireCoord, COORD_BYTES};
/// A fixed node's position on the wire (v7).
pub mod position;
pub use position::WirePosition;

/// What can go wrong with a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message does not decode: {0}")]
    Decode(postcard::Error),
    #[error("unknown message version {0} (this build speaks version {VERSION})")]
    UnknownVersion(u16),
    #[error("message of version {version}, before {lacks} (this build speaks version {VERSION})")]
    OldVersion { version: u16, lacks: &'static str },
    #[error("message is not signed")]
    Unsigned,
    #[error("signature does not verify")]
    BadSignature,
    #[error("{field} is longer than {max} bytes")]
    TooLong { field: &'static str, max: usize },
    #[error("{field} is more than {max}")]
    TooLarge { field: &'static str, max: u64 },
    #[error("{field} holds more than {max} entries")]
    TooMany { field: &'static str, max: usize },
    #[error("node coordinate: {0}")]
    BadCoord(String),
    #[error("node position: {0}")]
    BadPosition(String),
    #[error("message could not be encoded: {0}")]
    Encode(postcard::Error),
}

/// Every message of protocol v1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Message {
    NodeReport(Box<NodeReport>),
    LinkMetrics(Box<LinkMetrics>),
    DesiredState(Box<DesiredState>),
    ActualState(Box<ActualState>),
    PeerList(Box<PeerList>),
    /// Appended in issue 7 (variants keep their index: older frames decode unchanged).
    ComponentUsage(Box<ComponentUsage>),
    /// Appended in wire v3.
    Presence(Presence),
}

impl Message {
    pub fn kind(&self) -> &'static str {
        match self {
            Message::NodeReport(_) => "node report",
            Message::LinkMetrics(_) => "link metrics",
            Message::DesiredState(_) => "desired state",
            Message::ActualState(_) => "actual state",
            Message::PeerList(_) => "peer list",
            Message::ComponentUsage(_) => "component usage",
            Message::Presence(_) => "presence",
        }
    }
}

/// A node's static and dynamic properties, agent → cloud, on a period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    pub node: Name,
    /// Increases with every report of this agent run.
    pub seq: u64,
    /// The agent run (see [`is_fresh`]).
    pub run: u64,
    /// Milliseconds since the Unix epoch, agent clock.
    pub timestamp_ms: u64,
    pub datacenter: Name,
    pub layer: Layer,
    pub arch: Name,
    pub hardware: Labels,
    pub software: Labels,
    pub capacity: NodeCapacity,
    pub load: NodeLoad,
    /// Where the agent answers probes: `ip:port`.
    pub probe_addr: heapless::String<64>,
    /// Where a fixed node stands on the map (v7; none for a train): see [`crate::geo`].
    pub position: Option<WirePosition>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCapacity {
    pub cpu_millis: u64,
    pub memory_mb: u64,
    pub disk_mb: u64,
    /// Network bandwidth, megabits per second (0 when unknown).
    pub net_mbps: u64,
}

/// The five resource metrics of resource-aware scoring, and the managed container count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeLoad {
    /// CPU in use, in millicores (1000 = one core busy).
    pub cpu_millis: u64,
    pub memory_used_mb: u64,
    pub disk_used_mb: u64,
    /// Network throughput, bytes per second, received and sent.
    pub net_rx_bps: u64,
    pub net_tx_bps: u64,
    /// Disk I/O, bytes per second, read and written.
    pub disk_read_bps: u64,
    pub disk_write_bps: u64,
    /// Containers the agent manages on this node.
    pub containers: u32,
}

/// Measured quality of the links from `node` to its peers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkMetrics {
    pub node: Name,
    pub seq: u64,
    /// The agent run (see [`is_fresh`]).
    pub run: u64,
    /// At most [`MAX_LINKS_PER_MESSAGE`]; a larger table goes in several messages.
    pub links: heapless::Vec<LinkSample, MAX_LINKS_PER_MESSAGE>,
    /// The node's network coordinate from its probes of peers outside its group (wire v5),
    /// in the first message of each batch once it has one. Here rather than in the node
    /// report: the prober computes it from the samples these metrics summarise, on their
    /// period, in its own thread.
    pub coord: Option<WireCoord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkSample {
    pub peer: Name,
    /// Smoothed one-way latency estimate (half the round trip), milliseconds.
    pub latency_ms: f32,
    /// RFC 3550 interarrival jitter of the one-way estimate, milliseconds.
    pub jitter_ms: f32,
    /// Fraction of probes answered over the sliding window, in [0, 1].
    pub success: f32,
    /// Probes in the window.
    pub samples: u16,
    /// How long before this report the peer last answered a probe, milliseconds
    /// ([`NEVER_ANSWERED`] when it never did): the evidence that a node silent towards the
    /// control plane still answers its peers.
    pub last_answer_ms: u32,
}

/// [`LinkSample::last_answer_ms`] of a peer that never answered.
pub const NEVER_ANSWERED: u32 = u32::MAX;

/// A node's presence on the broker, agent → cloud, retained on `acoa/v1/nodes/{node}/online`:
/// `online: true` after each connection; `online: false` is the connection's last will, signed
/// when the connection is opened, or the agent's goodbye. `(run, conn)` names the connection
/// (`conn` counts the connections of one run), so an `offline` of an earlier connection, replayed,
/// is not taken for the current one's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Presence {
    pub node: Name,
    /// The agent run (see [`is_fresh`]).
    pub run: u64,
    /// The connection of this run, from 1.
    pub conn: u64,
    pub online: bool,
}

/// Everything that should run on one node: a complete, versioned document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DesiredState {
    pub node: Name,
    /// Strictly increasing; agents refuse a generation not newer than the last applied.
    pub generation: u64,
    /// The term of the control-plane leader that decided it (0: a single control plane on
    /// its file store). Agents refuse a term older than the one they last applied, however
    /// well signed: a deposed leader's orders.
    pub term: u64,
    pub containers: heapless::Vec<ContainerSpec, MAX_CONTAINERS>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerSpec {
    /// Unique on the node: `{app}.{component}`.
    pub name: Name,
    pub app: Name,
    pub component: Name,
    pub image: ImageRef,
    pub cpu_millis: u64,
    pub memory_mb: u64,
    pub env: heapless::Vec<EnvVar, MAX_ENV>,
    /// The component's health check, if it has one (wire v4; boxed: a command check is over
    /// 1 KB, and most containers have none).
    pub health: Option<Box<HealthSpec>>,
}

/// A health check and its timing (the model's `health`, checked there: `docs/model.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthSpec {
    pub check: CheckSpec,
    pub interval_s: u16,
    pub timeout_s: u16,
    pub retries: u8,
    pub start_period_s: u16,
}

/// What a health check does.
// the whole `HealthSpec` is boxed in a `ContainerSpec`: no need to box the command again
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckSpec {
    /// A command run in the container; it passes when it exits with 0.
    Cmd(heapless::Vec<HealthArg, MAX_HEALTH_ARGS>),
    /// A TCP connection to this port of the container.
    Tcp(u16),
    /// `GET path` to this port of the container; it passes on a 2xx or 3xx status.
    Http { port: u16, path: HealthArg },
}

impl std::fmt::Display for CheckSpec {
    /// `cmd sh -c test -f /tmp/ok`, `tcp 8080`, `http 8080/healthz`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckSpec::Cmd(args) => {
                f.write_str("cmd")?;
                for a in args {
                    write!(f, " {a}")?;
                }
                Ok(())
            }
            CheckSpec::Tcp(port) => write!(f, "tcp {port}"),
            CheckSpec::Http { port, path } => write!(f, "http {port}{path}"),
        }
    }
}

impl HealthSpec {
    /// The wire form of a component's validated `health` block; an error when it does not fit
    /// (a model that passed `validate()` always fits).
    pub fn from_model(h: &crate::model::Health) -> Result<HealthSpec, WireError> {
        use crate::model::HealthCheck;
        let u16_of = |field: &'static str, v: u32| {
            u16::try_from(v).map_err(|_| WireError::TooLarge {
                field,
                max: u64::from(u16::MAX),
            })
        };
        let port = |p: u32| u16_of("health port", p);
        let secs = u16_of;
        let check = match &h.check {
            HealthCheck::Cmd(args) => {
                let mut v = heapless::Vec::new();
                for a in args {
                    v.push(bounded("health command argument", a)?)
                        .map_err(|_| WireError::TooMany {
                            field: "health command",
                            max: MAX_HEALTH_ARGS,
                        })?;
                }
                CheckSpec::Cmd(v)
            }
            HealthCheck::Tcp(p) => CheckSpec::Tcp(port(*p)?),
            HealthCheck::Http(http) => CheckSpec::Http {
                port: port(http.port)?,
                path: bounded("health http path", &http.path)?,
            },
        };
        Ok(HealthSpec {
            check,
            interval_s: secs("health interval_s", h.interval_s)?,
            timeout_s: secs("health timeout_s", h.timeout_s)?,
            retries: u8::try_from(h.retries).map_err(|_| WireError::TooLarge {
                field: "health retries",
                max: u64::from(u8::MAX),
            })?,
            start_period_s: secs("health start_period_s", h.start_period_s)?,
        })
    }

    /// The model's form of this check.
    pub fn to_model(&self) -> crate::model::Health {
        use crate::model::{HealthCheck, HttpCheck};
        crate::model::Health {
            check: match &self.check {
                CheckSpec::Cmd(args) => {
                    HealthCheck::Cmd(args.iter().map(|a| a.to_string()).collect())
                }
                CheckSpec::Tcp(p) => HealthCheck::Tcp(u32::from(*p)),
                CheckSpec::Http { port, path } => HealthCheck::Http(HttpCheck {
                    port: u32::from(*port),
                    path: path.to_string(),
                }),
            },
            interval_s: u32::from(self.interval_s),
            timeout_s: u32::from(self.timeout_s),
            retries: u32::from(self.retries),
            start_period_s: u32::from(self.start_period_s),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    pub name: heapless::String<32>,
    pub value: heapless::String<192>,
}

/// What runs on a node, agent → cloud.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActualState {
    pub node: Name,
    /// The desired generation the agent last applied (0 for none).
    pub generation: u64,
    pub seq: u64,
    /// The agent run (see [`is_fresh`]).
    pub run: u64,
    pub containers: heapless::Vec<ContainerStatus, MAX_CONTAINERS>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerStatus {
    pub name: Name,
    pub image: ImageRef,
    pub state: ContainerState,
    pub restarts: u32,
    /// Why it is not running, when it is not.
    pub error: heapless::String<128>,
    /// What its health check found while it runs; `None` when it has no check, does not run,
    /// or its runtime checks it itself (k3s) (wire v4).
    pub health: Option<Health>,
}

/// A running container's health, by its check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Health {
    /// No check passed yet, and not enough failed to call it unhealthy.
    Starting,
    /// The last check passed.
    Healthy,
    /// `retries` checks in a row failed past the start period.
    Unhealthy,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Starting => "starting",
            Health::Healthy => "healthy",
            Health::Unhealthy => "unhealthy",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContainerState {
    Pending,
    Running,
    Exited,
    Failed,
    /// The agent will not run it (image outside the allowlist).
    Refused,
}

/// One node's probe targets, cloud → that agent, retained on `acoa/v1/nodes/{node}/peers`
/// (wire v5; before, one fleet-wide list): its neighbour set and the links a placement uses
/// that are only estimated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerList {
    /// The node the list is for: an agent refuses another node's.
    pub node: Name,
    /// Strictly increasing over the lists of one node.
    pub generation: u64,
    pub peers: heapless::Vec<Peer, MAX_PEERS_PER_NODE>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    pub node: Name,
    /// `ip:port` where the peer answers probes.
    pub addr: heapless::String<64>,
    /// Of the node's own group (datacenter, train): probed, but its samples are not given to
    /// the coordinate (`shared::coords::vivaldi`).
    pub group: bool,
}

/// What the components running on `node` use, agent → cloud, on a period: CPU and memory as
/// measured by the runtime, traffic as counted by the workloads themselves (their stats
/// datagrams). A complete list for the node each time (what is absent runs no longer here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentUsage {
    pub node: Name,
    pub seq: u64,
    /// The agent run (see [`is_fresh`]).
    pub run: u64,
    /// Milliseconds the rates were measured over.
    pub period_ms: u32,
    pub components: heapless::Vec<ComponentSample, MAX_CONTAINERS>,
}

/// One component on the node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentSample {
    pub app: Name,
    pub component: Name,
    /// The container measured (wire v6): `{app}.{component}`, or another name while a new copy
    /// runs beside the old one during a rollout.
    pub container: Name,
    /// CPU in use, millicores; `None` when the runtime did not say.
    pub cpu_millis: Option<f32>,
    /// Memory in use, MB; `None` when the runtime did not say.
    pub memory_mb: Option<f32>,
    /// What it sent, per downstream component (or channel, as the workload names it); empty
    /// when the workload reports nothing.
    pub traffic: heapless::Vec<TrafficSample, MAX_DOWNSTREAM>,
    /// The workload's own service time per message over the period (wire v6); `None` when the
    /// workload says nothing of it (stats datagram v1) or served no message yet.
    pub service: Option<ServiceSample>,
}

/// How long a workload takes per message, on its own clock: from receiving a message (or, at a
/// source, from the moment it is due) to forwarding it (clock-free: one container's clock).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ServiceSample {
    /// The mean over the messages served in the period, ms (at most
    /// [`stats_datagram::MAX_SERVICE_MS`]).
    pub mean_ms: f32,
    /// Messages served in the period (0: the last mean measured, none served since).
    pub messages: u32,
}

impl ServiceSample {
    /// The mean when it is a service time (finite, in `0..=MAX_SERVICE_MS`), else None: what
    /// a receiver reads from a sample it did not make.
    pub fn checked_ms(&self) -> Option<f64> {
        let v = self.mean_ms;
        (v.is_finite() && (0.0..=stats_datagram::MAX_SERVICE_MS).contains(&v)).then_some(v as f64)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrafficSample {
    /// A downstream component of the same application, or the name of a channel to it.
    pub to: Name,
    pub bytes_per_s: f32,
    pub messages_per_s: f32,
}

/// The envelope of every signed frame (also the scheduler jobs': `crate::jobs`).
#[derive(Serialize, Deserialize)]
pub(crate) struct Frame<'a> {
    pub(crate) version: u16,
    #[serde(borrow)]
    pub(crate) body: &'a [u8],
    #[serde(borrow)]
    pub(crate) signature: &'a [u8],
}

/// Encodes `msg` in a frame of [`VERSION`], signed with `key` when one is given.
pub fn encode(msg: &Message, key: Option<&SigningKey>) -> Result<Vec<u8>, WireError> {
    let body = postcard::to_allocvec(msg).map_err(WireError::Encode)?;
    let sig = key.map(|k| k.sign(&signed_bytes(&body)).to_bytes());
    let frame = Frame {
        version: VERSION,
        body: &body,
        signature: sig.as_ref().map(|s| &s[..]).unwrap_or(&[]),
    };
    postcard::to_allocvec(&frame).map_err(WireError::Encode)
}

/// A frame opened but not yet trusted.
#[derive(Debug, Clone, Copy)]
pub struct Envelope<'a> {
    body: &'a [u8],
    signature: &'a [u8],
}

/// Opens a frame: checks the version and splits body from signature.
pub fn open(bytes: &[u8]) -> Result<Envelope<'_>, WireError> {
    let (version, _) = postcard::take_from_bytes::<u16>(bytes).map_err(WireError::Decode)?;
    if let Some(&(version, lacks)) = OLD_VERSIONS.iter().find(|(v, _)| *v == version) {
        return Err(WireError::OldVersion { version, lacks });
    }
    if version != VERSION {
        return Err(WireError::UnknownVersion(version));
    }
    let frame: Frame<'_> = postcard::from_bytes(bytes).map_err(WireError::Decode)?;
    Ok(Envelope {
        body: frame.body,
        signature: frame.signature,
    })
}

impl<'a> Envelope<'a> {
    pub fn is_signed(&self) -> bool {
        !self.signature.is_empty()
    }

    /// Checks the signature against `key`.
    pub fn verify(&self, key: &VerifyingKey) -> Result<(), WireError> {
        if self.signature.is_empty() {
            return Err(WireError::Unsigned);
        }
        let sig = Signature::from_slice(self.signature).map_err(|_| WireError::BadSignature)?;
        key.verify(&signed_bytes(self.body), &sig)
            .map_err(|_| WireError::BadSignature)
    }

    /// Decodes the body, whether or not it was verified: use [`decode_verified`] for trust.
    pub fn message(&self) -> Result<Message, WireError> {
        postcard::from_bytes(self.body).map_err(WireError::Decode)
    }
}

/// Whether each envelope's signature verifies against its key, the valid ones checked in one
/// batch: about 25 µs a signature in batches of 16-64 on the CI machine's kind instead of 46
/// one by one (BENCHMARKS.md, "Signatures verified in batches"). A batch that fails is checked
/// again one by one, so a single bad signature costs its batch once more and is named; the
/// verdicts and errors are those of [`Envelope::verify`].
///
/// The batch equation is checked on the decompressed `R` where [`Envelope::verify`] compares
/// its encoding: a batch may accept a signature its key's holder encoded non-canonically
/// (malleability, not forgery: no key, no signature). Nothing here identifies a message by its
/// signature bytes; freshness is the signed `(run, seq)`.
#[cfg(feature = "batch-verify")]
pub fn verify_all(items: &[(Envelope<'_>, &VerifyingKey)]) -> Vec<Result<(), WireError>> {
    // the signatures that parse go into the batch; the others fail as they fail alone
    let sigs: Vec<Option<Signature>> = items
        .iter()
        .map(|(e, _)| Signature::from_slice(e.signature).ok())
        .collect();
    let whole: Vec<usize> = (0..items.len()).filter(|&i| sigs[i].is_some()).collect();
    let batch_ok = whole.len() > 1 && {
        let signed: Vec<Vec<u8>> = whole
            .iter()
            .map(|&i| signed_bytes(items[i].0.body))
            .collect();
        let messages: Vec<&[u8]> = signed.iter().map(Vec::as_slice).collect();
        let signatures: Vec<Signature> = whole.iter().filter_map(|&i| sigs[i]).collect();
        let keys: Vec<VerifyingKey> = whole.iter().map(|&i| *items[i].1).collect();
        ed25519_dalek::verify_batch(&messages, &signatures, &keys).is_ok()
    };
    items
        .iter()
        .zip(&sigs)
        .map(|((e, key), sig)| match sig {
            Some(_) if batch_ok => Ok(()),
            _ => e.verify(key),
        })
        .collect()
}

/// Opens, verifies against `key`, and decodes a frame.
pub fn decode_verified(bytes: &[u8], key: &VerifyingKey) -> Result<Message, WireError> {
    let env = open(bytes)?;
    env.verify(key)?;
    env.message()
}

/// Opens and decodes a frame without checking any signature.
pub fn decode_unverified(bytes: &[u8]) -> Result<Message, WireError> {
    open(bytes)?.message()
}

fn signed_bytes(body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(SIGNING_CONTEXT.len() + body.len());
    v.extend_from_slice(SIGNING_CONTEXT);
    v.extend_from_slice(body);
    v
}

// ---------------------------------------------------------------- replay protection

/// Whether an agent message numbered `(run, seq)` is newer than the last one accepted of the
/// same kind from the same node (`last`, `None` before the first): `run` counts the agent's
/// starts (persisted, so it never goes back), `seq` the messages of one run, so `(run, seq)`
/// strictly increases over a node's whole life and a replayed or reordered older message is not
/// fresh.
pub fn is_fresh(last: Option<(u64, u64)>, run: u64, seq: u64) -> bool {
    last.is_none_or(|last| (run, seq) > last)
}

// ---------------------------------------------------------------- helpers

/// A bounded string from `s`, or an error naming the field.
pub fn bounded<const N: usize>(
    field: &'static str,
    s: &str,
) -> Result<heapless::String<N>, WireError> {
    heapless::String::try_from(s).map_err(|_| WireError::TooLong { field, max: N })
}

/// A node, component or application name.
pub fn name(s: &str) -> Result<Name, WireError> {
    bounded("name", s)
}

/// Keys travel in configuration files as 64 hexadecimal digits.
pub mod keys {
    use ed25519_dalek::{SigningKey, VerifyingKey};

    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    pub enum KeyError {
        #[error("a key must be 64 hexadecimal digits, got {0} characters")]
        Length(usize),
        #[error("a key must be hexadecimal digits only")]
        NotHex,
        #[error("not a valid ed25519 public key")]
        Invalid,
    }

    pub fn to_hex(bytes: &[u8; 32]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn from_hex(s: &str) -> Result<[u8; 32], KeyError> {
        let s = s.trim();
        if s.len() != 64 {
            return Err(KeyError::Length(s.len()));
        }
        // from_str_radix alone would take a leading `+` as a sign
        if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(KeyError::NotHex);
        }
        let mut out = [0u8; 32];
        for (i, chunk) in s.as_bytes().chunks(2).enumerate() {
            let hex = std::str::from_utf8(chunk).map_err(|_| KeyError::NotHex)?;
            out[i] = u8::from_str_radix(hex, 16).map_err(|_| KeyError::NotHex)?;
        }
        Ok(out)
    }

    pub fn public_from_hex(s: &str) -> Result<VerifyingKey, KeyError> {
        VerifyingKey::from_bytes(&from_hex(s)?).map_err(|_| KeyError::Invalid)
    }

    pub fn secret_from_hex(s: &str) -> Result<SigningKey, KeyError> {
        Ok(SigningKey::from_bytes(&from_hex(s)?))
    }

    pub fn public_hex(key: &VerifyingKey) -> String {
        to_hex(key.as_bytes())
    }
}

#[cfg(test)]
mod replay_tests {
    use super::*;

    #[test]
    fn fresh_means_a_later_run_or_a_later_message_of_the_same_run() {
        assert!(is_fresh(None, 0, 0), "the first message of a node");
        assert!(is_fresh(Some((3, 10)), 3, 11));
        assert!(
            is_fresh(Some((3, 10)), 4, 1),
            "a restart numbers from 1 again"
        );
        assert!(!is_fresh(Some((3, 10)), 3, 10), "the same message again");
        assert!(
            !is_fresh(Some((3, 10)), 3, 9),
            "an older one of the same run"
        );
        assert!(
            !is_fresh(Some((3, 10)), 2, 500),
            "any message of an earlier run"
        );
        assert!(is_fresh(Some((u64::MAX - 1, u64::MAX)), u64::MAX, 0));
        assert!(!is_fresh(Some((u64::MAX, u64::MAX)), u64::MAX, u64::MAX));
    }

    #[test]
    fn agent_messages_carry_their_run_and_the_old_version_is_named() {
        let key = SigningKey::from_bytes(&[9; 32]);
        let usage = Message::ComponentUsage(Box::new(ComponentUsage {
            node: name("n1").unwrap(),
            seq: 7,
            run: 42,
            period_ms: 1000,
            components: heapless::Vec::new(),
        }));
        let frame = encode(&usage, Some(&key)).unwrap();
        assert_eq!(
            decode_verified(&frame, &key.verifying_key()).unwrap(),
            usage
        );
        // The same frame under an earlier version number: named, not misread.
        let env: Frame<'_> = postcard::from_bytes(&frame).unwrap();
        for &(version, lacks) in OLD_VERSIONS {
            let old = postcard::to_allocvec(&Frame {
                version,
                body: env.body,
                signature: env.signature,
            })
            .unwrap();
            let e = open(&old).unwrap_err();
            assert_eq!(e, WireError::OldVersion { version, lacks });
            assert!(
                e.to_string()
                    .contains(&format!("version {version}, before")),
                "{e}"
            );
        }
        assert_eq!(open(&[9, 0]).unwrap_err(), WireError::UnknownVersion(9));
    }

    #[test]
    fn a_presence_is_signed_and_names_its_connection() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let will = Message::Presence(Presence {
            node: name("n13").unwrap(),
            run: 4,
            conn: 2,
            online: false,
        });
        let frame = encode(&will, Some(&key)).unwrap();
        assert_eq!(decode_verified(&frame, &key.verifying_key()).unwrap(), will);
        assert!(frame.len() < 128, "a last will of {} bytes", frame.len());
        let other = SigningKey::from_bytes(&[8; 32]);
        assert_eq!(
            decode_verified(&frame, &other.verifying_key()).unwrap_err(),
            WireError::BadSignature
        );
    }
}

#[cfg(all(test, feature = "batch-verify"))]
mod batch_tests {
    use super::*;

    fn presence(key: &SigningKey, n: u64) -> Vec<u8> {
        let m = Message::Presence(Presence {
            node: name("n1").unwrap(),
            run: n,
            conn: 1,
            online: true,
        });
        encode(&m, Some(key)).unwrap()
    }

    /// `verify_all`'s verdicts against `Envelope::verify`'s, one by one.
    fn agrees(items: &[(Envelope<'_>, &VerifyingKey)]) -> Vec<Result<(), WireError>> {
        let all = verify_all(items);
        let one: Vec<_> = items.iter().map(|(e, k)| e.verify(k)).collect();
        assert_eq!(all, one);
        all
    }

    #[test]
    fn a_batch_gives_each_frame_the_verdict_it_gets_alone() {
        let keys: Vec<SigningKey> = (1..=40u8)
            .map(|i| SigningKey::from_bytes(&[i; 32]))
            .collect();
        let vks: Vec<VerifyingKey> = keys.iter().map(|k| k.verifying_key()).collect();
        let frames: Vec<Vec<u8>> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| presence(k, i as u64))
            .collect();
        let envs: Vec<Envelope<'_>> = frames.iter().map(|f| open(f).unwrap()).collect();
        let good: Vec<_> = envs.iter().copied().zip(vks.iter()).collect();
        assert!(agrees(&good).iter().all(Result::is_ok));
        assert_eq!(agrees(&good[..1]), vec![Ok(())]);
        assert!(agrees(&[]).is_empty());

        // one of each way to be wrong, among good ones
        let mut flipped = envs[3].signature.to_vec();
        flipped[10] ^= 1;
        let mut bad = good.clone();
        bad[3].0 = Envelope {
            body: envs[3].body,
            signature: &flipped,
        };
        bad[7].1 = &vks[8]; // another node's key
        bad[12].0 = Envelope {
            body: envs[12].body,
            signature: &[],
        };
        bad[20].0 = Envelope {
            body: envs[20].body,
            signature: &envs[20].signature[..63],
        };
        bad[30].0 = Envelope {
            body: envs[31].body,
            signature: envs[30].signature,
        };
        let v = agrees(&bad);
        for (i, r) in v.iter().enumerate() {
            match i {
                12 => assert_eq!(*r, Err(WireError::Unsigned)),
                3 | 7 | 20 | 30 => assert_eq!(*r, Err(WireError::BadSignature), "frame {i}"),
                _ => assert_eq!(*r, Ok(()), "frame {i}"),
            }
        }
    }
}
