//! The agent's configuration file (`edge_agent::config`): TOML read by `Config::load` (the only
//! public entry, so the input goes through a file), its checks, and the field parsers it uses
//! (`parse_broker_url`, `keys::public_from_hex`). Loading never panics, and what loads holds
//! the values the checks promise: a node name the control plane accepts, bounded lists and
//! periods, a broker host, and values the prober can be built from.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use acoa_fuzz::text;
use acoa_shared::model::check_name;
use acoa_shared::wire::{self, keys};
use edge_agent::config::{parse_broker_url, Config, Overrides, MAX_BROKERS, MAX_WINDOW};
use edge_agent::prober::Prober;
use libfuzzer_sys::fuzz_target;

/// The file each input is written to: in memory (`/dev/shm`) where there is one, for a write
/// to a disk-backed temporary directory stalled for over a second once on a loaded machine
/// and failed the run with libFuzzer's per-input timeout (an input that parses in 2 ms).
fn path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        dir.join(format!(
            "acoa-fuzz-agent-config-{}.toml",
            std::process::id()
        ))
    })
}

fuzz_target!(|data: &[u8]| {
    let Some(text) = text(data) else {
        return;
    };
    std::fs::write(path(), text).expect("the fuzz config file can be written");
    if let Ok(c) = Config::load(Overrides {
        config: Some(path().clone()),
        ..Default::default()
    }) {
        check_name("node", &c.node).expect("the agent's node name is one the model accepts");
        wire::name(&c.node).expect("the node name fits the wire");
        assert!(c.hardware.len() <= 16 && c.software.len() <= 16);
        assert!((1..=MAX_WINDOW).contains(&c.probe.window));
        assert!(c.probe.period_ms >= 10 && c.report_period_ms >= 100);
        assert!(c.probe.peers_per_period <= edge_agent::prober::MAX_PEERS);
        assert!((1..=MAX_BROKERS).contains(&c.broker.urls.len()));
        assert!(c.broker.urls.iter().all(|u| !u.host.is_empty()));
        // What the agent builds from it at start.
        let _ = Prober::new(
            &c.node,
            c.broker.control_plane_key,
            c.probe.window,
            c.probe.peers_per_period,
            c.probe.timeout_ms,
        );
    }
    if let Ok((host, _, _)) = parse_broker_url(text) {
        assert!(!host.is_empty(), "{text:?} parses to an empty host");
    }
    if let Ok(bytes) = keys::from_hex(text) {
        assert_eq!(
            keys::to_hex(&bytes),
            text.trim().to_ascii_lowercase(),
            "{text:?} is read as a key of other digits"
        );
        let _ = keys::public_from_hex(text);
    }
});
