//! The MQTT session: client options per broker, the signed last will, the connection loop.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use acoa_shared::topics::{self, acl};
#[cfg(feature = "tls")]
use anyhow::Context;
use rumqttc::{Event as MqttEvent, LastWill, MqttOptions, Packet, QoS};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::{Shared, MAX_INCOMING_PACKET, MAX_OUTGOING_PACKET, REQUEST_QUEUE};
use crate::brokers::{Rotation, BACKOFF_MAX};
use crate::config::{BrokerUrl, Config};
use crate::presence::Presence;

#[cfg(feature = "tls")]
fn tls_transport(cfg: &Config) -> anyhow::Result<rumqttc::Transport> {
    let path = cfg.broker.ca_file.as_ref().context(
        "broker.ca_file: mqtts:// needs the CA certificate (PEM) that signed the broker's",
    )?;
    let ca = std::fs::read(path).with_context(|| format!("broker.ca_file {}", path.display()))?;
    Ok(rumqttc::Transport::tls_with_config(
        rumqttc::TlsConfiguration::Simple {
            ca,
            alpn: None,
            client_auth: None,
        },
    ))
}

#[cfg(not(feature = "tls"))]
fn tls_transport(_cfg: &Config) -> anyhow::Result<rumqttc::Transport> {
    anyhow::bail!(
        "broker.url: mqtts:// needs TLS, which this build leaves out (build with --features tls)"
    )
}

/// The client options for `broker`: the agent's session (client id, last will, login, limits)
/// with that broker's address and transport.
pub(super) fn mqtt_options(cfg: &Config, broker: &BrokerUrl) -> anyhow::Result<MqttOptions> {
    let mut opts = MqttOptions::new(
        format!("{}{}", acl::AGENT_CLIENT_PREFIX, cfg.node),
        broker.host.clone(),
        broker.port,
    );
    opts.set_keep_alive(Duration::from_secs(10));
    opts.set_clean_session(true);
    opts.set_max_packet_size(MAX_INCOMING_PACKET, MAX_OUTGOING_PACKET);
    opts.set_request_channel_capacity(REQUEST_QUEUE);
    opts.set_inflight(16);
    if let (Some(u), Some(p)) = (&cfg.broker.username, &cfg.broker.password) {
        opts.set_credentials(u.clone(), p.clone());
    }
    if broker.tls {
        opts.set_transport(tls_transport(cfg)?);
    }
    Ok(opts)
}

/// The last will of the agent's next connection: its signed `offline` presence.
pub(super) fn will(node: &str, presence: &mut Presence) -> LastWill {
    LastWill::new(
        topics::online(node),
        presence.will_for_next(),
        QoS::AtLeastOnce,
        true,
    )
}

/// The broker list for a log line: `host:port`, or `host:port (then host:port, ...)`.
pub(super) fn brokers_line(urls: &[BrokerUrl]) -> String {
    let mut line = urls.first().map(|u| u.to_string()).unwrap_or_default();
    if urls.len() > 1 {
        let rest: Vec<String> = urls[1..].iter().map(|u| u.to_string()).collect();
        line.push_str(&format!(" (then {})", rest.join(", ")));
    }
    line
}

/// The MQTT session: subscriptions and the online marker on every accepted connection, incoming
/// documents to the reconciler and the prober; on a failure the next broker of the list
/// (`brokers`, one set of options each) after the [`Rotation`]'s wait.
pub(super) async fn mqtt_loop(
    cfg: Config,
    mut eventloop: rumqttc::EventLoop,
    brokers: Vec<MqttOptions>,
    shared: Arc<Shared>,
    desired_tx: watch::Sender<Option<Vec<u8>>>,
    peers_tx: std::sync::mpsc::SyncSender<Vec<u8>>,
    session_tx: watch::Sender<u64>,
) {
    let desired_topic = topics::desired(&cfg.node);
    let peers_topic = topics::peers(&cfg.node);
    let urls = &cfg.broker.urls;
    let mut rotation = Rotation::new(brokers.len());
    let mut down_since: Option<Instant> = None;
    let mut failures = 0u32;
    loop {
        match eventloop.poll().await {
            Ok(MqttEvent::Incoming(Packet::ConnAck(_))) => {
                rotation.connected();
                let broker = &urls[rotation.current()];
                match down_since.take() {
                    Some(t) => info!(
                        "broker connection back after {:.1} s ({failures} failed attempts), on broker {broker}",
                        t.elapsed().as_secs_f64()
                    ),
                    None => info!("connected to broker {broker}"),
                }
                failures = 0;
                let c = &shared.client;
                let online = shared
                    .presence
                    .lock()
                    .map(|p| p.online())
                    .unwrap_or_default();
                let _ = c.try_publish(topics::online(&cfg.node), QoS::AtLeastOnce, true, online);
                let _ = c.try_subscribe(desired_topic.clone(), QoS::AtLeastOnce);
                let _ = c.try_subscribe(peers_topic.clone(), QoS::AtLeastOnce);
                shared.connected.store(true, Ordering::Relaxed);
                shared.sessions.fetch_add(1, Ordering::Relaxed);
                session_tx.send_modify(|n| *n += 1);
            }
            Ok(MqttEvent::Incoming(Packet::Publish(p))) => {
                if p.topic == desired_topic {
                    // a newer frame replaces one the reconciler has not read yet
                    desired_tx.send_replace(Some(p.payload.to_vec()));
                } else if p.topic == peers_topic {
                    if peers_tx.try_send(p.payload.to_vec()).is_err() {
                        warn!("dropped a peer-list frame: the prober is busy with 4 already");
                    }
                } else {
                    debug!("ignored a message on {}", p.topic);
                }
            }
            Ok(MqttEvent::Incoming(Packet::SubAck(s))) => {
                if s.return_codes
                    .iter()
                    .any(|c| matches!(c, rumqttc::SubscribeReasonCode::Failure))
                {
                    warn!("broker refused a subscription (check its ACL for this node)");
                }
            }
            Ok(_) => {}
            Err(e) => {
                shared.connected.store(false, Ordering::Relaxed);
                failures += 1;
                let failed = &urls[rotation.current()];
                let next = rotation.failed();
                let then = if next.moved {
                    format!("moving to broker {}", urls[next.broker])
                } else {
                    "retrying".to_string()
                };
                if down_since.is_none() {
                    down_since = Some(Instant::now());
                    warn!(
                        "broker connection lost: {failed}: {e}; {then} with backoff up to {} s",
                        BACKOFF_MAX.as_secs()
                    );
                } else {
                    debug!(
                        "broker {failed} unreachable: {e}; {then} in {} ms",
                        next.wait.as_millis()
                    );
                }
                if next.moved {
                    // the same session options, another address: a clean session there, as
                    // after any reconnection
                    eventloop.mqtt_options = brokers[next.broker].clone();
                }
                // the next connection's will, signed for it
                if let Ok(mut p) = shared.presence.lock() {
                    let w = will(&cfg.node, &mut p);
                    eventloop.mqtt_options.set_last_will(w);
                }
                tokio::time::sleep(next.wait).await;
            }
        }
    }
}
