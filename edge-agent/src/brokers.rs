//! Which broker of its list the agent talks to: a pure state machine, told when a connection is
//! accepted or fails, that says where to connect next and how long to wait first.
//!
//! Invariants:
//! - Every failure of the current broker (refused, unreachable, or a connection that dropped)
//!   moves to the next broker of the list, round and round; a list of one stays on its broker.
//! - The wait before the next attempt doubles with every failure since the last accepted
//!   connection, from [`BACKOFF_MIN`] up to [`BACKOFF_MAX`], and starts again from
//!   [`BACKOFF_MIN`] once a broker accepts: a broker that is gone costs one short wait, a list of
//!   brokers that are all gone is tried at most every [`BACKOFF_MAX`].
//! - Nothing here touches the containers: moving is a matter of the MQTT session only.

use std::time::Duration;

/// The first wait after a failure.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest wait between two attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// The next reconnect delay: doubling from [`BACKOFF_MIN`], capped at [`BACKOFF_MAX`].
pub fn next_backoff(current: Duration) -> Duration {
    (current * 2).clamp(BACKOFF_MIN, BACKOFF_MAX)
}

/// Where the next connection attempt goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// The broker's index in the list.
    pub broker: usize,
    /// How long to wait before trying it.
    pub wait: Duration,
    /// Whether it is another broker than the one that failed.
    pub moved: bool,
}

/// The agent's position in its broker list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotation {
    count: usize,
    current: usize,
    backoff: Duration,
}

impl Rotation {
    /// Starts on the first of `count` brokers (at least one).
    pub fn new(count: usize) -> Rotation {
        Rotation {
            count: count.max(1),
            current: 0,
            backoff: Duration::ZERO,
        }
    }

    /// The broker connected to, or being tried.
    pub fn current(&self) -> usize {
        self.current
    }

    /// The current broker accepted a connection.
    pub fn connected(&mut self) {
        self.backoff = Duration::ZERO;
    }

    /// The current broker failed: the next attempt.
    pub fn failed(&mut self) -> Attempt {
        self.backoff = next_backoff(self.backoff);
        let next = (self.current + 1) % self.count;
        let moved = next != self.current;
        self.current = next;
        Attempt {
            broker: next,
            wait: self.backoff,
            moved,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let mut b = Duration::ZERO;
        let mut seen = Vec::new();
        for _ in 0..10 {
            b = next_backoff(b);
            seen.push(b.as_millis());
        }
        assert_eq!(seen[..4], [100, 200, 400, 800]);
        assert_eq!(*seen.last().unwrap(), 10_000);
    }

    #[test]
    fn a_failed_broker_moves_to_the_next_round_and_round_with_bounded_waits() {
        let mut r = Rotation::new(3);
        assert_eq!(r.current(), 0);
        let tries: Vec<(usize, u128, bool)> = (0..9)
            .map(|_| r.failed())
            .map(|a| (a.broker, a.wait.as_millis(), a.moved))
            .collect();
        assert_eq!(
            tries,
            [
                (1, 100, true),
                (2, 200, true),
                (0, 400, true),
                (1, 800, true),
                (2, 1600, true),
                (0, 3200, true),
                (1, 6400, true),
                (2, 10_000, true),
                (0, 10_000, true),
            ]
        );
        // accepted: the next failure moves on after the shortest wait again
        r.connected();
        assert_eq!(r.current(), 0);
        assert_eq!(
            r.failed(),
            Attempt {
                broker: 1,
                wait: BACKOFF_MIN,
                moved: true
            }
        );
    }

    #[test]
    fn a_list_of_one_stays_on_its_broker() {
        let mut r = Rotation::new(1);
        for want in [100, 200, 400] {
            let a = r.failed();
            assert_eq!((a.broker, a.wait.as_millis(), a.moved), (0, want, false));
        }
        assert_eq!(
            Rotation::new(0).failed().broker,
            0,
            "no list is a list of one"
        );
    }
}
