//! The rollout experiment on the railway testbed: the smoke-monitoring application under an
//! update policy, updated twice while its paths are measured inside the running containers: a
//! good revision (every component's image replaced by the same program under a new tag) and a
//! bad one (level detection's image exits at once). Figures: how long each path was not served
//! during each update, the time the good rollout took, and the time to detect and to undo the
//! bad one (from the control plane's log). With a QoS gate in the policy, a third revision
//! puts the gate's path across the WAN (a component required on a cloud node) and must roll
//! back on the gate alone.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use acoa_shared::model::{Application, Component, Layer, Update};
use anyhow::{bail, Context, Result};

use crate::dynamic::{all_running, placement_of};
use crate::partition::{self, Plane};
use crate::railbed::Bed;
use crate::tunnels;
use crate::workload;

/// One update of the experiment.
#[derive(Clone, Debug)]
pub struct Step {
    pub label: String,
    /// What changed, for the report.
    pub change: String,
    pub app: Application,
    /// Whether the rollout is expected to roll back (a bad revision).
    pub bad: bool,
}

/// What one update did.
#[derive(Clone, Debug, Default)]
pub struct StepResult {
    pub label: String,
    pub change: String,
    pub bad: bool,
    /// Seconds after the measurement's start at which the definition was published.
    pub applied_at: f64,
    /// The same as Unix time.
    pub applied_unix: f64,
    /// The revision the control plane gave it.
    pub revision: Option<u64>,
    /// The rollout's last phase (`done`, `rolled-back`, ...) and its reason.
    pub phase: String,
    pub reason: Option<String>,
    /// Seconds from the publication until the rollout failed (bad revisions), by the control
    /// plane's log.
    pub detected_after: Option<f64>,
    /// Seconds from the publication until the rollout was done, or rolled back, by the control
    /// plane's log (the status, polled, says when it has settled).
    pub finished_after: Option<f64>,
    /// (seconds after the publication, phase and batch) whenever they changed.
    pub timeline: Vec<(f64, String)>,
    /// Per path: the longest time between two messages that completed it, and the time it was
    /// not served (see [`unserved`]), both in ms, over the update's window.
    pub paths: BTreeMap<String, (f64, f64)>,
}

/// Over `[from, to)`: the longest time without a completed message, and the time the path was
/// not served: the sum of the gaps between consecutive completed messages (by origin time, the
/// window's ends included) longer than `outage` seconds, less one send interval each (the time
/// between the last message served and the first served again). Messages lost to the links'
/// own loss leave gaps of a few intervals, which `outage` is chosen to exceed. Seconds.
pub fn unserved(origins: &[f64], from: f64, to: f64, rate_hz: f64, outage: f64) -> (f64, f64) {
    let interval = 1.0 / rate_hz;
    let mut t: Vec<f64> = origins
        .iter()
        .copied()
        .filter(|o| *o >= from && *o < to)
        .collect();
    t.sort_by(f64::total_cmp);
    let mut points = vec![from - interval];
    points.extend(t);
    points.push(to);
    let (mut longest, mut lost) = (0.0f64, 0.0);
    for w in points.windows(2) {
        let gap = w[1] - w[0];
        longest = longest.max(gap);
        if gap > outage + 1e-9 {
            lost += gap - interval;
        }
    }
    (longest, lost)
}

/// When the control plane's log says the rollout of `app` from revision `from` to `to` was
/// done, failed, and rolled back (Unix seconds of the lines).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LogTimes {
    pub done: Option<f64>,
    pub failed: Option<f64>,
    pub rolled_back: Option<f64>,
}

/// Reads [`LogTimes`] from the control plane's log `text`.
pub fn log_times(text: &str, app: &str, from: u64, to: u64) -> LogTimes {
    let head = format!("rollout of {app} r{from}\u{2192}r{to}");
    let mut t = LogTimes::default();
    for line in text.lines() {
        let Some(rest) = line.split_once(&head).map(|x| x.1) else {
            continue;
        };
        let at = partition::line_time(line);
        if rest.starts_with(": done") {
            t.done = t.done.or(at);
        } else if rest.starts_with(" failed") {
            t.failed = t.failed.or(at);
        } else if rest.starts_with(": rolled back") {
            t.rolled_back = t.rolled_back.or(at);
        }
    }
    t
}

/// Where the baseline window starts, seconds after the collector got the placement.
pub const BASELINE_FROM_S: f64 = 3.0;

/// The options of a run.
pub struct Options {
    pub rate_hz: f64,
    pub warmup: Duration,
    /// Seconds measured before the first update and after the last.
    pub settle_s: f64,
    /// A gap longer than this is an outage (see [`unserved`]).
    pub outage_s: f64,
    pub update: Update,
}

/// `app` as the run deploys it: images under the run's prefix, the update policy given.
pub fn base_app(app: &Application, image_prefix: &str, update: &Update) -> Application {
    let mut a = app.clone();
    for c in &mut a.components {
        c.image = tunnels::retag(&c.image, image_prefix);
    }
    a.update = Some(update.clone());
    a
}

/// `image` under `tag` (`name:1` -> `name:tag`).
pub fn with_tag(image: &str, tag: &str) -> String {
    match image.rsplit_once(':') {
        // a colon after the last slash starts the tag; before it, a registry's port
        Some((name, old)) if !old.contains('/') => format!("{name}:{tag}"),
        _ => format!("{image}:{tag}"),
    }
}

/// The updates: every image under tag `2` (made with `podman tag`); then the component `bad`
/// with an image that exits at once (built here); then, when the policy has a gate, the
/// component `far` required on a cloud node, which puts the gate's path across the WAN; then,
/// with a gate and `delay` `(component, ms)`, that component's image holding every message
/// that long (`ACOA_DELAY_MS`, built here on its good image): the nodes and the network stay,
/// only the workload is slower.
pub fn steps(
    base: &Application,
    bad: &str,
    far: &str,
    delay: Option<(&str, f64)>,
) -> Result<Vec<Step>> {
    let mut good = base.clone();
    for c in &mut good.components {
        let to = with_tag(&c.image, "2");
        let st = std::process::Command::new("podman")
            .args(["tag", &c.image, &to])
            .status()
            .context("podman tag")?;
        if !st.success() {
            bail!("podman tag {} {to} failed", c.image);
        }
        c.image = to;
    }
    let mut worse = good.clone();
    let comp = component_mut(&mut worse, bad)?;
    comp.image = with_tag(&comp.image, "exits");
    // the workload refuses a bad collector address and exits at once
    acoa_test_support::workload_image(&comp.image, &["ACOA_CONTROL=nowhere"]);
    let mut steps = vec![
        Step {
            label: "good".into(),
            change: "every component's image under a new tag (the same program)".into(),
            app: good.clone(),
            bad: false,
        },
        Step {
            label: "bad".into(),
            change: format!("{bad}'s image exits at once"),
            app: worse,
            bad: true,
        },
    ];
    if let Some(gate) = base.update.as_ref().and_then(|u| u.gate.as_ref()) {
        let mut slow = good.clone();
        let comp = component_mut(&mut slow, far)?;
        comp.requires.layer = Some(Layer::Cloud);
        steps.push(Step {
            label: "gate".into(),
            change: format!(
                "{far} required on a cloud node: path {} across the WAN (gate {} ms)",
                gate.path,
                gate.max_latency_ms.unwrap_or(f64::NAN)
            ),
            app: slow,
            bad: true,
        });
        if let Some((c, ms)) = delay {
            let mut delayed = good.clone();
            let comp = component_mut(&mut delayed, c)?;
            let to = with_tag(&comp.image, "delay");
            delayed_image(&comp.image, &to, ms)?;
            comp.image = to;
            steps.push(Step {
                label: "delay".into(),
                change: format!(
                    "{c}'s workload holds every message {ms} ms (same nodes: path {} slower inside a container, gate {} ms)",
                    gate.path,
                    gate.max_latency_ms.unwrap_or(f64::NAN)
                ),
                app: delayed,
                bad: true,
            });
        }
    }
    Ok(steps)
}

/// The component `name` of `app`, to change it.
fn component_mut<'a>(app: &'a mut Application, name: &str) -> Result<&'a mut Component> {
    app.components
        .iter_mut()
        .find(|c| c.name == name)
        .with_context(|| format!("no component {name}"))
}

/// Builds `to`: `from` with `ACOA_DELAY_MS=ms` (the workload holds every message that long).
fn delayed_image(from: &str, to: &str, ms: f64) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("acoa-delayed-image-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("Containerfile");
    std::fs::write(&file, format!("FROM {from}\nENV ACOA_DELAY_MS={ms}\n"))?;
    let st = std::process::Command::new("podman")
        .args(["build", "-q", "-t", to, "-f"])
        .arg(&file)
        .arg(&dir)
        .status()
        .context("podman build");
    let _ = std::fs::remove_dir_all(&dir);
    if !st?.success() {
        bail!("podman build of {to} failed");
    }
    Ok(())
}

/// Runs the experiment on `bed`: the control plane and the agents up, `base` placed and
/// measured, then each step published and followed to its end.
pub fn run(
    bed: &Bed,
    cloud_bin: &Path,
    base: &Application,
    steps: &[Step],
    o: &Options,
    workdir: &Path,
) -> Result<Run> {
    let tb = &bed.tb;
    let plane = Plane::up(tb, &bed.cluster, cloud_bin, &bed.agent, workdir, &[])?;
    let name = base.application.clone();
    tracing::info!(
        "control plane and {} agents up; warming up {:?}",
        plane.names.len(),
        o.warmup
    );
    std::thread::sleep(o.warmup);
    let conf = |p: &BTreeMap<String, String>| {
        bed.collector.set_app(
            &name,
            workload::app_confs(base, p, |n| tb.addr(n).ok(), o.rate_hz),
        )
    };
    let file = workdir.join("app.yaml");
    std::fs::write(&file, serde_json::to_string_pretty(base)?)?;
    plane.cloud.apply(&file, 60)?;
    let initial = partition::poll(Duration::from_secs(120), || {
        let st = plane.status(&name).ok()?;
        all_running(&st, base).then(|| placement_of(&st))
    })
    .with_context(|| format!("{name} never ran; see {}", plane.log.display()))?;
    conf(&initial);
    let t0 = Instant::now();
    let start_ns = workload::now_ns();
    tracing::info!(
        ?initial,
        "running; measuring {} s before the first update",
        o.settle_s
    );
    std::thread::sleep(Duration::from_secs_f64(o.settle_s));
    let mut placement = initial;
    let mut results = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        // the base is revision 1, each update the next
        let target = i as u64 + 2;
        let file = workdir.join(format!("rev-{target}-{}.yaml", step.label));
        std::fs::write(&file, serde_json::to_string_pretty(&step.app)?)?;
        let mut r = StepResult {
            label: step.label.clone(),
            change: step.change.clone(),
            bad: step.bad,
            applied_at: t0.elapsed().as_secs_f64(),
            applied_unix: partition::unix_now(),
            ..Default::default()
        };
        let applied = Instant::now();
        plane.cloud.apply(&file, 15)?;
        let limit = Duration::from_secs(
            u64::from(o.update.deadline_s) * (step.app.components.len() as u64 + 1) + 60,
        );
        let mut last = String::new();
        // the revision the rollout starts from, as its status says (the last good one)
        let mut from = None;
        while applied.elapsed() < limit && r.finished_after.is_none() {
            std::thread::sleep(Duration::from_millis(250));
            let st = match plane.status(&name) {
                Ok(st) => st,
                Err(e) => {
                    tracing::warn!("status: {e:#}");
                    continue;
                }
            };
            let now = applied.elapsed().as_secs_f64();
            tracing::debug!(
                "{now:.1} s: revision {} rollout {}",
                st["revision"],
                st["rollout"]
            );
            let p = placement_of(&st);
            if !p.is_empty() && p != placement {
                conf(&p);
                placement = p;
            }
            let ro = &st["rollout"];
            if ro["to"].as_u64() != Some(target) {
                continue;
            }
            let phase = ro["phase"].as_str().unwrap_or("").to_string();
            let line = format!("{phase} {}", ro["batch"].as_str().unwrap_or(""));
            if line != last {
                tracing::info!(step = %step.label, "{now:.1} s: {line}");
                r.timeline.push((now, line.clone()));
                last = line;
            }
            r.revision = Some(target);
            from = ro["from"].as_u64();
            r.phase = phase.clone();
            r.reason = ro["reason"].as_str().map(str::to_string);
            let settled = match phase.as_str() {
                "done" => true,
                "rolled-back" => all_running(&st, base),
                _ => false,
            };
            if settled {
                r.finished_after = Some(now);
            }
        }
        let lt = from.map_or_else(LogTimes::default, |from| {
            log_times(
                &std::fs::read_to_string(&plane.log).unwrap_or_default(),
                &name,
                from,
                target,
            )
        });
        r.detected_after = lt.failed.map(|t| t - r.applied_unix);
        if let Some(t) = lt.done.or(lt.rolled_back) {
            r.finished_after = Some(t - r.applied_unix);
        }
        if r.finished_after.is_none() {
            bail!(
                "update {} did not finish within {limit:?} (last: {last}); see {}",
                step.label,
                plane.log.display()
            );
        }
        results.push(r);
        std::thread::sleep(Duration::from_secs_f64(o.settle_s));
    }
    std::thread::sleep(Duration::from_secs(2));
    let end = t0.elapsed().as_secs_f64() - 2.0;
    let rec = bed.collector.records();
    let mut samples = BTreeMap::new();
    for p in &base.paths {
        samples.insert(
            p.name.clone(),
            tunnels::path_samples(&rec, base, p, start_ns),
        );
    }
    // before the first update: the paths' own noise, measured the same way, from 3 s after the
    // collector got the placement (the workload asks for its configuration every second)
    results.insert(
        0,
        StepResult {
            label: "none (baseline)".into(),
            change: "nothing: the measurement before the first update".into(),
            applied_at: BASELINE_FROM_S.min(o.settle_s / 2.0),
            ..Default::default()
        },
    );
    // each window: from its publication to the next one's (the last: the run's end)
    let starts: Vec<f64> = results.iter().map(|r| r.applied_at).collect();
    for (i, r) in results.iter_mut().enumerate() {
        let to = starts.get(i + 1).copied().unwrap_or(end);
        for (path, s) in &samples {
            let origins: Vec<f64> = s.iter().map(|x| x.0).collect();
            let (longest, lost) = unserved(&origins, r.applied_at, to, o.rate_hz, o.outage_s);
            r.paths.insert(path.clone(), (longest * 1e3, lost * 1e3));
        }
    }
    drop(plane);
    partition::remove_app_containers(&name);
    Ok(Run { results, samples })
}

/// A run's results and, per path, (origin s after the measurement's start, latency ms) of
/// every message that completed it.
pub struct Run {
    pub results: Vec<StepResult>,
    pub samples: BTreeMap<String, Vec<(f64, f64)>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_served_all_along_lost_nothing_and_an_outage_counts_its_length() {
        // 10 Hz, every message through
        let all: Vec<f64> = (0..100).map(|i| i as f64 * 0.1).collect();
        let (longest, lost) = unserved(&all, 0.0, 10.0, 10.0, 0.3);
        assert!((longest - 0.1).abs() < 1e-9 && lost == 0.0);
        // two consecutive messages lost: a gap of three intervals, not counted
        let few: Vec<f64> = all
            .iter()
            .copied()
            .filter(|t| !(2.05..2.25).contains(t))
            .collect();
        assert_eq!(unserved(&few, 0.0, 10.0, 10.0, 0.3).1, 0.0);
        // a second without service: about a second
        let out: Vec<f64> = all
            .iter()
            .copied()
            .filter(|t| !(5.0..6.0).contains(t))
            .collect();
        let (longest, lost) = unserved(&out, 0.0, 10.0, 10.0, 0.3);
        assert!((longest - 1.1).abs() < 1e-9, "{longest}");
        assert!((lost - 1.0).abs() < 1e-9, "{lost}");
        // nothing at all in the window: the whole window
        assert!((unserved(&[], 0.0, 2.0, 10.0, 0.3).1 - 2.0).abs() < 1e-9);
    }

    #[test]
    fn rollout_times_are_read_from_the_log() {
        let log = "\
2026-12-02T01:34:58.513703Z  INFO cloud_broker::engine::revisions: rollout of smoke r2\u{2192}r3: batch 1/1 (canaries) started: level-detection
2026-12-02T01:34:58.891068Z  WARN cloud_broker::engine::revisions: rollout of smoke r2\u{2192}r3 failed: level-detection on n13: the new copy exited; rolling back to revision 2
2026-12-02T01:34:59.000000Z  WARN cloud_broker::engine::revisions: rollout of smoke r2\u{2192}r3: rolled back, revision 2 runs
2026-12-02T01:35:00.000000Z  INFO cloud_broker::engine::revisions: rollout of smoke r1\u{2192}r2: done, revision 2 runs
";
        let t = log_times(log, "smoke", 2, 3);
        let at = |l: &str| partition::line_time(l).unwrap();
        assert_eq!(t.failed, Some(at("2026-12-02T01:34:58.891068Z")));
        assert_eq!(t.rolled_back, Some(at("2026-12-02T01:34:59.000000Z")));
        assert_eq!(t.done, None);
        assert_eq!(
            log_times(log, "smoke", 1, 2).done,
            Some(at("2026-12-02T01:35:00.000000Z"))
        );
    }

    #[test]
    fn tags_change_only_the_tag() {
        assert_eq!(
            with_tag("localhost/acoa/x-smoke:1", "2"),
            "localhost/acoa/x-smoke:2"
        );
        assert_eq!(with_tag("localhost:5000/x", "2"), "localhost:5000/x:2");
    }
}
