//! The control plane's connection loop (`conn::spawn`) against a real Mosquitto that is stopped
//! and started again: the connection comes back by itself and subscribes again, so a
//! publication after the broker's restart still arrives (the session is clean: without the
//! new subscription it would not). Needs the `mosquitto` binary (Debian: apt-get install
//! mosquitto).

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cloud_broker::conn::{self, Inbox, Link};
use cloud_broker::identity::Login;
use common::*;
use rumqttc::{AsyncClient, Event as MqttEvent, MqttOptions, Packet, Publish, QoS};
use tokio::sync::mpsc;

/// An anonymous Mosquitto on 127.0.0.1:`port`, killed on drop.
struct Broker(Child);

impl Broker {
    async fn start(mosquitto: &Path, dir: &Path, port: u16) -> Broker {
        let conf = dir.join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!("listener {port} 127.0.0.1\nallow_anonymous true\n"),
        )
        .unwrap();
        let child = Command::new(mosquitto)
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

#[test]
fn a_connection_comes_back_and_subscribes_again_after_the_broker_restarts() {
    let Some(mosquitto) = find_bin("mosquitto") else {
        eprintln!("SKIPPED: mosquitto is not installed (apt-get install mosquitto)");
        return;
    };
    run(async move {
        let dir = tempdir_for_mosquitto();
        let port = free_port();
        let broker = Broker::start(&mosquitto, dir.path(), port).await;

        let login = Login {
            username: "anyone".into(),
            password: "anything".into(),
        };
        let url = format!("mqtt://127.0.0.1:{port}");
        let o = conn::mqtt_options(&url, "conn-test", &login).unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let link = Link {
            filters: &["t/#"],
            purpose: Some("the test"),
        };
        let c = conn::spawn(o, 16, link, Topics(tx));
        tokio::time::timeout(Duration::from_secs(10), c.subscribed)
            .await
            .expect("subscribed in time")
            .unwrap();
        publish_once(port, "t/before").await;
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert_eq!(got.unwrap().as_deref(), Some("t/before"));

        // the broker goes away and comes back on the same port, with no memory of the session
        drop(broker);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _broker = Broker::start(&mosquitto, dir.path(), port).await;
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
