//! The workload stats datagram across both sides: the `Reporter` every workload program sends
//! with (hil-tests/src/stats.rs, included by path as acoa-workload and na-micro include it) sends
//! over a real UDP socket to the agent's decoder and traffic table (v2: the container's name and
//! its service time too).

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use acoa_shared::wire;
use edge_agent::stats::Table;

#[allow(dead_code)]
#[path = "../../hil-tests/src/stats.rs"]
mod reporter;

/// One datagram from `r`, as the agent's stats socket receives it.
fn send_and_receive(r: &mut reporter::Reporter, agent: &UdpSocket) -> Vec<u8> {
    r.flush();
    let mut buf = [0u8; 4096];
    let n = agent.recv(&mut buf).expect("the reporter's datagram");
    buf[..n].to_vec()
}

#[test]
fn every_downstream_component_a_workload_counts_reaches_the_agent() {
    for n in 1..=16usize {
        let agent = UdpSocket::bind("127.0.0.1:0").unwrap();
        agent
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut r = reporter::Reporter::new(agent.local_addr().unwrap(), "app", "src");
        let mut table = Table::new();
        table.set_desired([("app.src", "app", "src")]);
        let t0 = Instant::now();
        for k in 0..n {
            r.record(&format!("d{k}"), 10);
        }
        let first = send_and_receive(&mut r, &agent);
        table
            .receive(&first, t0)
            .unwrap_or_else(|e| panic!("{n} downstream components: {e}"));
        for k in 0..n {
            for _ in 0..=k {
                r.record(&format!("d{k}"), 100);
            }
        }
        let second = send_and_receive(&mut r, &agent);
        let t1 = t0 + Duration::from_secs(1);
        table
            .receive(&second, t1)
            .unwrap_or_else(|e| panic!("{n} downstream components: {e}"));
        let rates = table.rates("app.src", "app", "src", t1);
        assert_eq!(rates.len(), n, "{n} downstream components");
        for (k, s) in rates.iter().enumerate() {
            assert_eq!(s.to.as_str(), format!("d{k}"));
            assert_eq!(s.bytes_per_s, 100.0 * (k + 1) as f32, "d{k} of {n}");
            assert_eq!(s.messages_per_s, (k + 1) as f32, "d{k} of {n}");
        }
    }
    // One bound on both sides.
    assert_eq!(reporter::MAX_DOWNSTREAM, wire::MAX_DOWNSTREAM);
}

#[test]
fn a_workloads_service_time_reaches_the_agent_as_its_containers_own() {
    let agent = UdpSocket::bind("127.0.0.1:0").unwrap();
    agent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let addr = agent.local_addr().unwrap();
    // the old copy app.src and the new copy app.src.r2, side by side
    let mut old = reporter::Reporter::new(addr, "app", "src").in_container(Some("app.src".into()));
    let mut new =
        reporter::Reporter::new(addr, "app", "src").in_container(Some("app.src.r2".into()));
    let mut table = Table::new();
    table.set_desired([("app.src", "app", "src"), ("app.src.r2", "app", "src")]);
    for _ in 0..4 {
        old.record_service(Duration::from_micros(500));
        new.record_service(Duration::from_millis(60));
    }
    let t0 = Instant::now();
    for r in [&mut old, &mut new] {
        let d = send_and_receive(r, &agent);
        table.receive(&d, t0).unwrap();
    }
    let old_s = table.service("app.src", "app", "src", t0).unwrap();
    let new_s = table.service("app.src.r2", "app", "src", t0).unwrap();
    assert_eq!((old_s.mean_ms, old_s.messages), (0.5, 4));
    assert_eq!((new_s.mean_ms, new_s.messages), (60.0, 4));
    assert_eq!(reporter::VERSION, edge_agent::stats::VERSION);
}
