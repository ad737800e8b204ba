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
        let mut r = Reporter::new(&cfg, 4).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let a = r.report(3);
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
}
