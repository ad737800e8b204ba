//! The control plane and an agent on two brokers: two real Mosquitto instances with the generated
//! password file and ACL, the control plane connected to both, a real edge agent with both URLs
//! running an application's container with real Podman. Mosquitto A, the agent's, is killed:
//! the agent moves to B within the backoff, keeps its container (same id), the control plane
//! keeps the node online and a new application reaches it through B; A comes back and gets the
//! retained desired state again.
//!
//! Needs `mosquitto` and `mosquitto_passwd` (Debian: mosquitto), the `edge-agent` binary and the
//! Podman REST socket (ACOA_SKIP_PODMAN=1 skips it), busybox-static for the image.

mod common;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use acoa_shared::topics;
use acoa_shared::wire::{self, Message};
use acoa_test_support::{busybox_images, remove_containers_labelled, sh, PODMAN_SOCKET};
use cloud_broker::status::AppStatus;
use common::*;
use rumqttc::{AsyncClient, Event as MqttEvent, MqttOptions, Packet, QoS};

const IMAGE: &str = "localhost/acoa/brokers-test:1";

/// Enrolls `name` with the key of the agent whose state directory is `state` (`edge-agent
/// pubkey`) on the brokers `url`; returns the agent's `[broker]` section.
fn enroll_agent(agent: &Path, state: &Path, data: &Path, name: &str, url: &str) -> String {
    let pk = sh(Command::new(agent)
        .args(["pubkey", "--state-dir"])
        .arg(state));
    let out = cli(
        data,
        &[
            "node",
            "add",
            name,
            "--public-key",
            pk.trim(),
            "--broker-url",
            url,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Starts the agent binary `agent` on `config`, its log in `log`.
fn spawn_agent(agent: &Path, config: &Path, log: &Path) -> Child {
    Command::new(agent)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// The agent process, killed on drop; its containers are removed on drop too.
struct Agent {
    child: Child,
    node: String,
    log: std::path::PathBuf,
}

impl Agent {
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn wait_log(&self, s: &str, timeout: Duration) -> Duration {
        let t = Instant::now();
        while !self.log_text().contains(s) {
            assert!(
                t.elapsed() < timeout,
                "agent log line `{s}` did not come within {timeout:?}:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        t.elapsed()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_containers_labelled("acoa.node", &self.node);
    }
}

/// A process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The id of the running container of `app` on `node`, if there is one.
fn container_id(node: &str, app: &str) -> Option<String> {
    let out = sh(Command::new("podman").args([
        "ps",
        "--filter",
        &format!("label=acoa.node={node}"),
        "--filter",
        &format!("label=acoa.app={app}"),
        "--filter",
        "status=running",
        "--format",
        "{{.ID}}",
    ]));
    out.split_whitespace().next().map(str::to_string)
}

/// `apply FILE` through the CLI (the endpoint lists both brokers); the application must run.
async fn apply_running(data: &Path, file: &Path, cp: &ControlPlane) -> AppStatus {
    let out = spawn_apply(data, file, &["--wait-s", "15", "--agents-wait-s", "20"])
        .await
        .unwrap();
    let st: Option<AppStatus> = serde_json::from_slice(&out.stdout).ok();
    assert!(
        out.status.success() && st.as_ref().is_some_and(|s| s.state == "running"),
        "{st:?}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        cp.log_text()
    );
    st.unwrap()
}

/// The generation of the document retained on `topic` (a node's desired state or its peer
/// list) of the Mosquitto whose fleet listener is on `port`, read with the admin's login on its
/// control plane's listener (a second connection with the node's login would take its agent's
/// session: the fleet's listener names each client after its login).
async fn retained_generation_on(data: &Path, port: u16, topic: String) -> Option<u64> {
    let mut o = admin_options(data, "reader", port + 1);
    o.set_max_packet_size(1 << 20, 1 << 20);
    let (c, mut el) = AsyncClient::new(o, 8);
    let read = async {
        loop {
            match el.poll().await {
                Ok(MqttEvent::Incoming(Packet::ConnAck(_))) => {
                    c.subscribe(topic.as_str(), QoS::AtLeastOnce).await.unwrap();
                }
                Ok(MqttEvent::Incoming(Packet::Publish(p))) => {
                    return match wire::decode_unverified(&p.payload) {
                        Ok(Message::DesiredState(d)) => Some(d.generation),
                        Ok(Message::PeerList(l)) => Some(l.generation),
                        _ => None,
                    };
                }
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(3), read)
        .await
        .ok()
        .flatten()
}

async fn retained_generation(data: &Path, port: u16, node: &str) -> Option<u64> {
    retained_generation_on(data, port, topics::desired(node)).await
}

/// The generation of `node`'s peer list retained on the broker on `port`.
async fn retained_peers(data: &Path, port: u16, node: &str) -> Option<u64> {
    retained_generation_on(data, port, topics::peers(node)).await
}

#[test]
fn an_agent_moves_to_the_other_broker_keeps_its_containers_and_stays_reachable() {
    let Some(mosquitto) = mosquitto() else {
        return;
    };
    let Some(bin) = agent_bin_with_podman() else {
        return;
    };
    busybox_images(&[IMAGE]);
    run(async move {
        let dir = tempdir_for_mosquitto();
        let data = dir.path().join("data");
        let (port_a, port_b) = (free_port_pair(), free_port_pair());
        let (url_a, url_b) = (
            format!("mqtt://127.0.0.1:{port_a}"),
            format!("mqtt://127.0.0.1:{port_b}"),
        );
        let both = format!("{url_a},{url_b}");

        // the node enrolled first: the password file both brokers get holds its login
        let node = format!("br{}", std::process::id() % 100_000);
        remove_containers_labelled("acoa.node", &node);
        let state = dir.path().join("agent-state");
        let broker = enroll_agent(&bin, &state, &data, &node, &both);
        assert!(
            broker.contains(&format!("urls = [\"{url_a}\", \"{url_b}\"]")),
            "{broker}"
        );
        let twin = enroll(&data, "twin");
        let (dir_a, dir_b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&dir_a).unwrap();
        std::fs::create_dir_all(&dir_b).unwrap();
        let (m_a, _) = start_mosquitto(&mosquitto, &dir_a, &data, port_a, false).await;
        let (_m_b, acl) = start_mosquitto(&mosquitto, &dir_b, &data, port_b, false).await;
        assert!(acl.contains(&format!("user {node}\n")));

        // the control plane on both brokers' own listeners
        let both_cp = format!("{},{}", control_url(port_a), control_url(port_b));
        let cp = ControlPlane::start(&data, free_port(), &["--broker-url", &both_cp]);
        assert!(cp.has_log(&both_cp), "{}", cp.log_text());

        // the same signed reports through both brokers (as bridged brokers would carry them):
        // each is taken once, the copies are dropped without a warning each
        let mut model = acoa_shared::model::load_cluster(&scenario("cluster.yaml"))
            .unwrap()
            .nodes[0]
            .clone();
        model.name = "twin".into();
        let mut clients = Vec::new();
        for port in [port_a, port_b] {
            let mut o = MqttOptions::new(format!("twin-{port}"), "127.0.0.1", port);
            o.set_credentials("twin", &twin.1);
            let (c, mut el) = AsyncClient::new(o, 64);
            tokio::spawn(async move { while el.poll().await.is_ok() {} });
            clients.push(c);
        }
        for seq in 1..=5 {
            let r = Message::NodeReport(Box::new(cloud_broker::testkit::report_of(
                &model,
                seq,
                "127.0.0.1:1",
            )));
            let frame = wire::encode(&r, Some(&twin.0)).unwrap();
            for c in &clients {
                c.publish(
                    topics::report("twin"),
                    QoS::AtLeastOnce,
                    false,
                    frame.clone(),
                )
                .await
                .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        cp.wait_log_async("node twin joined", Duration::from_secs(10))
            .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(cp.count_log("node twin joined"), 1, "{}", cp.log_text());
        assert!(!cp.has_log("dropped as a replay"), "{}", cp.log_text());
        drop(clients);

        // the agent, on A first
        let config = dir.path().join("agent.toml");
        std::fs::write(
            &config,
            format!(
                "node = \"{node}\"\ndatacenter = \"cloud1\"\nlayer = \"cloud\"\narch = \"x86_64\"\nstate_dir = \"{}\"\nreport_period_ms = 300\nimage_allowlist = [\"localhost/acoa/\"]\n[capacity]\ncpu_millis = 4000\nmemory_mb = 4096\ndisk_mb = 10000\n{broker}[probe]\nlisten = \"127.0.0.1:{}\"\n[podman]\nsocket = \"unix://{PODMAN_SOCKET}\"\n[stats]\nlisten = \"127.0.0.1:0\"\n",
                state.display(),
                free_port()
            ),
        )
        .unwrap();
        let log = dir.path().join("agent.log");
        let agent = Agent {
            child: spawn_agent(&bin, &config, &log),
            node: node.clone(),
            log,
        };
        agent
            .wait_log(
                &format!("connected to broker 127.0.0.1:{port_a}"),
                Duration::from_secs(20),
            )
            .await;
        cp.wait_log_async(&format!("node {node} joined"), Duration::from_secs(10))
            .await;

        // an application's container runs on it
        let first = write_pinned(dir.path(), "first", "", IMAGE, &node, 1, "");
        apply_running(&data, &first, &cp).await;
        let id = container_id(&node, "first").expect("the first application's container");

        // A is killed: the agent moves to B within the backoff
        let cp_lines = cp.log_text().lines().count();
        drop(m_a);
        let moved = agent
            .wait_log(
                &format!("on broker 127.0.0.1:{port_b}"),
                Duration::from_secs(5),
            )
            .await;
        eprintln!("the agent was on broker B {moved:?} after A was killed");
        assert!(
            agent
                .log_text()
                .contains(&format!("moving to broker 127.0.0.1:{port_b}")),
            "{}",
            agent.log_text()
        );
        // reports flow through B: the node stays online past the node time-out (2 s)
        tokio::time::sleep(Duration::from_secs(3)).await;
        let since: String = cp
            .log_text()
            .lines()
            .skip(cp_lines)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(!since.contains(&format!("node {node} lost")), "{since}");

        // a new application reaches it through B; the first one's container was left alone
        let second = write_pinned(dir.path(), "second", "", IMAGE, &node, 1, "");
        let st = apply_running(&data, &second, &cp).await;
        assert_eq!(st.placement.unwrap()["c0"], node);
        assert!(container_id(&node, "second").is_some());
        assert_eq!(
            container_id(&node, "first"),
            Some(id),
            "the container was replaced"
        );

        // A comes back (with its database): it is given the retained documents again, the
        // newest desired state among them
        let generation_b = retained_generation(&data, port_b, &node)
            .await
            .expect("B holds the desired state");
        // the peer lists leave through a queue of their own per broker (`latest`): B holds
        // the agent's too
        let peers_b = retained_peers(&data, port_b, &node)
            .await
            .expect("B holds the agent's peer list");
        let conf = dir_a.join("mosquitto/mosquitto.conf");
        let mlog = std::fs::File::create(dir_a.join("mosquitto-2.log")).unwrap();
        let _m_a = Killed(
            Command::new(&mosquitto)
                .arg("-c")
                .arg(&conf)
                .stdout(std::process::Stdio::null())
                .stderr(mlog)
                .spawn()
                .unwrap(),
        );
        wait_mosquitto(port_a).await;
        cp.wait_log_async(
            &format!("reconnected to the broker {}", control_url(port_a)),
            Duration::from_secs(10),
        )
        .await;
        let t = Instant::now();
        loop {
            let g = retained_generation(&data, port_a, &node).await;
            let p = retained_peers(&data, port_a, &node).await;
            if g == Some(generation_b) && p >= Some(peers_b) {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "A holds {g:?} and peer list {p:?}, B {generation_b} and {peers_b}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // copies and drops are not warned about one by one
        let log = cp.log_text();
        assert!(!log.contains("dropped as a replay"), "{log}");
        assert!(!agent.log_text().contains("panicked"));
    });
}
