//! Durability of the control plane with the real binary and its embedded broker (or a real
//! Mosquitto): a full disk, temporary files left by an interrupted write, restarts. Every test
//! function runs against the file store and against a real etcd (`serve --store etcd`, one
//! member started by the test; etcd's "full disk" is its space quota).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use acoa_shared::model;
use cloud_broker::status::AppStatus;
use common::backend::{Backend, Kind};
use common::*;

/// A tmpfs of `size` mounted on a fresh directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mount a tmpfs (needs root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Writes `filler` until the file system refuses more.
    fn fill(&self) -> PathBuf {
        let p = self.dir.path().join("filler");
        let mut f = std::fs::File::create(&p).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
        // the last pages too
        while f.write_all(&[0u8; 512]).is_ok() {}
        p
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn status_of(data: &Path, app: &str) -> Option<AppStatus> {
    let out = cli(data, &["status", app]);
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

async fn wait_state(data: &Path, app: &str, states: &[&str], timeout: Duration) -> AppStatus {
    let t = std::time::Instant::now();
    loop {
        let (d, a) = (data.to_path_buf(), app.to_string());
        let st = tokio::task::spawn_blocking(move || status_of(&d, &a))
            .await
            .unwrap();
        if let Some(st) = &st {
            if states.contains(&st.state.as_str()) {
                return st.clone();
            }
        }
        assert!(
            t.elapsed() < timeout,
            "{app} not in {states:?} within {timeout:?}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until smoke-monitoring is placed or running (5 s): it has a placement.
async fn smoke_monitoring_is_placed(data: &Path) {
    let states = ["placed", "running"];
    let st = wait_state(data, "smoke-monitoring", &states, Duration::from_secs(5)).await;
    assert!(st.placement.is_some());
}

/// Waits until `app` is decided: placed, running or unplaced (10 s).
async fn wait_decided(data: &Path, app: &str) {
    let states = ["placed", "running", "unplaced"];
    wait_state(data, app, &states, Duration::from_secs(10)).await;
}

/// Writes the smoke-monitoring scenario to `file`, named `app`.
fn write_smoke_monitoring_as(file: &Path, app: &str) {
    let text = std::fs::read_to_string(scenario("smoke-monitoring.yaml")).unwrap();
    let text = text.replace(
        "application: smoke-monitoring",
        &format!("application: {app}"),
    );
    std::fs::write(file, text).unwrap();
}

async fn apply(data: &Path, file: &Path) -> std::process::Output {
    cli_async(data, &["apply", file.to_str().unwrap(), "--wait-s", "5"]).await
}

/// The store of `b` made full: the file system of the data directory filled (returns the
/// filler), or etcd's space quota exceeded (its NOSPACE alarm raised).
fn fill(b: &Backend, fs: &Tmpfs) -> Option<PathBuf> {
    match b.kind {
        Kind::File => Some(fs.fill()),
        Kind::Etcd => {
            let etcd = cloud_broker::store::etcd::EtcdStore::connect(&b.etcd_config()).unwrap();
            let mut i = 0;
            while etcd
                .put_doc_if(&format!("filler/{i}"), vec![7u8; 1 << 20], 0)
                .is_ok()
            {
                i += 1;
                assert!(i < 200, "etcd's quota is never exceeded");
            }
            None
        }
    }
}

/// Space returns: the filler removed; for etcd also compacted, defragmented and its alarm
/// disarmed (as an operator does).
fn make_room(b: &Backend, filler: Option<PathBuf>) {
    if let Some(f) = filler {
        std::fs::remove_file(f).unwrap();
        return;
    }
    let endpoints = b.etcd.as_ref().unwrap().endpoints();
    let etcdctl = |args: &[&str]| {
        acoa_test_support::sh(
            Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &endpoints])
                .args(args),
        )
    };
    etcdctl(&["del", "--prefix", "/acoa/filler/"]);
    let v: serde_json::Value = serde_json::from_str(&etcdctl(&[
        "get",
        "/acoa/",
        "--prefix",
        "--keys-only",
        "-w",
        "json",
    ]))
    .unwrap();
    let rev = v["header"]["revision"].as_i64().unwrap().to_string();
    etcdctl(&["compact", &rev]);
    etcdctl(&["defrag"]);
    etcdctl(&["alarm", "disarm"]);
}

fn a_full_disk_holds_changes_keeps_serving_and_they_apply_once_space_returns(kind: Kind) {
    // etcd refuses writes past 16 MiB (its "full disk")
    let b = Backend::with_etcd_flags(kind, &["--quota-backend-bytes", "16777216"]);
    let args = b.serve_flags();
    run(async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let fs = Tmpfs::mount("4m");
        let data = fs.path();
        let cluster = model::load_cluster(&scenario("cluster.yaml")).unwrap();
        let creds = enroll_all(&data, &cluster);
        let port = free_port();
        // the log off the full disk
        let logs = tempfile::tempdir().unwrap();
        let mut cp = ControlPlane::start_logged(&data, port, &args, &logs.path().join("cp.log"));
        let _agents = join_all(&cp, &cp.url, &cluster, &creds, 17400, true).await;
        tokio::time::sleep(Duration::from_millis(800)).await;
        let out = apply(&data, &scenario("smoke-monitoring.yaml")).await;
        assert!(out.status.success(), "{}", cp.log_text());

        let filler = fill(&b, &fs);
        if kind == Kind::File {
            // a temporary file an interrupted write left: the control plane starts on a full
            // disk all the same and removes it (etcd: a replica cannot take the leadership
            // while etcd refuses writes, so it is not started again)
            cp.kill();
            let torn = data.join("store/apps/.speed-profiling.json.tmp999999999");
            std::fs::write(&torn, b"").unwrap();
            cp = ControlPlane::start_logged(&data, port, &args, &cp.log.clone());
            cp.wait_log_async("started with 1 applications", Duration::from_secs(10))
                .await;
            assert!(cp.has_log("removed 1 temporary files"), "{}", cp.log_text());
            assert!(!torn.exists());
        }

        // a new definition is held, its status says why; the process lives and the broker
        // serves what was published
        let out = apply(&data, &scenario("speed-profiling.yaml")).await;
        let st: AppStatus = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
            panic!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stderr),
                cp.log_text()
            )
        });
        assert_eq!(st.state, "refused", "{st:?}");
        let reason = st.reason.unwrap();
        assert!(reason.contains("store is full"), "{reason}");
        // a second change while full: refused too, logged once
        let renamed = tempfile::tempdir().unwrap();
        let other = renamed.path().join("other.yaml");
        write_smoke_monitoring_as(&other, "smoke-two");
        apply(&data, &other).await;
        wait_state(&data, "smoke-two", &["refused"], Duration::from_secs(5)).await;
        assert!(cp.alive());
        assert_eq!(cp.count_log("store cannot write"), 1, "{}", cp.log_text());
        smoke_monitoring_is_placed(&data).await;

        // space returns: the held definitions are applied, new ones accepted
        make_room(&b, filler);
        cp.wait_log_async("store writes again", Duration::from_secs(10))
            .await;
        wait_decided(&data, "speed-profiling").await;
        assert!(b.has_app(&data, "speed-profiling"));
        wait_decided(&data, "smoke-two").await;
        // and a change published now is taken at once
        write_smoke_monitoring_as(&other, "smoke-three");
        let out = apply(&data, &other).await;
        let st: AppStatus = serde_json::from_slice(&out.stdout).unwrap();
        assert_ne!(st.state, "refused", "{st:?}");
        assert!(b.has_app(&data, "smoke-three"));
        assert_eq!(
            data.join("store/apps/smoke-three.json").exists(),
            kind == Kind::File
        );
        assert!(cp.alive());
    });
}

#[test]
fn a_full_disk_holds_changes_keeps_serving_and_they_apply_once_space_returns_file() {
    a_full_disk_holds_changes_keeps_serving_and_they_apply_once_space_returns(Kind::File);
}

#[test]
fn a_full_disk_holds_changes_keeps_serving_and_they_apply_once_space_returns_etcd() {
    a_full_disk_holds_changes_keeps_serving_and_they_apply_once_space_returns(Kind::Etcd);
}

/// Mosquitto in `dir` for the control plane of `data` with persistence off (its generated
/// configuration keeps retained messages in a file, which would hide what a restart loses).
async fn mosquitto_without_persistence(
    mosquitto: &Path,
    dir: &Path,
    data: &Path,
    port: u16,
) -> Killed {
    let (m, _) = start_mosquitto(mosquitto, dir, data, port, false).await;
    drop(m);
    let conf = dir.join("mosquitto/mosquitto.conf");
    let text = std::fs::read_to_string(&conf)
        .unwrap()
        .replace("persistence true", "persistence false");
    std::fs::write(&conf, text).unwrap();
    let _ = std::fs::remove_dir_all(dir.join("mosquitto/persist"));
    std::fs::create_dir_all(dir.join("mosquitto/persist")).unwrap();
    restart_mosquitto(mosquitto, dir, port).await
}

/// A Mosquitto started here, killed (SIGKILL: nothing saved) on drop.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts Mosquitto again on the configuration already in `dir`.
async fn restart_mosquitto(mosquitto: &Path, dir: &Path, port: u16) -> Killed {
    let mlog = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("mosquitto.log"))
        .unwrap();
    let child = Command::new(mosquitto)
        .arg("-c")
        .arg(dir.join("mosquitto/mosquitto.conf"))
        .stdout(std::process::Stdio::null())
        .stderr(mlog)
        .spawn()
        .unwrap();
    let m = Killed(child);
    wait_mosquitto(port).await;
    wait_mosquitto(port + 1).await;
    m
}

/// A control plane on `port` using the broker of `t`, every node of the cluster a simulated
/// agent (probe ports from `base_port`), and smoke-monitoring applied.
async fn smoke_monitoring_applied(
    t: &WithMosquitto,
    port: u16,
    base_port: u16,
    store: &[String],
) -> (
    ControlPlane,
    std::collections::BTreeMap<String, cloud_broker::testkit::SimAgent>,
) {
    let (data, url) = (&t.data, t.url.as_str());
    let cp = ControlPlane::start(data, port, &with_broker(&t.control_url, store));
    let agents = join_all(&cp, url, &t.cluster, &t.creds, base_port, true).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let out = apply(data, &scenario("smoke-monitoring.yaml")).await;
    assert!(out.status.success(), "{}", cp.log_text());
    (cp, agents)
}

/// `--broker-url URL` and the store's flags.
fn with_broker<'a>(url: &'a str, store: &'a [String]) -> Vec<&'a str> {
    let mut v = vec!["--broker-url", url];
    v.extend(store.iter().map(String::as_str));
    v
}

/// The retained desired states the broker at `url` holds, read with the admin login.
async fn retained_desired(data: &Path, url: &str) -> Vec<String> {
    use rumqttc::{AsyncClient, Event as E, Packet, QoS};
    let creds = cloud_broker::identity::DataDir::new(data)
        .credentials()
        .unwrap();
    let o = cloud_broker::conn::mqtt_options(url, "durability-reader", &creds.admin).unwrap();
    let (c, mut el) = AsyncClient::new(o, 16);
    c.subscribe("acoa/v1/nodes/+/desired", QoS::AtLeastOnce)
        .await
        .unwrap();
    let mut topics = vec![];
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while let Ok(Ok(ev)) = tokio::time::timeout(
        deadline.saturating_duration_since(std::time::Instant::now()),
        el.poll(),
    )
    .await
    {
        if let E::Incoming(Packet::Publish(p)) = ev {
            if p.retain && !p.payload.is_empty() {
                topics.push(p.topic);
            }
        }
    }
    topics
}

fn a_restarted_broker_gets_the_retained_documents_again_without_a_control_plane_restart(
    kind: Kind,
) {
    let Some(t) = with_mosquitto() else { return };
    let b = Backend::new(kind);
    let store = b.serve_flags();
    run(async move {
        let (mosquitto, dir, data, port, url) =
            (&t.mosquitto, t.dir.path(), &t.data, t.port, &t.control_url);
        let m = mosquitto_without_persistence(mosquitto, dir, data, port).await;
        let (cp, _agents) = smoke_monitoring_applied(&t, free_port(), 17600, &store).await;
        let before = retained_desired(data, url).await;
        assert!(!before.is_empty());

        drop(m); // killed: with persistence off, everything retained is gone
        let _m = restart_mosquitto(mosquitto, dir, port).await;
        cp.wait_log_async(
            "publishing the retained documents again",
            Duration::from_secs(15),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut after = retained_desired(data, url).await;
        after.sort();
        let mut want = before.clone();
        want.sort();
        assert_eq!(after, want, "{}", cp.log_text());
        smoke_monitoring_is_placed(data).await;
    });
}

#[test]
fn a_restarted_broker_gets_the_retained_documents_again_without_a_control_plane_restart_file() {
    a_restarted_broker_gets_the_retained_documents_again_without_a_control_plane_restart(
        Kind::File,
    );
}

#[test]
fn a_restarted_broker_gets_the_retained_documents_again_without_a_control_plane_restart_etcd() {
    a_restarted_broker_gets_the_retained_documents_again_without_a_control_plane_restart(
        Kind::Etcd,
    );
}

fn a_delete_made_while_the_control_plane_is_down_is_queued_and_applied_on_start(kind: Kind) {
    let Some(t) = with_mosquitto() else { return };
    let b = Backend::new(kind);
    let store = b.serve_flags();
    run(async move {
        let (data, url) = (&t.data, &t.control_url);
        let (_m, _) = start_mosquitto(&t.mosquitto, t.dir.path(), data, t.port, false).await;
        let cp_port = free_port();
        let (mut cp, _agents) = smoke_monitoring_applied(&t, cp_port, 17700, &store).await;

        cp.kill();
        let out = cli_async(data, &["delete", "smoke-monitoring"]).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "not confirmed, yet: {err}");
        assert!(err.contains("queued"), "{err}");
        assert!(b.has_app(data, "smoke-monitoring"));

        let cp = ControlPlane::start(data, cp_port, &with_broker(url, &store));
        cp.wait_log_async(
            "application smoke-monitoring deleted",
            Duration::from_secs(15),
        )
        .await;
        assert!(!b.has_app(data, "smoke-monitoring"));
        // the cleared status follows the log line (after the store's writes)
        let d = data.clone();
        tokio::task::spawn_blocking(move || {
            wait_for("the status cleared", Duration::from_secs(5), || {
                status_of(&d, "smoke-monitoring").is_none().then_some(())
            })
        })
        .await
        .unwrap();
        // and a delete while it runs is confirmed
        let out = apply(data, &scenario("speed-profiling.yaml")).await;
        assert!(String::from_utf8_lossy(&out.stdout).contains("speed-profiling"));
        ok(cli_async(data, &["delete", "speed-profiling"]).await);
    });
}

#[test]
fn a_delete_made_while_the_control_plane_is_down_is_queued_and_applied_on_start_file() {
    a_delete_made_while_the_control_plane_is_down_is_queued_and_applied_on_start(Kind::File);
}

#[test]
fn a_delete_made_while_the_control_plane_is_down_is_queued_and_applied_on_start_etcd() {
    a_delete_made_while_the_control_plane_is_down_is_queued_and_applied_on_start(Kind::Etcd);
}
