//! The brokers' topic rules, with real processes: the control plane with its embedded broker, and
//! a real Mosquitto with the generated configuration. An attacker holding one node's login (n2)
//! tries to publish, delete and forge applications and statuses, to read what is not its own, to
//! speak for another node, to poison another node's desired state with a message larger than an
//! agent accepts, and to publish on wildcard topics: each is refused by the broker itself.
//! Mosquitto's part needs the `mosquitto` and `mosquitto_passwd` binaries (apt-get install
//! mosquitto).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use acoa_shared::topics::acl::{self, Role};
use acoa_shared::topics::{self, AGENT_MAX_PACKET};
use acoa_shared::wire;
use cloud_broker::identity::DataDir;
use cloud_broker::status::AppStatus;
use common::*;
use rumqttc::{
    AsyncClient, Event as MqttEvent, LastWill, MqttOptions, Packet, QoS, SubscribeReasonCode,
};

/// What a test client saw.
#[derive(Debug, Default)]
struct Seen {
    connacks: usize,
    errors: usize,
    puback: usize,
    subacks: Vec<Vec<SubscribeReasonCode>>,
    /// (topic, payload length)
    publishes: Vec<(String, usize)>,
}

fn options(url: &str, id: &str, user: &str, pass: &str, max_incoming: usize) -> MqttOptions {
    let (host, port) = acoa_shared::topics::broker_address(url).unwrap();
    let mut o = MqttOptions::new(id, host, port);
    o.set_credentials(user, pass);
    o.set_keep_alive(Duration::from_secs(5));
    o.set_max_packet_size(max_incoming, 1 << 20);
    o
}

/// A plain MQTT client that records what comes and reconnects after errors.
struct Probe {
    c: AsyncClient,
    seen: Arc<Mutex<Seen>>,
}

impl Probe {
    fn start(url: &str, id: &str, user: &str, pass: &str, max_incoming: usize) -> Probe {
        Probe::spawn(options(url, id, user, pass, max_incoming))
    }

    fn spawn(o: MqttOptions) -> Probe {
        let (c, mut el) = AsyncClient::new(o, 64);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s = seen.clone();
        tokio::spawn(async move {
            loop {
                match el.poll().await {
                    Ok(MqttEvent::Incoming(p)) => {
                        let mut s = s.lock().unwrap();
                        match p {
                            Packet::ConnAck(_) => s.connacks += 1,
                            Packet::PubAck(_) => s.puback += 1,
                            Packet::SubAck(a) => s.subacks.push(a.return_codes),
                            Packet::Publish(p) => s.publishes.push((p.topic, p.payload.len())),
                            _ => {}
                        }
                    }
                    Ok(_) => {}
                    Err(_) => {
                        s.lock().unwrap().errors += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        Probe { c, seen }
    }

    async fn connected(&self) {
        let t = Instant::now();
        while self.seen.lock().unwrap().connacks == 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "no connection");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Publishes at QoS 1 and waits (at most 3 s) for the acknowledgement: a broker may
    /// acknowledge a refused publication or close the connection.
    async fn publish(&self, topic: &str, retain: bool, payload: Vec<u8>) {
        let before = self.seen.lock().unwrap().puback;
        self.c
            .publish(topic, QoS::AtLeastOnce, retain, payload)
            .await
            .unwrap();
        let t = Instant::now();
        while self.seen.lock().unwrap().puback == before && t.elapsed() < Duration::from_secs(3) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Subscribes and returns the broker's return codes (None: no acknowledgement in 3 s).
    async fn subscribe(&self, filter: &str) -> Option<Vec<SubscribeReasonCode>> {
        let before = self.seen.lock().unwrap().subacks.len();
        self.c.subscribe(filter, QoS::AtLeastOnce).await.unwrap();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            if let Some(codes) = self.seen.lock().unwrap().subacks.get(before) {
                return Some(codes.clone());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

/// Connects with MQTT 3.1.1 over a plain socket, publishes `payload` on `topic` (QoS 1,
/// retained) whatever the topic, and waits up to 3 s for the acknowledgement or the end of the
/// connection.
fn raw_publish(url: &str, id: &str, user: &str, pass: &str, topic: &str, payload: &str) {
    use std::io::{Read, Write};
    fn string(out: &mut Vec<u8>, s: &[u8]) {
        out.extend_from_slice(&(s.len() as u16).to_be_bytes());
        out.extend_from_slice(s);
    }
    fn packet(first: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![first];
        let mut len = body.len();
        loop {
            let byte = (len % 128) as u8;
            len /= 128;
            out.push(if len > 0 { byte | 0x80 } else { byte });
            if len == 0 {
                break;
            }
        }
        out.extend_from_slice(body);
        out
    }
    let (host, port) = acoa_shared::topics::broker_address(url).unwrap();
    let mut s = std::net::TcpStream::connect((host.as_str(), port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut connect = Vec::new();
    string(&mut connect, b"MQTT");
    connect.extend_from_slice(&[4, 0xc2, 0, 30]);
    for f in [id, user, pass] {
        string(&mut connect, f.as_bytes());
    }
    s.write_all(&packet(0x10, &connect)).unwrap();
    let mut connack = [0u8; 4];
    s.read_exact(&mut connack).unwrap();
    assert_eq!(connack, [0x20, 2, 0, 0], "not connected");
    let mut publish = Vec::new();
    string(&mut publish, topic.as_bytes());
    publish.extend_from_slice(&[0, 1]);
    publish.extend_from_slice(payload.as_bytes());
    s.write_all(&packet(0x33, &publish)).unwrap();
    let mut ack = [0u8; 4];
    let _ = s.read(&mut ack);
}

fn statuses(data: &Path) -> BTreeMap<String, AppStatus> {
    ok(cli(data, &["status"]))
        .lines()
        .map(|l| serde_json::from_str::<AppStatus>(l).unwrap())
        .map(|s| (s.application.clone(), s))
        .collect()
}

const TINY: &str = "application: tiny\ncomponents:\n- name: one\n  image: localhost/acoa/one:1\n";

/// The attack with n2's login against the broker at `url` (the control plane `cp` runs on it);
/// `embedded`: the control plane's own broker (it also refuses the control plane's oversized
/// desired state; Mosquitto has no size per topic).
async fn attack(dir: &Path, data: &Path, url: &str, cp: &ControlPlane, embedded: bool) {
    let cluster = acoa_shared::model::load_cluster(&scenario("cluster.yaml")).unwrap();
    let creds = DataDir::new(data).credentials().unwrap();
    let enrolled: BTreeMap<&str, _> = ["n1", "n2", "n3"]
        .into_iter()
        .map(|n| (n, DataDir::new(data).inventory().unwrap().nodes[n].clone()))
        .collect();
    let key = |n: &str| acoa_test_keys(dir, n);
    // n1 is a running agent, n3 is enrolled but never ran
    let cpk = DataDir::new(data).signing_key().unwrap().verifying_key();
    let login = (key("n1"), enrolled["n1"].password.clone(), cpk);
    let a1 = start_n1(cp, url, login, true).await;
    let app = dir.join("tiny.yaml");
    std::fs::write(&app, TINY).unwrap();
    let out = spawn_apply(data, &app, &["--wait-s", "10", "--agents-wait-s", "0"])
        .await
        .unwrap();
    assert!(out.status.success(), "{}", cp.log_text());
    let tiny: AppStatus = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(tiny.placement.as_ref().unwrap()["one"], "n1");

    // n1's own login, as an agent with the agent's packet limit: reads its desired state. On
    // Mosquitto a login has one connection (the fleet's listener names each client after its
    // login: a second connection would take the first one's session), so there the victim is
    // the agent itself, `a1`
    let victim = embedded.then(|| {
        Probe::start(
            url,
            "n1-victim",
            "n1",
            &enrolled["n1"].password,
            AGENT_MAX_PACKET,
        )
    });
    if let Some(victim) = &victim {
        victim.connected().await;
        assert!(victim.subscribe(&topics::desired("n1")).await.is_some());
        assert!(victim.subscribe(&topics::peers("n1")).await.is_some());
    }
    let a1_connections = a1.connacks.load(Ordering::SeqCst);

    let n2 = Probe::start(url, "n2-attacker", "n2", &enrolled["n2"].password, 4 << 20);
    n2.connected().await;
    // every way the attack got through (all of them are listed when the test fails)
    let mut problems: Vec<String> = Vec::new();
    // reading what is not its own: everything, another node's desired state, the definitions
    for f in [
        "#",
        "acoa/#",
        &topics::desired("n1"),
        &topics::peers("n1"),
        "acoa/v1/apps/+",
        topics::NODES_WILDCARD,
    ] {
        let codes = n2.subscribe(f).await;
        if embedded && codes != Some(vec![SubscribeReasonCode::Failure]) {
            problems.push(format!("n2's subscription to {f} was granted: {codes:?}"));
        }
    }
    // a last will on n1's desired state: the embedded broker refuses the connection (Mosquitto
    // takes it and checks the will when it fires; there this second connection of n2's login
    // would only take the first one's session)
    let with_will = embedded.then(|| {
        let mut o = options(url, "n2-will", "n2", &enrolled["n2"].password, 4 << 20);
        let will = LastWill::new(topics::desired("n1"), vec![1u8; 8], QoS::AtLeastOnce, true);
        o.set_last_will(will);
        Probe::spawn(o)
    });
    // an application of its own (its container would run on n1), a deletion, forged statuses
    let evil = "application: evil\ncomponents:\n- name: one\n  image: localhost/acoa/evil:1\n";
    n2.publish(&topics::app("evil"), true, evil.into()).await;
    n2.publish(&topics::app("tiny"), true, Vec::new()).await;
    let mut forged = tiny.clone();
    forged.placement = Some(BTreeMap::from([("one".to_string(), "n666".to_string())]));
    n2.publish(
        &topics::app_status("tiny"),
        true,
        serde_json::to_vec(&forged).unwrap(),
    )
    .await;
    forged.application = "ghost".into();
    n2.publish(
        &topics::app_status("ghost"),
        true,
        serde_json::to_vec(&forged).unwrap(),
    )
    .await;
    // n3's report, signed by n3 (as a replay would be): n2 may not speak for n3
    let mut n3 = cluster.nodes[1].clone();
    n3.name = "n3".into();
    let replay = report_frame(&n3, 1, "6.6.6.6:1", Some(&key("n3")));
    n2.publish(&topics::report("n3"), false, replay).await;
    // 600 KB retained on n1's desired state: more than an agent accepts
    n2.publish(&topics::desired("n1"), true, vec![7u8; 600_000])
        .await;
    n2.publish(&topics::peers("n1"), true, vec![7u8; 600_000])
        .await;

    // wildcards in a published topic, even with the control plane's own login (rumqttc does not
    // send such a topic: the packet is written by hand)
    let wild = "application: wild\ncomponents:\n- name: one\n  image: localhost/acoa/one:1\n";
    for topic in ["acoa/v1/apps/+", "acoa/v1/apps/#"] {
        let cp_login = creds.control_plane.clone();
        let u = cp.url.clone();
        tokio::task::spawn_blocking(move || {
            raw_publish(
                &u,
                "cp-wild",
                &cp_login.username,
                &cp_login.password,
                topic,
                wild,
            )
        })
        .await
        .unwrap();
    }
    if embedded {
        // and no login, not even the control plane's, puts more than an agent accepts there
        let big = Probe::start(
            url,
            "cp-oversize",
            &creds.control_plane.username,
            &creds.control_plane.password,
            4 << 20,
        );
        big.connected().await;
        big.publish(&topics::desired("n1"), true, vec![7u8; 600_000])
            .await;
        big.publish(&topics::peers("n1"), true, vec![7u8; AGENT_MAX_PACKET])
            .await;
        // what the control plane alone reads may be larger
        big.publish(&topics::report("n3"), false, vec![0u8; 600_000])
            .await;
    }
    tokio::time::sleep(Duration::from_millis(2000)).await;

    // Mosquitto may grant `#` and filter each message: only what n2 may read (its own peer list)
    let leaked: Vec<_> = n2.seen.lock().unwrap().publishes.clone();
    let leaked: Vec<_> = leaked
        .into_iter()
        .filter(|(t, _)| acl::may_subscribe(Role::Node, "n2", t).is_err())
        .collect();
    if !leaked.is_empty() {
        problems.push(format!("n2 read {leaked:?}"));
    }
    if let Some(victim) = &victim {
        let v = victim.seen.lock().unwrap();
        if (v.connacks, v.errors) != (1, 0) {
            problems.push(format!(
                "the agent's connection was dropped: {} connections, {} errors in 2 s",
                v.connacks, v.errors
            ));
        }
        if v.publishes.iter().any(|(_, len)| *len >= AGENT_MAX_PACKET) {
            problems.push("the agent was sent more than it accepts".into());
        }
    }
    let a1_now = a1.connacks.load(Ordering::SeqCst);
    if a1_now != a1_connections || !a1.connected.load(Ordering::SeqCst) {
        problems.push(format!(
            "n1's agent lost its connection: {} connections during the attack",
            a1_now - a1_connections
        ));
    }
    if let Some(with_will) = &with_will {
        let w = with_will.seen.lock().unwrap();
        if w.connacks > 0 || w.errors == 0 {
            problems.push(format!(
                "n2 connected with a will on n1's desired state: {w:?}"
            ));
        }
    }
    let refused = a1.refused.load(Ordering::SeqCst);
    if refused > 0 {
        problems.push(format!(
            "n1 got {refused} messages not signed by the control plane"
        ));
    }
    let log = cp.log_text();
    for s in [
        "application evil",
        "application tiny deleted",
        "application +",
        "application #",
        "node n3 joined",
        "6.6.6.6",
    ] {
        if log.contains(s) {
            problems.push(format!("`{s}` reached the control plane"));
        }
    }
    let d = data.to_path_buf();
    let st = tokio::task::spawn_blocking(move || statuses(&d))
        .await
        .unwrap();
    for forged in ["ghost", "evil"] {
        if st.contains_key(forged) {
            problems.push(format!("`cloud-broker status` shows {forged}"));
        }
    }
    match st.get("tiny").and_then(|s| s.placement.as_ref()) {
        Some(p) if p["one"] == "n1" => {}
        other => problems.push(format!("`cloud-broker status` shows tiny on {other:?}")),
    }
    if embedded {
        // the oversized report on a topic only the control plane reads did reach it
        let t = Instant::now();
        while !cp.has_log("node report on node `n3`'s topic dropped")
            && t.elapsed() < Duration::from_secs(5)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let log = cp.log_text();
        // one line per refused client, however many refusals
        for (client, n) in [
            ("n2-attacker", 1),
            ("n2-will", 1),
            ("cp-oversize", 1),
            ("cp-wild", 1),
        ] {
            let lines = cp.count_log(&format!("broker refused client `{client}`"));
            if lines != n {
                problems.push(format!("{lines} refusal lines for {client}, not {n}"));
            }
        }
        for s in [
            "node report on node `n3`'s topic dropped",
            "may not subscribe to `#`",
            "600000 bytes on `acoa/v1/nodes/n1/desired`: its readers accept at most 262116",
        ] {
            if !log.contains(s) {
                problems.push(format!("the control plane's log lacks `{s}`"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{}\ncontrol plane log:\n{}",
        problems.join("\n"),
        cp.log_text()
    );
    drop(a1);
}

/// The signing key of `node`, kept beside the test's files by [`enroll_keys`].
fn acoa_test_keys(dir: &Path, node: &str) -> ed25519_dalek::SigningKey {
    let hex = std::fs::read_to_string(dir.join(format!("{node}.key"))).unwrap();
    wire::keys::secret_from_hex(&hex).unwrap()
}

/// A directory Mosquitto can reach with n1, n2, n3 enrolled in its `data` ([`enroll_keys`]).
fn enrolled_for_mosquitto() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempdir_for_mosquitto();
    let data = dir.path().join("data");
    enroll_keys(dir.path(), &data);
    (dir, data)
}

/// Enrolls n1, n2, n3 and keeps their keys in `dir`.
fn enroll_keys(dir: &Path, data: &Path) {
    for n in ["n1", "n2", "n3"] {
        let (k, _, _) = enroll(data, n);
        std::fs::write(
            dir.join(format!("{n}.key")),
            wire::keys::to_hex(&k.to_bytes()),
        )
        .unwrap();
    }
}

#[test]
fn the_embedded_broker_refuses_what_one_nodes_login_may_not_do() {
    run(async move {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        enroll_keys(dir.path(), &data);
        let cp = ControlPlane::start(&data, free_port(), &[]);
        let url = cp.url.clone();
        attack(dir.path(), &data, &url, &cp, true).await;
    });
}

#[test]
fn mosquitto_with_the_generated_config_refuses_what_one_nodes_login_may_not_do() {
    let Some(mosquitto) = mosquitto() else { return };
    run(async move {
        let (dir, data) = enrolled_for_mosquitto();
        let port = free_port_pair();
        let (_m, _) = start_mosquitto(&mosquitto, dir.path(), &data, port, true).await;
        let url = format!("mqtt://127.0.0.1:{port}");
        let cp = ControlPlane::start(&data, free_port(), &["--broker-url", &control_url(port)]);
        attack(dir.path(), &data, &url, &cp, false).await;
        let mlog = std::fs::read_to_string(dir.path().join("mosquitto.log")).unwrap();
        assert!(mlog.contains("Denied PUBLISH from n2 "), "{mlog}");
    });
}

#[test]
fn mosquitto_keeps_retained_definitions_and_desired_states_across_a_restart() {
    let Some(mosquitto) = mosquitto() else { return };
    run(async move {
        let (dir, data) = enrolled_for_mosquitto();
        let creds = DataDir::new(&data).credentials().unwrap();
        let port = free_port_pair();
        let url = control_url(port);
        let login = |id: &str| {
            let cp = &creds.control_plane;
            Probe::start(&url, id, &cp.username, &cp.password, 4 << 20)
        };
        let (m, _) = start_mosquitto(&mosquitto, dir.path(), &data, port, false).await;
        let before = login("before");
        before.connected().await;
        before
            .publish(&topics::app("tiny"), true, TINY.into())
            .await;
        before
            .publish(&topics::desired("n1"), true, b"generation 7".to_vec())
            .await;
        assert_eq!(before.seen.lock().unwrap().puback, 2);
        m.stop();
        let (_m, _) = start_mosquitto(&mosquitto, dir.path(), &data, port, false).await;
        let after = login("after");
        after.connected().await;
        after.subscribe("acoa/v1/apps/+").await.unwrap();
        after.subscribe("acoa/v1/nodes/+/desired").await.unwrap();
        let t = Instant::now();
        while after.seen.lock().unwrap().publishes.len() < 2 {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "retained messages lost in the restart: {:?}",
                after.seen.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut got = after.seen.lock().unwrap().publishes.clone();
        got.sort();
        assert_eq!(
            got,
            vec![
                (topics::app("tiny"), TINY.len()),
                (topics::desired("n1"), 12)
            ]
        );
    });
}
