//! Two control-plane replicas on one real etcd and one real Mosquitto: one leads, the other
//! waits; the leader paused past its lease (SIGSTOP) is replaced, the new leader places a new
//! application, and the old one, woken (SIGCONT), says it lost the leadership, writes nothing
//! and becomes a standby.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use acoa_test_support::etcd::EtcdCluster;
use cloud_broker::store::etcd::{EtcdConfig, EtcdStore};
use cloud_broker::store::Store;
use common::*;
use ed25519_dalek::{SigningKey, VerifyingKey};

/// A replica `name` of the control plane in `data` (log `data/{name}.log`), not waited for.
fn replica(data: &Path, name: &str, broker: &str, etcd: &str) -> ControlPlane {
    let log = data.join(format!("{name}.log"));
    let f = std::fs::File::create(&log).unwrap();
    let child = Command::new(bin())
        .arg("--data-dir")
        .arg(data)
        .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--broker-url", broker, "--node-timeout-ms", "2000"])
        .args(["--store", "etcd", "--etcd-endpoints", etcd])
        .args(["--lease-ttl-s", "2"])
        .env("RUST_LOG", "info,rumqttc=warn")
        .stdout(Stdio::null())
        .stderr(f)
        .spawn()
        .unwrap();
    ControlPlane {
        child,
        data: data.to_path_buf(),
        log,
        url: broker.to_string(),
    }
}

fn signal(cp: &ControlPlane, sig: &str) {
    let pid = cp.child.id().to_string();
    assert!(Command::new("kill")
        .args([sig, &pid])
        .status()
        .unwrap()
        .success());
}

/// What the tests start from: Mosquitto, an etcd cluster, a data directory (`dir/data`) with
/// node n1 enrolled, and two applications pinned to n1.
type Setup = (
    PathBuf,
    tempfile::TempDir,
    EtcdCluster,
    (SigningKey, String, VerifyingKey),
    PathBuf,
    PathBuf,
);

/// [`Setup`] with an etcd cluster of `members`; `None` (the test is skipped) without Mosquitto.
fn setup(members: usize) -> Option<Setup> {
    let Some(mosquitto) = find_bin("mosquitto") else {
        eprintln!("SKIPPED: no mosquitto");
        return None;
    };
    let dir = tempdir_for_mosquitto();
    let etcd = EtcdCluster::start(members, dir.path());
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let n1 = enroll(&data, "n1");
    let first = write_pinned(dir.path(), "first", "", "busybox:1", "n1", 1, "");
    let second = write_pinned(dir.path(), "second", "", "busybox:1", "n1", 1, "");
    Some((mosquitto, dir, etcd, n1, first, second))
}

async fn apply_ok(data: &Path, file: &Path, cp: &ControlPlane) {
    let out = spawn_apply(data, file, &["--agents-wait-s", "0"])
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        cp.log_text()
    );
}

#[test]
fn a_paused_leader_is_replaced_and_cannot_write_when_it_wakes() {
    let Some((mosquitto, dir, etcd, n1, first, second)) = setup(1) else {
        return;
    };
    let endpoints = etcd.endpoints();
    let (d, e, root) = (
        dir.path().join("data"),
        endpoints.clone(),
        dir.path().to_path_buf(),
    );
    run(async move {
        let port = free_port();
        let (_m, _acl) = start_mosquitto(&mosquitto, &root, &d, port, false).await;
        let broker = format!("mqtt://127.0.0.1:{port}");
        let a = replica(&d, "a", &broker, &e);
        a.wait_log_async("leading: term", Duration::from_secs(20))
            .await;
        a.wait_log_async("connected to the broker", Duration::from_secs(20))
            .await;
        let b = replica(&d, "b", &broker, &e);
        b.wait_log_async(" leads", Duration::from_secs(20)).await;
        assert!(!b.has_log("leading: term"), "{}", b.log_text());
        let _agent = start_n1(&a, &broker, n1, false).await;
        apply_ok(&d, &first, &a).await;

        // paused past its lease (2 s): the standby takes over
        signal(&a, "-STOP");
        b.wait_log_async("leading: term", Duration::from_secs(10))
            .await;
        apply_ok(&d, &second, &b).await;

        signal(&a, "-CONT");
        a.wait_log_async("lost the leadership", Duration::from_secs(10))
            .await;
        let t = std::time::Instant::now();
        while a.count_log("standby: waiting to lead") < 2 {
            assert!(t.elapsed() < Duration::from_secs(10), "{}", a.log_text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!b.has_log("lost the leadership"), "{}", b.log_text());
        assert_eq!(a.count_log("leading: term"), 1, "{}", a.log_text());
    });
    let snap = EtcdStore::connect(&EtcdConfig::new(&endpoints).unwrap())
        .unwrap()
        .load()
        .unwrap();
    assert!(snap.apps["first"].placement.is_some());
    assert!(snap.apps["second"].placement.is_some());
    let names: Vec<&str> = snap.desired["n1"]
        .containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["first.c0", "second.c0"]);
    drop(etcd);
}

/// etcd loses its quorum (two of three members killed): the leader stops deciding, a definition
/// published meanwhile is not placed, the agent keeps its desired state; once the members are
/// back a leader places the held definition and the first application is still there.
#[test]
fn without_etcd_quorum_nothing_is_decided_and_nothing_lost() {
    let Some((mosquitto, dir, mut etcd, n1, first, second)) = setup(3) else {
        return;
    };
    let endpoints = etcd.endpoints();
    let (d, e, root) = (
        dir.path().join("data"),
        endpoints.clone(),
        dir.path().to_path_buf(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let port = free_port();
    let (_m, _acl) = rt.block_on(start_mosquitto(&mosquitto, &root, &d, port, false));
    let broker = format!("mqtt://127.0.0.1:{port}");
    let a = replica(&d, "a", &broker, &e);
    a.wait_log("connected to the broker", Duration::from_secs(20));
    let agent = rt.block_on(start_n1(&a, &broker, n1, false));
    rt.block_on(apply_ok(&d, &first, &a));

    etcd.stop(1);
    etcd.stop(2);
    a.wait_log(
        "no decision can be made, etcd does not answer",
        Duration::from_secs(20),
    );
    let second_path = second.to_str().unwrap();
    let out = cli(
        &d,
        &[
            "apply",
            second_path,
            "--wait-s",
            "3",
            "--agents-wait-s",
            "0",
        ],
    );
    assert!(!out.status.success(), "placed without a quorum");
    // logged once, not once a second
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        a.count_log("no decision can be made"),
        1,
        "{}",
        a.log_text()
    );

    etcd.restart(1);
    etcd.restart(2);
    etcd.wait_healthy(Duration::from_secs(20));
    let snap = wait_for(
        "the held definition placed",
        Duration::from_secs(45),
        || {
            let s = EtcdStore::connect(&EtcdConfig::new(&endpoints).unwrap())
                .ok()?
                .load()
                .ok()?;
            s.apps
                .get("second")
                .is_some_and(|a| a.placement.is_some())
                .then_some(s)
        },
    );
    assert!(snap.apps["first"].placement.is_some(), "nothing lost");
    assert_eq!(snap.desired["n1"].containers.len(), 2);
    drop(agent);
    drop(a);
}
