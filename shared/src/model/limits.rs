//! Every bound on a model document, in one place (documented in `docs/model.md`).
//!
//! Two kinds: [`DocumentLimits`] are checked on the text before and while it is parsed (so
//! that no input makes parsing slow or large: a refusal comes before any deep work), the
//! `MAX_*` counts and lengths by `validate()` on the parsed model (so that models built as
//! values are held to them too). Application definitions arrive from the network and get
//! the tight [`APPLICATION`] bounds; cluster snapshots are operator files and get the
//! looser [`CLUSTER`] bounds. The counts comfortably admit the railway scenario (7
//! components) and the scheduler's synthetic benchmark applications (20 components,
//! about 30 channels, 6 paths, 12 criteria).

/// Longest name (application, component, node, datacenter, channel, path, label, ...),
/// bytes. Names are MQTT topic levels and container names.
pub const MAX_NAME_LEN: usize = 63;

/// Longest field path or reason of a `ModelError`, characters (they quote the document).
pub const MAX_ERROR_LEN: usize = 4096;

/// Longest container image reference, bytes.
pub const MAX_IMAGE_LEN: usize = 255;

/// Most components in one application.
pub const MAX_COMPONENTS: usize = 256;

/// Most channels in one application (and so in one path).
pub const MAX_CHANNELS: usize = 1024;

/// Most paths in one application.
pub const MAX_PATHS: usize = 256;

/// Most criteria in one application.
pub const MAX_CRITERIA: usize = 256;

/// Most labels in one list of a requirement (`requires.hardware`, `requires.software`).
pub const MAX_LABELS: usize = 32;

/// Longest `disconnect.tolerate_s` of an application, seconds (7 days).
pub const MAX_TOLERATE_S: u64 = 7 * 24 * 3600;

/// `disconnect.tolerate_s` when not given: ten minutes, longer than a train's usual tunnels,
/// cuttings and border stops.
pub const DEFAULT_TOLERATE_S: u64 = 600;

/// Bounds on a document's text, checked before (size) and while (the rest) it is parsed.
/// A node is a scalar, a sequence or a mapping (a mapping entry is two nodes, its key and
/// its value); nodes brought in by an alias count as often as the alias is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DocumentLimits {
    /// Largest document, bytes.
    pub max_bytes: usize,
    /// Deepest nesting of sequences and mappings (the top-level mapping is depth 1).
    pub max_depth: usize,
    /// Longest scalar (a YAML scalar or a JSON string: the bytes of its value, escapes
    /// decoded), bytes.
    pub max_scalar_bytes: usize,
    /// Most entries in one sequence or mapping.
    pub max_items: usize,
    /// Most nodes in the document, aliases expanded.
    pub max_nodes: u64,
    /// Most uses of aliases (`*name`).
    pub max_alias_uses: u64,
    /// Most nodes brought in by aliases, counted expanded (an alias of a 10-node anchor
    /// used 3 times brings in 30).
    pub max_alias_nodes: u64,
    /// Most scalar bytes brought in by aliases, counted expanded.
    pub max_alias_bytes: u64,
}

/// Bounds on an application definition (published on MQTT, applied by the CLI). Reading
/// the costliest document they admit takes about 15 ms of CPU; an application of 256
/// components, 1,024 channels, 256 paths and 256 criteria written plainly is 140 KB and
/// 18,000 nodes.
pub const APPLICATION: DocumentLimits = DocumentLimits {
    max_bytes: 256 * 1024,
    max_depth: 32,
    max_scalar_bytes: 1024,
    max_items: MAX_CHANNELS,
    max_nodes: 65_536,
    max_alias_uses: 1024,
    max_alias_nodes: 16_384,
    max_alias_bytes: 128 * 1024,
};

/// Bounds on a cluster snapshot file (written by an operator; a full mesh of 1,000 nodes
/// is a million links, about 70 MiB).
pub const CLUSTER: DocumentLimits = DocumentLimits {
    max_bytes: 256 * 1024 * 1024,
    max_depth: 32,
    max_scalar_bytes: 1024,
    max_items: 1 << 24,
    max_nodes: 1 << 28,
    max_alias_uses: 1 << 20,
    max_alias_nodes: 1 << 22,
    max_alias_bytes: 64 * 1024 * 1024,
};

/// Most arguments of a health check command (`health.check.cmd`).
pub const MAX_HEALTH_ARGS: usize = 8;

/// Longest argument of a health check command, and longest `health.check.http.path`, bytes.
pub const MAX_HEALTH_ARG_LEN: usize = 127;

/// Longest `health.interval_s` and `health.start_period_s`, seconds (one hour).
pub const MAX_HEALTH_PERIOD_S: u32 = 3600;

/// Longest `health.timeout_s`, seconds.
pub const MAX_HEALTH_TIMEOUT_S: u32 = 60;

/// Most `health.retries`.
pub const MAX_HEALTH_RETRIES: u32 = 10;

/// Most components in one batch of a rollout, and most canaries (`update.batch_size`,
/// `update.canaries`).
pub const MAX_UPDATE_BATCH: u32 = MAX_COMPONENTS as u32;

/// Longest `update.healthy_s` and `update.deadline_s`, seconds (one day).
pub const MAX_UPDATE_S: u32 = 24 * 3600;
