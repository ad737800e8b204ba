//! The MQTT session against a real Mosquitto: online marker, last will, clean shutdown.

mod common;

use std::process::Command;
use std::time::Duration;

use acoa_shared::topics;
use common::*;

const WAIT: Duration = Duration::from_secs(40);

fn start(tag: &str) -> Option<(Broker, Agent, Watcher)> {
    if skip_or_require(tag, false) {
        return None;
    }
    let dir = scratch_dir(tag);
    let broker = Broker::start(&dir);
    let node = node_name(tag);
    let watcher = Watcher::new(
        &broker.host,
        broker.port,
        &format!("acoa/v1/nodes/{node}/+"),
    );
    let mut agent = Agent::new(&node, &dir, &broker.url(), "", "listen = \"127.0.0.1:0\"");
    let mut cmd = Command::new(agent_bin());
    cmd.args(["--podman-socket", "unix:///nonexistent/podman.sock"]);
    agent.start_with(cmd);
    Some((broker, agent, watcher))
}

/// The `online` of a signed presence frame (wire v3), `None` if it is not one.
fn presence(payload: &[u8]) -> Option<bool> {
    match acoa_shared::wire::decode_unverified(payload).ok()? {
        acoa_shared::wire::Message::Presence(p) => Some(p.online),
        _ => None,
    }
}

#[test]
fn last_will_marks_a_dead_agent_offline() {
    let Some((_broker, mut agent, watcher)) = start("will") else {
        return;
    };
    let online = topics::online(&agent.node);
    wait_until("online marker", WAIT, || {
        watcher.last(&online).and_then(|p| presence(&p)) == Some(true)
    });
    agent.kill(); // no goodbye: the broker publishes the will after the keep-alive
    wait_until("last will offline", WAIT, || {
        watcher.last(&online).and_then(|p| presence(&p)) == Some(false)
    });
}

#[test]
fn sigterm_publishes_offline_and_exits_cleanly() {
    let Some((_broker, mut agent, watcher)) = start("term") else {
        return;
    };
    let online = topics::online(&agent.node);
    wait_until("online marker", WAIT, || {
        watcher.last(&online).and_then(|p| presence(&p)) == Some(true)
    });
    let pid = agent.pid().expect("running");
    run(Command::new("kill").args(["-TERM", &pid.to_string()]));
    wait_until("offline marker", Duration::from_secs(10), || {
        watcher.last(&online).and_then(|p| presence(&p)) == Some(false)
    });
    wait_until("the agent to exit", Duration::from_secs(10), || {
        !agent.is_running()
    });
    assert!(agent
        .logs()
        .contains("shutting down: containers keep running"));
}

/// Every start of the agent on the same state directory numbers its signed messages in a
/// greater run, so `(run, seq)` keeps increasing across restarts (seq starts over at 1).
#[test]
fn a_restarted_agent_signs_its_messages_in_a_new_run() {
    let Some((_broker, mut agent, watcher)) = start("run") else {
        return;
    };
    let report = topics::report(&agent.node);
    let key = agent.public_key();
    let report_of = |p: &[u8]| match acoa_shared::wire::decode_verified(p, &key) {
        Ok(acoa_shared::wire::Message::NodeReport(r)) => (r.run, r.seq),
        other => panic!("expected a node report, got {other:?}"),
    };
    wait_until("a report", WAIT, || watcher.last(&report).is_some());
    let first = report_of(&watcher.last(&report).unwrap());
    assert_eq!(first.0, 1, "the first start is run 1");
    agent.kill();
    let restarted = std::time::Instant::now();
    let mut cmd = Command::new(agent_bin());
    cmd.args(["--podman-socket", "unix:///nonexistent/podman.sock"]);
    agent.start_with(cmd);
    wait_until("a report of the new start", WAIT, || {
        !watcher.since(&report, restarted).is_empty()
    });
    let later = watcher.since(&report, restarted);
    let second = report_of(later.last().unwrap());
    assert_eq!(second.0, 2, "{first:?} then {second:?}");
    assert!(second > first);
    assert!(agent.logs().contains("agent run 2"));
}
