//! Hostile input against the real control plane binary with its embedded broker: simulated
//! agents are real MQTT clients publishing real signed messages, and the attacker is another
//! real client. Every test function runs against the file store and against a real etcd
//! (`serve --store etcd`, one member started by the test).

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use acoa_shared::model;
use acoa_shared::topics;
use cloud_broker::identity::DataDir;
use cloud_broker::status::AppStatus;
use common::backend::{Backend, Kind};
use common::*;
use rumqttc::{AsyncClient, Event as MqttEvent, MqttOptions, Packet, QoS};

/// A client of the broker at `url` with a login; its incoming publications as (topic, payload).
fn client(
    url: &str,
    id: &str,
    user: &str,
    pass: &str,
) -> (
    AsyncClient,
    tokio::sync::mpsc::UnboundedReceiver<(String, Vec<u8>)>,
) {
    let (host, port) = cloud_broker::conn::parse_url(url).unwrap();
    let mut o = MqttOptions::new(id, host, port);
    o.set_credentials(user, pass);
    o.set_keep_alive(Duration::from_secs(5));
    o.set_max_packet_size(2 << 20, 2 << 20);
    let (c, mut el) = AsyncClient::new(o, 64);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            match el.poll().await {
                Ok(MqttEvent::Incoming(Packet::Publish(p))) => {
                    let _ = tx.send((p.topic.clone(), p.payload.to_vec()));
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    });
    (c, rx)
}

/// A node's genuine signed report, captured on the wire and replayed every second after its
/// agent died, does not keep the node alive: it goes lost on time, and the replays are dropped.
fn a_replayed_report_does_not_keep_a_dead_node_alive(kind: Kind) {
    let b = Backend::new(kind);
    let store = b.serve_flags();
    run(async move {
        let s = control_plane_with_n1_enrolled_with(&store);
        let (cp, pw1) = (&s.cp, s.n1.1.clone());
        let creds = DataDir::new(&s.data).credentials().unwrap();

        // the eavesdropper reads n1's reports (the control plane's login reads everything)
        let (spy, mut seen) = client(
            &cp.url,
            "spy",
            &creds.control_plane.username,
            &creds.control_plane.password,
        );
        spy.subscribe(topics::report("n1"), QoS::AtLeastOnce)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;

        let agent = start_n1(cp, &cp.url, s.n1.clone(), false).await;
        let captured = tokio::time::timeout(Duration::from_secs(5), seen.recv())
            .await
            .expect("a report of n1 on the wire")
            .unwrap()
            .1;
        // the attacker has n1's broker password (not its key) and is connected before the kill
        let (replayer, _) = client(&cp.url, "replayer", "n1", &pw1);
        tokio::time::sleep(Duration::from_millis(300)).await;

        agent.kill();
        let killed = Instant::now();
        let mut lost_after = None;
        while killed.elapsed() < Duration::from_secs(10) {
            replayer
                .publish(
                    topics::report("n1"),
                    QoS::AtLeastOnce,
                    false,
                    captured.clone(),
                )
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_secs(1)).await;
            if cp.has_log("node n1 lost") {
                lost_after = Some(killed.elapsed());
                break;
            }
        }
        let log = cp.log_text();
        let lost_after = lost_after.unwrap_or_else(|| panic!("n1 never lost; log:\n{log}"));
        // --node-timeout-ms 2000 (and the last will): lost within that and a tick or two
        assert!(lost_after < Duration::from_secs(5), "{lost_after:?}\n{log}");
        assert!(
            log.contains("node report from node `n1` dropped as a replay"),
            "{log}"
        );
    });
}

/// The costliest definition the model still reads whole: just under the size bound, every
/// component valid and within the scan's bounds, refused for their number.
fn late_refusal(app: &str) -> String {
    let mut t = format!("application: {app}\ncomponents:\n");
    let image = format!("registry.example/{}:1", "x".repeat(230));
    let labels: Vec<String> = (0..30).map(|i| format!("label-{i:02}")).collect();
    for i in 0.. {
        let line = format!(
            "- {{name: c{i:04}, image: {image}, requires: {{hardware: [{}]}}}}\n",
            labels.join(", ")
        );
        if t.len() + line.len() > acoa_shared::model::limits::APPLICATION.max_bytes {
            break;
        }
        t.push_str(&line);
    }
    t
}

/// Definitions over the model's bounds: nesting, aliases, size.
fn over_the_limits() -> Vec<(String, String)> {
    let alias = {
        let list: Vec<String> = (0..1000).map(|i| format!("l{i}")).collect();
        let mut t = format!(
            "application: alias\ncomponents:\n- name: c0\n  image: i\n  requires: &r {{hardware: [{}]}}\n",
            list.join(", ")
        );
        for i in 1..=6000 {
            t.push_str(&format!("- {{name: c{i}, image: i, requires: *r}}\n"));
        }
        t
    };
    vec![
        (
            "nested".into(),
            format!("{}{}", "[".repeat(200_000), "]".repeat(200_000)),
        ),
        (
            "nested-map".into(),
            format!("a: {}1{}", "{a: ".repeat(50_000), "}".repeat(50_000)),
        ),
        ("alias".into(), alias),
        (
            "oversize".into(),
            format!("application: oversize\n# {}\n", "x".repeat(600_000)),
        ),
    ]
}

/// Hostile definitions, refused over and over, neither stall the control plane's keep-alive
/// and decisions (the nodes stay online, another application is placed in normal time) nor
/// are read again when they come back: a refusal is remembered by digest.
fn hostile_definitions_are_refused_without_stalling_and_not_read_again(kind: Kind) {
    let b = Backend::new(kind);
    let store = b.serve_flags();
    run(async move {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        let port = free_port();
        let cluster = model::load_cluster(&scenario("cluster.yaml")).unwrap();
        let mut two = cluster.clone();
        two.nodes.truncate(2);
        two.links.clear();
        let creds = enroll_all(data, &two);
        let cp = ControlPlane::start(
            data,
            port,
            &store.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let _agents = join_all(&cp, &cp.url, &two, &creds, 19300, false).await;
        let admin = DataDir::new(data).credentials().unwrap().admin;
        let (user, mut statuses) = client(&cp.url, "user", &admin.username, &admin.password);
        user.subscribe("acoa/v1/apps/+/status", QoS::AtLeastOnce)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;

        let mut hostile = over_the_limits();
        hostile.push(("late".into(), late_refusal("late")));
        let rounds = 5;
        for _ in 0..rounds {
            for (app, text) in &hostile {
                user.publish(topics::app(app), QoS::AtLeastOnce, true, text.clone())
                    .await
                    .unwrap();
            }
        }
        // meanwhile an ordinary application
        let t = Instant::now();
        let demo = "application: demo\ncomponents:\n- {name: a, image: localhost/acoa/a:1}\n";
        user.publish(topics::app("demo"), QoS::AtLeastOnce, true, demo)
            .await
            .unwrap();
        let mut last: BTreeMap<String, AppStatus> = BTreeMap::new();
        let placed_after = loop {
            let (_, payload) = tokio::time::timeout(Duration::from_secs(20), statuses.recv())
                .await
                .unwrap_or_else(|_| panic!("no status; log:\n{}", cp.log_text()))
                .unwrap();
            let st: AppStatus = serde_json::from_slice(&payload).unwrap();
            let placed = st.application == "demo" && st.state == "placed";
            last.insert(st.application.clone(), st);
            if placed {
                break t.elapsed();
            }
        };
        // the refusals: each with its reason
        let t_all = Instant::now();
        while hostile.iter().any(|(a, _)| !last.contains_key(a)) {
            assert!(t_all.elapsed() < Duration::from_secs(20), "{last:?}");
            if let Ok(Some((_, p))) =
                tokio::time::timeout(Duration::from_secs(1), statuses.recv()).await
            {
                let st: AppStatus = serde_json::from_slice(&p).unwrap();
                last.insert(st.application.clone(), st);
            }
        }
        for (app, _) in &hostile {
            assert_eq!(last[app].state, "rejected", "{app}: {:?}", last[app]);
            assert!(last[app].reason.is_some(), "{app}");
        }
        // published again: the refusal is remembered, the text not read again
        for (app, text) in &hostile {
            user.publish(topics::app(app), QoS::AtLeastOnce, true, text.clone())
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let log = cp.log_text();
        eprintln!("demo placed after {placed_after:?}");
        for l in log
            .lines()
            .filter(|l| l.contains(" read in ") || l.contains("read again"))
        {
            eprintln!("{l}");
        }
        assert!(
            placed_after < Duration::from_secs(5),
            "{placed_after:?}\n{log}"
        );
        assert_eq!(cp.count_log(" lost"), 0, "{log}");
        for (app, _) in &hostile {
            let read = cp.count_log(&format!("application {app}: definition "));
            let again = log
                .lines()
                .filter(|l| {
                    l.contains(&format!("application {app}: definition "))
                        && l.contains("not read again")
                })
                .count();
            // oversize is refused before reading (by its size alone), the others read once
            assert_eq!(read - again, 1, "{app} read {} times\n{log}", read - again);
            // every later publication is seen and not read again, unless the embedded broker
            // skipped some for a subscriber that fell behind its bounded log (it says so: a
            // slow reader loses old publications, never stalls the broker)
            if log.contains("Read cursor start jumped") {
                assert!((1..=rounds).contains(&again), "{app}: {again}\n{log}");
            } else {
                assert_eq!(again, rounds, "{app}\n{log}");
            }
        }
    });
}

/// `apply` says what the agents did, not only the placement: an agent that refuses the image
/// makes it fail with the agent's reason, and one that runs it makes it succeed.
fn apply_fails_with_the_agents_reason_when_an_agent_refuses_the_image(kind: Kind) {
    let b = Backend::new(kind);
    let store = b.serve_flags();
    use acoa_shared::wire::{self, ActualState, ContainerState, ContainerStatus, Message};
    run(async move {
        let s = control_plane_with_n1_enrolled_with(&store);
        let (cp, data, k1) = (&s.cp, &s.data, s.n1.0.clone());
        let mut agent = start_n1(cp, &cp.url, s.n1.clone(), true).await;
        let reason = "image docker.io/evil/miner:1 is outside the allowlist";
        let mut seq = 0;
        let mut apply_and_answer = |app: &'static str, state: ContainerState| {
            let file = data.join(format!("{app}.yaml"));
            std::fs::write(
                &file,
                format!("application: {app}\ncomponents:\n- {{name: a, image: docker.io/evil/miner:1}}\n"),
            )
            .unwrap();
            let out = spawn_apply(data, &file, &["--agents-wait-s", "20"]);
            seq += 1;
            (out, seq, state)
        };
        for (app, state, ok) in [
            ("refused", ContainerState::Refused, false),
            ("fine", ContainerState::Running, true),
        ] {
            let (out, seq, state) = apply_and_answer(app, state);
            // the agent gets its desired state and says what it did with the container
            let desired = loop {
                let d = tokio::time::timeout(Duration::from_secs(10), agent.desired.recv())
                    .await
                    .unwrap_or_else(|_| panic!("no desired state; log:\n{}", cp.log_text()))
                    .unwrap();
                if d.containers
                    .iter()
                    .any(|c| c.name.as_str() == format!("{app}.a"))
                {
                    break d;
                }
            };
            let mut a = ActualState {
                node: wire::name("n1").unwrap(),
                generation: desired.generation,
                seq,
                run: 1,
                containers: Default::default(),
            };
            for c in &desired.containers {
                let refused = c.name.as_str() == "refused.a";
                a.containers
                    .push(ContainerStatus {
                        name: c.name.clone(),
                        image: c.image.clone(),
                        state: if refused {
                            ContainerState::Refused
                        } else {
                            state
                        },
                        restarts: 0,
                        error: if refused {
                            wire::bounded("error", reason).unwrap()
                        } else {
                            Default::default()
                        },
                        health: None,
                    })
                    .unwrap();
            }
            let frame = wire::encode(&Message::ActualState(Box::new(a)), Some(&k1)).unwrap();
            agent.publish_raw(&topics::actual("n1"), frame, false).await;
            let out = out.await.unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.success(), ok, "{app}: {stdout}\n{stderr}");
            let st: AppStatus = serde_json::from_slice(&out.stdout).unwrap();
            if ok {
                assert_eq!(st.state, "running", "{st:?}");
            } else {
                assert_eq!(st.state, "placed", "{st:?}");
                assert_eq!(st.not_running[0].state, "refused", "{st:?}");
                assert_eq!(st.not_running[0].error, reason, "{st:?}");
                assert!(
                    stderr.contains(&format!("refused.a on node n1: refused: {reason}")),
                    "{stderr}"
                );
            }
        }
    });
}

/// A node holds at most the containers one desired state carries: an application pinned to a
/// full node is not placed, its status says why, and the applications already there keep
/// their containers.
fn a_full_node_refuses_another_application_and_keeps_the_first_ones_containers(kind: Kind) {
    let b = Backend::new(kind);
    let store = b.serve_flags();
    use acoa_shared::wire::MAX_CONTAINERS;
    run(async move {
        let s = control_plane_with_n1_enrolled_with(&store);
        let (cp, data) = (&s.cp, &s.data);
        let mut agent = start_n1(cp, &cp.url, s.n1.clone(), true).await;
        let pinned = |app: &str, n: usize| {
            let resources = ", resources: {cpu_millis: 10, memory_mb: 8}";
            write_pinned(data, app, "", "localhost/acoa/c:1", "n1", n, resources)
        };
        let apply = |file: std::path::PathBuf| spawn_apply(data, &file, &["--agents-wait-s", "0"]);
        let full = apply(pinned("full", MAX_CONTAINERS)).await.unwrap();
        assert!(
            full.status.success(),
            "{}",
            String::from_utf8_lossy(&full.stderr)
        );
        let more = apply(pinned("more", 1)).await.unwrap();
        let st: AppStatus = serde_json::from_slice(&more.stdout).unwrap();
        let log = cp.log_text();
        assert!(!more.status.success(), "{st:?}\n{log}");
        assert_eq!(st.state, "unplaced", "{st:?}\n{log}");
        let reason = st.reason.unwrap_or_default();
        eprintln!("more: {} ({reason})", st.state);
        assert!(
            reason.contains("n1") && reason.contains(&MAX_CONTAINERS.to_string()),
            "{reason}"
        );
        // the first application's containers stay on n1
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut last = None;
        while let Ok(Some(d)) =
            tokio::time::timeout(Duration::from_millis(500), agent.desired.recv()).await
        {
            last = Some(d);
        }
        let last = last.expect("n1's desired state");
        let names: Vec<&str> = last.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names.len(), MAX_CONTAINERS, "{names:?}");
        assert!(names.iter().all(|n| n.starts_with("full.")), "{names:?}");
    });
}

#[test]
fn a_replayed_report_does_not_keep_a_dead_node_alive_file() {
    a_replayed_report_does_not_keep_a_dead_node_alive(Kind::File);
}

#[test]
fn a_replayed_report_does_not_keep_a_dead_node_alive_etcd() {
    a_replayed_report_does_not_keep_a_dead_node_alive(Kind::Etcd);
}

#[test]
fn hostile_definitions_are_refused_without_stalling_and_not_read_again_file() {
    hostile_definitions_are_refused_without_stalling_and_not_read_again(Kind::File);
}

#[test]
fn hostile_definitions_are_refused_without_stalling_and_not_read_again_etcd() {
    hostile_definitions_are_refused_without_stalling_and_not_read_again(Kind::Etcd);
}

#[test]
fn apply_fails_with_the_agents_reason_when_an_agent_refuses_the_image_file() {
    apply_fails_with_the_agents_reason_when_an_agent_refuses_the_image(Kind::File);
}

#[test]
fn apply_fails_with_the_agents_reason_when_an_agent_refuses_the_image_etcd() {
    apply_fails_with_the_agents_reason_when_an_agent_refuses_the_image(Kind::Etcd);
}

#[test]
fn a_full_node_refuses_another_application_and_keeps_the_first_ones_containers_file() {
    a_full_node_refuses_another_application_and_keeps_the_first_ones_containers(Kind::File);
}

#[test]
fn a_full_node_refuses_another_application_and_keeps_the_first_ones_containers_etcd() {
    a_full_node_refuses_another_application_and_keeps_the_first_ones_containers(Kind::Etcd);
}
