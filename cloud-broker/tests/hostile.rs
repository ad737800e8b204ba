//! Hostile input against the real control plane binary with its embedded broker: simulated
//! agents are real MQTT clients publishing real signed messages, and the attacker is another
//! real client.

mod common;

use std::time::{Duration, Instant};

use acoa_shared::model;
use acoa_shared::topics;
use cloud_broker::identity::DataDir;
use cloud_broker::testkit::{AgentSpec, SimAgent};
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
#[test]
fn a_replayed_report_does_not_keep_a_dead_node_alive() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        let (k1, pw1, cpk) = enroll(data, "n1");
        let port = free_port();
        let cp = ControlPlane::start(data, port, &[]);
        let creds = DataDir::new(data).credentials().unwrap();
        let cluster = model::load_cluster(&scenario("cluster.yaml")).unwrap();
        let mut node1 = cluster.nodes[0].clone();
        node1.name = "n1".into();

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

        let agent = SimAgent::start(AgentSpec {
            url: cp.url.clone(),
            node: node1,
            password: pw1.clone(),
            key: k1,
            control_plane: cpk,
            probe_addr: "127.0.0.1:1".into(),
            links: vec![],
            period: Duration::from_millis(300),
            subscribe_desired: false,
        });
        cp.wait_log_async("node n1 joined", Duration::from_secs(10))
            .await;
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
