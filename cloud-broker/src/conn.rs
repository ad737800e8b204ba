//! The control plane's broker connections: the broker address, the client options, and the one
//! loop every long-lived connection runs (connect, subscribe, reconnect with bounded backoff).
//!
//! Invariants:
//! - A [`spawn`]ed connection subscribes its filter again after every accepted connection, so a
//!   reconnection never leaves it deaf (the session is clean).
//! - After a failure it waits [`BACKOFF_FIRST_MS`], doubling up to [`BACKOFF_MAX_MS`], and starts
//!   from [`BACKOFF_FIRST_MS`] again once connected; it never gives up on its own.
//! - It stops only when its [`Inbox`] says the receiving side is gone.
//! - [`Connection::up`] is true from an accepted connection to the next failure.
//! - A broker list ([`parse_list`]) has one to [`MAX_BROKERS`] brokers, no two alike.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rumqttc::{
    AsyncClient, Event as MqttEvent, MqttOptions, Packet, Publish, QoS, SubscribeFilter,
};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info, warn};

use crate::broker::MAX_PAYLOAD;
use crate::identity::Login;

/// The first wait before connecting again after a failure.
pub const BACKOFF_FIRST_MS: u64 = 100;
/// The longest wait before connecting again.
pub const BACKOFF_MAX_MS: u64 = 5000;

/// `mqtt://host:port` (or `tcp://`, or plain `host:port`) → host, port.
pub fn parse_url(url: &str) -> anyhow::Result<(String, u16)> {
    use acoa_shared::topics::{broker_address, BrokerUrlError};
    broker_address(url).map_err(|e| match e {
        BrokerUrlError::Tls(_) => anyhow::anyhow!(
            "{url}: TLS brokers are not supported by this build of the control plane"
        ),
        e => anyhow::anyhow!("{e}"),
    })
}

/// The most brokers the control plane connects to at once.
pub const MAX_BROKERS: usize = 8;

/// `--broker-url`'s list (`URL[,URL...]`, blanks around commas ignored): every URL parses, at
/// most [`MAX_BROKERS`], none twice (the same host and port).
pub fn parse_list(list: &str) -> anyhow::Result<Vec<String>> {
    let urls: Vec<String> = list.split(',').map(|u| u.trim().to_string()).collect();
    anyhow::ensure!(
        urls.len() <= MAX_BROKERS,
        "--broker-url: {} brokers, at most {MAX_BROKERS}",
        urls.len()
    );
    let mut seen = Vec::with_capacity(urls.len());
    for (i, u) in urls.iter().enumerate() {
        anyhow::ensure!(!u.is_empty(), "--broker-url: entry {} is empty", i + 1);
        let addr =
            parse_url(u).map_err(|e| anyhow::anyhow!("--broker-url: entry {}: {e}", i + 1))?;
        anyhow::ensure!(
            !seen.contains(&addr),
            "--broker-url: entry {}: {u} is listed twice",
            i + 1
        );
        seen.push(addr);
    }
    Ok(urls)
}

/// Client options for `url` with `login`.
pub fn mqtt_options(url: &str, client_id: &str, login: &Login) -> anyhow::Result<MqttOptions> {
    let (host, port) = parse_url(url)?;
    let mut o = MqttOptions::new(client_id, host, port);
    o.set_credentials(&login.username, &login.password);
    o.set_keep_alive(Duration::from_secs(10));
    o.set_max_packet_size(MAX_PAYLOAD + 1024, MAX_PAYLOAD + 1024);
    o.set_clean_session(true);
    o.set_inflight(200);
    Ok(o)
}

/// The wait before the next connection attempt: doubles on every failure up to
/// [`BACKOFF_MAX_MS`], back to [`BACKOFF_FIRST_MS`] once connected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    next_ms: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            next_ms: BACKOFF_FIRST_MS,
        }
    }
}

impl Backoff {
    /// The wait after one more failure.
    pub fn failed(&mut self) -> Duration {
        let d = Duration::from_millis(self.next_ms);
        self.next_ms = (self.next_ms * 2).min(BACKOFF_MAX_MS);
        d
    }

    /// A connection was accepted.
    pub fn connected(&mut self) {
        self.next_ms = BACKOFF_FIRST_MS;
    }
}

/// Where a connection's publications go.
pub trait Inbox: Send + 'static {
    /// One publication on the connection's filter; `false` when the receiving side is gone
    /// (the connection stops).
    fn publish(&mut self, p: Publish) -> impl Future<Output = bool> + Send;
}

/// The inbox of a connection that only publishes (no filter): it gets nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct PublishOnly;

impl Inbox for PublishOnly {
    async fn publish(&mut self, _: Publish) -> bool {
        true
    }
}

/// What a connection is: its filter and how its log lines name it.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    /// Subscribed (at least once) on every accepted connection; none for a connection that
    /// only publishes.
    pub filters: &'static [&'static str],
    /// What the connection is for, in its log lines; `None` for the node telemetry, whose
    /// connection is announced at info level ("connected to the broker").
    pub purpose: Option<&'static str>,
}

impl Link {
    fn connected(&self) {
        match self.purpose {
            None => info!("connected to the broker"),
            Some(p) => debug!("connected to the broker for {p}"),
        }
    }

    fn failed(&self, e: &rumqttc::ConnectionError, wait: Duration) {
        let ms = wait.as_millis();
        match self.purpose {
            None => warn!("broker connection: {e}; retrying in {ms} ms"),
            Some(p) => warn!("broker connection ({p}): {e}; retrying in {ms} ms"),
        }
    }
}

/// A running connection.
pub struct Connection {
    /// Publishes on this connection.
    pub client: AsyncClient,
    /// Fires once, when the broker first acknowledges the subscription (never for a connection
    /// that only publishes).
    pub subscribed: oneshot::Receiver<()>,
    /// One message per accepted connection after the first (the broker may have restarted and
    /// lost what it held); whether the broker kept a session (`session_present`).
    pub reconnected: mpsc::UnboundedReceiver<bool>,
    /// Whether the broker accepted the connection and it has not failed since.
    pub up: Arc<AtomicBool>,
}

/// Connects with `options` (requests queued up to `capacity`), subscribes `link.filters` on every
/// accepted connection and hands each publication to `inbox`, reconnecting after failures.
pub fn spawn(
    options: MqttOptions,
    capacity: usize,
    link: Link,
    mut inbox: impl Inbox,
) -> Connection {
    let (client, mut eventloop) = AsyncClient::new(options, capacity);
    let (ready_tx, subscribed) = oneshot::channel();
    let (again_tx, reconnected) = mpsc::unbounded_channel();
    let sub = client.clone();
    let up = Arc::new(AtomicBool::new(false));
    let up_loop = up.clone();
    tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let mut first = true;
        let mut backoff = Backoff::default();
        loop {
            match eventloop.poll().await {
                Ok(MqttEvent::Incoming(Packet::Publish(p))) => {
                    if !inbox.publish(p).await {
                        return;
                    }
                }
                Ok(MqttEvent::Incoming(Packet::ConnAck(ack))) => {
                    up_loop.store(true, Ordering::Relaxed);
                    backoff.connected();
                    link.connected();
                    if !std::mem::take(&mut first) {
                        let _ = again_tx.send(ack.session_present);
                    }
                    if link.filters.is_empty() {
                        continue;
                    }
                    // on a task of its own: the request waits for this loop to poll again
                    let c = sub.clone();
                    tokio::spawn(async move {
                        let subs = link
                            .filters
                            .iter()
                            .map(|f| SubscribeFilter::new(f.to_string(), QoS::AtLeastOnce));
                        if let Err(e) = c.subscribe_many(subs).await {
                            error!("cannot subscribe to {}: {e}", link.filters.join(", "));
                        }
                    });
                }
                Ok(MqttEvent::Incoming(Packet::SubAck(_))) => {
                    if let Some(r) = ready.take() {
                        let _ = r.send(());
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    up_loop.store(false, Ordering::Relaxed);
                    let wait = backoff.failed();
                    link.failed(&e, wait);
                    tokio::time::sleep(wait).await;
                }
            }
        }
    });
    Connection {
        client,
        subscribed,
        reconnected,
        up,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_bound_and_restarts_once_connected() {
        let mut b = Backoff::default();
        let waits: Vec<u64> = (0..8).map(|_| b.failed().as_millis() as u64).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        b.connected();
        assert_eq!(b.failed(), Duration::from_millis(BACKOFF_FIRST_MS));
    }

    #[test]
    fn broker_urls_parse_and_tls_is_refused_by_name() {
        assert_eq!(
            parse_url("mqtt://127.0.0.1:1884").unwrap(),
            ("127.0.0.1".into(), 1884)
        );
        assert_eq!(parse_url("broker").unwrap(), ("broker".into(), 1883));
        let e = parse_url("mqtts://h:8883").unwrap_err().to_string();
        assert!(e.contains("control plane"), "{e}");
        assert!(parse_url("mqtt://h:x").is_err());
    }

    #[test]
    fn a_broker_list_parses_in_order_and_what_is_wrong_is_named() {
        assert_eq!(
            parse_list("mqtt://a:1, mqtt://b:2").unwrap(),
            ["mqtt://a:1", "mqtt://b:2"]
        );
        assert_eq!(parse_list("mqtt://a:1").unwrap(), ["mqtt://a:1"]);
        for (list, want) in [
            ("mqtt://a:1,", "--broker-url: entry 2 is empty"),
            ("mqtt://a:1,mqtt://b:x", "--broker-url: entry 2: "),
            (
                "mqtt://a,mqtt://a:1883",
                "--broker-url: entry 2: mqtt://a:1883 is listed twice",
            ),
            (
                "mqtt://a,mqtts://b",
                "--broker-url: entry 2: mqtts://b: TLS brokers",
            ),
        ] {
            let e = parse_list(list).unwrap_err().to_string();
            assert!(e.starts_with(want), "{list}: {e}");
        }
        let many: Vec<String> = (0..=MAX_BROKERS).map(|i| format!("mqtt://h{i}")).collect();
        let e = parse_list(&many.join(",")).unwrap_err().to_string();
        assert!(e.contains(&format!("at most {MAX_BROKERS}")), "{e}");
    }
}
