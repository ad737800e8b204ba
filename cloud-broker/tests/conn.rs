//! The control plane's connection loop (`conn::spawn`) against a real Mosquitto that is stopped
//! and started again: the connection comes back by itself and subscribes again, so a
//! publication after the broker's restart still arrives (the session is clean: without the
//! new subscription it would not). And the peer lists' queue per broker against a Mosquitto
//! whose process is stopped (`kill -STOP`), and beside a desired state. Needs the `mosquitto`
//! binary (Debian: apt-get install mosquitto).

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use acoa_test_support::sh;
use cloud_broker::brokers::{self, Publishers};
use cloud_broker::conn::{self, Inbox, Link};
use cloud_broker::identity::Login;
use common::*;
use rumqttc::{AsyncClient, Event as MqttEvent, MqttOptions, Packet, Publish, QoS};
use tokio::sync::mpsc;

/// Where a test's anonymous Mosquitto runs: its binary, a directory for its configuration and
/// a free port on 127.0.0.1.
struct Setup {
    mosquitto: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

impl Setup {
    /// `None` (and the test says it is skipped) where Mosquitto is not installed.
    fn find() -> Option<Setup> {
        let Some(mosquitto) = find_bin("mosquitto") else {
            eprintln!("SKIPPED: mosquitto is not installed (apt-get install mosquitto)");
            return None;
        };
        Some(Setup {
            mosquitto,
            dir: tempdir_for_mosquitto(),
            port: free_port(),
        })
    }

    async fn start(&self) -> Broker {
        self.start_with("").await
    }

    /// With `extra` lines of configuration.
    async fn start_with(&self, extra: &str) -> Broker {
        let (dir, port) = (self.dir.path(), self.port);
        let conf = dir.join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!("listener {port} 127.0.0.1\nallow_anonymous true\n{extra}"),
        )
        .unwrap();
        let child = Command::new(&self.mosquitto)
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_mosquitto(port).await;
        Broker(child)
    }
}

/// An anonymous Mosquitto ([`Setup::start`]), killed on drop.
struct Broker(Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Hands every publication's topic to the test.
struct Topics(mpsc::Sender<String>);

impl Inbox for Topics {
    async fn publish(&mut self, p: Publish) -> bool {
        self.0.send(p.topic).await.is_ok()
    }
}

/// Publishes `topic` once from a client of its own and waits for the broker's acknowledgement.
async fn publish_once(port: u16, topic: &str) {
    let mut o = MqttOptions::new(format!("pub-{}", rand::random::<u32>()), "127.0.0.1", port);
    o.set_clean_session(true);
    let (c, mut el) = AsyncClient::new(o, 8);
    c.publish(topic, QoS::AtLeastOnce, false, b"x".to_vec())
        .await
        .unwrap();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        match tokio::time::timeout(Duration::from_secs(1), el.poll()).await {
            Ok(Ok(MqttEvent::Incoming(Packet::PubAck(_)))) => break,
            Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            _ => {}
        }
    }
    let _ = c.disconnect().await;
}

/// A peer-lists connection of the control plane's to `url`, as `serve` opens it (it only
/// publishes), once the broker accepted it.
async fn lists_connection(url: &str, id: &str) -> conn::Connection {
    let login = Login {
        username: "anyone".into(),
        password: "anything".into(),
    };
    let c = brokers::connect_lists(url, id, &login).unwrap();
    let t = Instant::now();
    while !c.up.load(std::sync::atomic::Ordering::Relaxed) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "not connected in time"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    c
}

/// A connection of the control plane's (`conn::spawn`, requests queued up to `capacity`) to
/// the anonymous broker on `port`, subscribed to `filters` (their publications' topics go to
/// `topics`); its URL.
async fn subscribed(
    port: u16,
    id: &str,
    filters: &'static [&'static str],
    capacity: usize,
    topics: mpsc::Sender<String>,
) -> (String, conn::Connection) {
    let login = Login {
        username: "anyone".into(),
        password: "anything".into(),
    };
    let url = format!("mqtt://127.0.0.1:{port}");
    let o = conn::mqtt_options(&url, id, &login).unwrap();
    let link = Link {
        filters,
        purpose: Some("the test"),
    };
    let mut c = conn::spawn(o, capacity, link, Topics(topics));
    tokio::time::timeout(Duration::from_secs(10), &mut c.subscribed)
        .await
        .expect("subscribed in time")
        .unwrap();
    (url, c)
}

#[test]
fn a_connection_comes_back_and_subscribes_again_after_the_broker_restarts() {
    let Some(m) = Setup::find() else { return };
    run(async move {
        let port = m.port;
        let broker = m.start().await;

        let (tx, mut rx) = mpsc::channel(16);
        let (_, _c) = subscribed(port, "conn-test", &["t/#"], 16, tx).await;
        publish_once(port, "t/before").await;
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert_eq!(got.unwrap().as_deref(), Some("t/before"));

        // the broker goes away and comes back on the same port, with no memory of the session
        drop(broker);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _broker = m.start().await;
        // publish until the new subscription takes it (the reconnection waits up to 5 s)
        let t = Instant::now();
        loop {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "nothing arrived after the restart: the connection did not subscribe again"
            );
            publish_once(port, "t/after").await;
            if let Ok(Some(topic)) =
                tokio::time::timeout(Duration::from_millis(300), rx.recv()).await
            {
                assert_eq!(topic, "t/after");
                break;
            }
        }
    });
}

/// The newest version each of `topics` topics `t/0..` holds retained on the broker on `port`
/// (the first 8 bytes of a document are its version), read by a client of its own.
async fn retained_versions(port: u16, topics: usize) -> Vec<Option<u64>> {
    let mut o = MqttOptions::new(format!("sub-{}", rand::random::<u32>()), "127.0.0.1", port);
    o.set_max_packet_size(1 << 21, 1 << 21);
    let (c, mut el) = AsyncClient::new(o, 8);
    let mut got = vec![None; topics];
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(3) && got.iter().any(Option::is_none) {
        match tokio::time::timeout(Duration::from_millis(500), el.poll()).await {
            Ok(Ok(MqttEvent::Incoming(Packet::ConnAck(_)))) => {
                c.subscribe("t/#", QoS::AtLeastOnce).await.unwrap();
            }
            Ok(Ok(MqttEvent::Incoming(Packet::Publish(p)))) => {
                let i: usize = p.topic["t/".len()..].parse().unwrap();
                got[i] = Some(u64::from_le_bytes(p.payload[..8].try_into().unwrap()));
            }
            Ok(Ok(_)) => {}
            Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(_) => {}
        }
    }
    let _ = c.disconnect().await;
    got
}

/// The peer lists leave through a queue of their own per broker
/// (`Publishers::publish_latest`): a broker that stops reading (its process stopped, as a
/// machine under load would be) holds up neither the caller, which the decision loop is, nor
/// more than one document per topic; once it reads again it gets the latest of each.
#[test]
fn the_latest_documents_never_wait_for_a_stalled_broker_and_only_the_latest_is_kept() {
    let Some(m) = Setup::find() else { return };
    run(async move {
        let port = m.port;
        let broker = m.start().await;
        let (tx, _rx) = mpsc::channel(16);
        let (url, c) = subscribed(port, "latest-test", &["nothing/#"], 4, tx).await;
        let lists = lists_connection(&url, "latest-test-lists").await;
        let publishers = Publishers::new(std::slice::from_ref(&url), &[c], &[lists]);

        // the broker stops reading; 100 topics of 256 KiB documents, five versions each, are
        // far more than the sockets' buffers hold
        let pid = broker.0.id().to_string();
        sh(Command::new("kill").args(["-STOP", &pid]));
        const TOPICS: usize = 100;
        let doc = |version: u64| {
            let mut d = vec![0u8; 256 << 10];
            d[..8].copy_from_slice(&version.to_le_bytes());
            d
        };
        for version in 1..=5 {
            for t in 0..TOPICS {
                publishers.publish_latest(&format!("t/{t}"), doc(version));
            }
            assert!(publishers.latest_queued() <= TOPICS, "one per topic");
        }
        // once the broker's connection has taken what it can, the rest waits in the queue
        let mut queued = publishers.latest_queued();
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = publishers.latest_queued();
            if now == queued {
                break;
            }
            queued = now;
        }
        assert!(queued > 0, "the stalled broker took every document");
        sh(Command::new("kill").args(["-CONT", &pid]));
        let t = Instant::now();
        loop {
            let got = retained_versions(port, TOPICS).await;
            if got.iter().all(|v| *v == Some(5)) {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the broker holds {got:?}, not the latest (5) of each topic"
            );
        }
    });
}

/// A desired state published while a round of peer lists drains to the same broker does not
/// wait behind the round: the lists leave on a connection of their own with a short queue
/// ([`brokers::LISTS_QUEUE`]). Drained onto the applications connection (queue 10,000, as
/// before), a round of 4,793 lists held a desired state of the 50,000-node load test for a
/// second.
#[test]
fn a_desired_state_never_waits_behind_a_round_of_peer_lists() {
    let Some(m) = Setup::find() else { return };
    run(async move {
        let port = m.port;
        // every list reaches the watcher (by default Mosquitto drops past 1,000 queued)
        let _broker = m.start_with("max_queued_messages 0\n").await;
        let (tx, mut seen) = mpsc::channel(1 << 16);
        let (url, _watch) = subscribed(port, "watch", &["t/#", "desired"], 16, tx).await;
        let (unused, _) = mpsc::channel(1);
        let (_, apps) = subscribed(port, "apps", &["nothing/#"], 10_000, unused).await;
        let lists = lists_connection(&url, "lists").await;
        let publishers = Publishers::new(std::slice::from_ref(&url), &[apps], &[lists]);

        const LISTS: usize = 5_000;
        for t in 0..LISTS {
            publishers.publish_latest(&format!("t/{t}"), vec![7u8; 2048]);
        }
        // the round is under way
        let t = Instant::now();
        while publishers.latest_queued() > LISTS - 500 {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the lists do not leave"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        publishers.publish("desired", b"d".to_vec(), false).await;
        let mut before = 0;
        loop {
            let topic = tokio::time::timeout(Duration::from_secs(30), seen.recv())
                .await
                .expect("the desired state came")
                .unwrap();
            if topic == "desired" {
                break;
            }
            before += 1;
        }
        assert!(
            before < LISTS / 2,
            "{before} of the {LISTS} peer lists arrived before the desired state"
        );
    });
}
