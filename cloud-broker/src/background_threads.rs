//! Threads for the control plane's background work, at a lower CPU priority than the rest.
//!
//! Background work places nothing new and no desired state waits for it: an exploration
//! round or a re-evaluation (`crate::workers`), deriving a live model's views ahead of the
//! jobs, computing the peer lists (`crate::serve`). At 50,000 nodes an exploration round takes
//! a core for 5-7 s. On the same priority as a placement, such work made a placement's
//! compile and bounds 3-5 times slower on a busy machine (BENCHMARKS.md, "Background work
//! yields, the budget from the start, potentials that shift"); here it runs [`BACKGROUND_NICE`] below the process, so it takes
//! the cores nobody else wants and yields them at once when a placement, the ingest or the
//! decision loop wants them.
//!
//! Invariant: a thread whose priority was lowered is never reused for other work (a thread
//! may lower its own priority but not raise it back without privilege): each piece of
//! background work gets a thread of its own, which ends with it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tracing::warn;

/// How much higher than the process's own the nice value of background work is (at most 19,
/// the lowest priority): at +10 a busy thread of the process gets about nine times its CPU
/// share.
pub const BACKGROUND_NICE: i32 = 10;

/// Runs `work` on a new thread named `name`, at [`BACKGROUND_NICE`] below the caller's
/// priority. Needs a Tokio runtime only if no thread can be started (then `work` runs on
/// Tokio's blocking threads, at the caller's priority, and that is said once).
pub fn spawn(name: &str, work: impl FnOnce() + Send + 'static) {
    let work = Arc::new(Mutex::new(Some(work)));
    let ours = work.clone();
    let started = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            lower_priority();
            let w = ours.lock().map(|mut w| w.take());
            if let Ok(Some(w)) = w {
                w();
            }
        });
    if let Err(e) = started {
        warn_once(&format!(
            "no thread of its own for background work ({e}): it runs at the placements' priority"
        ));
        if let Ok(Some(w)) = work.lock().map(|mut w| w.take()) {
            tokio::task::spawn_blocking(w);
        }
    }
}

/// The calling thread's nice value (Linux: each thread has its own).
pub fn nice() -> std::io::Result<i32> {
    Ok(rustix::process::getpriority_process(Some(
        rustix::thread::gettid(),
    ))?)
}

/// Lowers the calling thread's priority by [`BACKGROUND_NICE`].
fn lower_priority() {
    let me = Some(rustix::thread::gettid());
    let r = nice().and_then(|now| {
        Ok(rustix::process::setpriority_process(
            me,
            (now + BACKGROUND_NICE).min(19),
        )?)
    });
    if let Err(e) = r {
        warn_once(&format!(
            "background work cannot lower its CPU priority ({e}): it runs at the placements' priority"
        ));
    }
}

fn warn_once(what: &str) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        warn!("{what}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_work_runs_below_its_callers_priority_on_a_thread_of_its_own() {
        let caller = nice().expect("the test's nice value");
        let (tx, rx) = std::sync::mpsc::channel();
        spawn("acoa-test-bg", move || {
            let me = std::thread::current();
            tx.send((nice().expect("its nice value"), me.name().map(String::from)))
                .expect("the test waits");
        });
        let (got, name) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the work ran");
        assert_eq!(got, (caller + BACKGROUND_NICE).min(19));
        assert_eq!(name.as_deref(), Some("acoa-test-bg"));
        assert_eq!(
            nice().expect("the test's nice value"),
            caller,
            "the caller's unchanged"
        );
    }
}
