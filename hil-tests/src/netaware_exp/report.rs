//! The run's report: `report.md`, `steps.csv`, `dynamic.csv` and the plots.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use super::*;

/// The paper's p95 reductions (network-aware against the baseline) at 10, 100, 200 ms.
pub const PAPER_REDUCTION: [(f64, f64); 3] = [(10.0, 0.39), (100.0, 0.56), (200.0, 0.66)];

/// Relative p95 reduction of `net` against `base` at every common number of users.
pub fn reductions(base: &SettingResult, net: &SettingResult) -> Vec<(usize, f64)> {
    base.steps
        .iter()
        .filter_map(|(u, b)| {
            let n = net.steps.iter().find(|(v, _)| v == u)?.1;
            (b.p95.is_finite() && n.p95.is_finite() && b.p95 > 0.0)
                .then(|| (*u, (b.p95 - n.p95) / b.p95))
        })
        .collect()
}

fn nodes_used(p: &BTreeMap<String, String>) -> String {
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for n in p.values() {
        *by.entry(n.as_str()).or_default() += 1;
    }
    by.iter()
        .map(|(n, k)| format!("{n}:{k}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Writes `report.md`, `steps.csv`, `dynamic.csv` and the plots into `dir`; returns the Markdown.
pub fn write_report(
    dir: &Path,
    plan: &Plan,
    setup: &Setup,
    results: &[SettingResult],
    dynres: Option<&DynResult>,
    log: &[String],
) -> Result<String> {
    let mut md =
        String::from("# Paper 003 in the testbed: network-aware placement and descheduler\n\n");
    let _ = writeln!(
        md,
        "Workflow m0–m12 + db1–db4 (`acoa_scheduler::netaware::sim::paper_workflow`: {} calls per request), one `na-micro` per component; control node `cp` (ingress, load generator) and workers {}; uniform one-way latency between every two nodes on the emulated network. Service time: a sleep of 2 ms (microservice) or 4 ms (database) per visit, not CPU work (2 shared cores). Request 200 B, answers 1000 B / 1400 B (database). Components run {}. Load: N virtual users on `cp`, one request per second each, {} s per step (the first 2 s of a step not counted). Placements: baseline = Kubernetes' default scoring (LeastAllocated + BalancedAllocation, network-unaware, `netaware::baseline`), network-aware = `netaware::place` (default weights), both from the simulation's node capacities and background use and the components' use at {} users, imposed with `requires.datacenter`{}. Percentiles over the successful requests; failed = no answer within 10 s, or answered after a downstream call timed out (8 s).\n",
        setup.wf.calls().iter().flatten().sum::<f64>(),
        setup.workers().join(", "),
        if plan.processes { "as processes in the node namespaces" } else { "as Podman containers started by the real agents, placed through the real control plane" },
        plan.options.step.as_secs(),
        plan.options.users.iter().max().copied().unwrap_or(0),
        if plan
            .options
            .scheds
            .iter()
            .any(|s| matches!(s, Sched::ControlPlane(_)))
        {
            "; `control plane: NAME` = the application published with `scheduler: NAME` and no pins, placed by the control plane from what the agents measure (latencies from their probers, each component's CPU, memory and traffic from Podman and the workloads' stats datagrams)"
        } else {
            ""
        }
    );
    if !results.is_empty() {
        md.push_str("## Response time per setting\n\n| latency (ms) | scheduler | nodes used (components) | cross-node calls / request | users | requests | failed | p50 (ms) | p95 (ms) | p99 (ms) |\n|---|---|---|---|---|---|---|---|---|---|\n");
        let mut csv =
            String::from("latency_ms,scheduler,users,requests,failed,p50_ms,p95_ms,p99_ms\n");
        for r in results {
            for (u, s) in &r.steps {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.0} | {u} | {} | {} | {:.1} | {:.1} | {:.1} |",
                    r.latency_ms,
                    r.sched.label(),
                    nodes_used(&r.placement),
                    r.remote_calls,
                    s.requests,
                    s.failed,
                    s.p50,
                    s.p95,
                    s.p99
                );
                let _ = writeln!(
                    csv,
                    "{},{},{u},{},{},{:.3},{:.3},{:.3}",
                    r.latency_ms,
                    r.sched.short(),
                    s.requests,
                    s.failed,
                    s.p50,
                    s.p95,
                    s.p99
                );
            }
        }
        std::fs::write(dir.join("steps.csv"), csv)?;
        md.push_str("\n## p95 reduction, network-aware against the baseline\n\n| latency (ms) | users | baseline p95 (ms) | network-aware p95 (ms) | reduction | paper |\n|---|---|---|---|---|---|\n");
        let mut bars = Vec::new();
        for &l in &plan.options.latencies {
            let find = |s: &Sched| results.iter().find(|r| r.latency_ms == l && &r.sched == s);
            let net = results
                .iter()
                .find(|r| r.latency_ms == l && r.sched != Sched::Baseline);
            if let (Some(b), Some(n)) = (find(&Sched::Baseline), net) {
                let paper = PAPER_REDUCTION
                    .iter()
                    .find(|(pl, _)| *pl == l)
                    .map(|(_, r)| format!("{:.0} %", r * 100.0))
                    .unwrap_or_else(|| "-".into());
                for (u, red) in reductions(b, n) {
                    let bp = b
                        .steps
                        .iter()
                        .find(|x| x.0 == u)
                        .map(|x| x.1.p95)
                        .unwrap_or(f64::NAN);
                    let np = n
                        .steps
                        .iter()
                        .find(|x| x.0 == u)
                        .map(|x| x.1.p95)
                        .unwrap_or(f64::NAN);
                    let _ = writeln!(
                        md,
                        "| {l} | {u} | {bp:.1} | {np:.1} | {:.0} % | {paper} |",
                        red * 100.0
                    );
                }
                if let (Some(bl), Some(nl)) = (b.steps.last(), n.steps.last()) {
                    bars.push((format!("{l} ms base"), bl.1.p95));
                    bars.push((format!("{l} ms net"), nl.1.p95));
                }
            }
        }
        if !bars.is_empty() {
            match crate::report::bars_png(
                &dir.join("p95.png"),
                &format!(
                    "p95 end-to-end at {} users",
                    plan.options.users.iter().max().copied().unwrap_or(0)
                ),
                "p95 (ms)",
                &bars,
            ) {
                Ok(()) => md.push_str("\n![p95 per setting](p95.png)\n"),
                Err(e) => {
                    let _ = writeln!(md, "\n(no plot: {e})");
                }
            }
        }
    }
    if let (Some(d), Some((dsched, dopts))) = (dynres, &plan.dynamic) {
        let placed = |p: &BTreeMap<String, String>| {
            format!(
                "{} ({:.0} cross-node calls per request)",
                nodes_used(p),
                remote_calls(setup, p)
            )
        };
        let (before, after) = (placed(&d.before), placed(&d.after));
        let _ = writeln!(
            md,
            "\n## Latencies changed while it runs: the descheduler\n\n{} users; {}; at {:.1} s every link of the node with the most components besides m0's (or m0's node when they share one) goes to {} ms. {}.\n\n- before: {}\n- after: {}\n- p95 before the change {:.1} ms; from the change to the first move (at most 10 s) {:.1} ms; in the last 10 s {:.1} ms\n\n| t (s) | event |\n|---|---|",
            dopts.users,
            match dsched {
                Sched::ControlPlane(n) => format!(
                    "placed by the control plane (`scheduler: {n}`) at {} ms everywhere",
                    dopts.latency_ms
                ),
                _ => format!(
                    "the network-aware placement at {} ms everywhere (the schedulers see the use at {} users)",
                    dopts.latency_ms,
                    plan.options.users.iter().copied().max().unwrap_or(10)
                ),
            },
            d.change_s,
            dopts.degraded_ms,
            if matches!(dsched, Sched::ControlPlane(_)) {
                "The control plane's own descheduler (`netaware::app::deschedule`, every `--deschedule-ms`) decides, on the agents' measurements".to_string()
            } else {
                "The descheduler (`netaware::desched::Descheduler`, default configuration: 20 % gain sustained 5 ticks, one move in flight) ticks every second in the harness, on the emulator's current link table and the components' modelled use; each move re-pins the component through the control plane (a re-applied definition)".to_string()
            },
            before,
            after,
            d.p95_before,
            d.p95_degraded,
            d.p95_end
        );
        let t0 = d.events.first().map(|e| e.0 - d.change_s).unwrap_or(0.0);
        for (t, e) in &d.events {
            let _ = writeln!(md, "| {:.1} | {e} |", t - t0);
        }
        let mut csv = String::from("sent_s,rt_ms,ok\n");
        for s in &d.samples {
            let _ = writeln!(
                csv,
                "{:.3},{},{}",
                s.sent_s,
                s.rt_ms.map(|x| format!("{x:.3}")).unwrap_or_default(),
                s.ok
            );
        }
        std::fs::write(dir.join("dynamic.csv"), csv)?;
        let pts: Vec<(f64, f64)> = d
            .samples
            .iter()
            .filter(|s| s.ok)
            .filter_map(|s| Some((s.sent_s, s.rt_ms?)))
            .collect();
        let end = pts.iter().map(|p| p.0).fold(0.0, f64::max);
        let mut line = Vec::new();
        let mut windows = String::from(
            "\n| window (s, by send time) | requests | failed | p50 (ms) | p95 (ms) |\n|---|---|---|---|---|\n",
        );
        let mut t = 0.0;
        while t < end {
            let w: Vec<Sample> = d
                .samples
                .iter()
                .filter(|s| s.sent_s >= t && s.sent_s < t + 5.0)
                .copied()
                .collect();
            let st = stats(&w);
            if st.p95.is_finite() {
                line.push((t + 2.5, st.p95));
            }
            let _ = writeln!(
                windows,
                "| {t:.0}–{:.0} | {} | {} | {:.1} | {:.1} |",
                t + 5.0,
                st.requests,
                st.failed,
                st.p50,
                st.p95
            );
            t += 5.0;
        }
        md.push_str(&windows);
        match crate::report::scatter_png(
            &dir.join("desched.png"),
            "successful requests' response time (dots), p95 per 5 s (red)",
            "seconds since the load started",
            "response time (ms)",
            &pts,
            false,
            &[line],
        ) {
            Ok(()) => md.push_str("\n![p95 over time](desched.png)\n"),
            Err(e) => {
                let _ = writeln!(md, "\n(no plot: {e})");
            }
        }
    }
    md.push_str("\n## Log\n\n```text\n");
    for l in log {
        md.push_str(l);
        md.push('\n');
    }
    md.push_str("```\n");
    std::fs::write(dir.join("report.md"), &md)?;
    Ok(md)
}
