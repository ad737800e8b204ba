//! The prober thread: its I/O towards the MQTT session and the disk, and its start.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use acoa_shared::topics;
use acoa_shared::wire::{self, Message};
use anyhow::Context;
use ed25519_dalek::SigningKey;
use rumqttc::QoS;
use tracing::{info, warn};

use super::Shared;
use crate::config::Config;
use crate::prober::{self, ProbeIo, Prober};
use crate::store;

struct ThreadIo {
    peers_rx: std::sync::mpsc::Receiver<Vec<u8>>,
    shared: Arc<Shared>,
    state_dir: std::path::PathBuf,
    topic: String,
}

impl ProbeIo for ThreadIo {
    fn new_peers(&mut self) -> Option<Vec<u8>> {
        self.peers_rx.try_recv().ok()
    }
    fn persist_peers(&mut self, frame: &[u8]) {
        if let Err(e) = store::write_atomic(&self.state_dir, store::PEERS, frame) {
            warn!("cannot persist the peer list: {e}");
        }
    }
    fn publish(&mut self, metrics: wire::LinkMetrics) {
        self.shared.links_sent.fetch_add(1, Ordering::Relaxed);
        self.shared.publish(
            self.topic.clone(),
            QoS::AtMostOnce,
            &Message::LinkMetrics(Box::new(metrics)),
        );
    }
}

pub(super) fn start_prober(
    cfg: &Config,
    _key: &SigningKey,
    shared: Arc<Shared>,
    peers_rx: std::sync::mpsc::Receiver<Vec<u8>>,
) -> anyhow::Result<()> {
    let sock = std::net::UdpSocket::bind(cfg.probe.listen)
        .with_context(|| format!("probe.listen {}", cfg.probe.listen))?;
    let mut prober = Box::new(
        Prober::new(
            &cfg.node,
            cfg.broker.control_plane_key,
            cfg.probe.window,
            cfg.probe.peers_per_period,
            cfg.probe.timeout_ms,
        )
        .with_clock(cfg.probe.clock)
        .with_run(shared.run),
    );
    match store::read(&cfg.state_dir, store::PEERS) {
        Ok(Some(frame)) => match prober.set_peers(&frame, true) {
            Ok(Some(line)) => info!("{line}"),
            Ok(None) => {}
            Err(line) => warn!("persisted {line}"),
        },
        Ok(None) => {}
        Err(e) => warn!("cannot read the persisted peer list: {e}"),
    }
    info!(
        "prober listening on {} (advertised {}), {} peers per {} ms, window {}, clock {}",
        cfg.probe.listen,
        cfg.probe.advertise,
        cfg.probe.peers_per_period,
        cfg.probe.period_ms,
        cfg.probe.window,
        cfg.probe.clock
    );
    let run_cfg = prober::RunConfig {
        node: wire::name(&cfg.node).unwrap_or_default(),
        period: Duration::from_millis(cfg.probe.period_ms),
        publish_period: Duration::from_millis(cfg.report_period_ms),
    };
    let io = ThreadIo {
        peers_rx,
        topic: topics::links(&cfg.node),
        shared,
        state_dir: cfg.state_dir.clone(),
    };
    std::thread::Builder::new()
        .name("prober".into())
        // The tables are fixed-size and live on this stack: 1 MiB of address space,
        // only what is touched becomes resident.
        .stack_size(1024 * 1024)
        .spawn(move || prober::run(sock, *prober, run_cfg, io))
        .context("cannot start the prober thread")?;
    Ok(())
}
