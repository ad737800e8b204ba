//! What the components on this node use: traffic and service times from the workloads' own
//! stats datagrams, CPU and memory from the runtime, put together into a [`ComponentUsage`]
//! message every report period.
//!
//! Workloads send the agent (UDP, `[stats] listen`, address injected into every container as
//! `ACOA_AGENT_STATS`, with the container's name as `ACOA_CONTAINER`), about every second, one
//! JSON datagram of at most [`MAX_DATAGRAM`] bytes with cumulative counters since they started
//! (`hil_tests::stats::Reporter` does it):
//! `{"v":2,"app":"A","component":"C","container":"A.C","sent":[{"to":"D","bytes":123456,"messages":789}],"service":{"us":61200,"messages":10}}`.
//! `service` is the time the workload spent on the messages it served (receive to forward, on
//! its own clock), in microseconds, and their count; the agent reports the mean per message
//! over each report period. Version 1 (no `container`, no `service`) is still read: its traffic
//! counts for every container of its app/component.
//!
//! Pure and bounded: a [`Table`] of at most [`MAX_ENTRIES`] entries (per container of the
//! current desired state, and per app/component for datagrams that name no container), each
//! with at most [`MAX_DOWNSTREAM`] downstream counters; only containers and app/component pairs
//! of the current desired state are accepted; time comes in as a value.

use std::time::{Duration, Instant};

use acoa_shared::wire::{
    self, ComponentSample, ComponentUsage, Name, ServiceSample, TrafficSample, MAX_CONTAINERS,
    MAX_DOWNSTREAM,
};
use serde::Deserialize;

/// Components the table follows at most (one per container of a desired state).
pub const MAX_COMPONENTS: usize = MAX_CONTAINERS;
/// Entries the table holds at most: one per container of the desired state (datagrams that
/// name it), one per app/component pair (datagrams that do not).
pub const MAX_ENTRIES: usize = 2 * MAX_COMPONENTS;
/// The largest datagram accepted and the datagram format this agent reads (one definition with
/// the workloads' reporter).
pub use acoa_shared::wire::stats_datagram::{MAX_DATAGRAM, MAX_SERVICE_MS, OLD_VERSIONS, VERSION};
/// Counters not refreshed for this long count as a silent workload: rate 0, no service time.
pub const STALE: Duration = Duration::from_secs(10);

/// Why a datagram was dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatsError {
    #[error("stats datagram of {0} bytes dropped: larger than {MAX_DATAGRAM}")]
    TooLarge(usize),
    #[error("stats datagram dropped: {0}")]
    Malformed(String),
    #[error("stats datagram of version {0} dropped (this agent reads versions 1 to {VERSION})")]
    Version(u32),
    #[error("stats datagram from {app}/{component} dropped: not in the desired state")]
    NotDesired { app: String, component: String },
    #[error("stats datagram from {app}/{component} dropped: container {container} is not one of its containers in the desired state")]
    UnknownContainer {
        app: String,
        component: String,
        container: String,
    },
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct SentIn {
    to: Name,
    bytes: u64,
    #[serde(default)]
    messages: u64,
}

/// A workload's cumulative service time (v2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct ServiceIn {
    /// Microseconds spent on the messages served so far.
    pub us: u64,
    /// Messages served so far.
    pub messages: u64,
}

/// A parsed datagram.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Datagram {
    pub v: u32,
    pub app: Name,
    pub component: Name,
    /// The container's name (v2; None in v1).
    #[serde(default)]
    pub container: Option<Name>,
    #[serde(default)]
    sent: heapless::Vec<SentIn, MAX_DOWNSTREAM>,
    /// The cumulative service time (v2; None in v1 or when the workload measures none).
    #[serde(default)]
    pub service: Option<ServiceIn>,
}

/// Parses one datagram: bounded input, bounded result, never panics.
pub fn parse(bytes: &[u8]) -> Result<Datagram, StatsError> {
    if bytes.len() > MAX_DATAGRAM {
        return Err(StatsError::TooLarge(bytes.len()));
    }
    let mut d: Datagram = serde_json::from_slice(bytes).map_err(|e| {
        let mut m = e.to_string();
        m.truncate(120);
        StatsError::Malformed(m)
    })?;
    if d.v != VERSION && !OLD_VERSIONS.contains(&d.v) {
        return Err(StatsError::Version(d.v));
    }
    if d.v == 1 {
        // what v1 did not have means nothing in it
        d.container = None;
        d.service = None;
    }
    if let Some(s) = d.service {
        if s.us > 0 && s.messages == 0 {
            return Err(StatsError::Malformed(format!(
                "service: {} us over 0 messages",
                s.us
            )));
        }
    }
    Ok(d)
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Counter {
    bytes: u64,
    messages: u64,
}

#[derive(Debug, Clone)]
struct Downstream {
    to: Name,
    last: Counter,
    /// At `base_at`; `None` until a second datagram shows a difference.
    base: Counter,
    rate: (f32, f32),
}

/// The service time counters of one entry.
#[derive(Debug, Clone, Copy, Default)]
struct Service {
    /// The last cumulative counters received.
    last: Option<ServiceIn>,
    /// Where the period being measured starts (the workload's start at first).
    base: ServiceIn,
    /// The mean of the last period with messages served, ms.
    mean_ms: Option<f32>,
}

#[derive(Debug, Clone)]
struct Entry {
    app: Name,
    component: Name,
    /// None: datagrams that name no container (v1).
    container: Option<Name>,
    down: heapless::Vec<Downstream, MAX_DOWNSTREAM>,
    service: Service,
    last_at: Instant,
    base_at: Instant,
}

/// The workloads' counters and the rates derived from them.
#[derive(Debug, Default)]
pub struct Table {
    /// (container, app, component) of the desired state.
    allowed: heapless::Vec<(Name, Name, Name), MAX_COMPONENTS>,
    entries: heapless::Vec<Entry, MAX_ENTRIES>,
}

impl Table {
    pub fn new() -> Self {
        Self::default()
    }

    /// The containers of the current desired state, `(container, app, component)`; entries of
    /// others are dropped.
    pub fn set_desired<'a>(
        &mut self,
        containers: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) {
        self.allowed.clear();
        for (n, a, c) in containers {
            if let (Ok(n), Ok(a), Ok(c)) = (wire::name(n), wire::name(a), wire::name(c)) {
                let _ = self.allowed.push((n, a, c));
            }
        }
        let allowed = &self.allowed;
        self.entries.retain(|e| {
            allowed.iter().any(|(n, a, c)| {
                *a == e.app && *c == e.component && e.container.as_ref().is_none_or(|x| x == n)
            })
        });
    }

    /// Entries followed now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Takes one datagram received at `now`.
    pub fn receive(&mut self, bytes: &[u8], now: Instant) -> Result<(), StatsError> {
        let d = parse(bytes)?;
        let pair = |(_, a, c): &&(Name, Name, Name)| *a == d.app && *c == d.component;
        if !self.allowed.iter().any(|x| pair(&x)) {
            return Err(StatsError::NotDesired {
                app: d.app.to_string(),
                component: d.component.to_string(),
            });
        }
        if let Some(n) = &d.container {
            if !self.allowed.iter().filter(pair).any(|(x, _, _)| x == n) {
                return Err(StatsError::UnknownContainer {
                    app: d.app.to_string(),
                    component: d.component.to_string(),
                    container: n.to_string(),
                });
            }
        }
        let i = match self.entries.iter().position(|e| {
            e.app == d.app && e.component == d.component && e.container == d.container
        }) {
            Some(i) => i,
            None => {
                // cannot fail: at most one entry per allowed container and one per allowed
                // pair, MAX_ENTRIES in all
                let _ = self.entries.push(Entry {
                    app: d.app.clone(),
                    component: d.component.clone(),
                    container: d.container.clone(),
                    down: heapless::Vec::new(),
                    service: Service::default(),
                    last_at: now,
                    base_at: now,
                });
                self.entries.len() - 1
            }
        };
        let Some(e) = self.entries.get_mut(i) else {
            return Ok(());
        };
        e.last_at = now;
        if let Some(s) = d.service {
            if e.service
                .last
                .is_some_and(|l| s.us < l.us || s.messages < l.messages)
            {
                // the workload restarted: its counters start again from 0
                e.service.base = ServiceIn { us: 0, messages: 0 };
            }
            e.service.last = Some(s);
        }
        for s in &d.sent {
            let c = Counter {
                bytes: s.bytes,
                messages: s.messages,
            };
            match e.down.iter_mut().find(|x| x.to == s.to) {
                Some(x) => {
                    if c.bytes < x.last.bytes || c.messages < x.last.messages {
                        // the workload restarted: its counters start again from 0
                        x.base = Counter {
                            bytes: 0,
                            messages: 0,
                        };
                    }
                    x.last = c;
                }
                None => {
                    // first seen: the rate starts from here (what came before is unknown)
                    let _ = e.down.push(Downstream {
                        to: s.to.clone(),
                        last: c,
                        base: c,
                        rate: (0.0, 0.0),
                    });
                }
            }
        }
        Ok(())
    }

    /// The entry of `container` (of `app`/`component`): the one its datagrams name it in, else
    /// the one of its app/component's datagrams that name no container (v1).
    fn entry_mut(&mut self, container: &str, app: &str, component: &str) -> Option<&mut Entry> {
        let of = |e: &Entry| e.app.as_str() == app && e.component.as_str() == component;
        let i = self
            .entries
            .iter()
            .position(|e| of(e) && e.container.as_deref() == Some(container))
            .or_else(|| {
                self.entries
                    .iter()
                    .position(|e| of(e) && e.container.is_none())
            })?;
        self.entries.get_mut(i)
    }

    /// The traffic rates of `container` (of `app`/`component`) at `now`; every rate measured
    /// since the previous call that saw a new datagram (so a datagram that comes late does not
    /// make a 0 and then a double rate).
    pub fn rates(
        &mut self,
        container: &str,
        app: &str,
        component: &str,
        now: Instant,
    ) -> heapless::Vec<TrafficSample, MAX_DOWNSTREAM> {
        let mut out = heapless::Vec::new();
        let Some(e) = self.entry_mut(container, app, component) else {
            return out;
        };
        let stale = now.saturating_duration_since(e.last_at) > STALE;
        let span = e.last_at.saturating_duration_since(e.base_at).as_secs_f64();
        let fresh = span > 0.0;
        for x in e.down.iter_mut() {
            if stale {
                x.rate = (0.0, 0.0);
            } else if fresh {
                x.rate = (
                    (x.last.bytes.saturating_sub(x.base.bytes) as f64 / span) as f32,
                    (x.last.messages.saturating_sub(x.base.messages) as f64 / span) as f32,
                );
            }
            if fresh {
                x.base = x.last;
            }
            let _ = out.push(TrafficSample {
                to: x.to.clone(),
                bytes_per_s: x.rate.0,
                messages_per_s: x.rate.1,
            });
        }
        if fresh {
            e.base_at = e.last_at;
        }
        out
    }

    /// The mean service time of `container` (of `app`/`component`) over the messages it served
    /// since the previous call (at most [`MAX_SERVICE_MS`]); the last mean with `messages: 0`
    /// when it served none since; None when its workload reports none, or fell silent for
    /// longer than [`STALE`].
    pub fn service(
        &mut self,
        container: &str,
        app: &str,
        component: &str,
        now: Instant,
    ) -> Option<ServiceSample> {
        let e = self.entry_mut(container, app, component)?;
        if now.saturating_duration_since(e.last_at) > STALE {
            e.service.mean_ms = None;
            return None;
        }
        let s = &mut e.service;
        let last = s.last?;
        let served = last.messages.saturating_sub(s.base.messages);
        if served > 0 {
            let us = last.us.saturating_sub(s.base.us) as f64 / served as f64;
            s.mean_ms = Some(((us / 1000.0) as f32).min(MAX_SERVICE_MS));
            s.base = last;
        }
        Some(ServiceSample {
            mean_ms: s.mean_ms?,
            messages: u32::try_from(served).unwrap_or(u32::MAX),
        })
    }
}

/// Cumulative CPU time and memory of one container, as the runtime reports them.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerUsage {
    /// The spec name (`{app}.{component}`).
    pub name: String,
    /// CPU time used since the container started, ns.
    pub cpu_ns: u64,
    /// The runtime's clock when it was read, ns.
    pub at_ns: u64,
    pub memory_bytes: u64,
}

/// CPU rates from cumulative CPU times: remembers the previous reading of each container.
#[derive(Debug, Default)]
pub struct CpuRates {
    prev: heapless::Vec<(Name, u64, u64), MAX_COMPONENTS>,
}

impl CpuRates {
    pub fn new() -> Self {
        Self::default()
    }

    /// Millicores used by each container since the previous call (`None` for a container seen
    /// the first time, or restarted); forgets containers no longer listed.
    pub fn update(&mut self, now: &[ContainerUsage]) -> Vec<(String, Option<f32>)> {
        let mut next: heapless::Vec<(Name, u64, u64), MAX_COMPONENTS> = heapless::Vec::new();
        let mut out = Vec::with_capacity(now.len());
        for u in now {
            let Ok(name) = wire::name(&u.name) else {
                continue;
            };
            let rate = self
                .prev
                .iter()
                .find(|(n, _, _)| *n == name)
                .and_then(|&(_, cpu, at)| {
                    let dt = u.at_ns.checked_sub(at).filter(|d| *d > 0)?;
                    let used = u.cpu_ns.checked_sub(cpu)?;
                    Some((used as f64 / dt as f64 * 1000.0) as f32)
                });
            out.push((u.name.clone(), rate));
            let _ = next.push((name, u.cpu_ns, u.at_ns));
        }
        self.prev = next;
        out
    }
}

/// The samples of one report period: every container of the desired state (`(spec name, app,
/// component)`), with its CPU and memory when the runtime told them and its traffic when the
/// workload did.
pub fn samples(
    desired: &[(String, String, String)],
    cpu: &[(String, Option<f32>)],
    runtime: &[ContainerUsage],
    table: &mut Table,
    now: Instant,
) -> heapless::Vec<ComponentSample, MAX_COMPONENTS> {
    let mut components = heapless::Vec::new();
    for (name, app, comp) in desired {
        let (Ok(a), Ok(c)) = (wire::name(app), wire::name(comp)) else {
            continue;
        };
        let memory_mb = runtime
            .iter()
            .find(|u| u.name == *name)
            .map(|u| u.memory_bytes as f32 / (1024.0 * 1024.0));
        let cpu_millis = cpu.iter().find(|(n, _)| n == name).and_then(|(_, r)| *r);
        let Ok(container) = wire::name(name) else {
            continue;
        };
        let _ = components.push(ComponentSample {
            app: a,
            component: c,
            container,
            cpu_millis,
            memory_mb,
            traffic: table.rates(name, app, comp, now),
            service: table.service(name, app, comp, now),
        });
    }
    components
}

/// The message of one report period.
pub fn usage_message(
    node: &Name,
    run: u64,
    seq: u64,
    period_ms: u32,
    components: heapless::Vec<ComponentSample, MAX_COMPONENTS>,
) -> ComponentUsage {
    ComponentUsage {
        node: node.clone(),
        seq,
        run,
        period_ms,
        components,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v1 datagram (no container, no service time).
    fn dgram(app: &str, comp: &str, sent: &[(&str, u64, u64)]) -> Vec<u8> {
        let s: Vec<String> = sent
            .iter()
            .map(|(t, b, m)| format!(r#"{{"to":"{t}","bytes":{b},"messages":{m}}}"#))
            .collect();
        format!(
            r#"{{"v":1,"app":"{app}","component":"{comp}","sent":[{}]}}"#,
            s.join(",")
        )
        .into_bytes()
    }

    /// A v2 datagram of container `container` with cumulative service counters `(us, messages)`.
    fn dgram2(app: &str, comp: &str, container: &str, service: (u64, u64)) -> Vec<u8> {
        format!(
            r#"{{"v":2,"app":"{app}","component":"{comp}","container":"{container}","sent":[],"service":{{"us":{},"messages":{}}}}}"#,
            service.0, service.1
        )
        .into_bytes()
    }

    /// The desired containers `{app}.{c}` of `app`.
    fn desired_of<'a>(app: &'a str, comps: &'a [&'a str]) -> Vec<(String, &'a str, &'a str)> {
        comps
            .iter()
            .map(|c| (format!("{app}.{c}"), app, *c))
            .collect()
    }

    fn set(t: &mut Table, d: &[(String, &str, &str)]) {
        t.set_desired(d.iter().map(|(n, a, c)| (n.as_str(), *a, *c)));
    }

    #[test]
    fn parses_the_contract_datagram() {
        let d = parse(br#"{"v":1,"app":"A","component":"C","sent":[{"to":"D","bytes":123456,"messages":789}]}"#).unwrap();
        assert_eq!(d.app.as_str(), "A");
        assert_eq!(d.sent[0].bytes, 123456);
        assert_eq!(d.sent[0].messages, 789);
        // without counters yet, and with fields of a later version
        assert!(parse(br#"{"v":1,"app":"A","component":"C","extra":true}"#).is_ok());
    }

    #[test]
    fn parses_version_2_with_its_container_and_service_time_and_still_reads_version_1() {
        let d = parse(br#"{"v":2,"app":"A","component":"C","container":"A.C.r2","sent":[{"to":"D","bytes":1,"messages":1}],"service":{"us":61200,"messages":10}}"#).unwrap();
        assert_eq!(d.container.as_deref(), Some("A.C.r2"));
        assert_eq!(
            d.service,
            Some(ServiceIn {
                us: 61_200,
                messages: 10
            })
        );
        assert_eq!(d.sent.len(), 1);
        // v2 without the optional fields
        let d = parse(br#"{"v":2,"app":"A","component":"C"}"#).unwrap();
        assert_eq!((d.container, d.service), (None, None));
        // v1 read as before; fields it did not have mean nothing in it
        let d = parse(
            br#"{"v":1,"app":"A","component":"C","container":"x","service":{"us":1,"messages":1}}"#,
        )
        .unwrap();
        assert_eq!((d.container, d.service), (None, None));
    }

    #[test]
    fn bad_datagrams_are_named_errors() {
        assert_eq!(
            parse(&[b' '; 1025]),
            Err(StatsError::TooLarge(1025)),
            "oversized"
        );
        assert!(matches!(parse(b"garbage"), Err(StatsError::Malformed(_))));
        assert!(matches!(parse(b""), Err(StatsError::Malformed(_))));
        assert_eq!(
            parse(br#"{"v":3,"app":"A","component":"C"}"#),
            Err(StatsError::Version(3))
        );
        assert_eq!(
            StatsError::Version(3).to_string(),
            "stats datagram of version 3 dropped (this agent reads versions 1 to 2)"
        );
        let long = "x".repeat(70);
        assert!(matches!(
            parse(format!(r#"{{"v":1,"app":"{long}","component":"C"}}"#).as_bytes()),
            Err(StatsError::Malformed(_))
        ));
        // More downstream counters than the contract's bound: refused, not truncated.
        let many: Vec<(String, u64, u64)> = (0..=MAX_DOWNSTREAM)
            .map(|i| (format!("d{i}"), 1, 1))
            .collect();
        let many: Vec<(&str, u64, u64)> =
            many.iter().map(|(a, b, c)| (a.as_str(), *b, *c)).collect();
        assert!(matches!(
            parse(&dgram("A", "C", &many)),
            Err(StatsError::Malformed(_))
        ));
        assert!(matches!(
            parse(br#"{"v":1,"app":"A","component":"C","sent":[{"to":"D","bytes":-1}]}"#),
            Err(StatsError::Malformed(_))
        ));
        // v2's service time: named
        let e = parse(br#"{"v":2,"app":"A","component":"C","service":{"us":-5,"messages":1}}"#)
            .unwrap_err();
        assert!(
            matches!(&e, StatsError::Malformed(m) if m.contains("-5")),
            "{e}"
        );
        let e = parse(br#"{"v":2,"app":"A","component":"C","service":{"us":5}}"#).unwrap_err();
        assert!(
            matches!(&e, StatsError::Malformed(m) if m.contains("messages")),
            "{e}"
        );
        assert_eq!(
            parse(br#"{"v":2,"app":"A","component":"C","service":{"us":5,"messages":0}}"#),
            Err(StatsError::Malformed(
                "service: 5 us over 0 messages".into()
            ))
        );
        let e = parse(br#"{"v":2,"app":"A","component":"C","container":7}"#).unwrap_err();
        assert!(
            matches!(&e, StatsError::Malformed(m) if m.contains("invalid type")),
            "{e}"
        );
    }

    #[test]
    fn only_desired_components_are_accepted_and_kept() {
        let mut t = Table::new();
        let now = Instant::now();
        set(&mut t, &desired_of("app", &["a"]));
        assert!(t.receive(&dgram("app", "a", &[("b", 10, 1)]), now).is_ok());
        assert_eq!(
            t.receive(&dgram("app", "x", &[("b", 10, 1)]), now),
            Err(StatsError::NotDesired {
                app: "app".into(),
                component: "x".into()
            })
        );
        assert_eq!(
            t.receive(&dgram2("app", "a", "app.a.r9", (1, 1)), now),
            Err(StatsError::UnknownContainer {
                app: "app".into(),
                component: "a".into(),
                container: "app.a.r9".into()
            })
        );
        assert!(t.receive(&dgram2("app", "a", "app.a", (1, 1)), now).is_ok());
        assert_eq!(
            t.len(),
            2,
            "one entry of the pair (v1), one of the container"
        );
        set(&mut t, &desired_of("app", &["b"]));
        assert!(t.is_empty(), "a left the desired state: forgotten");
    }

    #[test]
    fn rates_come_from_counter_differences() {
        let mut t = Table::new();
        let t0 = Instant::now();
        let s = |x: u64| t0 + Duration::from_millis(x);
        set(&mut t, &desired_of("app", &["a"]));
        let rates = |t: &mut Table, at| t.rates("app.a", "app", "a", at);
        t.receive(&dgram("app", "a", &[("b", 5_000, 50)]), s(0))
            .unwrap();
        // one datagram: no rate yet
        let r = rates(&mut t, s(500));
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].bytes_per_s, 0.0);
        t.receive(&dgram("app", "a", &[("b", 7_000, 70)]), s(1000))
            .unwrap();
        let r = rates(&mut t, s(1100));
        assert_eq!(r[0].to.as_str(), "b");
        assert_eq!(r[0].bytes_per_s, 2000.0);
        assert_eq!(r[0].messages_per_s, 20.0);
        // no new datagram this period (it comes late): the last rate, not 0
        let r = rates(&mut t, s(2050));
        assert_eq!(r[0].bytes_per_s, 2000.0);
        t.receive(&dgram("app", "a", &[("b", 11_000, 110)]), s(2100))
            .unwrap();
        let r = rates(&mut t, s(2200));
        assert!((r[0].bytes_per_s - 4000.0 / 1.1).abs() < 1.0);
        // the workload restarted: counters from 0
        t.receive(&dgram("app", "a", &[("b", 1_000, 10)]), s(3100))
            .unwrap();
        let r = rates(&mut t, s(3200));
        assert_eq!(r[0].bytes_per_s, 1000.0);
        // silent for longer than STALE: 0
        let r = rates(&mut t, s(3100) + STALE + Duration::from_millis(1));
        assert_eq!(r[0].bytes_per_s, 0.0);
        assert!(t.rates("app.zz", "app", "zz", s(0)).is_empty());
    }

    #[test]
    fn service_times_are_means_per_period_and_per_container() {
        let mut t = Table::new();
        let t0 = Instant::now();
        let s = |x: u64| t0 + Duration::from_millis(x);
        // the old copy app.a and the new copy app.a.r2 of one component, side by side
        let mut d = desired_of("app", &["a"]);
        d.push(("app.a.r2".into(), "app", "a"));
        set(&mut t, &d);
        // the old copy: 1 ms per message; the new one: 60 ms
        t.receive(&dgram2("app", "a", "app.a", (10_000, 10)), s(0))
            .unwrap();
        t.receive(&dgram2("app", "a", "app.a.r2", (600_000, 10)), s(0))
            .unwrap();
        let old = t.service("app.a", "app", "a", s(500)).unwrap();
        let new = t.service("app.a.r2", "app", "a", s(500)).unwrap();
        assert_eq!((old.mean_ms, old.messages), (1.0, 10));
        assert_eq!(
            (new.mean_ms, new.messages),
            (60.0, 10),
            "not averaged with the old copy"
        );
        // the next period: 5 messages of 2 ms more each
        t.receive(&dgram2("app", "a", "app.a", (20_000, 15)), s(1000))
            .unwrap();
        let old = t.service("app.a", "app", "a", s(1500)).unwrap();
        assert_eq!((old.mean_ms, old.messages), (2.0, 5));
        // none served since: the last mean, 0 messages
        let old = t.service("app.a", "app", "a", s(1600)).unwrap();
        assert_eq!((old.mean_ms, old.messages), (2.0, 0));
        // restarted: from 0 again
        t.receive(&dgram2("app", "a", "app.a", (3_000, 1)), s(2000))
            .unwrap();
        assert_eq!(
            t.service("app.a", "app", "a", s(2100)).unwrap().mean_ms,
            3.0
        );
        // beyond the bound: reported as the bound
        t.receive(&dgram2("app", "a", "app.a.r2", (u64::MAX / 2, 11)), s(2000))
            .unwrap();
        assert_eq!(
            t.service("app.a.r2", "app", "a", s(2100)).unwrap().mean_ms,
            MAX_SERVICE_MS
        );
        // silent for longer than STALE: none
        assert_eq!(
            t.service(
                "app.a",
                "app",
                "a",
                s(2000) + STALE + Duration::from_millis(1)
            ),
            None
        );
        // a v1 workload says nothing of it
        let mut t = Table::new();
        set(&mut t, &desired_of("app", &["a"]));
        t.receive(&dgram("app", "a", &[("b", 1, 1)]), s(0)).unwrap();
        assert_eq!(t.service("app.a", "app", "a", s(100)), None);
    }

    #[test]
    fn cpu_rates_from_cumulative_times() {
        let mut c = CpuRates::new();
        let u = |cpu: u64, at: u64| ContainerUsage {
            name: "app.a".into(),
            cpu_ns: cpu,
            at_ns: at,
            memory_bytes: 3 * 1024 * 1024,
        };
        assert_eq!(
            c.update(&[u(1_000_000, 1_000_000_000)]),
            [("app.a".to_string(), None)]
        );
        // 250 ms of CPU over 1 s: 250 millicores
        assert_eq!(
            c.update(&[u(251_000_000, 2_000_000_000)]),
            [("app.a".to_string(), Some(250.0))]
        );
        // restarted (CPU time went back): unknown this time
        assert_eq!(
            c.update(&[u(5, 3_000_000_000)]),
            [("app.a".to_string(), None)]
        );
        assert!(c.update(&[]).is_empty());
    }

    #[test]
    fn the_message_holds_every_desired_container() {
        let mut t = Table::new();
        let now = Instant::now();
        t.set_desired([("app.a", "app", "a"), ("app.b", "app", "b")]);
        let desired = vec![
            ("app.a".to_string(), "app".to_string(), "a".to_string()),
            ("app.b".to_string(), "app".to_string(), "b".to_string()),
        ];
        t.receive(&dgram("app", "a", &[("b", 1, 1)]), now).unwrap();
        t.receive(&dgram2("app", "b", "app.b", (5_000, 2)), now)
            .unwrap();
        let runtime = vec![ContainerUsage {
            name: "app.a".into(),
            cpu_ns: 0,
            at_ns: 0,
            memory_bytes: 2 * 1024 * 1024,
        }];
        let cpu = vec![("app.a".to_string(), Some(12.0))];
        let m = usage_message(
            &wire::name("n1").unwrap(),
            3,
            7,
            1000,
            samples(&desired, &cpu, &runtime, &mut t, now),
        );
        assert_eq!((m.run, m.seq), (3, 7));
        assert_eq!(m.components.len(), 2);
        assert_eq!(m.components[0].cpu_millis, Some(12.0));
        assert_eq!(m.components[0].memory_mb, Some(2.0));
        assert_eq!(m.components[0].traffic.len(), 1);
        assert_eq!(m.components[1].cpu_millis, None);
        assert_eq!(m.components[1].memory_mb, None);
        assert!(m.components[1].traffic.is_empty());
        assert_eq!(m.components[0].container.as_str(), "app.a");
        assert_eq!(m.components[0].service, None, "a v1 workload");
        assert_eq!(
            m.components[1].service,
            Some(ServiceSample {
                mean_ms: 2.5,
                messages: 2
            })
        );
    }
}
