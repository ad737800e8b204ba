//! Node reports and per-container usage (workload stats datagrams in), and what containers
//! are told as the stats address.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use acoa_shared::topics;
use acoa_shared::wire::{self, Message};
use rumqttc::QoS;
use tokio::sync::watch;
use tracing::{debug, error, warn};

use super::reconcile::DesiredList;
use super::Shared;
use crate::config::Config;
use crate::report::{ReportGate, Reporter};
use crate::runtime::podman::PodmanRuntime;
use crate::runtime::Runtime;
use crate::stats::{self, CpuRates, Table};

/// What containers are told as `ACOA_AGENT_STATS` (see `config::StatsConfig`).
pub(super) async fn stats_advertise(cfg: &Config, port: u16, rt: &PodmanRuntime) -> Option<String> {
    if let Some(a) = &cfg.stats.advertise {
        return Some(a.clone());
    }
    let ip = cfg.stats.listen.ip();
    if ip.is_loopback() && cfg.netns.is_none() {
        warn!(
            "stats.listen {}: containers on Podman's bridge cannot reach a loopback address (they can when they join the agent's namespace, [podman] netns); set stats.listen = \"0.0.0.0:{port}\" for workload traffic stats",
            cfg.stats.listen
        );
    }
    if !ip.is_unspecified() {
        return Some(std::net::SocketAddr::new(ip, port).to_string());
    }
    match rt.default_gateway().await {
        Some(gw) => Some(std::net::SocketAddr::new(gw, port).to_string()),
        None => {
            warn!(
                "stats.listen {}: Podman's default network has no gateway to tell containers; set stats.advertise",
                cfg.stats.listen
            );
            None
        }
    }
}

pub(super) async fn report_loop(cfg: Config, shared: Arc<Shared>) {
    let mut reporter = match Reporter::new(&cfg, shared.run) {
        Ok(r) => r,
        Err(e) => {
            error!("cannot read this machine's resources: {e}; no node reports");
            return;
        }
    };
    let mut interval = tokio::time::interval(Duration::from_millis(cfg.report_period_ms));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let topic = topics::report(&cfg.node);
    let mut gate = ReportGate::new(Duration::from_secs(cfg.report_max_interval_s));
    let mut links_seen = 0;
    loop {
        interval.tick().await;
        let r = reporter.report(shared.containers.load(Ordering::Relaxed));
        let links = shared.links_sent.load(Ordering::Relaxed);
        let why = gate.decide(
            &r,
            Instant::now(),
            shared.sessions.load(Ordering::Relaxed),
            links != links_seen,
        );
        links_seen = links;
        let Some(why) = why else { continue };
        debug!("node report {}: {why:?}", r.seq);
        shared.publish(
            topic.clone(),
            QoS::AtMostOnce,
            &Message::NodeReport(Box::new(r)),
        );
    }
}

/// Workload stats in, one usage message per report period out.
pub(super) async fn usage_loop(
    cfg: Config,
    shared: Arc<Shared>,
    sock: Option<std::net::UdpSocket>,
    rt: Option<PodmanRuntime>,
    mut desired: watch::Receiver<DesiredList>,
) {
    let sock = sock.and_then(|s| {
        s.set_nonblocking(true).ok()?;
        tokio::net::UdpSocket::from_std(s).ok()
    });
    let node = wire::name(&cfg.node).unwrap_or_default();
    let topic = topics::usage(&cfg.node);
    let mut table = Box::new(Table::new());
    let mut cpu = CpuRates::new();
    let mut interval = tokio::time::interval(Duration::from_millis(cfg.report_period_ms));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut buf = [0u8; stats::MAX_DATAGRAM + 1];
    let mut seq = 0u64;
    let mut sent_empty = true;
    let mut last_tick = Instant::now();
    // dropped datagrams: one warning per 10 s at most
    let mut dropped = 0u64;
    let mut last_warn: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = interval.tick() => {
                let list = desired.borrow_and_update().clone();
                table.set_desired(list.iter().map(|(n, a, c)| (n.as_str(), a.as_str(), c.as_str())));
                let now = Instant::now();
                let period_ms = now.duration_since(last_tick).as_millis().min(u32::MAX as u128) as u32;
                last_tick = now;
                if list.is_empty() && sent_empty {
                    continue;
                }
                let runtime = match &rt {
                    Some(rt) => rt.usage().await.unwrap_or_else(|e| {
                        debug!("container stats unavailable: {e}");
                        Vec::new()
                    }),
                    None => Vec::new(),
                };
                let rates = cpu.update(&runtime);
                seq += 1;
                let components = stats::samples(&list, &rates, &runtime, &mut table, Instant::now());
                let msg = stats::usage_message(&node, shared.run, seq, period_ms, components);
                sent_empty = msg.components.is_empty();
                shared.publish(topic.clone(), QoS::AtMostOnce, &Message::ComponentUsage(Box::new(msg)));
            }
            r = recv_stats(sock.as_ref(), &mut buf) => {
                let Ok((n, from)) = r else { continue };
                if desired.has_changed().unwrap_or(false) {
                    let list = desired.borrow_and_update().clone();
                    table.set_desired(list.iter().map(|(n, a, c)| (n.as_str(), a.as_str(), c.as_str())));
                }
                if let Err(e) = table.receive(&buf[..n], Instant::now()) {
                    dropped += 1;
                    if last_warn.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                        warn!("{e} (from {from}; {dropped} dropped since the last such line)");
                        dropped = 0;
                        last_warn = Some(Instant::now());
                    }
                }
            }
        }
    }
}

async fn recv_stats(
    sock: Option<&tokio::net::UdpSocket>,
    buf: &mut [u8],
) -> std::io::Result<(usize, std::net::SocketAddr)> {
    match sock {
        Some(s) => s.recv_from(buf).await,
        None => std::future::pending().await,
    }
}
