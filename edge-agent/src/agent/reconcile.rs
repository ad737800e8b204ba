//! The reconcile loop: feeds the reconciler its events and carries out the actions it returns.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use acoa_shared::topics;
use acoa_shared::wire::Message;
use rumqttc::QoS;
use tokio::sync::{oneshot, watch};
use tracing::{debug, error, info, warn};

use super::Shared;
use crate::config::Config;
use crate::reconciler::{Action, Event, Level, Reconciler};
use crate::runtime::Runtime;
use crate::store;

/// `(spec name, app, component)` of every container of the current desired state.
pub(super) type DesiredList = Vec<(String, String, String)>;

fn desired_list(rec: &Reconciler) -> DesiredList {
    rec.desired()
        .map(|d| {
            d.containers
                .iter()
                .map(|c| {
                    (
                        c.name.to_string(),
                        c.app.to_string(),
                        c.component.to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What the reconcile loop works with, whatever the runtime.
pub(super) struct LoopParts {
    pub(super) rec: Reconciler,
    pub(super) cfg: Config,
    pub(super) desired_rx: watch::Receiver<Option<Vec<u8>>>,
    pub(super) session_rx: watch::Receiver<u64>,
    pub(super) shared: Arc<Shared>,
    pub(super) restored_tx: oneshot::Sender<()>,
    pub(super) tick: Duration,
    pub(super) desired_list_tx: watch::Sender<DesiredList>,
}

pub(super) async fn reconcile_loop<R: Runtime>(rt: R, parts: LoopParts) {
    let LoopParts {
        mut rec,
        cfg,
        mut desired_rx,
        mut session_rx,
        shared,
        restored_tx,
        tick,
        desired_list_tx,
    } = parts;
    let publish_list = |rec: &Reconciler| {
        let list = desired_list(rec);
        desired_list_tx.send_if_modified(|v| {
            let changed = *v != list;
            if changed {
                *v = list;
            }
            changed
        });
    };
    let epoch = Instant::now();
    let now_ms = move || epoch.elapsed().as_millis() as u64;
    match store::read(&cfg.state_dir, store::DESIRED) {
        Ok(Some(bytes)) => {
            let first = rec.handle(Event::Restored(bytes));
            execute(&rt, &mut rec, &cfg, &shared, first).await;
            publish_list(&rec);
        }
        Ok(None) => info!("no persisted desired state: waiting for one"),
        Err(e) => warn!("cannot read the persisted desired state: {e}"),
    }
    let _ = restored_tx.send(());
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut desired_open = true;
    loop {
        let ev = tokio::select! {
            _ = interval.tick() => Event::Tick { now_ms: now_ms() },
            r = desired_rx.changed(), if desired_open => {
                if r.is_err() { desired_open = false; continue; }
                match desired_rx.borrow_and_update().clone() {
                    Some(bytes) => Event::DesiredFrame(bytes),
                    None => continue,
                }
            },
            r = session_rx.changed() => {
                if r.is_err() { return; }
                Event::Connected
            }
        };
        let actions = rec.handle(ev);
        execute(&rt, &mut rec, &cfg, &shared, actions).await;
        publish_list(&rec);
    }
}

/// Carries out actions, feeding the results back, until the reconciler is done.
async fn execute<R: Runtime>(
    rt: &R,
    rec: &mut Reconciler,
    cfg: &Config,
    shared: &Shared,
    first: Vec<Action>,
) {
    let mut queue: std::collections::VecDeque<Action> = first.into();
    let mut failed: Vec<String> = Vec::new();
    let mut changed = false;
    let mut reobserved = false;
    let mut steps = 0;
    while let Some(action) = queue.pop_front() {
        steps += 1;
        if steps > 1000 {
            error!("reconciler produced over 1000 actions in one pass: stopping this pass");
            break;
        }
        if let Some(name) = action.container() {
            if failed.iter().any(|f| f == name) {
                continue;
            }
        }
        let result = match &action {
            Action::Observe => {
                let ev = match rt.list().await {
                    Ok(list) => {
                        shared
                            .containers
                            .store(list.len() as u32, Ordering::Relaxed);
                        Event::RuntimeObserved(list)
                    }
                    Err(e) => Event::RuntimeUnavailable(e.to_string()),
                };
                queue.extend(rec.handle(ev));
                None
            }
            Action::Create {
                spec,
                generation,
                spec_hash,
            } => Some(rt.create(spec, *generation, spec_hash).await),
            Action::Start { name } => Some(rt.start(name).await),
            Action::Remove { name } => Some(rt.remove(name).await),
            Action::Restart { name } => Some(rt.restart(name).await),
            Action::Check { name, check } => {
                // every check due in this pass runs at once: the pass waits for the slowest
                // (each bounded by its timeout), not for their sum
                let mut due = vec![(name.clone(), check.clone())];
                queue.retain(|a| match a {
                    Action::Check { name, check } if !failed.contains(name) => {
                        due.push((name.clone(), check.clone()));
                        false
                    }
                    _ => true,
                });
                let results =
                    futures_util::future::join_all(due.iter().map(|(n, c)| rt.check(n, c))).await;
                for ((name, _), result) in due.into_iter().zip(results) {
                    queue.extend(rec.handle(Event::Checked { name, result }));
                }
                None
            }
            Action::PersistDesired(bytes) => {
                if let Err(e) = store::write_atomic(&cfg.state_dir, store::DESIRED, bytes) {
                    error!("cannot persist the desired state: {e}");
                }
                None
            }
            Action::PublishActual(a) => {
                let summary: Vec<String> = a
                    .containers
                    .iter()
                    .map(|c| format!("{}={:?}", c.name, c.state))
                    .collect();
                debug!("actual state seq {}: {}", a.seq, summary.join(" "));
                shared.publish(
                    topics::actual(&shared.node),
                    QoS::AtLeastOnce,
                    &Message::ActualState(a.clone()),
                );
                None
            }
            Action::Log(Level::Info, m) => {
                info!("{m}");
                None
            }
            Action::Log(Level::Warn, m) => {
                warn!("{m}");
                None
            }
        };
        if let Some(r) = result {
            changed = true;
            if let Err(e) = r {
                let name = action.container().unwrap_or_default().to_owned();
                let error = format!("{} failed: {}", e.op().verb(), e.reason());
                failed.push(name.clone());
                queue.extend(rec.handle(Event::ActionFailed { name, error }));
            }
        }
        if queue.is_empty() && changed && !reobserved {
            // Report the result of what was just done without waiting for the next tick.
            reobserved = true;
            queue.push_back(Action::Observe);
        }
    }
}
