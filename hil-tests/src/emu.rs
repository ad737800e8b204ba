//! The emulated wide-area network as a whole: namespaces, TUN devices, addresses, the forwarder.
//!
//! ```no_run
//! use hil_tests::emu::Testbed;
//! use hil_tests::LinkSpec;
//! # fn main() -> Result<(), hil_tests::EmuError> {
//! let tb = Testbed::builder().up(&["a", "b"], &[])?;        // ideal links
//! tb.set_link("a", "b", LinkSpec::new(10.0, 0.0, 0.0))?;   // a -> b: 10 ms one way
//! tb.set_link("b", "a", LinkSpec::new(10.0, 0.0, 0.0))?;
//! let sock = tb.udp_socket("b", 7878)?;                     // bound inside b's namespace
//! let mut agent = tb.command("a", "edge-agent");            // `ip netns exec <ns of a> edge-agent`
//! # drop((sock, agent)); Ok(()) }                            // dropping `tb` tears everything down
//! ```

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acoa_shared::model::Link;

use crate::forwarder::{Endpoint, Forwarder, ForwarderOptions, Shared, StatsSnapshot};
use crate::linktable::{LinkSpec, LinkTable};
use crate::netns;

/// Name of the emulator's TUN device inside every node's namespace.
pub const IFNAME: &str = "emu0";
/// Name of the optional endpoint in the root namespace (see [`TestbedBuilder::host`]).
pub const HOST: &str = "host";

#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    #[error("network emulation unavailable: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Ip(#[from] netns::IpError),
    #[error("cannot create tun device {name}: {reason}")]
    Tun { name: String, reason: String },
    #[error("unknown node {0}")]
    UnknownNode(String),
    #[error("invalid link {from} -> {to}: {reason}")]
    InvalidLink {
        from: String,
        to: String,
        reason: String,
    },
    #[error("invalid subnet {subnet}: {reason}")]
    InvalidSubnet { subnet: String, reason: String },
    #[error("too many nodes for subnet {subnet}: node number {number}")]
    SubnetTooSmall { subnet: String, number: u32 },
    #[error("duplicate node {0}")]
    DuplicateNode(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Why the emulator cannot run here (not root, no /dev/net/tun, no `ip`), or `None` if it can.
/// Tests print this and skip.
pub fn unavailable_reason() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not running as root (network namespaces and TUN devices need root)".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("the ip command (apt-get install iproute2) is missing".into()),
    }
}

/// An IPv4 subnet; node number `i` gets address `base + i`, the host endpoint the last usable one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Subnet {
    pub base: Ipv4Addr,
    pub len: u8,
}

impl Default for Subnet {
    fn default() -> Self {
        Self {
            base: Ipv4Addr::new(10, 77, 0, 0),
            len: 16,
        }
    }
}

impl std::fmt::Display for Subnet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.len)
    }
}

impl FromStr for Subnet {
    type Err = EmuError;
    fn from_str(s: &str) -> Result<Self, EmuError> {
        let bad = |reason: &str| EmuError::InvalidSubnet {
            subnet: s.to_string(),
            reason: reason.to_string(),
        };
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| bad("expected A.B.C.D/LEN"))?;
        let base: Ipv4Addr = a.parse().map_err(|_| bad("bad address"))?;
        let len: u8 = l.parse().map_err(|_| bad("bad prefix length"))?;
        if !(8..=30).contains(&len) {
            return Err(bad("prefix length must be within 8..=30"));
        }
        let mask = u32::MAX << (32 - len);
        if u32::from(base) & !mask != 0 {
            return Err(bad("host bits set in the base address"));
        }
        Ok(Self { base, len })
    }
}

impl Subnet {
    fn size(&self) -> u32 {
        1u32 << (32 - self.len)
    }

    /// Address of node number `number` (1-based), if the subnet holds it.
    pub fn addr(&self, number: u32) -> Option<Ipv4Addr> {
        if number == 0 || number >= self.size() - 2 {
            return None;
        }
        Some(Ipv4Addr::from(u32::from(self.base) + number))
    }

    /// Address of the host endpoint: the last usable one.
    pub fn host_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.base) + self.size() - 2)
    }
}

/// One emulated node.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct TestbedNode {
    pub name: String,
    /// Its namespace (`/run/netns/<netns>`); empty for the host endpoint.
    pub netns: String,
    pub addr: Ipv4Addr,
}

/// How to bring a testbed up.
#[derive(Clone, Debug, Default)]
pub struct TestbedBuilder {
    prefix: Option<String>,
    subnet: Subnet,
    host: bool,
    opts: ForwarderOptions,
}

static TESTBED_COUNTER: AtomicU32 = AtomicU32::new(0);
static TUN_COUNTER: AtomicU32 = AtomicU32::new(0);
const LIB_PREFIX: &str = "acoat";

impl TestbedBuilder {
    /// Namespace name prefix: node `n01` lives in namespace `{prefix}n01`. Default: a prefix
    /// unique to this process and testbed (`acoat{pid}x{k}-`), so that parallel tests never meet.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Default 10.77.0.0/16.
    pub fn subnet(mut self, subnet: Subnet) -> Self {
        self.subnet = subnet;
        self
    }

    /// Adds an endpoint named [`HOST`] in the root namespace (a TUN device with the subnet's last
    /// address), so that programs on the host (a broker, the control plane) reach every node and
    /// are reached by them. Its links are ideal unless set. Only one testbed with a host endpoint
    /// per subnet at a time.
    pub fn host(mut self, on: bool) -> Self {
        self.host = on;
        self
    }

    /// Ask for SCHED_FIFO (default on).
    pub fn realtime(mut self, on: bool) -> Self {
        self.opts.realtime = on;
        self
    }

    /// Keep each directed link's packets in order (default on).
    pub fn keep_order(mut self, on: bool) -> Self {
        self.opts.keep_order = on;
        self
    }

    pub fn seed(mut self, seed: u64) -> Self {
        self.opts.seed = seed;
        self
    }

    /// Brings up `nodes` (node `i` in the slice gets address number `i + 1`) with the links of
    /// `links` that join two of them; other pairs are ideal.
    pub fn up(self, nodes: &[&str], links: &[Link]) -> Result<Testbed, EmuError> {
        let numbered: Vec<(String, u32)> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.to_string(), i as u32 + 1))
            .collect();
        self.up_numbered(&numbered, links)
    }

    /// Like [`up`](Self::up) with explicit address numbers (e.g. the position in a cluster file).
    pub fn up_numbered(self, nodes: &[(String, u32)], links: &[Link]) -> Result<Testbed, EmuError> {
        if let Some(reason) = unavailable_reason() {
            return Err(EmuError::Unavailable(reason));
        }
        gc_stale_testbeds();
        let prefix = self.prefix.clone().unwrap_or_else(|| {
            format!(
                "{LIB_PREFIX}{}x{}-",
                std::process::id(),
                TESTBED_COUNTER.fetch_add(1, Ordering::SeqCst)
            )
        });
        let mut tb = Testbed {
            nodes: Vec::new(),
            prefix,
            subnet: self.subnet,
            created: Vec::new(),
            fwd: None,
            cuts: Mutex::default(),
        };
        let mut endpoints = Vec::new();
        for (name, number) in nodes {
            if tb.nodes.iter().any(|n| &n.name == name) || name == HOST {
                return Err(EmuError::DuplicateNode(name.clone()));
            }
            let addr = self
                .subnet
                .addr(*number)
                .ok_or_else(|| EmuError::SubnetTooSmall {
                    subnet: self.subnet.to_string(),
                    number: *number,
                })?;
            let ns = format!("{}{}", tb.prefix, name);
            netns::del_netns(&ns)?; // a leftover of a run that did not tear down
            netns::add_netns(&ns)?;
            tb.created.push(ns.clone());
            let (dev, devname) = create_tun()?;
            netns::move_and_configure(&devname, &ns, IFNAME, addr, self.subnet.len)?;
            tb.nodes.push(TestbedNode {
                name: name.clone(),
                netns: ns,
                addr,
            });
            endpoints.push(Endpoint {
                name: name.clone(),
                addr,
                dev,
            });
        }
        if self.host {
            let addr = self.subnet.host_addr();
            let (dev, devname) = create_tun()?;
            netns::configure_host(&devname, addr, self.subnet.len)?;
            tb.nodes.push(TestbedNode {
                name: HOST.into(),
                netns: String::new(),
                addr,
            });
            endpoints.push(Endpoint {
                name: HOST.into(),
                addr,
                dev,
            });
        }
        let mut table = LinkTable::new(endpoints.len());
        for l in links {
            let (Some(f), Some(t)) = (tb.index(&l.from), tb.index(&l.to)) else {
                continue;
            };
            if f == t {
                continue; // a node's own loopback never crosses the emulator
            }
            let spec = LinkSpec::from_link(l);
            spec.validate().map_err(|reason| EmuError::InvalidLink {
                from: l.from.clone(),
                to: l.to.clone(),
                reason,
            })?;
            table.set(f, t, spec);
        }
        tb.fwd = Some(Forwarder::start(endpoints, table, self.opts.clone())?);
        tracing::info!(
            nodes = tb.nodes.len(),
            prefix = %tb.prefix,
            subnet = %tb.subnet,
            "emulated network up"
        );
        Ok(tb)
    }
}

fn create_tun() -> Result<(tun::Device, String), EmuError> {
    let name = format!(
        "ae{}x{}",
        std::process::id() % 1_000_000,
        TUN_COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    let mut cfg = tun::Configuration::default();
    cfg.tun_name(&name).layer(tun::Layer::L3);
    let dev = tun::create(&cfg).map_err(|e| EmuError::Tun {
        name: name.clone(),
        reason: e.to_string(),
    })?;
    Ok((dev, name))
}

/// Deletes the namespaces of library testbeds whose process is gone (killed before it could
/// tear down). Returns how many.
pub fn gc_stale_testbeds() -> usize {
    let mut n = 0;
    for ns in netns::list_netns() {
        let Some(rest) = ns.strip_prefix(LIB_PREFIX) else {
            continue;
        };
        let Some((pid, _)) = rest.split_once('x') else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() && netns::del_netns(&ns).is_ok() {
            n += 1;
        }
    }
    n
}

/// A running emulated network. Dropping it stops the forwarder and deletes the namespaces.
pub struct Testbed {
    nodes: Vec<TestbedNode>,
    prefix: String,
    subnet: Subnet,
    created: Vec<String>,
    fwd: Option<Forwarder>,
    /// Directed links cut by [`Testbed::cut`], with the spec each had before (restored by
    /// [`Testbed::heal`]).
    cuts: Mutex<BTreeMap<(usize, usize), LinkSpec>>,
}

impl Testbed {
    pub fn builder() -> TestbedBuilder {
        TestbedBuilder::default()
    }

    /// `Testbed::builder().up(nodes, links)`.
    pub fn up(nodes: &[&str], links: &[Link]) -> Result<Self, EmuError> {
        Self::builder().up(nodes, links)
    }

    pub fn nodes(&self) -> &[TestbedNode] {
        &self.nodes
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn subnet(&self) -> Subnet {
        self.subnet
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    pub fn node(&self, name: &str) -> Result<&TestbedNode, EmuError> {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .ok_or_else(|| EmuError::UnknownNode(name.into()))
    }

    /// The node's address.
    pub fn addr(&self, name: &str) -> Result<Ipv4Addr, EmuError> {
        Ok(self.node(name)?.addr)
    }

    /// The node's namespace name.
    pub fn netns(&self, name: &str) -> Result<&str, EmuError> {
        Ok(&self.node(name)?.netns)
    }

    /// `/run/netns/<namespace>`: e.g. for the agent's `[podman] netns`.
    pub fn netns_path(&self, name: &str) -> Result<PathBuf, EmuError> {
        Ok(netns::netns_path(self.netns(name)?))
    }

    /// The forwarder's shared state (link table, counters), e.g. for a control socket.
    pub fn shared(&self) -> &Arc<Shared> {
        self.fwd.as_ref().expect("forwarder runs").shared()
    }

    fn pair(&self, from: &str, to: &str) -> Result<(usize, usize), EmuError> {
        let f = self
            .index(from)
            .ok_or_else(|| EmuError::UnknownNode(from.into()))?;
        let t = self
            .index(to)
            .ok_or_else(|| EmuError::UnknownNode(to.into()))?;
        Ok((f, t))
    }

    /// Changes the directed link `from -> to`; takes effect for the next packet.
    pub fn set_link(&self, from: &str, to: &str, spec: LinkSpec) -> Result<(), EmuError> {
        let (f, t) = self.pair(from, to)?;
        spec.validate().map_err(|reason| EmuError::InvalidLink {
            from: from.into(),
            to: to.into(),
            reason,
        })?;
        self.shared().set_link(f, t, spec);
        Ok(())
    }

    pub fn link(&self, from: &str, to: &str) -> Result<LinkSpec, EmuError> {
        let (f, t) = self.pair(from, to)?;
        Ok(self.shared().link(f, t))
    }

    /// Cuts `a <-> b` both ways (every packet dropped), remembering each direction's spec for
    /// [`heal`](Self::heal); cutting a cut link again keeps the first spec.
    pub fn cut(&self, a: &str, b: &str) -> Result<(), EmuError> {
        let (f, t) = self.pair(a, b)?;
        let mut cuts = self.cuts.lock().expect("cuts lock");
        for (x, y) in [(f, t), (t, f)] {
            if x != y && !cuts.contains_key(&(x, y)) {
                cuts.insert((x, y), self.shared().link(x, y));
                self.shared().set_link(x, y, LinkSpec::new(0.0, 0.0, 1.0));
            }
        }
        Ok(())
    }

    /// Cuts every node of `group` from every node of `others` (both ways); links inside
    /// `group` stay as they are.
    pub fn cut_between(&self, group: &[&str], others: &[&str]) -> Result<(), EmuError> {
        for a in group {
            for b in others.iter().filter(|b| !group.contains(b)) {
                self.cut(a, b)?;
            }
        }
        Ok(())
    }

    /// Restores the cut links between `group` and `others` (both ways), leaving other cuts.
    pub fn heal_between(&self, group: &[&str], others: &[&str]) -> Result<(), EmuError> {
        let idx = |names: &[&str]| -> Result<Vec<usize>, EmuError> {
            names
                .iter()
                .map(|n| {
                    self.index(n)
                        .ok_or_else(|| EmuError::UnknownNode(n.to_string()))
                })
                .collect()
        };
        let (g, o) = (idx(group)?, idx(others)?);
        self.heal_where(|x, y| {
            (g.contains(&x) && o.contains(&y)) || (o.contains(&x) && g.contains(&y))
        });
        Ok(())
    }

    /// Restores every cut link that has `node` at one end (its spec from before the cut).
    pub fn heal(&self, node: &str) -> Result<(), EmuError> {
        let i = self
            .index(node)
            .ok_or_else(|| EmuError::UnknownNode(node.into()))?;
        self.heal_where(|x, y| x == i || y == i);
        Ok(())
    }

    /// Restores every cut link.
    pub fn heal_all(&self) {
        self.heal_where(|_, _| true);
    }

    fn heal_where(&self, pick: impl Fn(usize, usize) -> bool) {
        let mut cuts = self.cuts.lock().expect("cuts lock");
        let healed: Vec<(usize, usize)> =
            cuts.keys().copied().filter(|(x, y)| pick(*x, *y)).collect();
        for k in healed {
            if let Some(spec) = cuts.remove(&k) {
                self.shared().set_link(k.0, k.1, spec);
            }
        }
    }

    /// The directed links cut now, by name.
    pub fn cuts(&self) -> Vec<(String, String)> {
        let cuts = self.cuts.lock().expect("cuts lock");
        cuts.keys()
            .map(|(x, y)| (self.nodes[*x].name.clone(), self.nodes[*y].name.clone()))
            .collect()
    }

    /// Sets every link of `links` that joins two of this testbed's nodes.
    pub fn apply_links(&self, links: &[Link]) -> Result<usize, EmuError> {
        let mut n = 0;
        for l in links {
            if l.from == l.to || self.index(&l.from).is_none() || self.index(&l.to).is_none() {
                continue;
            }
            self.set_link(&l.from, &l.to, LinkSpec::from_link(l))?;
            n += 1;
        }
        Ok(n)
    }

    /// Measures the emulator's own one-way overhead on a delayed link: with `a -> b` set to
    /// exactly 1 ms (no jitter, no loss, no compensation), the median of 300 datagrams' one-way
    /// delays from the kernel's send time in `a` to the kernel's receive time in `b` (the
    /// namespaces share one clock), minus 1 ms: the emulator's reader wake-up, hand-over and
    /// write, not the measuring program's (a program's own wake-ups are its own, as on a real
    /// network). The link is restored afterwards. Use it with [`Shared::set_compensation`].
    pub fn calibrate(&self, a: &str, b: &str) -> Result<Duration, EmuError> {
        const PROBE_DELAY_MS: f64 = 1.0;
        let ab = self.link(a, b)?;
        let comp = self.shared().compensation();
        self.shared().set_compensation(Duration::ZERO);
        self.set_link(a, b, LinkSpec::new(PROBE_DELAY_MS, 0.0, 0.0))?;
        let run = || -> Result<f64, EmuError> {
            let rx = self.udp_socket(b, 0)?;
            let to = std::net::SocketAddr::new(self.addr(b)?.into(), rx.local_addr()?.port());
            let tx = self.udp_socket(a, 0)?;
            let d = crate::probe::one_way_kernel(&tx, &rx, to, 300, Duration::from_millis(5))?;
            if d.is_empty() {
                return Err(std::io::Error::other("no calibration datagram arrived").into());
            }
            Ok(crate::probe::quantile(&d, 0.5))
        };
        let res = run();
        self.set_link(a, b, ab)?;
        self.shared().set_compensation(comp);
        let one_way_ms = (res? - PROBE_DELAY_MS).max(0.0);
        Ok(Duration::from_secs_f64(one_way_ms / 1000.0))
    }

    /// See [`Shared::set_compensation`].
    pub fn set_compensation(&self, d: Duration) {
        self.shared().set_compensation(d)
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.shared().stats()
    }

    pub fn reset_stats(&self) {
        self.shared().reset_stats()
    }

    /// A UDP socket bound to `0.0.0.0:port` inside the node's namespace (port 0: any).
    pub fn udp_socket(&self, node: &str, port: u16) -> Result<UdpSocket, EmuError> {
        let n = self.node(node)?;
        if n.netns.is_empty() {
            return Ok(UdpSocket::bind(SocketAddrV4::new(n.addr, port))?);
        }
        Ok(netns::in_netns(&n.netns, move || {
            UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
        })?)
    }

    /// Runs `f` on a thread inside the node's namespace (e.g. to bind a listener there).
    pub fn in_node<F, R>(&self, node: &str, f: F) -> Result<R, EmuError>
    where
        F: FnOnce() -> std::io::Result<R> + Send + 'static,
        R: Send + 'static,
    {
        let n = self.node(node)?;
        if n.netns.is_empty() {
            return Ok(f()?);
        }
        Ok(netns::in_netns(&n.netns, f)?)
    }

    /// A command that runs `program` inside the node's namespace (`ip netns exec`); for the host
    /// endpoint, a plain command.
    pub fn command(&self, node: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        match self.node(node) {
            Ok(n) if !n.netns.is_empty() => netns::command_in(&n.netns, program),
            _ => Command::new(program),
        }
    }

    /// Stops the forwarder and deletes the namespaces, reporting the first failure.
    pub fn down(mut self) -> Result<(), EmuError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), EmuError> {
        if let Some(mut f) = self.fwd.take() {
            f.stop();
        }
        let mut first = None;
        for ns in self.created.drain(..) {
            if let Err(e) = netns::del_netns(&ns) {
                tracing::warn!(netns = %ns, error = %e, "cannot delete namespace");
                first.get_or_insert(e);
            }
        }
        match first {
            None => Ok(()),
            Some(e) => Err(e.into()),
        }
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnet_addresses() {
        let s: Subnet = "10.77.0.0/16".parse().unwrap();
        assert_eq!(s.addr(1), Some(Ipv4Addr::new(10, 77, 0, 1)));
        assert_eq!(s.addr(20), Some(Ipv4Addr::new(10, 77, 0, 20)));
        assert_eq!(s.addr(300), Some(Ipv4Addr::new(10, 77, 1, 44)));
        assert_eq!(s.addr(0), None);
        assert_eq!(s.host_addr(), Ipv4Addr::new(10, 77, 255, 254));
        let small: Subnet = "10.9.0.0/29".parse().unwrap();
        assert_eq!(small.addr(5), Some(Ipv4Addr::new(10, 9, 0, 5)));
        assert_eq!(small.addr(6), None);
        assert!("10.77.0.1/16".parse::<Subnet>().is_err());
        assert!("10.77.0.0".parse::<Subnet>().is_err());
        assert!("10.77.0.0/31".parse::<Subnet>().is_err());
    }
}
