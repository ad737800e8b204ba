//! The health of one running container, by its check (pure: plain values in, actions out).
//!
//! Each start (seen running after it did not run, or restarted here) begins `starting`. A check
//! is due `interval_s` after the start and `interval_s` after each check. A passed check makes
//! it `healthy`; a failed one counts only past `start_period_s` after the start, and `retries`
//! failed ones in a row make it `unhealthy`. An unhealthy container is restarted: the first
//! time at once, then each further time no sooner than [`restart_backoff_ms`] after the
//! previous restart for health, so that a container that never gets healthy is not restarted in
//! a tight loop. Staying healthy for [`FORGIVE_AFTER_MS`] forgets the earlier restarts.

use acoa_shared::wire::{Health, HealthSpec};

use super::{Action, Level};

/// Healthy this long in one go, a container's earlier restarts for health are forgotten (its
/// next one, if any, comes at once again).
pub const FORGIVE_AFTER_MS: u64 = 300_000;

/// How long after the `n`-th restart for health (`n` from 1) the next one may come: 10 s,
/// doubling, at most 5 minutes.
pub fn restart_backoff_ms(n: u32) -> u64 {
    if n == 0 {
        return 0;
    }
    (10_000u64 << (n - 1).min(5)).min(300_000)
}

#[derive(Debug, Clone, Default)]
pub(super) struct HealthTrack {
    /// When this run of the container started (first seen running, or restarted here); `None`
    /// while it does not run.
    since_ms: Option<u64>,
    state: Option<Health>,
    last_check_ms: Option<u64>,
    /// Failed checks in a row that counted (past the start period).
    failures: u32,
    last_failure: String,
    healthy_since_ms: Option<u64>,
    /// Restarts for health since the container was last healthy for [`FORGIVE_AFTER_MS`].
    health_restarts: u32,
    last_restart_ms: u64,
    /// The restart waiting for its backoff was said.
    deferral_logged: bool,
}

impl HealthTrack {
    /// What to report: `None` while the container does not run.
    pub(super) fn reported(&self) -> Option<Health> {
        self.state
    }

    fn begin(&mut self, now: u64) {
        self.since_ms = Some(now);
        self.state = Some(Health::Starting);
        self.last_check_ms = None;
        self.failures = 0;
        self.healthy_since_ms = None;
        self.deferral_logged = false;
    }

    /// The container does not run (or no longer matches its spec): its next run starts over.
    pub(super) fn stopped(&mut self) {
        self.since_ms = None;
        self.state = None;
        self.last_check_ms = None;
        self.failures = 0;
        self.healthy_since_ms = None;
    }

    /// The container `name` runs at `now`: restarts it when it is unhealthy and its backoff
    /// allows (`restarts` counts the container's restarts of every cause), asks for a check
    /// when one is due.
    pub(super) fn running(
        &mut self,
        name: &str,
        spec: &HealthSpec,
        now: u64,
        restarts: &mut u32,
        out: &mut Vec<Action>,
    ) {
        let since = match self.since_ms {
            Some(s) => s,
            None => {
                self.begin(now);
                now
            }
        };
        if self
            .healthy_since_ms
            .is_some_and(|h| now.saturating_sub(h) >= FORGIVE_AFTER_MS)
        {
            self.health_restarts = 0;
        }
        if self.state == Some(Health::Unhealthy) {
            let at = self.last_restart_ms + restart_backoff_ms(self.health_restarts);
            let why = format!(
                "{} failed checks in a row, the last: {}: {}",
                self.failures, spec.check, self.last_failure
            );
            if self.health_restarts == 0 || now >= at {
                self.health_restarts += 1;
                *restarts += 1;
                self.last_restart_ms = now;
                out.push(Action::Log(
                    Level::Warn,
                    format!(
                        "container {name} is unhealthy ({why}): restarting (restart {}; the next restart for health waits at least {} s)",
                        *restarts,
                        restart_backoff_ms(self.health_restarts) / 1000
                    ),
                ));
                out.push(Action::Restart { name: name.into() });
                self.begin(now);
                return;
            }
            if !self.deferral_logged {
                self.deferral_logged = true;
                out.push(Action::Log(
                    Level::Warn,
                    format!(
                        "container {name} is unhealthy ({why}): restarting in {} s (backoff after {} restarts for health)",
                        (at - now).div_ceil(1000),
                        self.health_restarts
                    ),
                ));
            }
        }
        let interval = u64::from(spec.interval_s) * 1000;
        let due = self.last_check_ms.unwrap_or(since) + interval;
        if now >= due {
            self.last_check_ms = Some(now);
            out.push(Action::Check {
                name: name.into(),
                check: Box::new(spec.clone()),
            });
        }
    }

    /// A check of the container `name` ended at `now`: `Ok` passed, `Err` failed with the
    /// reason. Returns whether it has just become unhealthy.
    pub(super) fn checked(
        &mut self,
        name: &str,
        spec: &HealthSpec,
        now: u64,
        result: Result<(), String>,
        out: &mut Vec<Action>,
    ) -> bool {
        let Some(since) = self.since_ms else {
            // it stopped (or was restarted) meanwhile: the result is of an earlier run
            return false;
        };
        match result {
            Ok(()) => {
                self.failures = 0;
                self.deferral_logged = false;
                if self.state != Some(Health::Healthy) {
                    out.push(Action::Log(
                        Level::Info,
                        format!("container {name} is healthy ({})", spec.check),
                    ));
                    self.healthy_since_ms = Some(now);
                }
                self.state = Some(Health::Healthy);
                false
            }
            Err(reason) => {
                self.last_failure = reason;
                let start_period = u64::from(spec.start_period_s) * 1000;
                if now < since + start_period {
                    // failures in the start period do not count
                    return false;
                }
                self.failures += 1;
                self.healthy_since_ms = None;
                let retries = u32::from(spec.retries.max(1));
                if self.failures <= retries {
                    out.push(Action::Log(
                        Level::Info,
                        format!(
                            "container {name}: health check failed ({} of {retries}): {}: {}",
                            self.failures, spec.check, self.last_failure
                        ),
                    ));
                }
                if self.failures >= retries && self.state != Some(Health::Unhealthy) {
                    self.state = Some(Health::Unhealthy);
                    return true;
                }
                false
            }
        }
    }
}
