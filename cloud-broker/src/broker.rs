//! The embedded MQTT broker (rumqttd), started by `serve` unless an external broker is given.
//! Every client must log in: the logins (nodes, workers, control plane, admin) are read from the
//! data directory and can be replaced while the broker runs (`node add` / `node remove`).
//! Every publication, subscription and last will is checked against `topics::acl`, the table
//! Mosquitto's generated ACL comes from (rumqttd is patched for that: `vendor/rumqttd`); a refusal
//! is logged once per client and hour.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use acoa_shared::topics::acl;
use rumqttd::{
    Access, AuthorizeHandler, Broker, Config, ConnectionSettings, RouterConfig, ServerSettings,
    TlsConfig,
};
use tracing::{info, warn};

use crate::identity::Account;

/// Logins the broker accepts and their roles, shared with the loop that reloads the inventory.
pub type Logins = Arc<RwLock<BTreeMap<String, Account>>>;

/// Largest publication the broker accepts (a placement job with its cluster snapshot fits);
/// what agents read is held to their packet size by `topics::acl::receiver_limit`.
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
        authorize: Some(authorize(logins.clone())),
    };
    connections.set_auth_handler(move |client_id: String, user: String, pass: String| {
        let role = logins
            .read()
            .map(|m| {
                m.get(&user)
                    .filter(|a| constant_time_eq(a.password.as_bytes(), pass.as_bytes()))
                    .map(|a| a.role)
            })
            .unwrap_or(None);
        let ok = match role {
            None => {
                warn!(
                    "broker refused client `{client_id}`: wrong user name or password for `{user}`"
                );
                false
            }
            // taking a reserved client id would close that connection (the control plane's)
            Some(role) => match acl::may_use_client_id(role, &user, &client_id) {
                Ok(()) => true,
                Err(e) => {
                    warn!("broker refused client `{client_id}`: {e}");
                    false
                }
            },
        };
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

/// The check of every publication, subscription and will: the user's role from `logins`, then
/// `topics::acl`.
fn authorize(logins: Logins) -> AuthorizeHandler {
    let log = Mutex::new(RefusalLog::new(Instant::now()));
    Arc::new(move |client: &str, user: &str, access: Access<'_>| {
        let role = logins.read().ok().and_then(|m| m.get(user).map(|a| a.role));
        let verdict = match (role, access) {
            (None, _) => Err(format!("`{user}` is not a login any more")),
            (Some(r), Access::Publish { topic, payload_len }) => {
                acl::may_publish(r, user, topic, payload_len).map_err(|e| e.to_string())
            }
            (Some(r), Access::Subscribe { filter }) => {
                acl::may_subscribe(r, user, filter).map_err(|e| e.to_string())
            }
        };
        if let Err(reason) = &verdict {
            let note = log
                .lock()
                .map(|mut l| l.note(Instant::now(), client))
                .unwrap_or(Note::Quiet);
            match note {
                Note::Log => warn!(
                    "broker refused client `{client}`: {reason} (its further refusals within the hour are not logged)"
                ),
                Note::Full => warn!(
                    "broker refused more than {LOGGED_CLIENTS} clients within the hour: further refusals are not logged"
                ),
                Note::Quiet => {}
            }
        }
        verdict.is_ok()
    })
}

/// How many clients' refusals are logged per [`LOG_WINDOW`] at most.
pub const LOGGED_CLIENTS: usize = 256;
/// After this, a client's refusals are logged again.
pub const LOG_WINDOW: Duration = Duration::from_secs(3600);

/// Whether to log a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Note {
    /// The client's first refusal in the window.
    Log,
    /// The table is full: say once that refusals go unlogged.
    Full,
    Quiet,
}

/// Which clients' refusals were logged in the current window: one line per client, at most
/// [`LOGGED_CLIENTS`] lines and one more per window whatever clients do.
#[derive(Debug)]
pub struct RefusalLog {
    since: Instant,
    clients: BTreeSet<String>,
    full_said: bool,
}

impl RefusalLog {
    pub fn new(now: Instant) -> RefusalLog {
        RefusalLog {
            since: now,
            clients: BTreeSet::new(),
            full_said: false,
        }
    }

    /// A refusal of `client` at `now`.
    pub fn note(&mut self, now: Instant, client: &str) -> Note {
        if now.duration_since(self.since) >= LOG_WINDOW {
            *self = RefusalLog::new(now);
        }
        if self.clients.contains(client) {
            Note::Quiet
        } else if self.clients.len() < LOGGED_CLIENTS {
            self.clients.insert(client.to_string());
            Note::Log
        } else if !self.full_said {
            self.full_said = true;
            Note::Full
        } else {
            Note::Quiet
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use acoa_shared::topics::{self, acl::Role};

    fn logins() -> Logins {
        let a = |role| Account {
            password: "pw".into(),
            role,
        };
        Arc::new(RwLock::new(BTreeMap::from([
            ("n1".to_string(), a(Role::Node)),
            ("n2".to_string(), a(Role::Node)),
            ("w1".to_string(), a(Role::Worker)),
            ("cp".to_string(), a(Role::ControlPlane)),
        ])))
    }

    fn publish(topic: &str, payload_len: usize) -> Access<'_> {
        Access::Publish { topic, payload_len }
    }

    fn sub(filter: &str) -> Access<'_> {
        Access::Subscribe { filter }
    }

    #[test]
    fn every_listener_checks_the_acl_with_the_current_logins() {
        let l = logins();
        let tls = TlsListener {
            listen: "127.0.0.1:2".parse().unwrap(),
            cert: "c".into(),
            key: "k".into(),
        };
        let cfg = config_with_tls("127.0.0.1:1".parse().unwrap(), l.clone(), Some(&tls));
        let v4 = cfg.v4.unwrap();
        assert_eq!(v4.len(), 2);
        for s in v4.values() {
            let check = s.connections.authorize.clone().unwrap();
            assert!(check("sim-n1", "n1", publish(&topics::report("n1"), 100)));
            assert!(!check("sim-n1", "n1", publish(&topics::report("n2"), 100)));
            assert!(!check("sim-n1", "n1", publish(&topics::desired("n2"), 10)));
            assert!(!check("sim-n1", "n1", publish(&topics::app("x"), 10)));
            assert!(!check("sim-n1", "n1", publish("acoa/v1/nodes/n1/+", 10)));
            assert!(check("sim-n1", "n1", sub(&topics::desired("n1"))));
            assert!(!check("sim-n1", "n1", sub("#")));
            assert!(!check("sim-n1", "n1", sub(&topics::desired("n2"))));
            assert!(check("sim-n1", "n1", sub(&topics::peers("n1"))));
            assert!(!check("sim-n1", "n1", sub(&topics::peers("n2"))));
            assert!(check("w", "w1", sub("$share/g/acoa/v1/sched/jobs")));
            assert!(check("cp", "cp", publish(&topics::desired("n2"), 1000)));
            assert!(!check("cp", "cp", publish(&topics::desired("n2"), 600_000)));
            // not a login (any more): nothing
            assert!(!check("x", "nobody", sub(&topics::peers("n1"))));
        }
        l.write().unwrap().remove("n1");
        let check = v4["1"].connections.authorize.clone().unwrap();
        assert!(!check("sim-n1", "n1", publish(&topics::report("n1"), 100)));
    }

    #[test]
    fn refusals_are_logged_once_per_client_and_window() {
        let t0 = Instant::now();
        let mut log = RefusalLog::new(t0);
        assert_eq!(log.note(t0, "a"), Note::Log);
        assert_eq!(log.note(t0, "a"), Note::Quiet);
        for i in 1..LOGGED_CLIENTS {
            assert_eq!(log.note(t0, &format!("c{i}")), Note::Log);
        }
        assert_eq!(log.note(t0, "one-too-many"), Note::Full);
        assert_eq!(log.note(t0, "another"), Note::Quiet);
        assert_eq!(log.note(t0, "a"), Note::Quiet);
        let later = t0 + LOG_WINDOW;
        assert_eq!(log.note(later, "a"), Note::Log);
        assert_eq!(log.note(later, "a"), Note::Quiet);
    }
}
