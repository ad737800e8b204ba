//! The packet forwarder: one reader thread per TUN device, one delivery thread.
//!
//! A reader takes an IPv4 packet from its node's TUN device, looks up the destination node by
//! address, draws the packet's fate on the directed link (loss, or a delay with jitter) and hands
//! it to the delivery thread with its due time. The delivery thread keeps a binary heap ordered
//! by due time, sleeps until shortly before the next one is due (timer slack set to 1 µs), spins
//! the last [`SPIN`], and writes the packet into the destination node's TUN device. Every thread
//! asks for `SCHED_FIFO` so that a busy machine does not add milliseconds; where that is refused
//! they run as normal threads (logged).
//!
//! Lateness (when a packet was written minus when it was due) is recorded in a histogram: it is
//! the emulator's own error, on top of which the kernel adds its path through the TUN devices.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashMap};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::{rngs::SmallRng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::linktable::{LinkSpec, LinkTable};

/// The delivery thread busy-waits for this long before a packet is due.
pub const SPIN: Duration = Duration::from_micros(150);
/// Largest packet read from a TUN device.
const MAX_PACKET: usize = 65_536;
/// Lateness histogram: 1 µs buckets up to this many µs, then one overflow bucket.
const HIST_US: usize = 5_000;

/// One emulated endpoint: a node's TUN device and its address.
pub struct Endpoint {
    pub name: String,
    pub addr: Ipv4Addr,
    pub dev: tun::Device,
}

/// What the emulator has done so far.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct StatsSnapshot {
    /// Packets written to their destination.
    pub delivered: u64,
    /// Packets dropped by the emulated loss.
    pub dropped: u64,
    /// Packets whose destination is no emulated node, or that are not IPv4.
    pub unroutable: u64,
    /// Packets that could not be written (destination device gone or full).
    pub write_errors: u64,
    /// Delivery lateness (written minus due), in microseconds.
    pub lateness_us: Lateness,
    /// Per directed link with traffic: packets forwarded (delivered or queued) and dropped.
    pub links: Vec<LinkCounters>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Lateness {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LinkCounters {
    pub from: String,
    pub to: String,
    pub forwarded: u64,
    pub dropped: u64,
}

struct LatenessHist {
    buckets: Vec<u64>,
    count: u64,
    sum_us: f64,
    max_us: f64,
}

impl LatenessHist {
    fn new() -> Self {
        Self {
            buckets: vec![0; HIST_US + 1],
            count: 0,
            sum_us: 0.0,
            max_us: 0.0,
        }
    }

    fn record(&mut self, late: Duration) {
        let us = late.as_secs_f64() * 1e6;
        self.count += 1;
        self.sum_us += us;
        if us > self.max_us {
            self.max_us = us;
        }
        let b = (us as usize).min(HIST_US);
        self.buckets[b] += 1;
    }

    fn quantile(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let target = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= target {
                return if i == HIST_US {
                    self.max_us
                } else {
                    (i + 1) as f64
                };
            }
        }
        self.max_us
    }

    fn snapshot(&self) -> Lateness {
        Lateness {
            count: self.count,
            mean: if self.count == 0 {
                0.0
            } else {
                self.sum_us / self.count as f64
            },
            p50: self.quantile(0.5),
            p99: self.quantile(0.99),
            p999: self.quantile(0.999),
            max: self.max_us,
        }
    }
}

/// State shared by the forwarder's threads and whoever controls it.
pub struct Shared {
    pub names: Vec<String>,
    pub addrs: Vec<Ipv4Addr>,
    index: HashMap<String, usize>,
    links: RwLock<LinkTable>,
    forwarded: Vec<AtomicU64>,
    dropped: Vec<AtomicU64>,
    unroutable: AtomicU64,
    write_errors: AtomicU64,
    lateness: Mutex<LatenessHist>,
    /// Subtracted from every non-zero delay, ns (see [`Shared::set_compensation`]).
    compensate_ns: AtomicU64,
}

impl Shared {
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    pub fn link(&self, from: usize, to: usize) -> LinkSpec {
        self.links.read().expect("link table lock").get(from, to)
    }

    pub fn set_link(&self, from: usize, to: usize, spec: LinkSpec) {
        self.links
            .write()
            .expect("link table lock")
            .set(from, to, spec);
    }

    pub fn stats(&self) -> StatsSnapshot {
        let n = self.names.len();
        let mut links = Vec::new();
        for f in 0..n {
            for t in 0..n {
                let fw = self.forwarded[f * n + t].load(Ordering::Relaxed);
                let dr = self.dropped[f * n + t].load(Ordering::Relaxed);
                if fw + dr > 0 {
                    links.push(LinkCounters {
                        from: self.names[f].clone(),
                        to: self.names[t].clone(),
                        forwarded: fw,
                        dropped: dr,
                    });
                }
            }
        }
        let lateness = self.lateness.lock().expect("stats lock").snapshot();
        StatsSnapshot {
            delivered: lateness.count,
            dropped: links.iter().map(|l| l.dropped).sum(),
            unroutable: self.unroutable.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
            lateness_us: lateness,
            links,
        }
    }

    /// The emulator's own path (reader wake-up, hand-over, write) adds about 0.02-0.04 ms per
    /// packet on a small VM, kernel stamp to kernel stamp. A compensation is subtracted from
    /// every non-zero drawn delay (never below zero) so that a packet takes the table's delay
    /// from leaving one device to reaching the other (a program's own wake-ups come on top, as
    /// on a real network); [`crate::emu::Testbed::calibrate`] measures it. Ideal links (latency
    /// 0) are not touched.
    pub fn set_compensation(&self, d: Duration) {
        self.compensate_ns
            .store(d.as_nanos() as u64, Ordering::Relaxed);
    }

    pub fn compensation(&self) -> Duration {
        Duration::from_nanos(self.compensate_ns.load(Ordering::Relaxed))
    }

    /// Forgets all counters (e.g. between two measurement runs).
    pub fn reset_stats(&self) {
        for c in self.forwarded.iter().chain(self.dropped.iter()) {
            c.store(0, Ordering::Relaxed);
        }
        self.unroutable.store(0, Ordering::Relaxed);
        self.write_errors.store(0, Ordering::Relaxed);
        *self.lateness.lock().expect("stats lock") = LatenessHist::new();
    }
}

struct Pending {
    due: Instant,
    seq: u64,
    to: usize,
    data: Vec<u8>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.due == other.due && self.seq == other.seq
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    // reversed: BinaryHeap is a max-heap, we want the earliest due first
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other
            .due
            .cmp(&self.due)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// Options of a forwarder.
#[derive(Clone, Debug)]
pub struct ForwarderOptions {
    /// Ask for SCHED_FIFO for the forwarder's threads.
    pub realtime: bool,
    /// Keep packets of one directed link in order (a packet is never delivered before one that
    /// entered the same link earlier), as on a real path; jitter then cannot reorder.
    pub keep_order: bool,
    /// Seed of the loss and jitter draws (each reader adds its index).
    pub seed: u64,
}

impl Default for ForwarderOptions {
    fn default() -> Self {
        Self {
            realtime: true,
            keep_order: true,
            seed: 0x00ac_0a00,
        }
    }
}

/// A running forwarder; stops its threads on drop.
pub struct Forwarder {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Forwarder {
    /// Starts forwarding between `endpoints` with `links` (indexed like `endpoints`).
    pub fn start(
        endpoints: Vec<Endpoint>,
        links: LinkTable,
        opts: ForwarderOptions,
    ) -> std::io::Result<Self> {
        let n = endpoints.len();
        assert_eq!(links.len(), n, "link table size");
        let names: Vec<String> = endpoints.iter().map(|e| e.name.clone()).collect();
        let addrs: Vec<Ipv4Addr> = endpoints.iter().map(|e| e.addr).collect();
        let index = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        let shared = Arc::new(Shared {
            names,
            addrs: addrs.clone(),
            index,
            links: RwLock::new(links),
            forwarded: (0..n * n).map(|_| AtomicU64::new(0)).collect(),
            dropped: (0..n * n).map(|_| AtomicU64::new(0)).collect(),
            unroutable: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            lateness: Mutex::new(LatenessHist::new()),
            compensate_ns: AtomicU64::new(0),
        });
        let by_addr: Arc<HashMap<Ipv4Addr, usize>> =
            Arc::new(addrs.iter().enumerate().map(|(i, a)| (*a, i)).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let devs: Arc<Vec<Endpoint>> = Arc::new(endpoints);
        let seq = Arc::new(AtomicU64::new(0));
        let (tx, rx) = mpsc::channel::<Pending>();
        let mut threads = Vec::new();

        {
            let shared = shared.clone();
            let stop = stop.clone();
            let devs = devs.clone();
            let realtime = opts.realtime;
            threads.push(
                std::thread::Builder::new()
                    .name("linkemu-deliver".into())
                    .spawn(move || {
                        tune_thread(realtime, "delivery");
                        deliver_loop(rx, &devs, &shared, &stop)
                    })?,
            );
        }
        for src in 0..n {
            let shared = shared.clone();
            let stop = stop.clone();
            let devs = devs.clone();
            let by_addr = by_addr.clone();
            let tx = tx.clone();
            let seq = seq.clone();
            let opts = opts.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("linkemu-rd-{src}"))
                    .spawn(move || {
                        tune_thread(opts.realtime, "reader");
                        read_loop(src, &devs, &by_addr, &shared, &stop, tx, &seq, &opts)
                    })?,
            );
        }
        Ok(Self {
            shared,
            stop,
            threads,
        })
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Stops all threads and waits for them.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sets the calling thread's timer slack to 1 µs and, if `realtime`, asks for SCHED_FIFO
/// (priority 50); a refusal is logged, not an error.
pub fn tune_thread(realtime: bool, what: &str) {
    // 1 µs timer slack instead of the default 50 µs: sleeps end when asked
    if let Err(e) = nix::sys::prctl::set_timerslack(1_000) {
        tracing::debug!(error = %e, "cannot set timer slack");
    }
    if realtime {
        use thread_priority::{
            set_thread_priority_and_policy, thread_native_id, RealtimeThreadSchedulePolicy,
            ThreadPriority, ThreadPriorityValue, ThreadSchedulePolicy,
        };
        let prio = ThreadPriorityValue::try_from(50u8).expect("priority 50 is valid");
        if let Err(e) = set_thread_priority_and_policy(
            thread_native_id(),
            ThreadPriority::Crossplatform(prio),
            ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo),
        ) {
            tracing::warn!(thread = what, error = ?e, "SCHED_FIFO refused, running as a normal thread: delays may be less precise on a busy machine");
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn read_loop(
    src: usize,
    devs: &[Endpoint],
    by_addr: &HashMap<Ipv4Addr, usize>,
    shared: &Shared,
    stop: &AtomicBool,
    tx: Sender<Pending>,
    seq: &AtomicU64,
    opts: &ForwarderOptions,
) {
    let n = devs.len();
    let dev = &devs[src].dev;
    let mut rng = SmallRng::seed_from_u64(opts.seed.wrapping_add(src as u64));
    let mut last_due: Vec<Option<Instant>> = vec![None; n];
    let mut buf = vec![0u8; MAX_PACKET];
    while !stop.load(Ordering::Relaxed) {
        let len = match dev.recv_timeout(&mut buf, Duration::from_millis(100)) {
            Ok(len) => len,
            Err(e)
                if e.kind() == std::io::ErrorKind::TimedOut
                    || e.kind() == std::io::ErrorKind::Interrupted
                    || e.kind() == std::io::ErrorKind::WouldBlock =>
            {
                continue
            }
            Err(e) => {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                tracing::warn!(node = %devs[src].name, error = %e, "tun read failed");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let now = Instant::now();
        let pkt = &buf[..len];
        if len < 20 || pkt[0] >> 4 != 4 {
            shared.unroutable.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let dst = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
        let Some(&to) = by_addr.get(&dst) else {
            shared.unroutable.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let spec = shared.link(src, to);
        let Some(delay) = spec.draw(&mut rng) else {
            shared.dropped[src * n + to].fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let delay = if spec.latency_ms > 0.0 {
            delay.saturating_sub(shared.compensation())
        } else {
            delay
        };
        let mut due = now + delay;
        if opts.keep_order {
            if let Some(prev) = last_due[to] {
                if prev > due {
                    due = prev;
                }
            }
            last_due[to] = Some(due);
        }
        shared.forwarded[src * n + to].fetch_add(1, Ordering::Relaxed);
        let p = Pending {
            due,
            seq: seq.fetch_add(1, Ordering::Relaxed),
            to,
            data: pkt.to_vec(),
        };
        if tx.send(p).is_err() {
            break;
        }
    }
}

fn deliver_loop(rx: Receiver<Pending>, devs: &[Endpoint], shared: &Shared, stop: &AtomicBool) {
    let mut heap: BinaryHeap<Pending> = BinaryHeap::new();
    let idle = Duration::from_millis(50);
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        // take what the readers queued
        loop {
            match rx.try_recv() {
                Ok(p) => heap.push(p),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return,
            }
        }
        // deliver what is due
        let mut now = Instant::now();
        while heap.peek().is_some_and(|p| p.due <= now) {
            let p = heap.pop().expect("peeked");
            if devs[p.to].dev.send(&p.data).is_err() {
                shared.write_errors.fetch_add(1, Ordering::Relaxed);
            }
            shared
                .lateness
                .lock()
                .expect("stats lock")
                .record(now.saturating_duration_since(p.due));
            now = Instant::now();
        }
        // wait for the next one, or for new packets
        let wait = match heap.peek() {
            None => idle,
            Some(p) => p.due.saturating_duration_since(now),
        };
        if wait > SPIN {
            match rx.recv_timeout((wait - SPIN).min(idle)) {
                Ok(p) => heap.push(p),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        } else {
            std::hint::spin_loop();
        }
    }
}
