//! The testbed's side of the workload program (`acoa-workload`): the collector that tells each
//! component where its channels go and receives what every component saw, and the per-path
//! latency and loss computed from that.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use acoa_shared::model::{AppPath, Application};

/// Where the workload listens: `BASE_PORT + index of the component in the application`.
pub const BASE_PORT: u16 = 9100;
/// The collector's port (on the testbed's host endpoint).
pub const COLLECTOR_PORT: u16 = 9099;

/// What one component is told.
#[derive(Clone, Debug, PartialEq)]
pub struct ComponentConf {
    pub port: u16,
    pub rate_hz: f64,
    pub out: Vec<(String, SocketAddr)>,
}

impl ComponentConf {
    fn answer(&self) -> String {
        let out: Vec<String> = self.out.iter().map(|(c, a)| format!("{c}@{a}")).collect();
        format!(
            "K1 port={} rate={} out={}",
            self.port,
            self.rate_hz,
            out.join(",")
        )
    }
}

/// The configuration of every component of `app` placed by `placement` (component -> node):
/// sources (components no channel enters) emit at `rate_hz`.
pub fn app_confs(
    app: &Application,
    placement: &BTreeMap<String, String>,
    addr_of: impl Fn(&str) -> Option<Ipv4Addr>,
    rate_hz: f64,
) -> HashMap<String, ComponentConf> {
    app_confs_at(app, placement, addr_of, rate_hz, BASE_PORT)
}

/// [`app_confs`] with component ports from `base_port` (several copies of an application side
/// by side on the same nodes).
pub fn app_confs_at(
    app: &Application,
    placement: &BTreeMap<String, String>,
    addr_of: impl Fn(&str) -> Option<Ipv4Addr>,
    rate_hz: f64,
    base_port: u16,
) -> HashMap<String, ComponentConf> {
    let port =
        |c: &str| base_port + app.components.iter().position(|x| x.name == c).unwrap_or(0) as u16;
    let mut m = HashMap::new();
    for c in &app.components {
        let is_source = !app.channels.iter().any(|ch| ch.to == c.name);
        let out = app
            .channels
            .iter()
            .filter(|ch| ch.from == c.name)
            .filter_map(|ch| {
                let node = placement.get(&ch.to)?;
                let a = addr_of(node)?;
                Some((
                    ch.name.clone(),
                    SocketAddr::V4(SocketAddrV4::new(a, port(&ch.to))),
                ))
            })
            .collect();
        m.insert(
            c.name.clone(),
            ComponentConf {
                port: port(&c.name),
                rate_hz: if is_source { rate_hz } else { 0.0 },
                out,
            },
        );
    }
    m
}

#[derive(Clone, Debug)]
pub struct Sent {
    pub app: String,
    pub component: String,
    pub seq: u64,
    pub origin_ns: u128,
}

#[derive(Clone, Debug)]
pub struct Received {
    pub app: String,
    pub component: String,
    pub seq: u64,
    pub origin_ns: u128,
    pub recv_ns: u128,
    pub trail: String,
}

#[derive(Clone, Debug, Default)]
pub struct Records {
    pub sent: Vec<Sent>,
    pub received: Vec<Received>,
}

/// End-to-end figures of one path over a time window.
#[derive(Clone, Debug, Default)]
pub struct PathStats {
    pub sent: usize,
    pub received: usize,
    /// Per received message: arrival at the path's last component minus origin, ms.
    pub latency_ms: Vec<f64>,
}

impl PathStats {
    pub fn success(&self) -> f64 {
        if self.sent == 0 {
            return f64::NAN;
        }
        self.received as f64 / self.sent as f64
    }
    pub fn median_ms(&self) -> f64 {
        crate::probe::quantile(&self.latency_ms, 0.5)
    }
    pub fn mean_ms(&self) -> f64 {
        crate::probe::mean(&self.latency_ms)
    }
}

impl Records {
    /// The figures of `path` of `app` for messages that left the source within
    /// `[from_ns, to_ns)` (leave a grace period before `to_ns` for messages in flight).
    pub fn path_stats(
        &self,
        app: &Application,
        path: &AppPath,
        from_ns: u128,
        to_ns: u128,
    ) -> PathStats {
        let ch = |name: &str| app.channels.iter().find(|c| c.name == name);
        let (Some(first), Some(last)) = (
            path.channels.first().and_then(|c| ch(c)),
            path.channels.last().and_then(|c| ch(c)),
        ) else {
            return PathStats::default();
        };
        let trail = path.channels.join("/");
        // (seq, origin): a stray copy of the same application elsewhere (another test's
        // containers reaching this collector) counts from 0 too, but not at the same instants
        let sent: HashSet<(u64, u128)> = self
            .sent
            .iter()
            .filter(|s| s.app == app.application && s.component == first.from)
            .filter(|s| s.origin_ns >= from_ns && s.origin_ns < to_ns)
            .map(|s| (s.seq, s.origin_ns))
            .collect();
        let mut seen = HashSet::new();
        let mut latency_ms = Vec::new();
        for r in &self.received {
            if r.app == app.application
                && r.component == last.to
                && (r.trail == trail || r.trail.ends_with(&format!("/{trail}")))
                && sent.contains(&(r.seq, r.origin_ns))
                && seen.insert(r.seq)
            {
                latency_ms.push((r.recv_ns.saturating_sub(r.origin_ns)) as f64 / 1e6);
            }
        }
        PathStats {
            sent: sent.len(),
            received: seen.len(),
            latency_ms,
        }
    }
}

/// Answers the components' configuration requests and records their reports.
pub struct Collector {
    pub addr: SocketAddr,
    confs: Arc<RwLock<HashMap<(String, String), ComponentConf>>>,
    records: Arc<Mutex<Records>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Collector {
    pub fn start(sock: UdpSocket) -> std::io::Result<Self> {
        Self::start_from(sock, None)
    }

    /// The collector of testbed `tb`, on its host endpoint's address `host` ([`COLLECTOR_PORT`]):
    /// [`Collector::start_from`] the testbed's nodes only.
    pub fn start_on(tb: &crate::emu::Testbed, host: Ipv4Addr) -> std::io::Result<Self> {
        Self::start_from(
            UdpSocket::bind(SocketAddrV4::new(host, COLLECTOR_PORT))?,
            Some(
                tb.nodes()
                    .iter()
                    .map(|n| std::net::IpAddr::V4(n.addr))
                    .collect(),
            ),
        )
    }

    /// [`Collector::start`] that ignores datagrams from any address but `allowed` (the
    /// testbed's node addresses): containers of other tests that reach the host endpoint must
    /// not be told a configuration nor counted.
    pub fn start_from(
        sock: UdpSocket,
        allowed: Option<HashSet<std::net::IpAddr>>,
    ) -> std::io::Result<Self> {
        sock.set_read_timeout(Some(Duration::from_millis(50)))?;
        let addr = sock.local_addr()?;
        let confs: Arc<RwLock<HashMap<(String, String), ComponentConf>>> = Arc::default();
        let records: Arc<Mutex<Records>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c2, r2, s2) = (confs.clone(), records.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("collector".into())
            .spawn(move || {
                let mut buf = [0u8; 2048];
                while !s2.load(Ordering::Relaxed) {
                    let Ok((n, from)) = sock.recv_from(&mut buf) else {
                        continue;
                    };
                    if allowed.as_ref().is_some_and(|a| !a.contains(&from.ip())) {
                        continue;
                    }
                    let text = String::from_utf8_lossy(&buf[..n]);
                    let w: Vec<&str> = text.split_whitespace().collect();
                    match w.as_slice() {
                        ["C1", app, comp] => {
                            let conf = c2
                                .read()
                                .expect("conf lock")
                                .get(&(app.to_string(), comp.to_string()))
                                .cloned();
                            if let Some(conf) = conf {
                                let _ = sock.send_to(conf.answer().as_bytes(), from);
                            }
                        }
                        ["S1", app, comp, seq, origin] => {
                            if let (Ok(seq), Ok(origin_ns)) = (seq.parse(), origin.parse()) {
                                r2.lock().expect("records lock").sent.push(Sent {
                                    app: app.to_string(),
                                    component: comp.to_string(),
                                    seq,
                                    origin_ns,
                                });
                            }
                        }
                        ["R1", app, comp, seq, origin, recv, trail] => {
                            if let (Ok(seq), Ok(origin_ns), Ok(recv_ns)) =
                                (seq.parse(), origin.parse(), recv.parse())
                            {
                                r2.lock().expect("records lock").received.push(Received {
                                    app: app.to_string(),
                                    component: comp.to_string(),
                                    seq,
                                    origin_ns,
                                    recv_ns,
                                    trail: trail.to_string(),
                                });
                            }
                        }
                        _ => {}
                    }
                }
            })?;
        Ok(Self {
            addr,
            confs,
            records,
            stop,
            thread: Some(thread),
        })
    }

    /// Sets (or replaces) what every component of `app` is told.
    pub fn set_app(&self, app: &str, confs: HashMap<String, ComponentConf>) {
        let mut m = self.confs.write().expect("conf lock");
        m.retain(|(a, _), _| a != app);
        for (c, conf) in confs {
            m.insert((app.to_string(), c), conf);
        }
    }

    pub fn records(&self) -> Records {
        self.records.lock().expect("records lock").clone()
    }

    pub fn clear(&self) {
        *self.records.lock().expect("records lock") = Records::default();
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Nanoseconds since the Unix epoch (the clock the workload stamps messages with).
pub fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}
