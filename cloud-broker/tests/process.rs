//! The real control plane binary with its embedded broker, and simulated agents that are real
//! MQTT clients publishing real signed messages.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use acoa_shared::model;
use acoa_shared::topics;
use acoa_shared::wire::{self, DesiredState, Message};
use cloud_broker::status::AppStatus;
use cloud_broker::testkit::SimAgent;
use common::*;
use rumqttc::{AsyncClient, Event as MqttEvent, MqttOptions, Packet, QoS};

async fn next_desired(a: &mut SimAgent, timeout: Duration) -> Option<Box<DesiredState>> {
    tokio::time::timeout(timeout, a.desired.recv())
        .await
        .ok()
        .flatten()
}

/// The newest desired state that arrives within `timeout` (draining older ones).
async fn latest_desired(a: &mut SimAgent, timeout: Duration) -> Option<Box<DesiredState>> {
    let mut last = None;
    let t = Instant::now();
    while t.elapsed() < timeout {
        match tokio::time::timeout(Duration::from_millis(300), a.desired.recv()).await {
            Ok(Some(d)) => last = Some(d),
            _ => {
                if last.is_some() {
                    break;
                }
            }
        }
    }
    last
}

/// `status APP`, which must succeed, off the runtime's threads.
async fn status_of(data: &std::path::Path, app: &str) -> AppStatus {
    let (data, app) = (data.to_path_buf(), app.to_string());
    let out = tokio::task::spawn_blocking(move || ok(cli(&data, &["status", &app])));
    serde_json::from_str(&out.await.unwrap()).unwrap()
}

#[test]
fn railway_apps_on_the_embedded_broker_placed_moved_and_kept_across_a_restart() {
    run(async {
        let (_dir, data, cluster, creds) = railway_enrolled();
        let port = free_port();
        let mut cp = ControlPlane::start(&data, port, &[]);
        let mut agents = join_all(&cp, &cp.url, &cluster, &creds, 17000, true).await;
        // links arrive with the next reports
        tokio::time::sleep(Duration::from_millis(800)).await;

        // apply through the CLI: placed as the scheduler says on the same snapshot
        let smoke = scenario("smoke-monitoring.yaml");
        let st = cp.apply(&smoke, &["--agents-wait-s", "0"]).await;
        assert_eq!(st.state, "placed");
        let app = model::load_application(&scenario("smoke-monitoring.yaml")).unwrap();
        let acoa_scheduler::Outcome::Placed(best) =
            acoa_scheduler::place(&cluster, &app, &acoa_scheduler::Ledger::new()).unwrap()
        else {
            panic!()
        };
        let placement = st.placement.clone().unwrap();
        assert_eq!(placement, best.assignment);
        // link metrics travel as f32: the score matches to float precision
        assert!(
            (st.score.unwrap() - best.score).abs() < 1e-5,
            "{:?} vs {}",
            st.score,
            best.score
        );
        cp.wait_log_async(
            "application smoke-monitoring placed",
            Duration::from_secs(5),
        )
        .await;

        // each chosen node's agent gets its containers, signed
        let mut by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (c, n) in &placement {
            by_node
                .entry(n.clone())
                .or_default()
                .push(format!("smoke-monitoring.{c}"));
        }
        let mut generations = BTreeMap::new();
        for (n, names) in &by_node {
            let d = next_desired(agents.get_mut(n).unwrap(), Duration::from_secs(5))
                .await
                .unwrap_or_else(|| panic!("no desired state for {n}"));
            let mut got: Vec<String> = d.containers.iter().map(|c| c.name.to_string()).collect();
            got.sort();
            let mut want = names.clone();
            want.sort();
            assert_eq!(got, want);
            agents[n].report_running(d.generation, &want).await;
            generations.insert(n.clone(), d.generation);
        }
        cp.wait_log_async(
            "application smoke-monitoring running",
            Duration::from_secs(5),
        )
        .await;
        let st = status_of(&data, "smoke-monitoring").await;
        assert_eq!(st.state, "running");

        // kill the agent of the storage node: last will → lost → its components move
        let lost = placement["storage"].clone();
        agents.remove(&lost).unwrap().kill();
        cp.wait_log_async(&format!("node {lost} lost"), Duration::from_secs(10))
            .await;
        cp.wait_log_async(
            "application smoke-monitoring re-placed (node",
            Duration::from_secs(10),
        )
        .await;
        let st = status_of(&data, "smoke-monitoring").await;
        let after = st.placement.clone().unwrap();
        assert_ne!(after["storage"], lost);
        for (c, n) in &placement {
            if *n != lost {
                assert_eq!(after[c], *n, "{c} should not move");
            }
        }
        let newn = after["storage"].clone();
        let d = latest_desired(agents.get_mut(&newn).unwrap(), Duration::from_secs(5))
            .await
            .expect("the new node gets the storage component");
        assert!(d
            .containers
            .iter()
            .any(|c| c.component.as_str() == "storage"));
        generations.insert(newn.clone(), d.generation);
        let names: Vec<String> = d.containers.iter().map(|c| c.name.to_string()).collect();
        agents[&newn].report_running(d.generation, &names).await;

        // restart the control plane (and so its embedded broker): nothing lost, no newer
        // generation for anyone: agents have nothing to restart
        let placed_before = after.clone();
        cp.kill();
        let mut cp = ControlPlane::start(&data, port, &[]);
        cp.wait_log_async("started with 1 applications", Duration::from_secs(10))
            .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        for (n, a) in agents.iter_mut() {
            while let Ok(d) = a.desired.try_recv() {
                let before = generations.get(n).copied().unwrap_or(0);
                assert_eq!(
                    d.generation, before,
                    "node {n} got generation {} after the restart (had {before})",
                    d.generation
                );
            }
        }
        let st = status_of(&data, "smoke-monitoring").await;
        assert_eq!(st.placement.unwrap(), placed_before);
        assert!(cp.alive());

        // delete: every node's containers stop
        let out = cli_async(&data, &["delete", "smoke-monitoring"]).await;
        assert!(out.status.success());
        let d = latest_desired(agents.get_mut(&newn).unwrap(), Duration::from_secs(5))
            .await
            .unwrap();
        assert!(d.containers.is_empty());
        cp.wait_log_async(
            "application smoke-monitoring deleted",
            Duration::from_secs(5),
        )
        .await;
    });
}

#[test]
fn the_control_plane_with_its_embedded_broker_runs_without_transparent_huge_pages() {
    // its allocator asks for them; the embedded broker's sparse per-connection buffers would
    // each hold a 2 MiB page (BENCHMARKS.md, "Huge pages")
    let dir = tempfile::tempdir().unwrap();
    let cp = ControlPlane::start(dir.path(), free_port(), &[]);
    assert_eq!(cp.huge_pages(), Some(false));
}

#[test]
fn wrong_credentials_are_refused_by_the_embedded_broker() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let (_k, pw, _cp) = enroll(dir.path(), "n1");
        let port = free_port();
        let cp = ControlPlane::start(dir.path(), port, &[]);
        for (user, pass, ok) in [
            ("n1", "wrong", false),
            ("nobody", "x", false),
            ("n1", pw.as_str(), true),
        ] {
            let mut o = MqttOptions::new(format!("t-{user}-{ok}"), "127.0.0.1", port);
            o.set_credentials(user, pass);
            let r = connects(o).await;
            assert_eq!(r, ok, "{user}/{pass}");
        }
        cp.wait_log_async("broker refused client", Duration::from_secs(2))
            .await;
        // anonymous: refused too
        let o = MqttOptions::new("anon", "127.0.0.1", port);
        let r = connects(o).await;
        assert!(!r, "anonymous clients are refused");
    });
}

/// A broker closes a client id's session when another connection takes that id: a node that
/// could connect as `acoa-control-plane-apps` would throw the control plane off its own broker
/// as often as it likes. The system's client ids are reserved for their logins.
#[test]
fn a_node_cannot_take_the_control_planes_or_another_agents_client_id() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let (_k, pw, _cp) = enroll(dir.path(), "n1");
        enroll(dir.path(), "n2");
        let port = free_port();
        let cp = ControlPlane::start(dir.path(), port, &[]);
        cp.wait_log_async("connected to the broker", Duration::from_secs(10))
            .await;
        for (id, ok) in [
            ("acoa-control-plane", false),
            ("acoa-control-plane-apps", false),
            ("acoa-control-plane-lists", false),
            ("acoa-cli-1", false),
            ("acoa-agent-n2", false),
            ("acoa-agent-n1", true),
        ] {
            let mut o = MqttOptions::new(id, "127.0.0.1", port);
            o.set_credentials("n1", pw.as_str());
            assert_eq!(connects(o).await, ok, "n1 as {id}");
        }
        cp.wait_log_async(
            "broker refused client `acoa-control-plane-apps`: `n1` may not connect as `acoa-control-plane-apps`",
            Duration::from_secs(2),
        )
        .await;
        assert_eq!(
            cp.count_log("broker connection"),
            0,
            "a connection of the control plane was closed"
        );
    });
}

#[test]
fn a_node_cannot_speak_for_another_nor_command_it_on_the_embedded_broker() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        let (k1, pw1, cpk) = enroll(data, "n1");
        let (k2, pw2, _) = enroll(data, "n2");
        let port = free_port();
        let cp = ControlPlane::start(data, port, &[]);
        let (node1, node2) = (railway_node(0, "n1"), railway_node(1, "n2"));
        // n1 only listens (its reporter ticks once at start: let it, then check n2's forgeries)
        let a1 = quiet_agent(&cp.url, node1.clone(), (k1.clone(), pw1, cpk), true);
        let a2 = quiet_agent(&cp.url, node2.clone(), (k2.clone(), pw2, cpk), true);
        cp.wait_log_async("node n2 joined", Duration::from_secs(10))
            .await;
        cp.wait_log_async("node n1 joined", Duration::from_secs(10))
            .await;
        let joined_n1 = cp.count_log("node n1 joined");

        // a report in n1's name signed with n2's key, on n1's topic (the broker lets only n1's
        // login publish there, tests/broker_rules.rs: it goes through n1's connection)
        let forged = report_frame(&node1, 99, "6.6.6.6:1", Some(&k2));
        a1.publish_raw(&topics::report("n1"), forged.clone(), false)
            .await;
        cp.wait_log_async(
            "node report on node `n1`'s topic dropped: signature does not verify",
            Duration::from_secs(5),
        )
        .await;
        // ... and on its own topic, naming n1
        a2.publish_raw(&topics::report("n2"), forged, false).await;
        cp.wait_log_async(
            "node report on node `n2`'s topic names node `n1`: dropped",
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(cp.count_log("node n1 joined"), joined_n1);
        assert!(!cp.has_log("6.6.6.6"));

        // a desired state for n1 signed with n2's key (only the control plane and the admin may
        // publish there: it goes through the admin's login): n1 refuses it
        let o = admin_options(data, "forger", port);
        let (forger, mut el) = AsyncClient::new(o, 16);
        tokio::spawn(async move { while el.poll().await.is_ok() {} });
        let mut d = DesiredState {
            node: wire::name("n1").unwrap(),
            generation: 1_000_000,
            term: 0,
            containers: Default::default(),
        };
        d.generation += 1;
        let fake = wire::encode(&Message::DesiredState(Box::new(d)), Some(&k2)).unwrap();
        let fake_desired = forger.publish(topics::desired("n1"), QoS::AtLeastOnce, true, fake);
        fake_desired.await.unwrap();
        let t = Instant::now();
        while a1.refused.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "n1 saw no forged desired state"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut a1 = a1;
        assert!(
            a1.desired.try_recv().is_err(),
            "nothing forged was accepted"
        );
    });
}

#[test]
fn bad_input_gets_its_error_and_the_control_plane_keeps_serving() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_path_buf();
        let (k1, _pw1, _) = enroll(&data, "n1");
        let port = free_port();
        let mut cp = ControlPlane::start(&data, port, &[]);
        // the node telemetry below is published once: only once the control plane has
        // subscribed to it (it starts after that; "connected" is the connection's acceptance)
        cp.wait_log_async("started with", Duration::from_secs(10))
            .await;
        let o = admin_options(&data, "bad-input", port);
        let (c, mut el) = AsyncClient::new(o, 64);
        let statuses =
            std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::<String, AppStatus>::new()));
        let s2 = statuses.clone();
        tokio::spawn(async move {
            while let Ok(ev) = el.poll().await {
                if let MqttEvent::Incoming(Packet::Publish(p)) = ev {
                    if let Ok(st) = serde_json::from_slice::<AppStatus>(&p.payload) {
                        s2.lock().unwrap().insert(st.application.clone(), st);
                    }
                }
            }
        });
        c.subscribe("acoa/v1/apps/+/status", QoS::AtLeastOnce)
            .await
            .unwrap();
        let node = model::load_cluster(&scenario("cluster.yaml"))
            .unwrap()
            .nodes[0]
            .clone();
        let pubs: Vec<(String, Vec<u8>)> = vec![
            (
                topics::app("bad-yaml"),
                b"application: bad-yaml\ncomponents: [ {name: x".to_vec(),
            ),
            (
                topics::app("no-components"),
                b"application: no-components\ncomponents: []\n".to_vec(),
            ),
            (topics::app("binary"), vec![0x00, 0xff, 0x13, 0x37]),
            (
                topics::app("mismatch"),
                b"application: other\ncomponents: [{name: a, image: i}]\n".to_vec(),
            ),
            (topics::report("n1"), vec![0xde, 0xad, 0xbe, 0xef]),
            (topics::report("n1"), report_frame(&node, 1, "x", None)),
            (
                topics::report("ghost"),
                report_frame(&node, 1, "x", Some(&k1)),
            ),
            // not a topic the control plane subscribes to (`topics::NODES_TELEMETRY`): it never
            // reaches it (ingest's "not an acoa/v1 topic" is tested in ingest's unit tests)
            ("acoa/v1/nodes/n1/whatever".into(), b"??".to_vec()),
            (topics::online("n1"), b"perhaps".to_vec()),
            (topics::links("n1"), vec![1, 0, 0]),
        ];
        for (t, p) in pubs {
            c.publish(t, QoS::AtLeastOnce, false, p).await.unwrap();
        }
        let t = Instant::now();
        while statuses.lock().unwrap().len() < 4 {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "{:?}\n{}",
                statuses.lock().unwrap(),
                cp.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let st = statuses.lock().unwrap().clone();
        for (app, why) in [
            ("bad-yaml", "invalid yaml"),
            (
                "no-components",
                "components: an application needs at least one component",
            ),
            ("binary", "not UTF-8"),
            ("mismatch", "differs from the topic's name `mismatch`"),
        ] {
            assert_eq!(st[app].state, "rejected", "{app}");
            assert!(
                st[app].reason.as_deref().unwrap().contains(why),
                "{app}: {:?}",
                st[app].reason
            );
            cp.wait_log_async(
                &format!("application {app} rejected"),
                Duration::from_secs(2),
            )
            .await;
        }
        for line in [
            "node report on node `n1`'s topic dropped: message does not decode",
            "node report on node `n1`'s topic dropped: message is not signed",
            "node report for unknown node `ghost`",
            "online marker of node `n1` is not a signed presence",
            "link metrics on node `n1`'s topic dropped",
        ] {
            cp.wait_log_async(line, Duration::from_secs(5)).await;
        }
        assert!(cp.alive());
        // still serving: the CLI gets the statuses
        let out = cli_async(&data, &["status"]).await;
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 4);
        // a bad file through the CLI names the file and field, publishes nothing
        let bad = data.join("bad.yaml");
        std::fs::write(&bad, "application: x\ncomponents:\n- {name: a}\n").unwrap();
        let out = cli(&data, &["apply", bad.to_str().unwrap()]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("bad.yaml") && err.contains("image"), "{err}");
    });
}

#[test]
fn node_inventory_commands() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = cli(d, &["node", "add", "n7"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("[broker]\n"), "{text}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("set-key"));
    assert!(!cli(d, &["node", "add", "n7"]).status.success());
    assert!(!cli(d, &["node", "set-key", "n7", "not-hex"])
        .status
        .success());
    let k = ed25519_dalek::SigningKey::from_bytes(&[3; 32]).verifying_key();
    let hex = wire::keys::public_hex(&k);
    assert!(cli(d, &["node", "set-key", "n7", &hex]).status.success());
    let list = String::from_utf8(cli(d, &["node", "list"]).stdout).unwrap();
    assert!(list.contains(&format!("n7\t{hex}")), "{list}");
    assert!(cli(d, &["node", "remove", "n7"]).status.success());
    assert!(!cli(d, &["node", "remove", "n7"]).status.success());
    let list = String::from_utf8(cli(d, &["node", "list"]).stdout).unwrap();
    assert!(list.is_empty());
}

#[test]
fn a_node_removed_from_the_inventory_is_lost_and_its_login_refused() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_path_buf();
        let (k1, pw1, cpk) = enroll(&data, "n1");
        let port = free_port();
        let cp = ControlPlane::start(&data, port, &[]);
        let _a = start_n1(&cp, &cp.url, (k1, pw1.clone(), cpk), false).await;
        let out = cli_async(&data, &["node", "remove", "n1"]).await;
        assert!(out.status.success());
        cp.wait_log_async(
            "node n1 lost (removed from the inventory)",
            Duration::from_secs(5),
        )
        .await;
        // its open connection may publish nothing any more
        cp.wait_log_async("`n1` is not a login any more", Duration::from_secs(5))
            .await;
        let mut o = MqttOptions::new("n1-again", "127.0.0.1", port);
        o.set_credentials("n1", &pw1);
        let ok = connects(o).await;
        assert!(!ok, "a removed node's login is refused");
    });
}

#[test]
fn the_control_plane_hears_its_loopback_back_through_the_embedded_broker() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    enroll(data, "n1");
    let port = free_port();
    let cp = ControlPlane::start(data, port, &["--stats-every-ms", "1000"]);
    // a loopback a second goes out and comes back through the broker, the subscription and an
    // ingest task (the broker's rules let the control plane, and only it, use the topic)
    let back = wait_for("two loopbacks back", Duration::from_secs(20), || {
        cp.log_text()
            .lines()
            .filter_map(|l| l.split("loopback: ").nth(1))
            .filter_map(|r| r.split(' ').next()?.parse::<u64>().ok())
            .find(|n| *n >= 2)
    });
    assert!(back >= 2);
    assert!(
        !cp.has_log("loopback on `"),
        "a loopback dropped as malformed"
    );
}
