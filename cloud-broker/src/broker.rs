//! The embedded MQTT broker (rumqttd), started by `serve` unless an external broker is given.
//! Every client must log in: the logins (nodes, control plane, admin) are read from the data
//! directory and can be replaced while the broker runs (`node add` / `node remove`).
//! rumqttd has no per-topic access rules: end-to-end signatures are what keep one node's
//! credentials from commanding or speaking for another.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use rumqttd::{Broker, Config, ConnectionSettings, RouterConfig, ServerSettings, TlsConfig};
use tracing::{info, warn};

/// Logins the broker accepts, shared with the loop that reloads the inventory.
pub type Logins = Arc<RwLock<BTreeMap<String, String>>>;

/// Largest publication the broker accepts (the peer list of a few thousand nodes fits).
pub const MAX_PAYLOAD: usize = 1 << 20;

/// A second listener, for MQTT over TLS (`mqtts://`): the server's certificate chain and key
/// (PEM). Clients still log in with their user name and password; the plain listener can stay
/// on loopback for the control plane itself and the CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsListener {
    pub listen: SocketAddr,
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub fn config(listen: SocketAddr, logins: Logins) -> Config {
    config_with_tls(listen, logins, None)
}

pub fn config_with_tls(listen: SocketAddr, logins: Logins, tls: Option<&TlsListener>) -> Config {
    let mut connections = ConnectionSettings {
        connection_timeout_ms: 10_000,
        max_payload_size: MAX_PAYLOAD,
        max_inflight_count: 200,
        auth: None,
        external_auth: None,
        dynamic_filters: true,
    };
    connections.set_auth_handler(move |client_id: String, user: String, pass: String| {
        let ok = logins
            .read()
            .map(|m| {
                m.get(&user)
                    .is_some_and(|p| constant_time_eq(p.as_bytes(), pass.as_bytes()))
            })
            .unwrap_or(false);
        if !ok {
            warn!("broker refused client `{client_id}`: wrong user name or password for `{user}`");
        }
        async move { ok }
    });
    let server = ServerSettings {
        name: "acoa-v4".into(),
        listen,
        tls: None,
        next_connection_delay_ms: 0,
        connections,
    };
    let mut v4 = HashMap::new();
    if let Some(t) = tls {
        let mut s = server.clone();
        s.name = "acoa-v4-tls".into();
        s.listen = t.listen;
        s.tls = Some(TlsConfig::Rustls {
            capath: None,
            certpath: t.cert.display().to_string(),
            keypath: t.key.display().to_string(),
        });
        v4.insert("2".to_string(), s);
    }
    v4.insert("1".to_string(), server);
    Config {
        id: 0,
        router: RouterConfig {
            max_connections: 20_000,
            max_outgoing_packet_count: 1000,
            // per subscribed filter: at most 3 × 2 MiB of backlog (a segment holds the largest
            // payload); memory stays bounded whatever the fleet size
            max_segment_size: 2 << 20,
            max_segment_count: 3,
            custom_segment: None,
            initialized_filters: None,
            shared_subscriptions_strategy: Default::default(),
        },
        v4: Some(v4),
        v5: None,
        ws: None,
        cluster: None,
        console: None,
        bridge: None,
        prometheus: None,
        metrics: None,
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Starts the broker on its own threads; returns once it was started (it runs until exit).
pub fn start(listen: SocketAddr, logins: Logins) -> anyhow::Result<()> {
    start_with_tls(listen, logins, None)
}

/// [`start`], with a TLS listener too when `tls` is given.
pub fn start_with_tls(
    listen: SocketAddr,
    logins: Logins,
    tls: Option<TlsListener>,
) -> anyhow::Result<()> {
    // rumqttd binds in its own thread and reports failure only by logging: check the port
    // and the TLS files first.
    std::net::TcpListener::bind(listen)
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
    if let Some(t) = &tls {
        std::net::TcpListener::bind(t.listen)
            .map_err(|e| anyhow::anyhow!("cannot listen on {} (TLS): {e}", t.listen))?;
        for (what, p) in [("certificate", &t.cert), ("key", &t.key)] {
            let text = std::fs::read_to_string(p)
                .map_err(|e| anyhow::anyhow!("cannot read the TLS {what} {}: {e}", p.display()))?;
            if !text.contains("-----BEGIN") {
                anyhow::bail!("the TLS {what} {} is not PEM", p.display());
            }
        }
    }
    let mut broker = Broker::new(config_with_tls(listen, logins, tls.as_ref()));
    std::thread::Builder::new()
        .name("broker".into())
        .spawn(move || {
            if let Err(e) = broker.start() {
                tracing::error!("embedded broker stopped: {e}");
            }
        })?;
    info!("embedded MQTT broker listening on {listen} (credentials required)");
    if let Some(t) = &tls {
        info!(
            "embedded MQTT broker listening on {} with TLS (certificate {})",
            t.listen,
            t.cert.display()
        );
    }
    Ok(())
}
