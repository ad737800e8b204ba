//! `cloud-broker apply | delete | status | history | rollback`: the user's side, over MQTT with
//! the admin login.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use acoa_shared::topics::{self, acl};
use anyhow::{bail, Context};
use rumqttc::{AsyncClient, Event as MqttEvent, Packet, QoS};

use crate::conn::mqtt_options;
use crate::identity::DataDir;
use crate::status::{digest, AppStatus, NotRunning};

fn url(dd: &DataDir, broker_url: Option<&str>) -> anyhow::Result<String> {
    match broker_url {
        Some(u) => Ok(u.to_string()),
        None => dd.endpoint().with_context(|| {
            format!(
                "no broker known: start `cloud-broker serve --data-dir {}` first, or give --broker-url",
                dd.root.display()
            )
        }),
    }
}

/// Connects to the broker, or to the first of a comma-separated list that accepts.
async fn connect(
    dd: &DataDir,
    broker_url: Option<&str>,
) -> anyhow::Result<(AsyncClient, rumqttc::EventLoop)> {
    let list = url(dd, broker_url)?;
    let mut failed: Vec<(String, anyhow::Error)> = Vec::new();
    for u in list.split(',').map(str::trim) {
        match connect_to(dd, u).await {
            Ok(c) => return Ok(c),
            Err(e) => failed.push((u.to_string(), e)),
        }
    }
    if failed.len() == 1 {
        return Err(failed.remove(0).1);
    }
    let each: Vec<String> = failed.iter().map(|(u, e)| format!("{u}: {e:#}")).collect();
    bail!("no broker accepts the connection: {}", each.join("; "))
}

async fn connect_to(dd: &DataDir, url: &str) -> anyhow::Result<(AsyncClient, rumqttc::EventLoop)> {
    let creds = dd.credentials()?;
    let id = format!("{}{}", acl::CLI_CLIENT_PREFIX, std::process::id());
    let o = mqtt_options(url, &id, &creds.admin)?;
    let (c, mut el) = AsyncClient::new(o, 64);
    // wait for the connection to be accepted
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, el.poll()).await {
            Ok(Ok(MqttEvent::Incoming(Packet::ConnAck(_)))) => return Ok((c, el)),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => bail!("cannot connect to the broker: {e}"),
            Err(_) => bail!("cannot connect to the broker: timed out"),
        }
    }
}

/// What became of an applied definition, judged from its status document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Rejected,
    Unplaced,
    /// Every component runs.
    Running,
    /// An agent refused a component or it failed to start: which, where and the agent's reason.
    Refused(Vec<NotRunning>),
    /// Accepted or placed, and these components do not run yet.
    Starting(Vec<NotRunning>),
}

impl Verdict {
    pub fn of(st: &AppStatus) -> Verdict {
        match st.state.as_str() {
            // `refused`: the control plane holds the definition (its store cannot write); it is
            // applied later by itself, but not now
            "rejected" | "refused" => Verdict::Rejected,
            "unplaced" => Verdict::Unplaced,
            "running" => Verdict::Running,
            _ => {
                let refused: Vec<NotRunning> = st
                    .not_running
                    .iter()
                    .filter(|n| n.state == "refused" || n.state == "failed")
                    .cloned()
                    .collect();
                if refused.is_empty() {
                    Verdict::Starting(st.not_running.clone())
                } else {
                    Verdict::Refused(refused)
                }
            }
        }
    }

    /// Whether `apply` stops waiting: anything but components still starting.
    pub fn is_final(&self) -> bool {
        !matches!(self, Verdict::Starting(_))
    }

    /// Whether `apply` fails.
    pub fn failed(&self) -> bool {
        matches!(
            self,
            Verdict::Rejected | Verdict::Unplaced | Verdict::Refused(_)
        )
    }

    /// One line per component that needs saying, for the user.
    pub fn lines(&self, st: &AppStatus) -> Vec<String> {
        let app = &st.application;
        let one = |what: &str, n: &NotRunning| {
            let mut l = format!("{app}.{} on node {}: {what}", n.component, n.node);
            if !n.error.is_empty() {
                l.push_str(&format!(": {}", n.error));
            }
            l
        };
        match self {
            Verdict::Rejected | Verdict::Unplaced => vec![format!(
                "{app} {}: {}",
                st.state,
                st.reason.as_deref().unwrap_or("")
            )],
            Verdict::Running => vec![format!("{app} running")],
            Verdict::Refused(v) => v.iter().map(|n| one(&n.state, n)).collect(),
            Verdict::Starting(_) if st.state == "accepted" => {
                vec![format!("{app} accepted, not placed at the deadline")]
            }
            Verdict::Starting(v) => v
                .iter()
                .map(|n| one(&format!("still starting at the deadline ({})", n.state), n))
                .collect(),
        }
    }
}

/// Publishes the definition in `file` and waits for the control plane's verdict on it
/// (within `wait`), then for what the agents do with the placement (within `agents_wait`
/// more): returns at the first status that is rejected, unplaced, running or says an agent
/// refused a component, else the last one at the deadline.
pub async fn apply(
    dd: &DataDir,
    broker_url: Option<&str>,
    file: &std::path::Path,
    wait: Duration,
    agents_wait: Duration,
) -> anyhow::Result<AppStatus> {
    let text = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let app = acoa_shared::model::parse_application(&String::from_utf8_lossy(&text))
        .map_err(|e| e.in_file(file.display().to_string()))?;
    let name = app.application;
    let d = digest(&text);
    let (c, mut el) = connect(dd, broker_url).await?;
    c.subscribe(topics::app_status(&name), QoS::AtLeastOnce)
        .await?;
    c.publish(topics::app(&name), QoS::AtLeastOnce, true, text)
        .await?;
    let mut deadline = Instant::now() + wait;
    let mut placed = false;
    let mut last: Option<AppStatus> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, el.poll()).await {
            Ok(Ok(MqttEvent::Incoming(Packet::Publish(p)))) => {
                if let Ok(st) = serde_json::from_slice::<AppStatus>(&p.payload) {
                    if st.digest == d {
                        if Verdict::of(&st).is_final() {
                            let _ = c.disconnect().await;
                            return Ok(st);
                        }
                        if st.state == "placed" && !placed {
                            placed = true;
                            deadline = Instant::now() + agents_wait;
                        }
                        last = Some(st);
                    }
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => bail!("broker connection lost: {e}"),
            Err(_) => match last {
                Some(st) => return Ok(st),
                None => bail!(
                    "published {name}, but the control plane said nothing about it within {} s",
                    wait.as_secs()
                ),
            },
        }
    }
}

/// How long `delete` waits for the control plane to confirm a deletion.
pub const DELETE_CONFIRM: Duration = Duration::from_secs(5);

/// Deletes an application: publishes its tombstone ([`crate::records::tombstone`]) as the
/// retained definition and waits for the control plane to clear its status. An error when it
/// does not within [`DELETE_CONFIRM`]: the deletion is then queued on the broker, applied when
/// the control plane runs.
pub async fn delete(dd: &DataDir, broker_url: Option<&str>, app: &str) -> anyhow::Result<()> {
    acoa_shared::model::check_name("application", app)?;
    let (c, mut el) = connect(dd, broker_url).await?;
    let status = topics::app_status(app);
    c.subscribe(&status, QoS::AtLeastOnce).await?;
    c.publish(
        topics::app(app),
        QoS::AtLeastOnce,
        true,
        crate::records::tombstone(app),
    )
    .await?;
    let deadline = Instant::now() + DELETE_CONFIRM;
    let mut published = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, el.poll()).await {
            Ok(Ok(MqttEvent::Incoming(Packet::PubAck(_)))) => published = true,
            // the control plane clears the status once the deletion is durable
            Ok(Ok(MqttEvent::Incoming(Packet::Publish(p))))
                if p.topic == status && p.payload.is_empty() =>
            {
                break;
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => bail!("broker connection lost: {e}"),
            Err(_) if published => bail!(
                "the deletion of {app} is queued on the broker: the control plane did not confirm it within {} s; it is applied when the control plane runs",
                DELETE_CONFIRM.as_secs()
            ),
            Err(_) => bail!("the broker did not acknowledge the deletion"),
        }
    }
    let _ = c.disconnect().await;
    Ok(())
}

/// The statuses the broker holds (retained), for one application or all.
pub async fn status(
    dd: &DataDir,
    broker_url: Option<&str>,
    app: Option<&str>,
) -> anyhow::Result<BTreeMap<String, AppStatus>> {
    let (c, mut el) = connect(dd, broker_url).await?;
    let filter = match app {
        Some(a) => topics::app_status(a),
        None => "acoa/v1/apps/+/status".to_string(),
    };
    c.subscribe(filter, QoS::AtLeastOnce).await?;
    let mut out = BTreeMap::new();
    let mut deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, el.poll()).await {
            Ok(Ok(MqttEvent::Incoming(Packet::SubAck(_)))) => {
                // retained messages follow the acknowledgement closely
                deadline = Instant::now() + Duration::from_millis(500);
            }
            Ok(Ok(MqttEvent::Incoming(Packet::Publish(p)))) => {
                if let Ok(st) = serde_json::from_slice::<AppStatus>(&p.payload) {
                    out.insert(st.application.clone(), st);
                }
                deadline = Instant::now() + Duration::from_millis(300);
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => bail!("broker connection lost: {e}"),
            Err(_) => break,
        }
    }
    let _ = c.disconnect().await;
    Ok(out)
}

/// `history APP`: one line per kept revision, from the application's status: its number,
/// digest, whether it runs, why it failed; then the rollout under way or the last one.
pub fn history_lines(st: &AppStatus) -> Vec<String> {
    let mut v: Vec<String> = st
        .revisions
        .iter()
        .map(|r| {
            let mark = if st.revision == Some(r.number) {
                "runs"
            } else if let Some(f) = &r.failed {
                f.as_str()
            } else {
                ""
            };
            format!("{}\t{}\t{mark}", r.number, r.digest)
        })
        .collect();
    if let Some(r) = &st.rollout {
        let mut l = format!(
            "rollout r{}→r{}: {}, batch {}",
            r.from, r.to, r.phase, r.batch
        );
        if let Some(why) = &r.reason {
            l.push_str(&format!(" ({why})"));
        }
        for w in &r.waiting {
            l.push_str(&format!("; waits: {w}"));
        }
        v.push(l);
    }
    v
}

/// Asks the control plane to go back (`rollback APP [--to N]`, a request published on the
/// application's definition topic, not retained: the definition stays) and waits (within
/// `wait`) for the status that shows it: a rollout rolling back or rolled back, or a new
/// revision.
pub async fn rollback(
    dd: &DataDir,
    broker_url: Option<&str>,
    app: &str,
    to: Option<u64>,
    wait: Duration,
) -> anyhow::Result<AppStatus> {
    acoa_shared::model::check_name("application", app)?;
    let (c, mut el) = connect(dd, broker_url).await?;
    let status = topics::app_status(app);
    c.subscribe(&status, QoS::AtLeastOnce).await?;
    // the retained status first: what runs before the request
    let mut before: Option<AppStatus> = None;
    let mut deadline = Instant::now() + Duration::from_secs(5);
    let mut published = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, el.poll()).await {
            Ok(Ok(MqttEvent::Incoming(Packet::SubAck(_)))) if !published => {
                deadline = Instant::now() + Duration::from_millis(500);
            }
            Ok(Ok(MqttEvent::Incoming(Packet::Publish(p)))) => {
                let Ok(st) = serde_json::from_slice::<AppStatus>(&p.payload) else {
                    continue;
                };
                if !published {
                    before = Some(st);
                    continue;
                }
                let b = before.as_ref();
                let phase = st.rollout.as_ref().map(|r| r.phase.as_str());
                let went_back = matches!(phase, Some("rolling-back" | "rolled-back"))
                    && b.and_then(|b| b.rollout.as_ref()) != st.rollout.as_ref();
                let new_revision = b.is_some_and(|b| b.revisions.last() != st.revisions.last());
                if went_back || new_revision {
                    let _ = c.disconnect().await;
                    return Ok(st);
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => bail!("broker connection lost: {e}"),
            Err(_) if !published => {
                if before.is_none() {
                    bail!("no status for application {app}: is it deployed?");
                }
                c.publish(
                    topics::app(app),
                    QoS::AtLeastOnce,
                    false,
                    crate::records::rollback_request(app, to),
                )
                .await?;
                published = true;
                deadline = Instant::now() + wait;
            }
            Err(_) => bail!(
                "the control plane did not act on the rollback of {app} within {} s (its log says why: a revision not kept, or already running)",
                wait.as_secs()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nr(component: &str, state: &str, error: &str) -> NotRunning {
        NotRunning {
            component: component.into(),
            node: "n1".into(),
            state: state.into(),
            error: error.into(),
        }
    }

    #[test]
    fn a_refusal_by_an_agent_fails_apply_and_a_slow_start_does_not() {
        let mut st = AppStatus::new("shop", "placed", "d");
        st.not_running = vec![nr("a", "pending", ""), nr("b", "unknown", "")];
        let v = Verdict::of(&st);
        assert!(!v.is_final() && !v.failed());
        assert_eq!(
            v.lines(&st)[0],
            "shop.a on node n1: still starting at the deadline (pending)"
        );
        st.not_running
            .push(nr("c", "refused", "image outside the allowlist"));
        let v = Verdict::of(&st);
        assert!(v.is_final() && v.failed());
        assert_eq!(
            v.lines(&st),
            vec!["shop.c on node n1: refused: image outside the allowlist".to_string()]
        );
        st.not_running = vec![];
        st.state = "running".into();
        assert_eq!(Verdict::of(&st), Verdict::Running);
        st.state = "unplaced".into();
        st.reason = Some("node n1 holds 32 containers".into());
        assert!(Verdict::of(&st).failed());
        st.state = "refused".into();
        st.reason = Some("the control plane's store is full".into());
        assert!(Verdict::of(&st).is_final() && Verdict::of(&st).failed());
        st.state = "accepted".into();
        assert!(!Verdict::of(&st).is_final());
    }
}
