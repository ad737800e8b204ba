//! Experiment 1: measurement fidelity. For every directed pair of nodes, what was measured
//! against what the emulator was told, with the testbed's fidelity goal: measured latency within 5 % (or
//! 0.1 ms, whichever is larger) of the emulated value.
//!
//! A round-trip prober (the reference prober here, the agent's too) sees, for the pair A -> B,
//! half the round trip: `(latency(A->B) + latency(B->A)) / 2`, and the round-trip success
//! `success(A->B) * success(B->A)`. That is what measurements are compared with ("expected");
//! the one-way table values are listed beside.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use acoa_shared::model::Link;
use serde::Serialize;

use crate::emu::{EmuError, Testbed};
use crate::probe::{self, EchoServer};

#[derive(Clone, Debug, Serialize)]
pub struct PairRow {
    pub from: String,
    pub to: String,
    /// One-way latency of from -> to in the link table.
    pub table_latency_ms: f64,
    /// What a round-trip prober should see: half the sum of both directions.
    pub expected_latency_ms: f64,
    pub measured_latency_ms: f64,
    /// Round-trip success: success(from -> to) * success(to -> from).
    pub expected_success: f64,
    pub measured_success: f64,
    pub samples: usize,
}

impl PairRow {
    pub fn latency_error_ms(&self) -> f64 {
        self.measured_latency_ms - self.expected_latency_ms
    }
    pub fn tolerance_ms(&self) -> f64 {
        (0.05 * self.expected_latency_ms).max(0.1)
    }
    pub fn latency_ok(&self) -> bool {
        self.latency_error_ms().abs() <= self.tolerance_ms()
    }
    pub fn success_error(&self) -> f64 {
        self.measured_success - self.expected_success
    }
}

/// `(from, to) -> link` of a link table.
pub fn link_map(links: &[Link]) -> HashMap<(String, String), Link> {
    links
        .iter()
        .map(|l| ((l.from.clone(), l.to.clone()), l.clone()))
        .collect()
}

/// The expected row of a pair (measured fields zero).
pub fn expected(map: &HashMap<(String, String), Link>, from: &str, to: &str) -> PairRow {
    let get = |a: &str, b: &str| map.get(&(a.to_string(), b.to_string()));
    let (lab, sab) = get(from, to).map_or((0.0, 1.0), |l| (l.latency_ms, l.success));
    let (lba, sba) = get(to, from).map_or((0.0, 1.0), |l| (l.latency_ms, l.success));
    PairRow {
        from: from.into(),
        to: to.into(),
        table_latency_ms: lab,
        expected_latency_ms: (lab + lba) / 2.0,
        measured_latency_ms: f64::NAN,
        expected_success: sab * sba,
        measured_success: f64::NAN,
        samples: 0,
    }
}

/// The expected row of a pair for a one-way prober (synchronized clocks): the table's own
/// latency and success of `from -> to`.
pub fn expected_one_way(map: &HashMap<(String, String), Link>, from: &str, to: &str) -> PairRow {
    let mut row = expected(map, from, to);
    row.expected_latency_ms = row.table_latency_ms;
    row.expected_success = map
        .get(&(from.to_string(), to.to_string()))
        .map_or(1.0, |l| l.success);
    row
}

pub const ECHO_PORT: u16 = 9000;

/// Measures every directed pair of `nodes` with the reference UDP echo prober: `probes` probes
/// per pair, one every `interval`, all pairs at once. Latency: median round trip / 2.
pub fn reference(
    tb: &Testbed,
    nodes: &[String],
    links: &[Link],
    probes: usize,
    interval: Duration,
) -> Result<Vec<PairRow>, EmuError> {
    let map = link_map(links);
    let mut echoes = Vec::new();
    for n in nodes {
        echoes.push(EchoServer::start(tb.udp_socket(n, ECHO_PORT)?)?);
    }
    let mut jobs = Vec::new();
    for a in nodes {
        for b in nodes {
            if a == b {
                continue;
            }
            let sock: UdpSocket = tb.udp_socket(a, 0)?;
            let dst = SocketAddr::new(tb.addr(b)?.into(), ECHO_PORT);
            let row = expected(&map, a, b);
            jobs.push(std::thread::spawn(move || {
                crate::forwarder::tune_thread(true, "prober");
                let r = probe::measure_here(&sock, dst, probes, interval, Duration::from_secs(1));
                (row, r)
            }));
        }
    }
    let mut rows = Vec::new();
    for j in jobs {
        let (mut row, r) = j
            .join()
            .map_err(|_| std::io::Error::other("prober thread panicked"))?;
        let r = r?;
        row.measured_latency_ms = r.median() / 2.0;
        row.measured_success = r.success();
        row.samples = r.rtts_ms.len();
        rows.push(row);
    }
    drop(echoes);
    Ok(rows)
}

/// Summary figures of a set of rows.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub pairs: usize,
    /// Pairs with a measurement (an agent may not have reported some).
    pub measured: usize,
    pub latency_within_goal: usize,
    pub max_abs_latency_error_ms: f64,
    pub mean_abs_latency_error_ms: f64,
    pub mean_latency_error_ms: f64,
    pub max_abs_success_error: f64,
    pub mean_abs_success_error: f64,
}

pub fn summarize(rows: &[PairRow]) -> Summary {
    let valid: Vec<&PairRow> = rows
        .iter()
        .filter(|r| r.measured_latency_ms.is_finite())
        .collect();
    let n = valid.len().max(1) as f64;
    Summary {
        pairs: rows.len(),
        measured: valid.len(),
        latency_within_goal: valid.iter().filter(|r| r.latency_ok()).count(),
        max_abs_latency_error_ms: valid
            .iter()
            .map(|r| r.latency_error_ms().abs())
            .fold(0.0, f64::max),
        mean_abs_latency_error_ms: valid
            .iter()
            .map(|r| r.latency_error_ms().abs())
            .sum::<f64>()
            / n,
        mean_latency_error_ms: valid.iter().map(|r| r.latency_error_ms()).sum::<f64>() / n,
        max_abs_success_error: valid
            .iter()
            .filter(|r| r.measured_success.is_finite())
            .map(|r| r.success_error().abs())
            .fold(0.0, f64::max),
        mean_abs_success_error: valid
            .iter()
            .filter(|r| r.measured_success.is_finite())
            .map(|r| r.success_error().abs())
            .sum::<f64>()
            / n,
    }
}
