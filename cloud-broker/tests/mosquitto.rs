//! The control plane on an external Mosquitto configured by `cloud-broker mosquitto-config`:
//! the whole flow works through it, and the broker itself refuses what the ACL forbids.
//! Needs the `mosquitto` and `mosquitto_passwd` binaries (Debian: apt-get install mosquitto).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use acoa_shared::topics;
use acoa_shared::wire::{self, DesiredState, Message};
use common::*;
use rumqttc::{AsyncClient, Event as MqttEvent, MqttOptions, Packet, QoS};

#[test]
fn mosquitto_with_the_generated_acl_refuses_foreign_topics() {
    let Some(mosquitto) = mosquitto() else {
        return;
    };
    run(async move {
        let dir = tempdir_for_mosquitto();
        let data = dir.path().join("data");
        let (k1, pw1, cpk) = enroll(&data, "n1");
        let (k2, pw2, _) = enroll(&data, "n2");
        let port = free_port_pair();
        let (_m, acl) = start_mosquitto(&mosquitto, dir.path(), &data, port, true).await;
        assert!(acl.contains("user n1\ntopic write acoa/v1/nodes/n1/report"));
        assert!(!acl.contains("topic write acoa/v1/nodes/n1/desired"));
        // each listener has the grants of its own logins only
        assert!(!acl.contains("user acoa-control-plane"));
        let acl_control =
            std::fs::read_to_string(dir.path().join("mosquitto/acl-control")).unwrap();
        assert!(acl_control.contains("user acoa-control-plane\ntopic readwrite acoa/#\n"));
        assert!(acl_control.contains("user acoa-admin\n"));
        assert!(!acl_control.contains("user n1"));
        let url = format!("mqtt://127.0.0.1:{port}");
        let cp = ControlPlane::start(
            &data,
            free_port(),
            &[
                "--broker-url",
                &control_url(port),
                "--stats-every-ms",
                "1000",
            ],
        );
        // no embedded broker: huge pages are off all the same (at 50,000 nodes they held a
        // quarter of the RSS: BENCHMARKS.md, "The heap and the RSS at 50,000 nodes")
        assert_eq!(cp.huge_pages(), Some(false));

        let (n1, n2) = (railway_node(0, "n1"), railway_node(1, "n2"));
        let mut a1 = quiet_agent(&url, n1.clone(), (k1.clone(), pw1, cpk), true);
        let a2 = quiet_agent(&url, n2.clone(), (k2.clone(), pw2.clone(), cpk), true);
        cp.wait_log_async("node n1 joined", Duration::from_secs(10))
            .await;
        cp.wait_log_async("node n2 joined", Duration::from_secs(10))
            .await;

        // the flow works through Mosquitto: apply, placed, the agent gets its desired state
        let app = dir.path().join("tiny.yaml");
        std::fs::write(
            &app,
            "application: tiny\ncomponents:\n- name: one\n  image: localhost/acoa/one:1\n  requires: {layer: cloud}\n",
        )
        .unwrap();
        let st = cp
            .apply(&app, &["--wait-s", "10", "--agents-wait-s", "0"])
            .await;
        let node = st.placement.unwrap()["one"].clone();
        assert!(node == "n1" || node == "n2");

        // an eavesdropper with n2's login subscribes to n1's desired state: nothing comes. A
        // login has one connection on the fleet's listener (named after the login, a second one
        // takes the first one's session): n2's agent goes, the attacker takes its place
        a2.kill();
        let seen = Arc::new(AtomicU64::new(0));
        let mut o = MqttOptions::new("n2-eavesdrop", "127.0.0.1", port);
        o.set_credentials("n2", &pw2);
        let (spy, mut el) = AsyncClient::new(o, 16);
        let s2 = seen.clone();
        tokio::spawn(async move {
            while let Ok(ev) = el.poll().await {
                // its own node's topics it may read; anything else is a leak
                if let MqttEvent::Incoming(Packet::Publish(p)) = ev {
                    if !p.topic.starts_with("acoa/v1/nodes/n2/") {
                        eprintln!("leaked to n2: {}", p.topic);
                        s2.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        });
        spy.subscribe(topics::desired("n1"), QoS::AtLeastOnce)
            .await
            .unwrap();
        spy.subscribe(topics::NODES_WILDCARD, QoS::AtLeastOnce)
            .await
            .unwrap();
        spy.subscribe(topics::loopback(0), QoS::AtLeastOnce)
            .await
            .unwrap();

        // n2 tries to speak for n1 and to command n1: the broker drops both
        let forged = report_frame(&n1, 5, "6.6.6.6:1", Some(&k2));
        let raw = |topic: String, payload: Vec<u8>, retain: bool| {
            let spy = spy.clone();
            async move {
                spy.publish(topic, QoS::AtLeastOnce, retain, payload)
                    .await
                    .unwrap()
            }
        };
        raw(topics::report("n1"), forged, false).await;
        let fake = DesiredState {
            node: wire::name("n1").unwrap(),
            generation: 999_999,
            term: 0,
            containers: Default::default(),
        };
        let fake = wire::encode(&Message::DesiredState(Box::new(fake)), Some(&k2)).unwrap();
        raw(topics::desired("n1"), fake, true).await;
        // ... and to make the control plane's loopback look late or on time
        raw(topics::loopback(0), vec![1; 17], false).await;
        raw(topics::loopback(0), vec![0xde], false).await;
        // positive control: the same kind of garbage on n2's own topic does reach the control plane
        raw(topics::report("n2"), vec![0xde, 0xad], false).await;
        cp.wait_log_async(
            "node report on node `n2`'s topic dropped",
            Duration::from_secs(5),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            !cp.has_log("node report on node `n1`'s topic dropped"),
            "the broker let n2 publish on n1's topic"
        );
        assert!(!cp.has_log("6.6.6.6"));
        assert!(
            !cp.has_log("loopback on `"),
            "the broker let n2 publish a loopback"
        );
        // the control plane's own loopback does come back through Mosquitto
        wait_for("two loopbacks back", Duration::from_secs(20), || {
            cp.log_text()
                .lines()
                .filter_map(|l| l.split("loopback: ").nth(1))
                .filter_map(|r| r.split(' ').next()?.parse::<u64>().ok())
                .find(|n| *n >= 2)
        });
        assert_eq!(
            a1.refused.load(Ordering::SeqCst),
            0,
            "n1 never saw the forged desired state"
        );
        while let Ok(d) = a1.desired.try_recv() {
            assert!(d.generation < 999_999);
        }
        assert_eq!(
            seen.load(Ordering::SeqCst),
            0,
            "n2 could read n1's or others' topics"
        );
        let mlog = std::fs::read_to_string(dir.path().join("mosquitto.log")).unwrap();
        assert!(mlog.contains("Denied PUBLISH from n2 "), "{mlog}");

        // wrong password: refused by Mosquitto
        let mut o = MqttOptions::new("intruder", "127.0.0.1", port);
        o.set_credentials("n1", "wrong");
        let ok = connects(o).await;
        assert!(!ok);
    });
}

/// A broker closes a client id's session when another connection takes that id. Mosquitto's
/// ACL cannot reserve ids for logins, so the generated configuration has two listeners: the
/// fleet's names every client after its login, the control plane's takes only the control
/// plane's and the admin's logins. A node's login can take neither the control plane's client
/// ids (which would throw it off its broker, again and again) nor another agent's.
#[test]
fn on_mosquitto_a_node_cannot_take_the_control_planes_or_another_agents_client_id() {
    let Some(mosquitto) = mosquitto() else {
        return;
    };
    run(async move {
        let dir = tempdir_for_mosquitto();
        let data = dir.path().join("data");
        let (_k1, pw1, _) = enroll(&data, "n1");
        let (k2, pw2, cpk) = enroll(&data, "n2");
        let port = free_port_pair();
        let (_m, _) = start_mosquitto(&mosquitto, dir.path(), &data, port, false).await;
        let url = format!("mqtt://127.0.0.1:{port}");
        let cp = ControlPlane::start(&data, free_port(), &["--broker-url", &control_url(port)]);
        let a2 = quiet_agent(&url, railway_node(1, "n2"), (k2, pw2, cpk), true);
        cp.wait_log_async("node n2 joined", Duration::from_secs(10))
            .await;
        let n2_connections = a2.connacks.load(Ordering::SeqCst);
        // the fleet's listener takes n1's login under any client id, as `n1`
        for id in [
            "acoa-control-plane",
            "acoa-control-plane-apps",
            "acoa-control-plane-lists",
            "acoa-control-plane-sched",
            "acoa-cli-1",
            "acoa-agent-n2",
            "sim-n2",
        ] {
            let mut o = MqttOptions::new(id, "127.0.0.1", port);
            o.set_credentials("n1", pw1.as_str());
            assert!(connects(o).await, "n1 as {id}");
        }
        // one connection per login: a second one takes the first one's session (so one login
        // cannot hold the broker's connections either)
        let mut o = MqttOptions::new("n1-first", "127.0.0.1", port);
        o.set_credentials("n1", pw1.as_str());
        let first = tokio::spawn(async move {
            let (_c, mut el) = AsyncClient::new(o, 10);
            let mut connected = false;
            loop {
                match el.poll().await {
                    Ok(MqttEvent::Incoming(Packet::ConnAck(_))) => connected = true,
                    Ok(_) => {}
                    Err(_) => return connected,
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut o = MqttOptions::new("n1-second", "127.0.0.1", port);
        o.set_credentials("n1", pw1.as_str());
        let (_second, mut el) = AsyncClient::new(o, 10);
        tokio::spawn(async move { while el.poll().await.is_ok() {} });
        let dropped = tokio::time::timeout(Duration::from_secs(5), first).await;
        assert!(
            matches!(dropped, Ok(Ok(true))),
            "the first connection of n1's login was not taken over: {dropped:?}"
        );
        // the control plane's listener does not take a node's login at all
        for id in ["acoa-control-plane-apps", "n1"] {
            let mut o = MqttOptions::new(id, "127.0.0.1", port + 1);
            o.set_credentials("n1", pw1.as_str());
            assert!(
                !connects(o).await,
                "n1 on the control plane's listener as {id}"
            );
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(
            cp.count_log("broker connection"),
            0,
            "a connection of the control plane was closed: {}",
            cp.log_text()
        );
        assert_eq!(
            a2.connacks.load(Ordering::SeqCst),
            n2_connections,
            "n2's agent lost its session"
        );
        assert!(a2.connected.load(Ordering::SeqCst));
        let mlog = std::fs::read_to_string(dir.path().join("mosquitto.log")).unwrap();
        let as_n1 = mlog
            .lines()
            .filter(|l| l.contains("New client connected") && l.contains(" as n1 "))
            .count();
        assert_eq!(as_n1, 9, "{mlog}");
    });
}

/// Before any node is enrolled the fleet's password file is empty (nobody gets in there) and
/// Mosquitto runs the control plane all the same; an inventory with a node named like the
/// system's client ids (written before names beginning `acoa-` were refused) gets no
/// configuration, and the error names it. With the control plane on external brokers,
/// `node add` wants the fleet's listener given.
#[test]
fn mosquitto_config_without_nodes_and_with_a_reserved_name() {
    let Some(mosquitto) = mosquitto() else {
        return;
    };
    run(async move {
        let dir = tempdir_for_mosquitto();
        let data = dir.path().join("data");
        let port = free_port_pair();
        let (_m, _) = start_mosquitto(&mosquitto, dir.path(), &data, port, false).await;
        let passwd = dir.path().join("mosquitto/passwd");
        assert_eq!(std::fs::metadata(&passwd).unwrap().len(), 0);
        let cp = ControlPlane::start(&data, free_port(), &["--broker-url", &control_url(port)]);
        cp.wait_log_async("connected to the broker", Duration::from_secs(10))
            .await;

        // `node add` does not print the control plane's listener for a node
        let out = cli(&data, &["node", "add", "n5"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("external brokers") && err.contains("give --broker-url the fleet's"),
            "{err}"
        );
        let fleet = format!("mqtt://127.0.0.1:{port}");
        let section = ok(cli(&data, &["node", "add", "n5", "--broker-url", &fleet]));
        assert!(section.contains(&fleet), "{section}");

        let inventory = data.join("inventory.json");
        std::fs::write(
            &inventory,
            r#"{"nodes": {"acoa-control-plane-apps": {"password": "0123456789abcdef"}}}"#,
        )
        .unwrap();
        let out = cli(
            &data,
            &[
                "mosquitto-config",
                "--out",
                dir.path().join("again").to_str().unwrap(),
            ],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains("`acoa-control-plane-apps` in the inventory begins with `acoa-`"),
            "{err}"
        );
        assert!(!dir.path().join("again/mosquitto.conf").exists());
    });
}
