//! `cloud-broker apply | delete | status`: the user's side, over MQTT with the admin login.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use acoa_shared::topics;
use anyhow::{bail, Context};
use rumqttc::{AsyncClient, Event as MqttEvent, Packet, QoS};

use crate::conn::mqtt_options;
use crate::identity::DataDir;
use crate::status::{digest, AppStatus};

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

async fn connect(
    dd: &DataDir,
    broker_url: Option<&str>,
) -> anyhow::Result<(AsyncClient, rumqttc::EventLoop)> {
    let creds = dd.credentials()?;
    let id = format!("acoa-cli-{}", std::process::id());
    let o = mqtt_options(&url(dd, broker_url)?, &id, &creds.admin)?;
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

/// Publishes the definition in `file` and waits for the control plane's verdict on it.
/// Returns the status (placed / running / unplaced / rejected).
pub async fn apply(
    dd: &DataDir,
    broker_url: Option<&str>,
    file: &std::path::Path,
    wait: Duration,
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
    let deadline = Instant::now() + wait;
    let mut last: Option<AppStatus> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, el.poll()).await {
            Ok(Ok(MqttEvent::Incoming(Packet::Publish(p)))) => {
                if let Ok(st) = serde_json::from_slice::<AppStatus>(&p.payload) {
                    if st.digest == d {
                        if st.state != "accepted" {
                            let _ = c.disconnect().await;
                            return Ok(st);
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

/// Deletes an application (an empty retained definition).
pub async fn delete(dd: &DataDir, broker_url: Option<&str>, app: &str) -> anyhow::Result<()> {
    acoa_shared::model::check_name("application", app)?;
    let (c, mut el) = connect(dd, broker_url).await?;
    c.publish(topics::app(app), QoS::AtLeastOnce, true, Vec::new())
        .await?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, el.poll()).await {
            Ok(Ok(MqttEvent::Incoming(Packet::PubAck(_)))) => break,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => bail!("broker connection lost: {e}"),
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
