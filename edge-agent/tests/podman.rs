//! The agent binary against real Podman (REST socket) and a real Mosquitto.
//!
//! Needs: podman + runc configured (see shared/notes/machine.md), the Podman service on
//! /run/podman/podman.sock, mosquitto and mosquitto-clients, busybox-static. Each test
//! fails with a clear message when one is missing, unless ACOA_SKIP_PODMAN=1.

mod common;

use std::time::{Duration, Instant};

use acoa_shared::topics;
use acoa_shared::wire::{ContainerSpec, ContainerState};
use common::*;

const WAIT: Duration = Duration::from_secs(60);
impl Rig {
    /// Publishes the desired state `generation` of `specs`, signed and retained, for the
    /// rig's node.
    fn publish_desired(&self, generation: u64, specs: &[ContainerSpec]) {
        let node = &self.agent.node;
        let frame = desired(node, generation, specs, Some(&cp_key()));
        self.broker.publish(&topics::desired(node), &frame, true);
    }

    /// Publishes app.a and app.b at `generation` and waits until both run; returns them as
    /// `podman ps` shows them.
    fn two_running(&self, generation: u64) -> Vec<Ps> {
        let node = &self.agent.node;
        let (a, b) = (spec("app.a", IMAGE), spec("app.b", IMAGE));
        self.publish_desired(generation, &[a, b]);
        wait_until("both to run", WAIT, || running_names(node).len() == 2);
        ps(node)
    }
}

fn cname(node: &str, spec: &str) -> String {
    format!("acoa-{node}-{spec}")
}

#[test]
fn desired_containers_run_are_removed_and_restarted() {
    let Some(mut r) = rig("life", WAIT) else {
        return;
    };
    let node = r.agent.node.clone();
    let key = r.agent.public_key();
    let a = spec("app.a", IMAGE);
    let b = spec("app.b", IMAGE);
    r.publish_desired(1, &[a.clone(), b.clone()]);
    wait_until("both containers to run", WAIT, || {
        running_names(&node) == [cname(&node, "app.a"), cname(&node, "app.b")]
    });
    // Labels as the contract says.
    let labels = run(std::process::Command::new("podman").args([
        "inspect",
        &cname(&node, "app.a"),
        "--format",
        "{{json .Config.Labels}}",
    ]));
    for l in [
        "\"acoa.managed\":\"true\"",
        &format!("\"acoa.node\":\"{node}\""),
        "\"acoa.app\":\"app\"",
        "\"acoa.component\":\"a\"",
        "\"acoa.generation\":\"1\"",
    ] {
        assert!(labels.contains(l), "{l} missing in {labels}");
    }
    // The actual state reports both running, signed by the node key.
    wait_until("actual state: both running", WAIT, || {
        r.watcher.last(&topics::actual(&node)).is_some_and(|p| {
            let s = actual(&p, &key);
            s.generation == 1
                && s.containers.len() == 2
                && s.containers
                    .iter()
                    .all(|c| c.state == ContainerState::Running)
        })
    });
    assert!(
        r.watcher.count(&topics::report(&node)) > 0,
        "node reports arrive"
    );
    assert_eq!(
        r.watcher
            .last(&topics::online(&node))
            .and_then(|p| presence(&p)),
        Some(true)
    );

    // Killed by hand: restarted.
    let before = ps(&node);
    run(std::process::Command::new("podman").args(["kill", &cname(&node, "app.b")]));
    r.agent.wait_log("container app.b exited", WAIT);
    wait_until("app.b running again", WAIT, || {
        running_names(&node).contains(&cname(&node, "app.b"))
    });
    let ids = |v: &[Ps]| {
        v.iter()
            .map(|p| (p.name.clone(), p.id.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(&before),
        ids(&ps(&node)),
        "same containers (restarted, not recreated)"
    );
    wait_until("actual state: restart counted", WAIT, || {
        r.watcher.last(&topics::actual(&node)).is_some_and(|p| {
            actual(&p, &key).containers.iter().any(|c| {
                c.name.as_str() == "app.b" && c.restarts >= 1 && c.state == ContainerState::Running
            })
        })
    });

    // A new generation without app.b: removed; app.a kept as it is.
    let id_a = ps(&node)[0].id.clone();
    r.publish_desired(2, std::slice::from_ref(&a));
    wait_until("app.b removed", WAIT, || {
        ps(&node).iter().map(|p| p.name.clone()).collect::<Vec<_>>() == [cname(&node, "app.a")]
    });
    assert_eq!(ps(&node)[0].id, id_a, "app.a not recreated");
    assert!(r.agent.is_running());
}

#[test]
fn untrusted_desired_states_change_nothing() {
    let Some(mut r) = rig("trust", WAIT) else {
        return;
    };
    let node = r.agent.node.clone();
    let a = spec("app.a", IMAGE);
    r.publish_desired(5, std::slice::from_ref(&a));
    wait_until("app.a to run", WAIT, || {
        running_names(&node) == [cname(&node, "app.a")]
    });
    let before = ps(&node);
    let b = spec("app.b", IMAGE);
    let intruder = ed25519_dalek::SigningKey::from_bytes(&[13; 32]);
    let attempts: Vec<(Vec<u8>, &str)> = vec![
        (
            // this build's version byte, then garbage
            [
                &[acoa_shared::wire::VERSION as u8][..],
                b"\xff\xff\xff\xffgarbage",
            ]
            .concat(),
            "message does not decode",
        ),
        (
            b"\x01\xff\xff\xff\xffgarbage".to_vec(),
            "message of version 1, before the agents' run counter",
        ),
        (
            desired(&node, 6, std::slice::from_ref(&b), None),
            "refused desired state: message is not signed",
        ),
        (
            desired(&node, 7, std::slice::from_ref(&b), Some(&intruder)),
            "refused desired state: signature does not verify",
        ),
        (
            desired(&node, 4, std::slice::from_ref(&b), Some(&cp_key())),
            "refused desired state generation 4: not newer than applied generation 5",
        ),
        (
            desired("someone-else", 8, std::slice::from_ref(&b), Some(&cp_key())),
            "it is for node \"someone-else\"",
        ),
        (
            vec![0u8; 70_000],
            "(70000 bytes): unknown message version 0",
        ),
    ];
    for (payload, line) in attempts {
        r.broker.publish(&topics::desired(&node), &payload, true);
        r.agent.wait_log(line, WAIT);
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(ps(&node), before, "nothing changed");
    assert!(r.agent.is_running(), "the agent is still up");
    // And a valid newer one still works.
    r.publish_desired(9, &[a, b]);
    wait_until("app.b to run", WAIT, || running_names(&node).len() == 2);
}

#[test]
fn image_outside_allowlist_is_refused_and_reported() {
    let Some(r) = rig("allow", WAIT) else { return };
    let node = r.agent.node.clone();
    let key = r.agent.public_key();
    let bad = spec("app.bad", "docker.io/library/busybox:latest");
    let good = spec("app.good", IMAGE);
    // Allowed, but no such image here (no registry either): a failure, reported.
    let missing = spec("app.missing", "localhost/acoa/does-not-exist:1");
    r.publish_desired(1, &[bad, good, missing]);
    r.agent.wait_log("refused container app.bad: image docker.io/library/busybox:latest is outside the allowlist", WAIT);
    wait_until("actual state: bad refused, good running", WAIT, || {
        r.watcher.last(&topics::actual(&node)).is_some_and(|p| {
            let s = actual(&p, &key);
            s.containers.iter().any(|c| {
                c.name.as_str() == "app.bad"
                    && c.state == ContainerState::Refused
                    && c.error.contains("allowlist")
            }) && s
                .containers
                .iter()
                .any(|c| c.name.as_str() == "app.good" && c.state == ContainerState::Running)
        })
    });
    wait_until("actual state: missing image failed", WAIT, || {
        r.watcher.last(&topics::actual(&node)).is_some_and(|p| {
            actual(&p, &key).containers.iter().any(|c| {
                c.name.as_str() == "app.missing"
                    && c.state == ContainerState::Failed
                    && c.error.starts_with("create failed")
            })
        })
    });
    assert_eq!(running_names(&node), [cname(&node, "app.good")]);
    assert!(r
        .agent
        .logs()
        .contains("container app.missing: create failed"));
}

#[test]
fn broker_outage_leaves_containers_alone_and_agent_reconnects() {
    let Some(mut r) = rig("outage", WAIT) else {
        return;
    };
    let node = r.agent.node.clone();
    let before = r.two_running(1);
    r.broker.stop();
    r.agent.wait_log("broker connection lost", WAIT);
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(ps(&node), before, "containers untouched during the outage");
    assert!(r.agent.is_running());
    r.broker.restart();
    let back = Instant::now();
    r.agent.wait_log("broker connection back", WAIT);
    wait_until("reports after the outage", WAIT, || {
        !r.watcher.since(&topics::report(&node), back).is_empty()
    });
    wait_until("online marker after the outage", WAIT, || {
        r.watcher
            .since(&topics::online(&node), back)
            .last()
            .is_some_and(|p| presence(p) == Some(true))
    });
    assert_eq!(ps(&node), before, "containers untouched after reconnecting");
}

#[test]
fn restart_with_broker_down_restores_containers_from_disk() {
    let Some(mut r) = rig("restore", WAIT) else {
        return;
    };
    let node = r.agent.node.clone();
    let before = r.two_running(3);
    // Power cut: the agent dies, the broker is gone, one container is lost too.
    r.agent.kill();
    r.broker.stop();
    run(std::process::Command::new("podman").args(["rm", "-f", "-t", "0", &cname(&node, "app.b")]));
    r.agent.start();
    r.agent
        .wait_log("restored desired state generation 3 (2 containers)", WAIT);
    wait_until("app.b restored", WAIT, || running_names(&node).len() == 2);
    let after = ps(&node);
    assert_eq!(after[0].id, before[0].id, "app.a, already right, is kept");
    assert_ne!(after[1].id, before[1].id, "app.b was recreated");
    // The broker comes back: nothing is recreated.
    r.broker.restart();
    // the agent's first attempt may come after the broker is back (it restores containers
    // first): then its log says "connected to broker", else "broker connection back"
    wait_until("the agent connected again", WAIT, || {
        let log = r.agent.logs();
        let run2 = &log[log.rfind("agent run 2").unwrap_or(0)..];
        run2.contains("connected to broker") || run2.contains("broker connection back")
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(ps(&node), after);
}

#[test]
fn containers_join_the_configured_network_namespace() {
    if skip_or_require("netns", true) {
        return;
    }
    require_bin("ip", "apt-get install -y iproute2");
    let node = node_name("netns");
    remove_all(&node);
    let _cleanup = Cleanup(node.clone());
    let ns = format!("acoa-nj{}", std::process::id() % 100_000);
    let _ = std::process::Command::new("ip")
        .args(["netns", "del", &ns])
        .output();
    run(std::process::Command::new("ip").args(["netns", "add", &ns]));
    struct DelNs(String);
    impl Drop for DelNs {
        fn drop(&mut self) {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", &self.0])
                .output();
        }
    }
    let _del = DelNs(ns.clone());
    run(std::process::Command::new("ip").args([
        "-n",
        &ns,
        "link",
        "add",
        "acoatest0",
        "type",
        "veth",
        "peer",
        "name",
        "acoatest1",
    ]));
    let dir = scratch_dir("netns");
    let broker = Broker::start(&dir);
    let mut agent = Agent::new(&node, &dir, &broker.url(), "", PROBE);
    let mut cmd = std::process::Command::new(agent_bin());
    cmd.args(["--netns", &format!("/run/netns/{ns}")]);
    agent.start_with(cmd);
    agent.wait_log("connected to broker", WAIT);
    broker.publish(
        &topics::desired(&node),
        &desired(&node, 1, &[spec("app.a", IMAGE)], Some(&cp_key())),
        true,
    );
    let c = cname(&node, "app.a");
    wait_until("app.a to run", WAIT, || running_names(&node) == [c.clone()]);
    let mode = run(std::process::Command::new("podman").args([
        "inspect",
        &c,
        "--format",
        "{{.HostConfig.NetworkMode}}",
    ]));
    assert_eq!(mode.trim(), format!("ns:/run/netns/{ns}"));
    let dev = run(std::process::Command::new("podman").args([
        "exec",
        &c,
        "/bin/busybox",
        "cat",
        "/proc/net/dev",
    ]));
    assert!(
        dev.contains("acoatest0"),
        "the container sees the namespace's interface: {dev}"
    );
}

#[test]
fn a_burst_of_desired_states_ends_on_the_newest() {
    // Desired states arrive faster than containers start: the reconciler must end on the
    // newest one (a queue that dropped the newest frames when full left the node on an old
    // state until the next reconnect; seen in the testbed).
    let Some(r) = rig("burst", WAIT) else { return };
    let node = r.agent.node.clone();
    // one MQTT session publishes all of them back to back
    let opts = rumqttc::MqttOptions::new("burst-publisher", &r.broker.host, r.broker.port);
    let (client, mut conn) = rumqttc::Client::new(opts, 32);
    for g in 1..=20u64 {
        let s = spec(&format!("app.c{g}"), IMAGE);
        client
            .publish(
                topics::desired(&node),
                rumqttc::QoS::AtLeastOnce,
                false,
                desired(&node, g, &[s], Some(&cp_key())),
            )
            .unwrap();
    }
    let mut acked = 0;
    for ev in conn.iter() {
        match ev {
            Ok(rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_))) => {
                acked += 1;
                if acked == 20 {
                    break;
                }
            }
            Ok(_) => {}
            Err(e) => panic!("burst publisher: {e}"),
        }
    }
    wait_until("the newest desired state runs", WAIT, || {
        running_names(&node) == [cname(&node, "app.c20")]
    });
    assert!(!r.agent.logs().contains("dropped a desired-state frame"));
}

/// The `online` of a signed presence frame (wire v3), `None` if it is not one.
fn presence(payload: &[u8]) -> Option<bool> {
    match acoa_shared::wire::decode_unverified(payload).ok()? {
        acoa_shared::wire::Message::Presence(p) => Some(p.online),
        _ => None,
    }
}
