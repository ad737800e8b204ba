//! Health checks end to end: the agent binary against real Podman and a real Mosquitto.
//! A command check runs through Podman's own health check, TCP and HTTP checks by the agent
//! against the container's address; a container whose check passes is reported healthy, one
//! whose check fails is reported unhealthy and restarted.
//!
//! Needs what `tests/podman.rs` needs; fails with a clear message when something is missing,
//! unless ACOA_SKIP_PODMAN=1.

mod common;

use std::process::Command;
use std::time::Duration;

use acoa_shared::topics;
use acoa_shared::wire::{
    self, ActualState, CheckSpec, ContainerSpec, ContainerState, ContainerStatus, Health,
    HealthSpec,
};
use common::*;

const WAIT: Duration = Duration::from_secs(90);
const HTTPD: &str = "localhost/acoa/test-httpd:1";

/// A check every second, each given a second. The passing ones get 10 retries: a command
/// check that Podman cannot run within its second on a loaded machine must not make them
/// unhealthy; the failing ones are unhealthy after 2.
fn with_check(name: &str, image: &str, check: CheckSpec) -> ContainerSpec {
    let mut s = spec(name, image);
    s.health = Some(Box::new(HealthSpec {
        check,
        interval_s: 1,
        timeout_s: 1,
        retries: if name.ends_with("-ok") { 10 } else { 2 },
        start_period_s: 0,
    }));
    s
}

fn cmd(args: &[&str]) -> CheckSpec {
    CheckSpec::Cmd(
        args.iter()
            .map(|a| wire::bounded("arg", a).unwrap())
            .collect(),
    )
}

fn http(path: &str) -> CheckSpec {
    CheckSpec::Http {
        port: 8080,
        path: wire::bounded("path", path).unwrap(),
    }
}

fn status<'a>(s: &'a ActualState, name: &str) -> Option<&'a ContainerStatus> {
    s.containers.iter().find(|c| c.name.as_str() == name)
}

fn podman_health(container: &str) -> String {
    run(Command::new("podman").args(["inspect", container, "--format", "{{.State.Health.Status}}"]))
        .trim()
        .to_owned()
}

#[test]
fn passing_checks_are_healthy_and_failing_ones_are_restarted() {
    // the rig stays whole: its fields drop in order (the agent killed before its containers
    // are removed); bindings destructured from it would drop the other way round, and the
    // agent, still running, restarted the failing containers after the cleanup (leftovers)
    let Some(mut rig) = rig("health", WAIT) else {
        return;
    };
    let (broker, watcher) = (&rig.broker, &rig.watcher);
    let node = rig.agent.node.clone();
    acoa_test_support::busybox_httpd_image(HTTPD);
    let key = rig.agent.public_key();

    let specs = [
        // Podman's own health check, run in the container
        with_check("app.cmd-ok", IMAGE, cmd(&["sh", "-c", "test -d /bin"])),
        with_check("app.cmd-bad", IMAGE, cmd(&["sh", "-c", "test -f /missing"])),
        // the agent's, against the container's address
        with_check("app.tcp-ok", HTTPD, CheckSpec::Tcp(8080)),
        with_check("app.tcp-bad", HTTPD, CheckSpec::Tcp(8081)),
        with_check("app.http-ok", HTTPD, http("/healthz")),
        with_check("app.http-bad", HTTPD, http("/missing")),
        // no check: no health
        spec("app.plain", IMAGE),
    ];
    let frame = desired(&node, 1, &specs, Some(&cp_key()));
    broker.publish(&topics::desired(&node), &frame, true);

    let last = || {
        watcher
            .last(&topics::actual(&node))
            .map(|p| actual(&p, &key))
    };
    wait_until("the passing checks reported healthy", WAIT, || {
        last().is_some_and(|s| {
            ["app.cmd-ok", "app.tcp-ok", "app.http-ok"].iter().all(|n| {
                status(&s, n).is_some_and(|c| {
                    c.state == ContainerState::Running && c.health == Some(Health::Healthy)
                })
            })
        })
    });
    wait_until("the failing checks restarted", WAIT, || {
        last().is_some_and(|s| {
            ["app.cmd-bad", "app.tcp-bad", "app.http-bad"]
                .iter()
                .all(|n| status(&s, n).is_some_and(|c| c.restarts >= 1))
        })
    });
    // unhealthy was reported before each restart
    let all: Vec<ActualState> = watcher
        .since(&topics::actual(&node), std::time::Instant::now() - WAIT * 2)
        .iter()
        .map(|p| actual(p, &key))
        .collect();
    for n in ["app.cmd-bad", "app.tcp-bad", "app.http-bad"] {
        assert!(
            all.iter().any(|s| status(s, n).is_some_and(
                |c| c.health == Some(Health::Unhealthy) && c.state == ContainerState::Running
            )),
            "{n} never reported unhealthy"
        );
        assert!(
            !all.iter()
                .any(|s| status(s, n).is_some_and(|c| c.health == Some(Health::Healthy))),
            "{n} reported healthy"
        );
    }
    let s = last().unwrap();
    for n in ["app.cmd-ok", "app.tcp-ok", "app.http-ok"] {
        assert_eq!(status(&s, n).unwrap().restarts, 0, "{n} restarted");
    }
    let plain = status(&s, "app.plain").unwrap();
    assert_eq!((plain.state, plain.health), (ContainerState::Running, None));

    // one log line says so, with the reason
    let logs = rig.agent.logs();
    for (n, reason) in [
        ("app.cmd-bad", "cmd sh -c test -f /missing: exited with 1"),
        ("app.tcp-bad", "tcp 8081: connect to "),
        ("app.http-bad", "http 8080/missing: GET /missing on "),
    ] {
        let line = logs
            .lines()
            .find(|l| {
                l.contains(&format!(
                    "container {n} is unhealthy (2 failed checks in a row"
                ))
            })
            .unwrap_or_else(|| panic!("no restart line for {n}:\n{logs}"));
        assert!(line.contains(reason), "{line}");
        assert!(line.contains("restarting (restart 1;"), "{line}");
    }
    assert!(logs.contains("status 404"), "{logs}");
    // Podman's own view of the command checks agrees (the agent runs them through Podman)
    assert_eq!(podman_health(&format!("acoa-{node}-app.cmd-ok")), "healthy");
    assert_ne!(
        podman_health(&format!("acoa-{node}-app.cmd-bad")),
        "healthy"
    );
    // restarted, not recreated: the same containers
    assert_eq!(ps(&node).len(), specs.len());
    assert!(rig.agent.is_running());
}
