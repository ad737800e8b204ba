//! `acoa-workload`: the testbed's workload program; one static binary plays any component.
//!
//! It forwards timestamped UDP messages along the application's channels, so that the real
//! end-to-end latency and loss of every path can be measured inside the running application.
//! A source component (rate > 0) emits a message every 1/rate s on each of its out channels;
//! every component that receives a message reports it to the collector and forwards it on each
//! of its out channels, appending the channel to the message's trail. Clocks: the wall clock of
//! the machine, shared by all the testbed's namespaces and containers.
//!
//! Configuration (environment):
//! - `ACOA_APP`, `ACOA_COMPONENT`: set by the control plane for every container
//! - `ACOA_CONTROL=ip:port`: the testbed's collector; asked every second for this component's
//!   port, rate and out channels (so a re-placement is followed), and sent the reports
//! - or, without a collector: `ACOA_LISTEN=ip:port`, `ACOA_OUT=chan@ip:port,...`,
//!   `ACOA_RATE_HZ`, `ACOA_REPORT=ip:port` (optional)
//! - `ACOA_AGENT_STATS=ip:port`: set by the agent; the bytes and messages sent on each out
//!   channel are reported there every second (`hil_tests::stats`, `to` = the channel's name,
//!   which the control plane resolves to the channel's downstream component), with the time
//!   this component spends on each message (its service time: received, or due at a source, to
//!   forwarded)
//! - `ACOA_DELAY_MS`: holds every message that long before forwarding (or, at a source, before
//!   sending) it: a revision that adds delay on its paths (default 0; without blocking: the
//!   messages wait in a queue)
//!
//! Datagrams (text): data `D1 seq origin_ns trail`; report `R1 app component seq origin_ns
//! recv_ns trail`; sent `S1 app component seq origin_ns`; config request `C1 app component`,
//! answer `K1 port=P rate=HZ out=chan@ip:port,...`.
//!
//! Two copies of a component may run side by side on one node during a rollout (the new one
//! started before the old one stops), in the node's one network namespace: the listening
//! socket is bound with SO_REUSEPORT so that both can hold the component's port, and the
//! traffic moves to the new copy without a gap when the old one stops.
// One exception, [`bind_reuseport`]: std has no SO_REUSEPORT and this program is std only.
#![deny(unsafe_code)]

// std only (built with plain rustc by images.sh): the stats reporter is included by path.
#[allow(dead_code)]
#[path = "../stats.rs"]
mod stats;

#[path = "../named_addr.rs"]
mod named_addr;

#[path = "../workload_ctl.rs"]
mod workload_ctl;

use std::collections::VecDeque;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Clone, Debug, Default, PartialEq)]
struct Config {
    port: u16,
    rate_hz: f64,
    out: Vec<(String, SocketAddr)>,
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn parse_out(s: &str) -> Result<Vec<(String, SocketAddr)>, String> {
    named_addr::parse_list(s, ',', "out channel", "chan")
}

fn parse_config(answer: &str) -> Result<Config, String> {
    let mut cfg = Config::default();
    for (k, v) in workload_ctl::fields(answer)? {
        match k {
            "port" => cfg.port = v.parse().map_err(|_| format!("bad port {v}"))?,
            "rate" => cfg.rate_hz = v.parse().map_err(|_| format!("bad rate {v}"))?,
            "out" => cfg.out = parse_out(v)?,
            _ => {}
        }
    }
    Ok(cfg)
}

use workload_ctl::env;

fn log(app: &str, comp: &str, msg: &str) {
    workload_ctl::log("acoa-workload", app, comp, msg);
}

fn main() {
    workload_ctl::main_with("acoa-workload", run);
}

/// A message held for `ACOA_DELAY_MS`: its datagrams go out at `due`; it was received (or due
/// at a source) at `since`.
struct Held {
    due: Instant,
    since: Instant,
    sends: Vec<(String, SocketAddr, String)>,
}

/// Messages held at most; beyond, a message is dropped (as a full queue would).
const MAX_HELD: usize = 4096;

/// Holds `h` until it is due (dropped when [`MAX_HELD`] are held).
fn hold(held: &mut VecDeque<Held>, h: Held) {
    if held.len() < MAX_HELD {
        held.push_back(h);
    }
}

/// Sends the held messages that are due; each counts as served from its `since`.
fn send_due(sock: &UdpSocket, held: &mut VecDeque<Held>, stats: &mut stats::Reporter) {
    while held.front().is_some_and(|h| h.due <= Instant::now()) {
        let Some(h) = held.pop_front() else { break };
        for (ch, to, d) in &h.sends {
            if sock.send_to(d.as_bytes(), to).is_ok() {
                stats.record(ch, d.len());
            }
        }
        stats.record_service(h.since.elapsed());
    }
}

fn ask(ctl: &UdpSocket, control: SocketAddr, app: &str, comp: &str) -> Option<Config> {
    workload_ctl::ask(ctl, control, app, comp, 2048).and_then(|a| parse_config(&a).ok())
}

fn run(app: &str, comp: &str) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    let control: Option<SocketAddr> = match env("ACOA_CONTROL") {
        Some(s) => Some(
            s.parse()
                .map_err(|_| format!("ACOA_CONTROL: bad address {s}"))?,
        ),
        None => None,
    };
    let report: Option<SocketAddr> = match env("ACOA_REPORT") {
        Some(s) => Some(
            s.parse()
                .map_err(|_| format!("ACOA_REPORT: bad address {s}"))?,
        ),
        None => control,
    };
    let ctl = UdpSocket::bind("0.0.0.0:0").map_err(io)?;
    ctl.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(io)?;
    let mut cfg = match control {
        Some(c) => loop {
            if let Some(cfg) = ask(&ctl, c, app, comp) {
                break cfg;
            }
            log(
                app,
                comp,
                &format!("no answer from the collector at {c}, retrying"),
            );
        },
        None => {
            let listen: SocketAddr = env("ACOA_LISTEN")
                .unwrap_or_else(|| "0.0.0.0:9100".into())
                .parse()
                .map_err(|_| "ACOA_LISTEN: bad address".to_string())?;
            Config {
                port: listen.port(),
                rate_hz: env("ACOA_RATE_HZ")
                    .map(|r| r.parse().map_err(|_| format!("ACOA_RATE_HZ: bad rate {r}")))
                    .transpose()?
                    .unwrap_or(0.0),
                out: parse_out(&env("ACOA_OUT").unwrap_or_default())?,
            }
        }
    };
    let sock = bind_reuseport(cfg.port).map_err(io)?;
    log(
        app,
        comp,
        &format!(
            "listening on {}, rate {} Hz, out [{}]",
            sock.local_addr().map_err(io)?,
            cfg.rate_hz,
            cfg.out
                .iter()
                .map(|(c, a)| format!("{c}@{a}"))
                .collect::<Vec<_>>()
                .join(",")
        ),
    );
    let delay = match env("ACOA_DELAY_MS") {
        Some(d) => Duration::from_secs_f64(
            d.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0 && *v <= 60_000.0)
                .ok_or_else(|| format!("ACOA_DELAY_MS: {d} is not a delay in 0..=60000 ms"))?
                / 1000.0,
        ),
        None => Duration::ZERO,
    };
    if !delay.is_zero() {
        log(app, comp, &format!("holds every message {delay:?}"));
    }
    let mut held: VecDeque<Held> = VecDeque::new();
    let mut stats = stats::Reporter::from_env();
    let mut seq: u64 = 0;
    let mut next_emit = Instant::now();
    let mut next_ask = Instant::now() + Duration::from_secs(1);
    let mut buf = [0u8; 2048];
    loop {
        let now = Instant::now();
        if let (Some(c), true) = (control, now >= next_ask) {
            next_ask = now + Duration::from_secs(1);
            if let Some(new) = ask(&ctl, c, app, comp) {
                if new.port != cfg.port {
                    log(app, comp, "port changed; restart to follow it");
                }
                if new != cfg {
                    log(
                        app,
                        comp,
                        &format!(
                            "new configuration: rate {} Hz, {} out channels",
                            new.rate_hz,
                            new.out.len()
                        ),
                    );
                }
                cfg = Config {
                    port: cfg.port,
                    ..new
                };
            }
        }
        if cfg.rate_hz > 0.0 && now >= next_emit {
            let origin = now_ns();
            hold(
                &mut held,
                Held {
                    due: now + delay,
                    since: now,
                    sends: cfg
                        .out
                        .iter()
                        .map(|(ch, to)| (ch.clone(), *to, format!("D1 {seq} {origin} {ch}")))
                        .collect(),
                },
            );
            if let Some(r) = report {
                let _ = ctl.send_to(format!("S1 {app} {comp} {seq} {origin}").as_bytes(), r);
            }
            seq += 1;
            next_emit += Duration::from_secs_f64(1.0 / cfg.rate_hz);
            if next_emit < now {
                next_emit = now; // do not burst after a stall
            }
        }
        send_due(&sock, &mut held, &mut stats);
        stats.tick();
        let mut wait = Duration::from_millis(200);
        if cfg.rate_hz > 0.0 {
            wait = wait.min(next_emit.saturating_duration_since(Instant::now()));
        }
        if let Some(h) = held.front() {
            wait = wait.min(h.due.saturating_duration_since(Instant::now()));
        }
        sock.set_read_timeout(Some(wait.max(Duration::from_micros(100))))
            .map_err(io)?;
        let Ok((n, _from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        let received = Instant::now();
        let recv = now_ns();
        let text = String::from_utf8_lossy(&buf[..n]);
        let mut w = text.split_whitespace();
        let (Some("D1"), Some(s), Some(origin), Some(trail)) =
            (w.next(), w.next(), w.next(), w.next())
        else {
            continue; // not ours: ignored
        };
        if let Some(r) = report {
            let _ = ctl.send_to(
                format!("R1 {app} {comp} {s} {origin} {recv} {trail}").as_bytes(),
                r,
            );
        }
        hold(
            &mut held,
            Held {
                due: received + delay,
                since: received,
                sends: cfg
                    .out
                    .iter()
                    .map(|(ch, to)| (ch.clone(), *to, format!("D1 {s} {origin} {trail}/{ch}")))
                    .collect(),
            },
        );
        send_due(&sock, &mut held, &mut stats);
    }
}

/// A UDP socket on 0.0.0.0:`port` with SO_REUSEPORT set before the bind (see the module
/// documentation). Linux only; the constants are the same on x86_64 and aarch64.
#[allow(unsafe_code)]
fn bind_reuseport(port: u16) -> std::io::Result<UdpSocket> {
    use std::os::fd::FromRawFd;
    #[repr(C)]
    struct SockaddrIn {
        family: u16,
        port: u16,
        addr: u32,
        zero: [u8; 8],
    }
    extern "C" {
        fn socket(domain: i32, kind: i32, protocol: i32) -> i32;
        fn setsockopt(fd: i32, level: i32, name: i32, value: *const i32, len: u32) -> i32;
        fn bind(fd: i32, addr: *const SockaddrIn, len: u32) -> i32;
        fn close(fd: i32) -> i32;
    }
    const AF_INET: i32 = 2;
    const SOCK_DGRAM: i32 = 2;
    const SOCK_CLOEXEC: i32 = 0o2000000;
    const SOL_SOCKET: i32 = 1;
    const SO_REUSEPORT: i32 = 15;
    let one: i32 = 1;
    let sa = SockaddrIn {
        family: AF_INET as u16,
        port: port.to_be(),
        addr: 0,
        zero: [0; 8],
    };
    // SAFETY: plain system calls on a descriptor this function owns; the pointers are to live
    // locals of the sizes given; on success the descriptor is handed to UdpSocket, which owns it.
    unsafe {
        let fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, 4) != 0
            || bind(fd, &sa, std::mem::size_of::<SockaddrIn>() as u32) != 0
        {
            let e = std::io::Error::last_os_error();
            close(fd);
            return Err(e);
        }
        Ok(UdpSocket::from_raw_fd(fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_config_answers() {
        let c = parse_config("K1 port=9101 rate=10 out=a@10.0.0.1:9102,b@10.0.0.2:9103").unwrap();
        assert_eq!(c.port, 9101);
        assert_eq!(c.rate_hz, 10.0);
        assert_eq!(c.out.len(), 2);
        assert_eq!(c.out[1].0, "b");
        let c = parse_config("K1 port=9101 rate=0 out=").unwrap();
        assert!(c.out.is_empty());
        assert!(parse_config("X").is_err());
        assert!(parse_out("a@nope").unwrap_err().contains("bad address"));
    }

    #[test]
    fn two_copies_share_the_port_and_the_traffic_moves_when_one_stops() {
        let a = bind_reuseport(0).unwrap();
        let port = a.local_addr().unwrap().port();
        let b = bind_reuseport(port).expect("a second copy binds the same port");
        for s in [&a, &b] {
            s.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
        }
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = ("127.0.0.1", port);
        tx.send_to(b"one", to).unwrap();
        let mut buf = [0u8; 8];
        // the kernel picks one socket for this sender: the other gets nothing
        let (got, other) = match a.recv(&mut buf) {
            Ok(_) => (a, b),
            Err(_) => {
                b.recv(&mut buf).expect("one of the two copies receives");
                (b, a)
            }
        };
        drop(got);
        tx.send_to(b"two", to).unwrap();
        let n = other.recv(&mut buf).expect("the remaining copy receives");
        assert_eq!(&buf[..n], b"two");
        // without SO_REUSEPORT the port is taken
        assert!(UdpSocket::bind(("0.0.0.0", port)).is_err());
    }
}
