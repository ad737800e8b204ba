//! How precisely the emulator holds its delays as the packet rate grows: one node sends
//! timestamped UDP datagrams to another over a link of fixed delay (no jitter, no loss) at a
//! given rate; the receiver computes each datagram's one-way latency (same clock) minus the
//! configured delay. Reported beside the emulator's own delivery lateness.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::emu::{EmuError, Testbed};
use crate::forwarder::Lateness;
use crate::LinkSpec;

#[derive(Clone, Debug, Serialize)]
pub struct RateResult {
    pub rate_pps: u64,
    pub sent: u64,
    pub received: u64,
    /// One-way latency minus the configured delay, ms.
    pub error_p50_ms: f64,
    pub error_p99_ms: f64,
    pub error_max_ms: f64,
    pub lateness_us: Lateness,
}

/// Runs the sweep on nodes `a -> b` (a new testbed's two nodes) with `delay_ms` one way.
pub fn rate_sweep(
    tb: &Testbed,
    a: &str,
    b: &str,
    delay_ms: f64,
    rates: &[u64],
    secs: f64,
) -> Result<Vec<RateResult>, EmuError> {
    tb.set_link(a, b, LinkSpec::new(delay_ms, 0.0, 0.0))?;
    let base = Instant::now();
    let mut out = Vec::new();
    for &rate in rates {
        tb.reset_stats();
        let rx = tb.udp_socket(b, 0)?;
        rx.set_read_timeout(Some(Duration::from_millis(100)))?;
        let dst = std::net::SocketAddr::new(tb.addr(b)?.into(), rx.local_addr()?.port());
        let tx = tb.udp_socket(a, 0)?;
        let done = Arc::new(AtomicBool::new(false));
        let d2 = done.clone();
        let recv = std::thread::spawn(move || {
            crate::forwarder::tune_thread(true, "bench-rx");
            let mut errs = Vec::new();
            let mut buf = [0u8; 64];
            loop {
                match rx.recv(&mut buf) {
                    Ok(n) if n >= 8 => {
                        let now = base.elapsed().as_nanos() as u64;
                        let sent = u64::from_be_bytes(buf[..8].try_into().expect("8 bytes"));
                        errs.push((now.saturating_sub(sent)) as f64 / 1e6 - delay_ms);
                    }
                    _ => {
                        if d2.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                }
            }
            errs
        });
        let count = (rate as f64 * secs) as u64;
        let send = std::thread::spawn(move || -> std::io::Result<u64> {
            crate::forwarder::tune_thread(true, "bench-tx");
            let interval = Duration::from_secs_f64(1.0 / rate as f64);
            let start = Instant::now();
            for i in 0..count {
                let due = start + interval * i as u32;
                while Instant::now() < due {
                    let left = due - Instant::now();
                    if left > Duration::from_micros(200) {
                        std::thread::sleep(left - Duration::from_micros(100));
                    } else {
                        std::hint::spin_loop();
                    }
                }
                let mut msg = [0u8; 64];
                msg[..8].copy_from_slice(&(base.elapsed().as_nanos() as u64).to_be_bytes());
                tx.send_to(&msg, dst)?;
            }
            Ok(count)
        });
        let sent = send
            .join()
            .map_err(|_| std::io::Error::other("sender panicked"))??;
        std::thread::sleep(Duration::from_secs_f64(delay_ms / 1000.0 + 0.3));
        done.store(true, Ordering::Relaxed);
        let errs = recv
            .join()
            .map_err(|_| std::io::Error::other("receiver panicked"))?;
        out.push(RateResult {
            rate_pps: rate,
            sent,
            received: errs.len() as u64,
            error_p50_ms: crate::probe::quantile(&errs, 0.5),
            error_p99_ms: crate::probe::quantile(&errs, 0.99),
            error_max_ms: errs.iter().copied().fold(f64::NAN, f64::max),
            lateness_us: tb.stats().lateness_us,
        });
    }
    Ok(out)
}
