//! Per-component usage with real Podman and a real Mosquitto: a workload container
//! (`acoa-workload`, built here with plain rustc as hil-tests/images.sh does) counts what it
//! sends and reports it to the agent's stats socket (ACOA_AGENT_STATS, injected by the agent);
//! the agent publishes signed usage messages with the container's CPU, memory and traffic rate.
//!
//! Needs what tests/podman.rs needs, plus `rustc` (the workspace's toolchain) and `tar`.
//! The container is on Podman's default bridge: the agent listens on 0.0.0.0 and tells the
//! container the bridge's gateway. ACOA_SKIP_PODMAN=1 skips it.

mod common;

use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

use acoa_shared::topics;
use acoa_shared::wire::{self, ComponentUsage, EnvVar, Message};
use common::*;

const WAIT: Duration = Duration::from_secs(60);
const PROBE: &str = "listen = \"127.0.0.1:0\"\nperiod_ms = 500";
const WORKLOAD: &str = "localhost/acoa/measure-usage-test:1";

/// The workload image, from the current source.
fn ensure_workload_image() {
    acoa_test_support::workload_image(WORKLOAD, &[]);
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: wire::bounded("env", name).unwrap(),
        value: wire::bounded("env", value).unwrap(),
    }
}

fn usage(p: &[u8], key: &ed25519_dalek::VerifyingKey) -> ComponentUsage {
    match wire::decode_verified(p, key).expect("a usage message signed by the node") {
        Message::ComponentUsage(u) => *u,
        other => panic!("expected component usage, got {}", other.kind()),
    }
}

#[test]
fn workload_traffic_cpu_and_memory_are_reported() {
    if skip_or_require("usage", true) {
        return;
    }
    require_bin("rustc", "the workspace's Rust toolchain");
    ensure_workload_image();
    let node = node_name("usage");
    remove_all(&node);
    let _cleanup = Cleanup(node.clone());
    let dir = scratch_dir("usage");
    let broker = Broker::start(&dir);
    let watcher = Watcher::new(
        &broker.host,
        broker.port,
        &format!("acoa/v1/nodes/{node}/+"),
    );
    let stats_port = free_port();
    let mut agent = Agent::new(
        &node,
        &dir,
        &broker.url(),
        &format!("[stats]\nlisten = \"0.0.0.0:{stats_port}\""),
        PROBE,
    );
    agent.start();
    let key = agent.public_key();
    agent.wait_log("connected to broker", WAIT);
    agent.wait_log(
        &format!(
            "workload stats on udp 0.0.0.0:{stats_port}; containers are told ACOA_AGENT_STATS="
        ),
        WAIT,
    );

    let mut src = spec("app.src", WORKLOAD);
    src.env.push(env("ACOA_RATE_HZ", "20")).unwrap();
    // where the messages go does not matter here: they are counted when sent
    src.env
        .push(env("ACOA_OUT", "to-sink@127.0.0.1:9"))
        .unwrap();
    let sink = spec("app.sink", WORKLOAD);
    broker.publish(
        &topics::desired(&node),
        &desired(&node, 1, &[src, sink], Some(&cp_key())),
        true,
    );
    wait_until("both containers to run", WAIT, || {
        running_names(&node).len() == 2
    });
    let envs = run(Command::new("podman").args([
        "inspect",
        &format!("acoa-{node}-app.src"),
        "--format",
        "{{json .Config.Env}}",
    ]));
    for e in [
        "ACOA_APP=app".to_string(),
        "ACOA_COMPONENT=src".to_string(),
        "ACOA_CONTAINER=app.src".to_string(),
        format!(":{stats_port}\""),
    ] {
        assert!(envs.contains(&e), "{e} missing in {envs}");
    }

    // 20 messages/s of about 30 bytes on channel to-sink; CPU and memory from Podman.
    let topic = topics::usage(&node);
    wait_until("a usage message with the workload's traffic", WAIT, || {
        watcher.last(&topic).is_some_and(|p| {
            let u = usage(&p, &key);
            let Some(s) = u.components.iter().find(|c| c.component.as_str() == "src") else {
                return false;
            };
            s.traffic.iter().any(|t| {
                t.to.as_str() == "to-sink"
                    && t.messages_per_s > 5.0
                    && t.messages_per_s < 40.0
                    && t.bytes_per_s > 100.0
            }) && s.cpu_millis.is_some()
                && s.memory_mb.is_some_and(|m| m > 0.0)
        })
    });
    let u = usage(&watcher.last(&topic).unwrap(), &key);
    assert_eq!(u.node.as_str(), node);
    let sink = u
        .components
        .iter()
        .find(|c| c.component.as_str() == "sink")
        .expect("every desired container is in the message");
    assert!(sink.traffic.is_empty(), "the sink sends nothing");

    // Garbage on the stats socket: dropped with a line, the agent carries on.
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.send_to(b"garbage", ("127.0.0.1", stats_port)).unwrap();
    agent.wait_log("stats datagram dropped", WAIT);
    assert!(agent.is_running());

    // Nothing desired any more: one last message without components.
    broker.publish(
        &topics::desired(&node),
        &desired(&node, 2, &[], Some(&cp_key())),
        true,
    );
    wait_until("an empty usage message", WAIT, || {
        watcher
            .last(&topic)
            .is_some_and(|p| usage(&p, &key).components.is_empty())
    });
}
