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

#[test]
fn last_will_marks_a_dead_agent_offline() {
    let Some((_broker, mut agent, watcher)) = start("will") else {
        return;
    };
    let online = topics::online(&agent.node);
    wait_until("online marker", WAIT, || {
        watcher.last(&online).as_deref() == Some(&b"online"[..])
    });
    agent.kill(); // no goodbye: the broker publishes the will after the keep-alive
    wait_until("last will offline", WAIT, || {
        watcher.last(&online).as_deref() == Some(&b"offline"[..])
    });
}

#[test]
fn sigterm_publishes_offline_and_exits_cleanly() {
    let Some((_broker, mut agent, watcher)) = start("term") else {
        return;
    };
    let online = topics::online(&agent.node);
    wait_until("online marker", WAIT, || {
        watcher.last(&online).as_deref() == Some(&b"online"[..])
    });
    let pid = agent.pid().expect("running");
    run(Command::new("kill").args(["-TERM", &pid.to_string()]));
    wait_until("offline marker", Duration::from_secs(10), || {
        watcher.last(&online).as_deref() == Some(&b"offline"[..])
    });
    wait_until("the agent to exit", Duration::from_secs(10), || {
        !agent.is_running()
    });
    assert!(agent
        .logs()
        .contains("shutting down: containers keep running"));
}
