//! The workload stats datagram across both sides: the `Reporter` every workload program sends
//! with (hil-tests/src/stats.rs, included by path as acoa-workload and na-micro include it) sends
//! over a real UDP socket to the agent's decoder and traffic table.

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
        table.set_desired([("app", "src")]);
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
        let rates = table.rates("app", "src", t1);
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
