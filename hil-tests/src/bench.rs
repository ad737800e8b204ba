//! How precisely the emulator holds its delays as the packet rate grows: one node sends UDP
//! datagrams to another over a link of fixed delay (no jitter, no loss) at a given rate; each
//! datagram's one-way latency runs from the kernel's send stamp to the kernel's receive stamp
//! (one clock: the emulator's delay, not the measuring threads' wake-ups), minus the configured
//! delay. Reported beside the emulator's own delivery lateness.

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
    use acoa_kstamp::{self as ap, KernelStamps};
    tb.set_link(a, b, LinkSpec::new(delay_ms, 0.0, 0.0))?;
    let mut out = Vec::new();
    for &rate in rates {
        tb.reset_stats();
        let rx = tb.udp_socket(b, 0)?;
        rx.set_read_timeout(Some(Duration::from_millis(100)))?;
        let dst = std::net::SocketAddr::new(tb.addr(b)?.into(), rx.local_addr()?.port());
        let tx = tb.udp_socket(a, 0)?;
        if ap::enable_kernel_stamps(&rx) != KernelStamps::Nanoseconds
            || !ap::enable_send_stamps(&tx)
        {
            return Err(std::io::Error::other("no kernel send or receive timestamps").into());
        }
        let token: u32 = rand::random();
        let count = (rate as f64 * secs) as u64;
        let done = Arc::new(AtomicBool::new(false));
        let d2 = done.clone();
        // (sequence number, kernel receive time) of every datagram that arrived
        let recv = std::thread::spawn(move || {
            crate::forwarder::tune_thread(true, "bench-rx");
            let mut got = Vec::new();
            let mut buf = [0u8; 128];
            loop {
                match ap::recv_stamped(&rx, &mut buf) {
                    Ok((n, _, Some(k))) => {
                        if let Some(seq) = crate::probe::probe_seq(&buf[..n], token) {
                            got.push((seq, k));
                        }
                    }
                    _ => {
                        if d2.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                }
            }
            got
        });
        // every datagram's send time: the kernel's where it gave one
        let send = std::thread::spawn(move || -> std::io::Result<Vec<Option<u64>>> {
            crate::forwarder::tune_thread(true, "bench-tx");
            let interval = Duration::from_secs_f64(1.0 / rate as f64);
            let mut sent_at = vec![None; count as usize];
            let start = Instant::now();
            for i in 0..count as usize {
                let due = start + interval * i as u32;
                while Instant::now() < due {
                    let left = due - Instant::now();
                    if left > Duration::from_micros(200) {
                        std::thread::sleep(left - Duration::from_micros(100));
                    } else {
                        std::hint::spin_loop();
                    }
                }
                sent_at[i] = Some(ap::wall_ns());
                tx.send_to(&crate::probe::probe_bytes(token, i as u64), dst)?;
                crate::probe::drain_send_stamps(&tx, token, &mut sent_at);
            }
            std::thread::sleep(Duration::from_millis(5));
            crate::probe::drain_send_stamps(&tx, token, &mut sent_at);
            Ok(sent_at)
        });
        let sent_at = send
            .join()
            .map_err(|_| std::io::Error::other("sender panicked"))??;
        let sent = sent_at.len() as u64;
        std::thread::sleep(Duration::from_secs_f64(delay_ms / 1000.0 + 0.3));
        done.store(true, Ordering::Relaxed);
        let got = recv
            .join()
            .map_err(|_| std::io::Error::other("receiver panicked"))?;
        let errs: Vec<f64> = got
            .iter()
            .filter_map(|(seq, k)| {
                let s = (*sent_at.get(*seq)?)?;
                Some(k.saturating_sub(s) as f64 / 1e6 - delay_ms)
            })
            .collect();
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
