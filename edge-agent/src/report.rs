//! Node reports: static properties from the configuration, dynamic ones from `sysinfo`.

use std::path::Path;
use std::time::Instant;

use acoa_shared::wire::{self, NodeCapacity, NodeLoad, NodeReport};
use sysinfo::{Disks, Networks, System};

use crate::config::Config;

/// Reads the machine; one per agent, refreshed once per report.
pub struct Reporter {
    sys: System,
    disks: Disks,
    /// The disk that holds the state directory.
    disk: Option<usize>,
    nets: Networks,
    last: Instant,
    seq: u64,
    template: NodeReport,
}

fn labels(list: &[String]) -> wire::Labels {
    list.iter()
        .filter_map(|s| wire::name(s).ok())
        .take(16)
        .collect()
}

/// The index of the disk whose mount point is the longest prefix of `path`.
fn disk_of(disks: &Disks, path: &Path) -> Option<usize> {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    disks
        .iter()
        .enumerate()
        .filter(|(_, d)| path.starts_with(d.mount_point()))
        .max_by_key(|(_, d)| d.mount_point().as_os_str().len())
        .map(|(i, _)| i)
}

const MB: u64 = 1024 * 1024;

impl Reporter {
    /// The reporter of agent run `run` ([`crate::store::next_run`]).
    pub fn new(cfg: &Config, run: u64) -> Result<Self, sysinfo::Error> {
        let mut sys = System::new()?;
        sys.refresh_cpu_usage();
        sys.refresh_memory();
        let disks = Disks::new_with_refreshed_list()?;
        let disk = disk_of(&disks, &cfg.state_dir);
        let nets = Networks::new_with_refreshed_list()?;
        let detected_cpu = (sys.cpus().len().max(1) as u64) * 1000;
        let detected_disk = disk.map_or(0, |i| disks[i].total_space() / MB);
        let capacity = NodeCapacity {
            cpu_millis: cfg.capacity.cpu_millis.unwrap_or(detected_cpu),
            memory_mb: cfg.capacity.memory_mb.unwrap_or(sys.total_memory() / MB),
            disk_mb: cfg.capacity.disk_mb.unwrap_or(detected_disk),
            net_mbps: cfg.capacity.net_mbps.unwrap_or(0),
        };
        let template = NodeReport {
            node: wire::name(&cfg.node).unwrap_or_default(),
            seq: 0,
            run,
            timestamp_ms: 0,
            datacenter: wire::name(&cfg.datacenter).unwrap_or_default(),
            layer: cfg.layer,
            arch: wire::name(&cfg.arch).unwrap_or_default(),
            hardware: labels(&cfg.hardware),
            software: labels(&cfg.software),
            capacity,
            load: NodeLoad::default(),
            probe_addr: wire::bounded("probe_addr", &cfg.probe.advertise.to_string())
                .unwrap_or_default(),
            position: cfg.position.as_ref().map(wire::WirePosition::from_position),
        };
        Ok(Reporter {
            sys,
            disks,
            disk,
            nets,
            last: Instant::now(),
            seq: 0,
            template,
        })
    }

    /// A fresh report: use since the previous call.
    pub fn report(&mut self, containers: u32) -> NodeReport {
        let now = Instant::now();
        let secs = now.duration_since(self.last).as_secs_f64().max(0.001);
        self.last = now;
        self.sys.refresh_cpu_usage();
        self.sys.refresh_memory();
        self.nets.refresh(false);
        let (mut rx, mut tx) = (0u64, 0u64);
        for (name, data) in &self.nets {
            if name != "lo" {
                rx += data.received();
                tx += data.transmitted();
            }
        }
        let (mut disk_used, mut rd, mut wr) = (0, 0, 0);
        if let Some(i) = self.disk {
            let d = &mut self.disks[i];
            d.refresh();
            disk_used = d.total_space().saturating_sub(d.available_space()) / MB;
            let u = d.usage();
            rd = u.read_bytes;
            wr = u.written_bytes;
        }
        let ncpu = self.sys.cpus().len().max(1) as f64;
        let per_sec = |b: u64| (b as f64 / secs) as u64;
        self.seq += 1;
        let mut r = self.template.clone();
        r.seq = self.seq;
        r.timestamp_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        r.load = NodeLoad {
            cpu_millis: (f64::from(self.sys.global_cpu_usage()) / 100.0 * ncpu * 1000.0) as u64,
            memory_used_mb: self
                .sys
                .total_memory()
                .saturating_sub(self.sys.available_memory())
                / MB,
            disk_used_mb: disk_used,
            net_rx_bps: per_sec(rx),
            net_tx_bps: per_sec(tx),
            disk_read_bps: per_sec(rd),
            disk_write_bps: per_sec(wr),
            containers,
        };
        r
    }
}

/// A usage figure (CPU, memory, disk in use) is "changed" when it moved by this share of the
/// node's capacity since the last report sent.
pub const USAGE_THRESHOLD: f64 = 0.05;
/// A rate (network, disk I/O) is "changed" when it moved by this share of the last one sent
/// and by at least [`RATE_FLOOR_BPS`].
pub const RATE_THRESHOLD: f64 = 0.25;
pub const RATE_FLOOR_BPS: u64 = 1 << 20;

/// Why a node report goes out now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Send {
    /// The first of this run, or the first on a new broker connection.
    Connected,
    /// Its properties (labels, capacity, probe address...) or its container count changed.
    Properties,
    /// A usage figure moved beyond its threshold.
    Usage,
    /// No link metrics went out in the last period: the report is what the control plane
    /// hears of this node (its liveness needs one message a period).
    Heartbeat,
    /// `report_max_interval_s` passed since the last one.
    Refresh,
}

/// When the node report goes out: on a change (beyond a small threshold for usage figures), on a
/// new connection, when the link metrics did not go out in a period, or at the latest every
/// `max_interval` (pure: the report loop feeds it one report a period).
pub struct ReportGate {
    max_interval: std::time::Duration,
    /// The last report sent, when, and on which connection.
    last: Option<(NodeReport, Instant, u64)>,
}

impl ReportGate {
    pub fn new(max_interval: std::time::Duration) -> Self {
        ReportGate {
            max_interval,
            last: None,
        }
    }

    /// Whether `r` goes out at `now`: `session` counts the broker connections so far,
    /// `links_sent` whether link metrics went out since the previous period.
    pub fn decide(
        &mut self,
        r: &NodeReport,
        now: Instant,
        session: u64,
        links_sent: bool,
    ) -> Option<Send> {
        let why = match &self.last {
            None => Some(Send::Connected),
            Some((_, _, s)) if *s != session => Some(Send::Connected),
            Some((p, _, _)) if !same_properties(p, r) => Some(Send::Properties),
            Some((p, _, _)) if usage_moved(p, r) => Some(Send::Usage),
            _ if !links_sent => Some(Send::Heartbeat),
            Some((_, at, _)) if now.duration_since(*at) >= self.max_interval => Some(Send::Refresh),
            _ => None,
        };
        if why.is_some() {
            self.last = Some((r.clone(), now, session));
        }
        why
    }
}

/// Everything but the usage figures and the per-report fields (seq, time) is the same.
fn same_properties(a: &NodeReport, b: &NodeReport) -> bool {
    a.node == b.node
        && a.run == b.run
        && a.datacenter == b.datacenter
        && a.layer == b.layer
        && a.arch == b.arch
        && a.hardware == b.hardware
        && a.software == b.software
        && a.capacity == b.capacity
        && a.probe_addr == b.probe_addr
        && a.position == b.position
        && a.load.containers == b.load.containers
}

fn usage_moved(a: &NodeReport, b: &NodeReport) -> bool {
    let share =
        |x: u64, y: u64, cap: u64| x.abs_diff(y) as f64 >= USAGE_THRESHOLD * cap.max(1) as f64;
    let rate = |x: u64, y: u64| {
        let d = x.abs_diff(y);
        d >= RATE_FLOOR_BPS && d as f64 >= RATE_THRESHOLD * x.max(1) as f64
    };
    let (l, m, c) = (&a.load, &b.load, &b.capacity);
    share(l.cpu_millis, m.cpu_millis, c.cpu_millis)
        || share(l.memory_used_mb, m.memory_used_mb, c.memory_mb)
        || share(l.disk_used_mb, m.disk_used_mb, c.disk_mb)
        || rate(l.net_rx_bps, m.net_rx_bps)
        || rate(l.net_tx_bps, m.net_tx_bps)
        || rate(l.disk_read_bps, m.disk_read_bps)
        || rate(l.disk_write_bps, m.disk_write_bps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Overrides};

    #[test]
    fn reports_this_machine() {
        let cfg = Config::load(Overrides {
            node: Some("n1".into()),
            control_plane_key: Some(
                "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29".into(),
            ),
            state_dir: Some(std::env::temp_dir()),
            hardware: vec!["smoke-sensor".into()],
            ..Default::default()
        })
        .unwrap();
        let mut cfg = cfg;
        cfg.position = Some(acoa_shared::geo::Position::new(46.948, 7.439).unwrap());
        let mut r = Reporter::new(&cfg, 4).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let a = r.report(3);
        let p = a
            .position
            .expect("the configured position")
            .to_position()
            .unwrap();
        assert!(p.chord_km(&cfg.position.unwrap()) < 0.01);
        let b = r.report(3);
        assert_eq!((a.seq, b.seq), (1, 2));
        assert_eq!((a.run, b.run), (4, 4));
        assert_eq!(a.node.as_str(), "n1");
        assert_eq!(a.hardware[0].as_str(), "smoke-sensor");
        assert!(a.capacity.cpu_millis >= 1000);
        assert!(a.capacity.memory_mb > 0);
        assert!(a.capacity.disk_mb > 0, "the disk of the state dir is found");
        assert!(a.load.memory_used_mb > 0 && a.load.memory_used_mb <= a.capacity.memory_mb);
        assert!(a.load.disk_used_mb <= a.capacity.disk_mb);
        assert_eq!(a.load.containers, 3);
    }

    #[test]
    fn a_report_goes_out_on_a_change_a_connection_a_silent_period_or_the_interval() {
        let t0 = Instant::now();
        let s = std::time::Duration::from_secs;
        let mut g = ReportGate::new(s(10));
        let mut r = NodeReport {
            node: wire::name("n1").unwrap(),
            seq: 1,
            run: 1,
            timestamp_ms: 0,
            datacenter: wire::name("dc").unwrap(),
            layer: acoa_shared::model::Layer::Edge,
            arch: wire::name("aarch64").unwrap(),
            hardware: Default::default(),
            software: Default::default(),
            capacity: NodeCapacity {
                cpu_millis: 4000,
                memory_mb: 4096,
                disk_mb: 10_000,
                net_mbps: 0,
            },
            load: NodeLoad {
                cpu_millis: 1000,
                memory_used_mb: 1000,
                net_rx_bps: 4 << 20,
                ..Default::default()
            },
            probe_addr: wire::bounded("probe_addr", "10.0.0.1:7878").unwrap(),
            position: None,
        };
        assert_eq!(g.decide(&r, t0, 1, true), Some(Send::Connected));
        // small moves, a new seq and time: nothing to say
        r.seq = 2;
        r.timestamp_ms = 1000;
        r.load.cpu_millis = 1199; // < 5 % of 4000
        r.load.memory_used_mb = 1200; // < 5 % of 4096
        r.load.net_rx_bps = (5 << 20) - 1; // 25 % of 4 MiB/s is 1 MiB/s: just under
        assert_eq!(g.decide(&r, t0 + s(1), 1, true), None);
        // drift adds up against the last report sent
        r.load.cpu_millis = 1200;
        assert_eq!(g.decide(&r, t0 + s(2), 1, true), Some(Send::Usage));
        r.load.net_rx_bps = 7 << 20;
        assert_eq!(g.decide(&r, t0 + s(3), 1, true), Some(Send::Usage));
        // a container more, a label: at once
        r.load.containers = 1;
        assert_eq!(g.decide(&r, t0 + s(4), 1, true), Some(Send::Properties));
        r.hardware.push(wire::name("gpu").unwrap()).unwrap();
        assert_eq!(g.decide(&r, t0 + s(5), 1, true), Some(Send::Properties));
        // no link metrics this period: the report is the heartbeat
        assert_eq!(g.decide(&r, t0 + s(6), 1, false), Some(Send::Heartbeat));
        // a new connection
        assert_eq!(g.decide(&r, t0 + s(7), 2, true), Some(Send::Connected));
        // nothing changes: at the latest every 10 s
        for i in 8..17 {
            assert_eq!(g.decide(&r, t0 + s(i), 2, true), None, "{i}");
        }
        assert_eq!(g.decide(&r, t0 + s(17), 2, true), Some(Send::Refresh));
        assert_eq!(g.decide(&r, t0 + s(18), 2, true), None);
    }
}
