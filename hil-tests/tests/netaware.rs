//! CI-sized paper 003 in the testbed: the m0–m12 + db1–db4 workflow as real `na-micro`
//! processes in the namespaces of `cp`, `w1`..`w5` on the emulated network (20 ms one way between
//! any two nodes), the load generator on `cp`. Fails when the network-aware placement's p95 is not
//! clearly below the network-unaware baseline's, or when the descheduler does not move m0 off a
//! node whose links degrade. No control plane or Podman here (the full run, `hil netaware` via
//! `hil-tests/run-netaware.sh`, goes through them). Needs root and /dev/net/tun.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use common::skip;
use hil_tests::emu::Testbed;
use hil_tests::netaware_exp::{Bench, DynOptions, Launch, Options, Sched, Setup};

#[test]
fn network_aware_beats_the_baseline_and_the_descheduler_moves() {
    if skip() {
        return;
    }
    let setup = Setup::paper(5).unwrap();
    let names: Vec<&str> = setup.nodes.iter().map(|s| s.as_str()).collect();
    let tb = Testbed::builder()
        .subnet("10.84.0.0/16".parse().unwrap())
        .host(true)
        .up(&names, &[])
        .unwrap();
    let logdir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hil-results/netaware-ci");
    let launch = Launch::Processes {
        bin: PathBuf::from(env!("CARGO_BIN_EXE_na-micro")),
        procs: BTreeMap::new(),
        logdir: logdir.clone(),
    };
    let mut b = Bench::new(&tb, setup, launch).unwrap();
    let o = Options {
        latencies: vec![20.0],
        users: vec![5],
        step: Duration::from_secs(6),
        scheds: vec![Sched::Baseline, Sched::NetAware],
        plan_users: 5.0,
        timeout: Duration::from_secs(60),
    };
    let base = b.setting(20.0, &Sched::Baseline, &o).unwrap();
    let net = b.setting(20.0, &Sched::NetAware, &o).unwrap();
    println!("baseline {base:?}\nnetwork-aware {net:?}");
    let (bs, ns) = (base.steps[0].1, net.steps[0].1);
    // 5 users for 4 counted seconds: about 20 requests each
    assert!(bs.answered >= 10 && ns.answered >= 10, "{bs:?} {ns:?}");
    assert!(
        net.remote_calls < base.remote_calls,
        "network-aware placement crosses nodes as often: {net:?} {base:?}"
    );
    // at least one 20 ms round trip less on the way of the slowest requests
    assert!(
        ns.p95 + 40.0 < bs.p95,
        "network-aware p95 {:.1} ms not clearly below the baseline's {:.1} ms",
        ns.p95,
        bs.p95
    );

    // the schedulers see the use of 40 users (the application spreads over three nodes); every
    // link of the node with the most components besides m0's goes 10 -> 150 ms while the load
    // runs: the descheduler moves them away
    let d = b
        .deschedule(
            &DynOptions {
                latency_ms: 10.0,
                degraded_ms: 150.0,
                users: 5,
                plan_users: 40.0,
                before: Duration::from_secs(5),
                after: Duration::from_secs(35),
                tick: Some(Duration::from_secs(1)),
                timeout: Duration::from_secs(60),
            },
            &Sched::NetAware,
        )
        .unwrap();
    println!("{:#?}", d.events);
    println!(
        "p95 before {:.1} ms, degraded {:.1} ms, end {:.1} ms",
        d.p95_before, d.p95_degraded, d.p95_end
    );
    let on = |p: &BTreeMap<String, String>| p.values().filter(|n| **n == d.degraded).count();
    assert!(
        on(&d.after) < on(&d.before),
        "nothing moved off the degraded node {}: {:?}",
        d.degraded,
        d.events
    );
    assert!(
        d.p95_end < d.p95_degraded,
        "p95 did not recover: {d:?}",
        d = (d.p95_before, d.p95_degraded, d.p95_end)
    );
    drop(b);
    drop(tb);
}
