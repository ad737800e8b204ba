//! Two control-plane replicas on one real etcd and one real Mosquitto: one leads, the other
//! waits; the leader paused past its lease (SIGSTOP) is replaced, the new leader places a new
//! application, and the old one, woken (SIGCONT), says it lost the leadership, writes nothing
//! and becomes a standby.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use acoa_test_support::etcd::EtcdCluster;
use cloud_broker::store::etcd::{EtcdConfig, EtcdStore};
use cloud_broker::store::Store;
use common::*;
use ed25519_dalek::{SigningKey, VerifyingKey};

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
    let terms = run(async move {
        let port = free_port_pair();
        let (_m, _acl) = start_mosquitto(&mosquitto, &root, &d, port, false).await;
        let broker = format!("mqtt://127.0.0.1:{port}");
        let a = replica(&d, "a", &control_url(port), &e);
        a.wait_log_async("leading: term", Duration::from_secs(20))
            .await;
        a.wait_log_async("connected to the broker", Duration::from_secs(20))
            .await;
        let b = replica(&d, "b", &control_url(port), &e);
        b.wait_log_async(" leads", Duration::from_secs(20)).await;
        assert!(!b.has_log("leading: term"), "{}", b.log_text());
        let _agent = start_n1(&a, &broker, n1, false).await;
        apply_ok(&d, &first, &a).await;

        // paused past its lease (2 s): the standby takes over
        signal(&a, "-STOP");
        b.wait_log_async("leading: term", Duration::from_secs(10))
            .await;
        // a hot standby: it heard n1 while it waited
        b.wait_log_async(
            "taking over warm: the latest reports of 1 nodes",
            Duration::from_secs(5),
        )
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
        (term_of(&a), term_of(&b))
    });
    assert!(terms.1 > terms.0, "{terms:?}");
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
    // the desired state carries the new leader's term: agents refuse the old one's
    assert_eq!(snap.desired["n1"].term, terms.1);
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
    let port = free_port_pair();
    let (_m, _acl) = rt.block_on(start_mosquitto(&mosquitto, &root, &d, port, false));
    let broker = format!("mqtt://127.0.0.1:{port}");
    let a = replica(&d, "a", &control_url(port), &e);
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

/// Failover time, a benchmark (ignored; `KILLS` kills, 20 by default):
/// `cargo test -p cloud-broker --test replicas -- --ignored --nocapture failover`.
/// Two replicas (lease 2 s) on three etcd members and one Mosquitto, n1 reporting. Each round:
/// kill -9 the leader, publish at once an application pinned to n1, and time until the standby
/// leads and until the desired state that holds the application reaches a subscriber of n1's
/// desired topic (the agent's view); the application is deleted and the killed replica comes
/// back as a standby.
#[test]
#[ignore = "a benchmark that prints figures"]
fn failover_time() {
    use acoa_shared::{topics, wire};
    use rumqttc::{AsyncClient, Event as MqttEvent, Packet, QoS};
    let kills: usize = std::env::var("KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(20);
    let mosquitto = find_bin("mosquitto").expect("mosquitto");
    let dir = tempdir_for_mosquitto();
    let etcd = EtcdCluster::start(3, dir.path());
    let e = etcd.endpoints();
    let d = dir.path().join("data");
    std::fs::create_dir_all(&d).unwrap();
    let n1 = enroll(&d, "n1");
    let root = dir.path().to_path_buf();
    let (leads, places) = run(async move {
        let port = free_port_pair();
        let (_m, _acl) = start_mosquitto(&mosquitto, &root, &d, port, false).await;
        let broker = format!("mqtt://127.0.0.1:{port}");
        let mut cps = [
            replica(&d, "r0", &control_url(port), &e),
            replica(&d, "r1", &control_url(port), &e),
        ];
        let mut leader = loop {
            if let Some(i) = cps.iter().position(|c| c.has_log("leading: term")) {
                break i;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        cps[leader]
            .wait_log_async("connected to the broker", Duration::from_secs(20))
            .await;
        let _agent = start_n1(&cps[leader], &broker, n1, false).await;
        // the agent's view: the container names of every desired state for n1
        let (c, mut el) = AsyncClient::new(admin_options(&d, "bench-watch", port + 1), 100);
        c.subscribe(topics::desired("n1"), QoS::AtLeastOnce)
            .await
            .unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<String>>();
        tokio::spawn(async move {
            while let Ok(ev) = el.poll().await {
                if let MqttEvent::Incoming(Packet::Publish(p)) = ev {
                    if let Ok(wire::Message::DesiredState(ds)) = wire::decode_unverified(&p.payload)
                    {
                        let names = ds.containers.iter().map(|c| c.name.to_string());
                        let _ = tx.send(names.collect());
                    }
                }
            }
        });
        let (mut leads, mut places) = (Vec::new(), Vec::new());
        for round in 0..kills {
            let app = format!("k{round}");
            let text = format!(
                "application: {app}\ncomponents:\n- {{name: c0, image: busybox:1, requires: {{node: n1}}}}\n"
            );
            let other = 1 - leader;
            cps[other]
                .wait_log_async("standby:", Duration::from_secs(20))
                .await;
            cps[leader].kill();
            let t0 = std::time::Instant::now();
            c.publish(topics::app(&app), QoS::AtLeastOnce, true, text)
                .await
                .unwrap();
            let before = cps[other].count_log("leading: term");
            while cps[other].count_log("leading: term") == before {
                assert!(t0.elapsed() < Duration::from_secs(30), "no new leader");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            leads.push(t0.elapsed().as_secs_f64());
            let want = format!("{app}.c0");
            loop {
                let names = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                    .await
                    .expect("a desired state within 30 s")
                    .unwrap();
                if names.contains(&want) {
                    break;
                }
            }
            places.push(t0.elapsed().as_secs_f64());
            c.publish(topics::app(&app), QoS::AtLeastOnce, true, Vec::new())
                .await
                .unwrap();
            // the killed replica comes back as a standby
            cps[leader] = replica(&d, &format!("r{leader}-{round}"), &control_url(port), &e);
            leader = other;
        }
        (leads, places)
    });
    let pct = |v: &[f64], p: f64| {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        s[((s.len() - 1) as f64 * p).round() as usize]
    };
    println!("failover over {kills} kills of the leader (lease 2 s, 2 replicas, 3 etcd members, Mosquitto):");
    println!("| from the kill until | p50 (s) | p99 (s) | max (s) |");
    println!("|---|---|---|---|");
    for (what, v) in [
        ("the standby leads", &leads),
        (
            "an application published meanwhile is in n1's desired state",
            &places,
        ),
    ] {
        println!(
            "| {what} | {:.2} | {:.2} | {:.2} |",
            pct(v, 0.5),
            pct(v, 0.99),
            pct(v, 1.0)
        );
    }
    drop(etcd);
}

/// Two replicas on two "machines" (data directories that share only the signing key and the
/// broker credentials), each with its embedded broker (a cold standby): a node enrolled
/// through the leader's command line while the other waits is in etcd, so once the leader is
/// gone the other's broker lets it log in and it gets its desired state.
#[test]
fn a_node_enrolled_through_one_replica_logs_in_after_the_other_takes_over() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = EtcdCluster::start(1, dir.path());
    let e = etcd.endpoints();
    let (da, db) = (dir.path().join("a"), dir.path().join("b"));
    let root = dir.path().to_path_buf();
    run(async move {
        let mut a = replica_embedded(&da, "a", free_port(), &e, 2);
        a.wait_log_async("connected to the broker", Duration::from_secs(20))
            .await;
        std::fs::create_dir_all(&db).unwrap();
        for f in ["control-plane.key", "credentials.json"] {
            std::fs::copy(da.join(f), db.join(f)).unwrap();
        }
        let b = replica_embedded(&db, "b", free_port(), &e, 2);
        b.wait_log_async(" leads", Duration::from_secs(20)).await;
        let (d, e2) = (da.clone(), e.clone());
        let n1 = tokio::task::spawn_blocking(move || {
            enroll_with(&d, "n1", &["--store", "etcd", "--etcd-endpoints", &e2])
        })
        .await
        .unwrap();
        assert!(!da.join("inventory.json").exists());
        a.wait_log_async("inventory reloaded: 1 nodes", Duration::from_secs(10))
            .await;
        let agent = start_n1(&a, &a.url, n1.clone(), false).await;
        let app = write_pinned(&root, "first", "", "busybox:1", "n1", 1, "");
        apply_ok(&da, &app, &a).await;
        drop(agent);

        a.kill();
        b.wait_log_async("connected to the broker", Duration::from_secs(20))
            .await;
        // n1 is known from the store's records: its reports are taken without a new join
        let mut agent = quiet_agent(&b.url, railway_node(0, "n1"), n1, true);
        let d = tokio::time::timeout(Duration::from_secs(15), agent.desired.recv())
            .await
            .expect("a desired state from the new leader within 15 s")
            .unwrap();
        let names: Vec<String> = d.containers.iter().map(|c| c.name.to_string()).collect();
        assert_eq!(names, ["first.c0"], "{}", b.log_text());
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!b.has_log("unknown node"), "{}", b.log_text());
        assert!(!db.join("inventory.json").exists());
    });
    drop(etcd);
}

/// A leader stopped cleanly (SIGTERM) revokes its lease: the standby leads at once, well under
/// the lease's TTL (10 s here), where a killed leader's lease would have to expire first.
#[test]
fn a_leader_stopped_cleanly_hands_over_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = EtcdCluster::start(1, dir.path());
    let e = etcd.endpoints();
    let data = dir.path().join("data");
    let ttl = Duration::from_secs(10);
    let mut a = replica_embedded(&data, "a", free_port(), &e, ttl.as_secs());
    a.wait_log("connected to the broker", Duration::from_secs(20));
    let b = replica_embedded(&data, "b", free_port(), &e, ttl.as_secs());
    b.wait_log(" leads", Duration::from_secs(20));

    signal(&a, "-TERM");
    let t0 = std::time::Instant::now();
    b.wait_log("leading: term", ttl);
    let took = t0.elapsed();
    println!(
        "takeover after a clean stop: {} ms (lease {} s)",
        took.as_millis(),
        ttl.as_secs()
    );
    a.wait_log("resigned: term", Duration::from_secs(5));
    let _ = a.child.wait();
    assert!(
        took < ttl / 2,
        "took {took:?} with a lease of {ttl:?}\n{}",
        a.log_text()
    );
    b.wait_log("connected to the broker", Duration::from_secs(10));
    drop(etcd);
}
