//! Per-peer link statistics: the latency as the trimmed mean of the last [`LATENCY_WINDOW`]
//! one-way samples (restarted when a fast EWMA tracker detects a level shift), the RFC 3550
//! interarrival jitter of those samples, the success over the last `window` probes and its
//! split into the two directions from the responder's ping counts ([`DirLoss`]).
//!
//! Invariant: fixed size (a bit window of at most 64 outcomes, [`LATENCY_WINDOW`] samples, three
//! marks), no time or I/O: samples come in as values; success stays within `[0, 1]` and is 1
//! before anything was sent.

/// Weight of a new sample in the fast latency tracker (as TCP's SRTT).
const EWMA_ALPHA: f64 = 0.125;
/// One-way samples per peer the reported latency is the mean of (at most).
pub const LATENCY_WINDOW: usize = 32;
/// Samples kept when a level shift restarts the window.
const SHIFT_KEEP: usize = 6;

/// A pong this many pings older than the latest is a reordered one; further back, the
/// numbering has restarted.
const REORDER_LIMIT: u32 = 256;

/// One pong seen by the loss attribution: our ping's index, the responder's count and how
/// many pongs we had received in all.
#[derive(Debug, Clone, Copy)]
struct Mark {
    idx: u32,
    count: u16,
    answered: u32,
}

/// Splits round-trip loss into its two directions from the responder's counts, over the
/// span between an anchor pong and the latest one (`window` to `2 * window` pings).
#[derive(Debug, Clone, Default)]
pub struct DirLoss {
    anchor: Option<Mark>,
    mid: Option<Mark>,
    last: Option<Mark>,
}

impl DirLoss {
    /// A pong answering our ping number `idx` says the responder has received `count`
    /// pings from us; `answered` counts our pongs received, this one included.
    pub fn on_pong(&mut self, idx: u32, count: u16, answered: u32, window: usize) {
        let m = Mark {
            idx,
            count,
            answered,
        };
        if let Some(last) = self.last {
            let di = idx.wrapping_sub(last.idx);
            let behind = last.idx.wrapping_sub(idx);
            if di == 0 || behind <= REORDER_LIMIT {
                return; // a reordered (older) pong: nothing new
            }
            let dc = u32::from(count.wrapping_sub(last.count));
            if behind < di || dc == 0 || dc > di {
                // Our numbering restarted (far behind: the peer's stats were replaced), or
                // the responder restarted or forgot us: start over.
                *self = DirLoss::default();
            }
        }
        match (self.anchor, self.mid) {
            (None, _) | (_, None) => {
                self.anchor = Some(m);
                self.mid = Some(m);
            }
            (Some(_), Some(mid)) => {
                if idx.wrapping_sub(mid.idx) as usize >= window {
                    self.anchor = Some(mid);
                    self.mid = Some(m);
                }
            }
        }
        self.last = Some(m);
    }

    /// Of the pings that reached the responder in the span, the fraction whose pong came
    /// back; `None` before two pongs with counts.
    pub fn reverse_success(&self) -> Option<f64> {
        let (a, l) = (self.anchor?, self.last?);
        let arrived = l.count.wrapping_sub(a.count);
        if arrived == 0 {
            return None;
        }
        let back = l.answered.wrapping_sub(a.answered);
        Some((f64::from(back) / f64::from(arrived)).clamp(0.0, 1.0))
    }
}

/// Mean and (population) standard deviation.
fn mean_sd(values: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let (n, sum) = values.clone().fold((0u32, 0.0), |(n, s), v| (n + 1, s + v));
    if n == 0 {
        return (0.0, 0.0);
    }
    let mean = sum / f64::from(n);
    let var = values.map(|v| (v - mean) * (v - mean)).sum::<f64>() / f64::from(n);
    (mean, var.sqrt())
}

/// Per-peer link statistics.
#[derive(Debug, Clone, Default)]
pub struct LinkStats {
    /// The fast tracker (EWMA), which detects level shifts.
    tracker_ms: Option<f64>,
    /// The newest one-way samples, oldest first; the reported latency is their trimmed mean.
    recent: heapless::Deque<f32, LATENCY_WINDOW>,
    jitter_ms: f64,
    last_owd_ms: Option<f64>,
    /// Outcomes, newest in bit 0 (1 = answered).
    bits: u64,
    count: u32,
    /// Pings sent to this peer (wrapping): the index of the next one.
    pub(super) sent: u32,
    /// Pongs received from this peer (wrapping).
    pub(super) answered: u32,
    pub(super) dir: DirLoss,
    /// Samples that fell back to RTT/2 since the last clock warning.
    pub(super) clock_fallbacks: u32,
    pub(super) last_clock_warn_ns: Option<u64>,
}

impl LinkStats {
    fn push(&mut self, ok: bool, window: usize) {
        let mask = if window >= 64 {
            u64::MAX
        } else {
            (1u64 << window) - 1
        };
        self.bits = ((self.bits << 1) | u64::from(ok)) & mask;
        self.count = (self.count + 1).min(window as u32);
    }

    /// A round trip of `rtt_ms`: a sample of RTT/2.
    pub fn on_reply(&mut self, rtt_ms: f64, window: usize) {
        self.on_sample(rtt_ms / 2.0, window);
    }

    /// A one-way latency sample of an answered probe.
    pub fn on_sample(&mut self, owd: f64, window: usize) {
        let ewma = match self.tracker_ms {
            None => owd,
            Some(l) => l + EWMA_ALPHA * (owd - l),
        };
        self.tracker_ms = Some(ewma);
        if self.recent.is_full() {
            self.recent.pop_front();
        }
        let _ = self.recent.push_back(owd as f32);
        // A level shift: the tracker leaves the window's mean by more than three of its own
        // standard deviations (sd * sqrt(a / (2 - a)) for white noise) plus 0.05 ms. The
        // window restarts from the newest run of samples nearer the tracker than the old mean
        // (at most SHIFT_KEEP, at least the newest).
        let n = self.recent.len();
        if n > SHIFT_KEEP {
            let (mean, sd) = mean_sd(self.recent.iter().map(|v| f64::from(*v)));
            let noise = sd * (EWMA_ALPHA / (2.0 - EWMA_ALPHA)).sqrt();
            if (ewma - mean).abs() > 3.0 * noise + 0.05 {
                let keep = self
                    .recent
                    .iter()
                    .rev()
                    .take(SHIFT_KEEP)
                    .take_while(|v| (f64::from(**v) - ewma).abs() < (f64::from(**v) - mean).abs())
                    .count()
                    .max(1);
                while self.recent.len() > keep {
                    self.recent.pop_front();
                }
                // The tracker restarts at the new level (else it would trigger again and
                // again while it catches up).
                self.tracker_ms = Some(mean_sd(self.recent.iter().map(|v| f64::from(*v))).0);
            }
        }
        if let Some(last) = self.last_owd_ms {
            let d = (owd - last).abs();
            self.jitter_ms += (d - self.jitter_ms) / 16.0;
        }
        self.last_owd_ms = Some(owd);
        self.push(true, window);
    }

    pub fn on_loss(&mut self, window: usize) {
        self.push(false, window);
    }

    /// The recent one-way samples' mean less their highest and lowest eighth (a trimmed
    /// mean: one late packet on a quiet link does not move it; `None` before the first).
    pub fn latency_ms(&self) -> Option<f64> {
        if self.recent.is_empty() {
            return None;
        }
        let mut v: heapless::Vec<f32, LATENCY_WINDOW> = self.recent.iter().copied().collect();
        v.sort_unstable_by(|a, b| a.total_cmp(b));
        let k = v.len() / 8;
        Some(mean_sd(v[k..v.len() - k].iter().map(|x| f64::from(*x))).0)
    }

    pub fn jitter_ms(&self) -> f64 {
        self.jitter_ms
    }

    pub fn samples(&self) -> u32 {
        self.count
    }

    /// Success of the direction to the peer: the round-trip success over the window
    /// divided by the reverse direction's success, when the responder counts; else the
    /// round-trip success.
    pub fn success(&self) -> f64 {
        let rt = self.round_trip_success();
        match self.dir.reverse_success() {
            Some(r) if r > 0.0 => (rt / r).clamp(0.0, 1.0),
            _ => rt,
        }
    }

    /// Fraction answered over the window (1 when nothing was sent yet).
    pub fn round_trip_success(&self) -> f64 {
        if self.count == 0 {
            return 1.0;
        }
        let mask = if self.count >= 64 {
            u64::MAX
        } else {
            (1u64 << self.count) - 1
        };
        f64::from((self.bits & mask).count_ones()) / f64::from(self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_follow_rfc3550_and_window() {
        let mut s = LinkStats::default();
        for _ in 0..10 {
            s.on_reply(100.0, 4);
        }
        assert!((s.latency_ms().unwrap() - 50.0).abs() < 1e-9);
        assert_eq!(s.jitter_ms(), 0.0);
        s.on_reply(120.0, 4); // one-way 60: D = 10, J = 10/16
        assert!((s.jitter_ms() - 0.625).abs() < 1e-9);
        s.on_loss(4);
        s.on_loss(4);
        assert_eq!(s.samples(), 4);
        assert!((s.success() - 0.5).abs() < 1e-9);
        s.on_loss(4);
        s.on_loss(4);
        assert_eq!(s.success(), 0.0);
    }

    /// A normal draw (Box-Muller over a small LCG): deterministic noise for the tests.
    fn normal(state: &mut u64) -> f64 {
        let mut u = || {
            *state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        let (u1, u2) = (u(), u());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    #[test]
    fn a_jittery_link_reads_steadily_and_a_changed_one_is_followed_within_a_few_samples() {
        // 20 ms with 1.3 ms of noise (the railway table's longest links): over many runs the
        // reported latency after 64 samples stays within 5 % far more often than TCP's EWMA
        // (sd 0.26 sigma) would; the window mean's sd is sigma / sqrt(32).
        let mut rng = 7u64;
        let mut worst = 0.0f64;
        for _ in 0..300 {
            let mut s = LinkStats::default();
            for _ in 0..64 {
                s.on_sample(20.0 + 1.3 * normal(&mut rng), 64);
            }
            worst = worst.max((s.latency_ms().unwrap() - 20.0).abs());
        }
        assert!(worst < 1.0, "worst error {worst} ms over 300 runs");
        // A step from 1 ms to 6 ms on a quiet link: the old level is forgotten within 8 samples.
        let mut s = LinkStats::default();
        for _ in 0..40 {
            s.on_sample(1.0 + 0.03 * normal(&mut rng), 64);
        }
        // (One packet 2.5 ms late on it first: the trimmed mean does not move.)
        s.on_sample(3.5, 64);
        assert!(
            (s.latency_ms().unwrap() - 1.0).abs() < 0.02,
            "{:?}",
            s.latency_ms()
        );
        for i in 1..=8 {
            s.on_sample(6.0 + 0.03 * normal(&mut rng), 64);
            if i == 8 {
                let got = s.latency_ms().unwrap();
                assert!((got - 6.0).abs() < 0.1, "after {i} samples: {got}");
            }
        }
        // And the same step on a jittery link: followed within 12 samples (to 10 %).
        let mut s = LinkStats::default();
        for _ in 0..40 {
            s.on_sample(20.0 + 1.3 * normal(&mut rng), 64);
        }
        for _ in 0..12 {
            s.on_sample(30.0 + 1.3 * normal(&mut rng), 64);
        }
        let got = s.latency_ms().unwrap();
        assert!((got - 30.0).abs() < 3.0, "{got}");
        // Settled at the new level: the window fills again (no restarts on mere noise).
        for _ in 0..LATENCY_WINDOW {
            s.on_sample(30.0 + 1.3 * normal(&mut rng), 64);
        }
        assert_eq!(s.recent.len(), LATENCY_WINDOW);
        assert!((s.latency_ms().unwrap() - 30.0).abs() < 1.0);
    }

    #[test]
    fn a_dead_peer_goes_to_zero_and_a_restarted_responder_is_followed() {
        let mut d = DirLoss::default();
        for i in 0..30u32 {
            d.on_pong(i, (i + 1) as u16, i + 1, 10);
        }
        assert_eq!(d.reverse_success(), Some(1.0));
        // The responder restarted: its count starts again at 1.
        d.on_pong(30, 1, 31, 10);
        assert_eq!(d.reverse_success(), None);
        d.on_pong(31, 2, 32, 10);
        assert_eq!(d.reverse_success(), Some(1.0));
        // A reordered older pong changes nothing.
        d.on_pong(29, 5, 33, 10);
        assert_eq!(d.reverse_success(), Some(1.0));
        // The pings' numbering restarted (the peer's stats were replaced): follow it.
        let mut r = DirLoss::default();
        r.on_pong(5000, 100, 1, 10);
        r.on_pong(0, 101, 2, 10);
        r.on_pong(1, 102, 3, 10);
        assert_eq!(r.reverse_success(), Some(1.0));
        // Wrapping counts.
        let mut w = DirLoss::default();
        w.on_pong(0, 65535, 1, 10);
        w.on_pong(2, 1, 2, 10);
        assert_eq!(w.reverse_success(), Some(0.5));
        // A peer that stops answering: the round-trip window empties, so does success.
        let mut s = LinkStats::default();
        for i in 0..10u32 {
            s.answered += 1;
            s.dir.on_pong(i, (i + 1) as u16, s.answered, 10);
            s.on_reply(2.0, 10);
        }
        for _ in 0..10 {
            s.on_loss(10);
        }
        assert_eq!(s.success(), 0.0);
    }
}
