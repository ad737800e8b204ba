//! Workload traffic statistics for the node's agent: the sending side of the stats datagram.
//!
//! The agent injects `ACOA_AGENT_STATS=ip:port`, `ACOA_APP`, `ACOA_COMPONENT` and
//! `ACOA_CONTAINER` into every container it starts. A workload counts what it sends to each
//! downstream component, and the time it spends on each message it serves (from receiving it,
//! or at a source from the moment it is due, to forwarding it: its own clock only), and, about
//! every second, sends the agent one JSON datagram (at most [`MAX_DATAGRAM`] bytes) with the
//! cumulative counters since it started:
//!
//! ```json
//! {"v":2,"app":"A","component":"C","container":"A.C","sent":[{"to":"D","bytes":123456,"messages":789}],"service":{"us":61200,"messages":10}}
//! ```
//!
//! `container` is left out without `ACOA_CONTAINER`, `service` before the first message served
//! (the agent reads both as "not said"). The container's name tells the agent which copy
//! measured it when two copies of a component run side by side during a rollout.
//!
//! `to` names the downstream component (a channel name of the application is also accepted:
//! the control plane resolves it to the channel's `to`). [`Reporter`] does this for any workload
//! program: without `ACOA_AGENT_STATS` it is a no-op; it never blocks (non-blocking socket,
//! send errors ignored) and never panics.
//!
//! Standard library only: `acoa-workload` and `na-micro` are built with plain `rustc`
//! (hil-tests/images.sh) and include this file with `#[path]`; it includes the datagram's limits
//! (shared/src/wire/stats_datagram.rs) the same way.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

// The version and limits, one definition for both sides (the agent reads them from
// `acoa_shared::wire::stats_datagram`): included by path, as this file itself is.
#[path = "../../shared/src/wire/stats_datagram.rs"]
#[allow(dead_code)] // the agent's side of the contract (versions it reads, its bounds)
mod contract;
/// The datagram's format version, its largest size, and the downstream components counted
/// (further ones are ignored).
pub use contract::{MAX_DATAGRAM, MAX_DOWNSTREAM, VERSION};

/// How often [`Reporter::tick`] sends.
pub const PERIOD: Duration = Duration::from_secs(1);

/// Cumulative counters towards one downstream component.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    pub to: String,
    pub bytes: u64,
    pub messages: u64,
}

/// `s` as a JSON string literal.
fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// The datagram of `app`/`component` (in `container`) with the counters `sent` and the service
/// time `service` (microseconds, messages).
fn encode(
    app: &str,
    component: &str,
    container: Option<&str>,
    sent: &[Sent],
    service: Option<(u64, u64)>,
) -> String {
    let entries: Vec<String> = sent
        .iter()
        .map(|s| {
            format!(
                "{{\"to\":{},\"bytes\":{},\"messages\":{}}}",
                json_str(&s.to),
                s.bytes,
                s.messages
            )
        })
        .collect();
    let container = container
        .map(|c| format!(",\"container\":{}", json_str(c)))
        .unwrap_or_default();
    let service = service
        .map(|(us, m)| format!(",\"service\":{{\"us\":{us},\"messages\":{m}}}"))
        .unwrap_or_default();
    format!(
        "{{\"v\":{VERSION},\"app\":{},\"component\":{}{container},\"sent\":[{}]{service}}}",
        json_str(app),
        json_str(component),
        entries.join(",")
    )
}

struct Inner {
    sock: UdpSocket,
    agent: SocketAddr,
    app: String,
    component: String,
    container: Option<String>,
    sent: Vec<Sent>,
    /// Microseconds spent on the messages served, and their count.
    service: Option<(u64, u64)>,
    next: Instant,
}

/// Counts what a workload sends and reports it to the agent; see the module documentation.
pub struct Reporter {
    inner: Option<Inner>,
}

impl Reporter {
    /// From `ACOA_AGENT_STATS`, `ACOA_APP` and `ACOA_COMPONENT` (and `ACOA_CONTAINER` when
    /// set); a no-op reporter when any of the three is unset or the address does not resolve.
    pub fn from_env() -> Self {
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.trim().is_empty());
        match (
            var("ACOA_AGENT_STATS"),
            var("ACOA_APP"),
            var("ACOA_COMPONENT"),
        ) {
            (Some(addr), Some(app), Some(comp)) => {
                match addr
                    .trim()
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                {
                    Some(a) => Self::new(a, &app, &comp).in_container(var("ACOA_CONTAINER")),
                    None => Self::disabled(),
                }
            }
            _ => Self::disabled(),
        }
    }

    /// A reporter that sends to `agent` (disabled when no local socket can be bound).
    pub fn new(agent: SocketAddr, app: &str, component: &str) -> Self {
        let bind = if agent.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        };
        let inner = UdpSocket::bind(bind)
            .and_then(|s| s.set_nonblocking(true).map(|_| s))
            .ok()
            .map(|sock| Inner {
                sock,
                agent,
                app: app.to_string(),
                component: component.to_string(),
                container: None,
                sent: Vec::new(),
                service: None,
                next: Instant::now() + PERIOD,
            });
        Reporter { inner }
    }

    /// The reporter of the container named `container` (`ACOA_CONTAINER`).
    pub fn in_container(mut self, container: Option<String>) -> Self {
        if let Some(i) = self.inner.as_mut() {
            i.container = container;
        }
        self
    }

    /// A reporter that does nothing.
    pub fn disabled() -> Self {
        Reporter { inner: None }
    }

    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Counts one message of `bytes` bytes sent to downstream component `to`.
    pub fn record(&mut self, to: &str, bytes: usize) {
        let Some(i) = self.inner.as_mut() else {
            return;
        };
        if let Some(s) = i.sent.iter_mut().find(|s| s.to == to) {
            s.bytes = s.bytes.saturating_add(bytes as u64);
            s.messages = s.messages.saturating_add(1);
        } else if i.sent.len() < MAX_DOWNSTREAM {
            i.sent.push(Sent {
                to: to.to_string(),
                bytes: bytes as u64,
                messages: 1,
            });
        }
    }

    /// Counts one message served in `took` (received, or due at a source, to forwarded).
    pub fn record_service(&mut self, took: Duration) {
        let Some(i) = self.inner.as_mut() else {
            return;
        };
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let (t, m) = i.service.unwrap_or((0, 0));
        i.service = Some((t.saturating_add(us), m.saturating_add(1)));
    }

    /// Sends the counters when a period has passed since the last send; call it often.
    pub fn tick(&mut self) {
        if self
            .inner
            .as_ref()
            .is_some_and(|i| Instant::now() >= i.next)
        {
            self.flush();
        }
    }

    /// Sends the counters now.
    pub fn flush(&mut self) {
        let Some(d) = self.datagram() else {
            return;
        };
        if let Some(i) = self.inner.as_mut() {
            let _ = i.sock.send_to(d.as_bytes(), i.agent);
            i.next = Instant::now() + PERIOD;
        }
    }

    /// The datagram as it would be sent now (`None` when disabled): entries that would push it
    /// past [`MAX_DATAGRAM`] bytes are left out.
    pub fn datagram(&self) -> Option<String> {
        let i = self.inner.as_ref()?;
        let mut n = i.sent.len();
        loop {
            let text = encode(
                &i.app,
                &i.component,
                i.container.as_deref(),
                &i.sent[..n],
                i.service,
            );
            if text.len() <= MAX_DATAGRAM {
                return Some(text);
            }
            if n == 0 {
                return None; // names alone too long: nothing sensible to send
            }
            n -= 1;
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> &[Sent] {
        self.inner.as_ref().map(|i| &i.sent[..]).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_reporter_is_a_no_op() {
        let mut r = Reporter::disabled();
        r.record("x", 10);
        r.tick();
        r.flush();
        assert!(!r.is_enabled());
        assert!(r.datagram().is_none());
        assert!(r.counters().is_empty());
    }

    #[test]
    fn counts_and_sends_cumulative_counters() {
        let agent = UdpSocket::bind("127.0.0.1:0").unwrap();
        agent
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut r = Reporter::new(agent.local_addr().unwrap(), "smoke", "measurement");
        r.record("level-detection", 100);
        r.record("level-detection", 50);
        r.record("alarm", 7);
        r.flush();
        let mut buf = [0u8; 2048];
        let n = agent.recv(&mut buf).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&buf[..n]).unwrap();
        assert_eq!(v["v"], 2);
        assert_eq!(v["app"], "smoke");
        assert_eq!(v["component"], "measurement");
        assert_eq!(v["sent"][0]["to"], "level-detection");
        assert_eq!(v["sent"][0]["bytes"], 150);
        assert_eq!(v["sent"][0]["messages"], 2);
        assert_eq!(v["sent"][1]["to"], "alarm");
        r.record("alarm", 3);
        r.flush();
        let n = agent.recv(&mut buf).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&buf[..n]).unwrap();
        assert_eq!(v["sent"][1]["bytes"], 10, "cumulative");
        assert!(
            v.get("container").is_none() && v.get("service").is_none(),
            "{v}"
        );
    }

    #[test]
    fn names_its_container_and_sums_its_service_times() {
        let mut r = Reporter::new("127.0.0.1:9".parse().unwrap(), "smoke", "alarm")
            .in_container(Some("smoke.alarm.r2".into()));
        r.record_service(Duration::from_micros(60_000));
        r.record_service(Duration::from_micros(62_500));
        let v: serde_json::Value = serde_json::from_str(&r.datagram().unwrap()).unwrap();
        assert_eq!(v["container"], "smoke.alarm.r2");
        assert_eq!(v["service"]["us"], 122_500);
        assert_eq!(v["service"]["messages"], 2);
    }

    #[test]
    fn datagram_stays_within_a_kibibyte() {
        let mut r = Reporter::new("127.0.0.1:9".parse().unwrap(), "a", "b");
        for k in 0..40 {
            r.record(&format!("{k:0>60}"), 1);
        }
        assert_eq!(r.counters().len(), MAX_DOWNSTREAM);
        let d = r.datagram().unwrap();
        assert!(d.len() <= MAX_DATAGRAM, "{}", d.len());
        assert!(d.contains("\"sent\":[{"));
        serde_json::from_str::<serde_json::Value>(&d).unwrap();
    }

    #[test]
    fn names_are_escaped() {
        let r = Reporter::new("127.0.0.1:9".parse().unwrap(), "a\"b", "c\\d\n");
        let v: serde_json::Value = serde_json::from_str(&r.datagram().unwrap()).unwrap();
        assert_eq!(v["app"], "a\"b");
        assert_eq!(v["component"], "c\\d\n");
        assert_eq!(v["sent"], serde_json::json!([]));
    }
}
