//! The figures of a run, one row per fleet size and store.

use crate::StoreChoice;

/// One fleet size's figures.
pub struct Summary {
    pub nodes: usize,
    pub store: StoreChoice,
    /// etcd: writes per second over the window, and the database's size (bytes) when the
    /// control plane started and at the end of the window, with the seconds in between.
    pub etcd: Option<(f64, u64, u64, f64)>,
    pub window_s: f64,
    pub offered: f64,
    pub ingest: f64,
    pub cpu: f64,
    pub rss_joined_mib: f64,
    pub rss_end_mib: f64,
    pub peak_mib: f64,
    /// (minute, min MiB, max MiB) over the window.
    pub per_minute: Vec<(u64, f64, f64)>,
    pub p50: f64,
    pub p99: f64,
    pub apps: usize,
    pub unplaced: usize,
    /// Each Mosquitto's CPU (cores) over the window and peak RSS (MiB) of the 10 s samples.
    pub brokers: Vec<(f64, f64)>,
    /// Peer lists seen: how many, and their sizes (min, mean, max).
    pub lists: (usize, usize, f64, usize),
}

/// Prints the runs' table and each run's RSS per minute.
pub fn print(summaries: &[Summary]) {
    println!();
    println!(
        "| nodes | store | window | offered | ingested | CPU (cores) | RSS joined → end | peak RSS (VmHWM) | publish → desired p50 / p99 (apps) | Mosquitto CPU / peak RSS each | peer lists (min / mean / max peers) | etcd writes/s | etcd db size (start → end, s) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for s in summaries {
        let etcd = match s.etcd {
            Some((w, db0, db1, secs)) => format!(
                "{w:.1} | {:.1} → {:.1} MiB ({secs:.0} s)",
                db0 as f64 / 1048576.0,
                db1 as f64 / 1048576.0
            ),
            None => "– | –".into(),
        };
        let brokers = if s.brokers.is_empty() {
            "embedded".to_string()
        } else {
            s.brokers
                .iter()
                .map(|(c, m)| format!("{c:.2} / {m:.0} MiB"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (ln, lmin, lmean, lmax) = s.lists;
        println!(
            "| {} | {:?} | {:.0} s | {:.0} msg/s | {:.0} msg/s | {:.2} | {:.0} → {:.0} MiB | {:.0} MiB | {:.1} / {:.1} ms ({}{}) | {brokers} | {ln} lists: {lmin} / {lmean:.1} / {lmax} | {etcd} |",
            s.nodes,
            s.store,
            s.window_s,
            s.offered,
            s.ingest,
            s.cpu,
            s.rss_joined_mib,
            s.rss_end_mib,
            s.peak_mib,
            s.p50,
            s.p99,
            s.apps,
            if s.unplaced > 0 { format!(", {} not placed", s.unplaced) } else { String::new() }
        );
    }
    for s in summaries {
        let curve: Vec<String> = s
            .per_minute
            .iter()
            .map(|(m, lo, hi)| format!("min {m}: {lo:.0}-{hi:.0}"))
            .collect();
        println!(
            "RSS per minute, {} nodes (MiB): {}",
            s.nodes,
            curve.join(", ")
        );
    }
}
