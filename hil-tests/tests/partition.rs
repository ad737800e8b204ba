//! Partitions end to end: the real control plane (`cloud-broker serve`, its embedded broker on
//! the testbed's host endpoint), real agents in seven railway node namespaces (cloud1, cloud2,
//! train1, station) running real Podman containers, links cut in the emulated network.
//!
//! 1. A node cut from the control plane only (its peers still reach it): unreachable past the
//!    evidence window, nothing moves, no container restarts.
//! 2. The same node then cut from everyone: lost, its components running elsewhere within
//!    seconds; healed, it is online again, its stale copy is removed (no duplicates) and
//!    nothing else restarted.
//! 3. Train 1 cut from the cloud and the station: its nodes unreachable, its components stay
//!    and are not duplicated; healed, not one container restarted (ids and start times).
//!
//! Needs root, /dev/net/tun, the Podman REST socket, the `cloud-broker` and `edge-agent`
//! binaries next to the test's directory (`cargo build -p cloud-broker -p edge-agent`; or
//! ACOA_CLOUD_BROKER_BIN / ACOA_EDGE_AGENT_BIN), busybox-static for the image. Prints
//! `SKIPPED: <reason>` and passes where these are missing (ACOA_SKIP_PODMAN=1 skips it).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use acoa_shared::model::{Application, Cluster};
use hil_tests::agents::AgentOptions;
use hil_tests::dynamic::all_running;
use hil_tests::emu::{unavailable_reason, Testbed, HOST};
use hil_tests::partition::{
    containers, duplicates, poll, remove_app_containers, restarted, Container, LogTail, NodeState,
    Plane,
};

/// Railway nodes n01, n02 (cloud1), n07 (cloud2), n13-n15 (train1), n19 (station), renamed
/// with a prefix of this test's own: agents own the containers labelled with their node's name,
/// so no other system on this Podman may share the names.
const NODES: [&str; 7] = [
    "pt-n01", "pt-n02", "pt-n07", "pt-n13", "pt-n14", "pt-n15", "pt-n19",
];
const TRAIN: [&str; 3] = ["pt-n13", "pt-n14", "pt-n15"];
const NODE_PREFIX: &str = "pt-";
const IMAGE: &str = "localhost/acoa/partition-test:1";
const APP: &str = "smoke-partition";
/// The control plane's evidence window (`serve --evidence-window-ms`): a silent node that no
/// peer reached within it is lost.
const EVIDENCE_WINDOW: Duration = Duration::from_secs(5);

fn bin(env: &str, name: &str) -> Option<PathBuf> {
    if let Ok(p) = std::env::var(env) {
        return Some(PathBuf::from(p));
    }
    let p = std::env::current_exe().ok()?.parent()?.parent()?.join(name);
    p.exists().then_some(p)
}

/// The railway cluster cut down to `NODES` (their links only).
fn cluster(root: &std::path::Path) -> Cluster {
    let mut cl = hil_tests::partition::prefixed(
        &acoa_shared::model::load_cluster(&root.join("scenarios/railway/cluster.yaml"))
            .expect("railway cluster"),
        NODE_PREFIX,
    );
    cl.nodes.retain(|n| NODES.contains(&n.name.as_str()));
    cl.links
        .retain(|l| NODES.contains(&l.from.as_str()) && NODES.contains(&l.to.as_str()));
    cl
}

/// Smoke monitoring with every image the test's busybox image.
fn app(root: &std::path::Path) -> Application {
    let mut a =
        acoa_shared::model::load_application(&root.join("scenarios/railway/smoke-monitoring.yaml"))
            .expect("smoke monitoring");
    a.application = APP.into();
    for c in &mut a.components {
        c.image = IMAGE.into();
    }
    a
}

/// Removes the application's containers when dropped (also when the test fails).
struct Cleanup;
impl Drop for Cleanup {
    fn drop(&mut self) {
        remove_app_containers(APP);
    }
}

fn names() -> Vec<String> {
    NODES.iter().map(|s| s.to_string()).collect()
}

/// The placement once every component runs and no channel rests on an estimated link (a
/// placement made before the agents measured their links is explored and may move onto
/// measured ones: the test must not take that move for the partition's).
fn running(plane: &Plane, app: &Application) -> Option<BTreeMap<String, String>> {
    let st = plane.status(APP).ok()?;
    let measured = st["links"]
        .as_object()
        .is_some_and(|l| l.values().all(|k| k != "estimated"));
    (measured && all_running(&st, app)).then(|| hil_tests::dynamic::placement_of(&st))
}

/// Every component of the placement runs in exactly one container on its node.
fn settled(p: &BTreeMap<String, String>) -> Option<Vec<Container>> {
    let cs = containers(APP, &names()).ok()?;
    let ok = cs.iter().filter(|c| c.running).count() == p.len()
        && p.iter().all(|(comp, node)| {
            cs.iter()
                .any(|c| c.running && &c.component == comp && &c.node == node)
        });
    ok.then_some(cs)
}

#[test]
fn partitions_end_to_end() {
    if let Some(why) = unavailable_reason() {
        println!("SKIPPED: {why}");
        return;
    }
    if std::env::var("ACOA_SKIP_PODMAN").as_deref() == Ok("1") {
        println!("SKIPPED: ACOA_SKIP_PODMAN=1");
        return;
    }
    let (Some(cloud_bin), Some(agent_bin)) = (
        bin("ACOA_CLOUD_BROKER_BIN", "cloud-broker"),
        bin("ACOA_EDGE_AGENT_BIN", "edge-agent"),
    ) else {
        println!("SKIPPED: no cloud-broker or edge-agent binary (cargo build -p cloud-broker -p edge-agent)");
        return;
    };
    assert!(
        acoa_test_support::podman_ok(),
        "needs the Podman REST socket at {} (or ACOA_SKIP_PODMAN=1)",
        acoa_test_support::PODMAN_SOCKET
    );
    acoa_test_support::busybox_images(&[IMAGE]);
    let t0 = Instant::now();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let cl = cluster(&root);
    let app = app(&root);
    let numbered: Vec<(String, u32)> = NODES
        .iter()
        .enumerate()
        .map(|(i, n)| (n.to_string(), i as u32 + 1))
        .collect();
    let tb = Testbed::builder()
        .subnet("10.83.0.0/16".parse().unwrap())
        .host(true)
        .up_numbered(&numbered, &cl.links)
        .unwrap();
    let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("partition-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let mut agent = AgentOptions::new(&agent_bin);
    agent.period_ms = 500;
    agent.window = 16;
    let _cleanup = Cleanup;
    remove_app_containers(APP);
    let serve = [
        "--evidence-window-ms".to_string(),
        EVIDENCE_WINDOW.as_millis().to_string(),
    ];
    let plane = Plane::up(&tb, &cl, &cloud_bin, &agent, &work, &serve).unwrap();
    let mut log = LogTail::at_end(&plane.log);
    let fail = |what: &str| -> ! {
        panic!(
            "{what} ({:.1} s in); control plane log: {}",
            t0.elapsed().as_secs_f64(),
            plane.log.display()
        )
    };

    println!(
        "control plane and agents up at {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    // placed and running
    let file = work.join("app.yaml");
    std::fs::write(&file, serde_json::to_string_pretty(&app).unwrap()).unwrap();
    let applied = poll(Duration::from_secs(20), || {
        plane
            .cloud
            .apply(&file, 10)
            .ok()
            .filter(|st| st["placement"].is_object())
    });
    if applied.is_none() {
        fail("smoke monitoring was never placed");
    }
    // running on measured links, and the same 2 s later (an exploration round that was due
    // has run)
    let placement = poll(Duration::from_secs(30), || {
        let p = running(&plane, &app)?;
        std::thread::sleep(Duration::from_secs(2));
        (running(&plane, &app)? == p).then_some(p)
    })
    .unwrap_or_else(|| fail("smoke monitoring never ran on measured links"));
    let c0 = poll(Duration::from_secs(10), || settled(&placement))
        .unwrap_or_else(|| fail("the containers never matched the placement"));
    println!(
        "placed {placement:?} after {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    // the node cut: one that holds only components free to move (no pin, hardware or datacenter)
    let free = |comp: &str| {
        app.components.iter().any(|c| {
            c.name == comp
                && c.requires.hardware.is_empty()
                && c.requires.datacenter.is_none()
                && c.requires.node.is_none()
        })
    };
    let victim = placement
        .values()
        .find(|n| {
            placement
                .iter()
                .filter(|(_, m)| m == n)
                .all(|(c, _)| free(c))
        })
        .cloned()
        .unwrap_or_else(|| fail("no node holds only components free to move"));
    let others: Vec<&str> = NODES
        .iter()
        .copied()
        .filter(|n| *n != victim)
        .chain([HOST])
        .collect();

    let at = |what: &str| println!("{:>5.1} s: {what}", t0.elapsed().as_secs_f64());

    // 1. cut from the control plane only: unreachable, and it stays so past the evidence
    //    window while its peers reach it; nothing moves, nothing restarts
    let mark = log.mark();
    tb.cut(&victim, HOST).unwrap();
    at(&format!("{victim} cut from the control plane"));
    if log
        .wait_state(
            &victim,
            NodeState::Unreachable,
            mark,
            Duration::from_secs(15),
        )
        .is_none()
    {
        fail(&format!(
            "{victim} cut from the control plane was never called unreachable"
        ));
    }
    at(&format!("{victim} unreachable"));
    std::thread::sleep(EVIDENCE_WINDOW + Duration::from_secs(1));
    assert_eq!(
        plane.placement(APP),
        placement,
        "a component moved while {victim} was only unreachable"
    );
    assert!(
        !log.states_since(&victim, mark).contains(&NodeState::Lost),
        "{victim} was called lost while its peers reached it"
    );
    let c1 = containers(APP, &names()).unwrap();
    assert!(
        restarted(&c0, &c1).is_empty(),
        "restarted: {:?}",
        restarted(&c0, &c1)
    );
    assert!(
        duplicates(&c1).is_empty(),
        "duplicates: {:?}",
        duplicates(&c1)
    );

    // 2. then cut from everyone: lost, its components running elsewhere within seconds
    let mark = log.mark();
    tb.cut_between(&[victim.as_str()], &others).unwrap();
    at(&format!("{victim} cut from everyone"));
    let t = Instant::now();
    if log
        .wait_state(&victim, NodeState::Lost, mark, Duration::from_secs(20))
        .is_none()
    {
        fail(&format!("{victim} cut from everyone was never called lost"));
    }
    let lost_s = t.elapsed().as_secs_f64();
    let v2 = victim.clone();
    let moved = poll(Duration::from_secs(20), || {
        running(&plane, &app).filter(|p| !p.values().any(|n| *n == v2))
    })
    .unwrap_or_else(|| {
        fail(&format!(
            "{victim}'s components were never running elsewhere"
        ))
    });
    at(&format!(
        "{victim} lost after {lost_s:.1} s, its components running elsewhere after {:.1} s: {moved:?}",
        t.elapsed().as_secs_f64()
    ));
    // back: its stale copy removed, nothing else restarted
    let mark = log.mark();
    tb.heal(&victim).unwrap();
    if log
        .wait_state(&victim, NodeState::Online, mark, Duration::from_secs(25))
        .is_none()
    {
        fail(&format!("{victim} never came back online after the cut"));
    }
    at(&format!("{victim} back"));
    let c2 = poll(Duration::from_secs(15), || {
        settled(&plane.placement(APP)).filter(|cs| duplicates(cs).is_empty())
    })
    .unwrap_or_else(|| fail("duplicates left after the lost node came back"));
    let kept: Vec<Container> = c0.iter().filter(|c| c.node != victim).cloned().collect();
    assert!(
        restarted(&kept, &c2).is_empty(),
        "restarted: {:?}",
        restarted(&kept, &c2)
    );
    let placement = plane.placement(APP);
    // its peers probe it again and say so (a node that entered a tunnel before any peer's
    // report showed it back could be told from a crash by no one)
    std::thread::sleep(Duration::from_secs(4));

    // 3. train 1 cut from the cloud and the station, past the evidence window: unreachable,
    //    its components stay and are not duplicated
    let outside: Vec<&str> = NODES
        .iter()
        .copied()
        .filter(|n| !TRAIN.contains(n))
        .chain([HOST])
        .collect();
    let mark = log.mark();
    tb.cut_between(&TRAIN, &outside).unwrap();
    at("train 1 cut from the cloud and the station");
    for n in TRAIN {
        if log
            .wait_state(n, NodeState::Unreachable, mark, Duration::from_secs(15))
            .is_none()
        {
            fail(&format!(
                "{n} of the train cut off was never called unreachable"
            ));
        }
    }
    at("train 1 unreachable");
    std::thread::sleep(EVIDENCE_WINDOW + Duration::from_secs(1));
    for n in TRAIN {
        assert!(
            !log.states_since(n, mark).contains(&NodeState::Lost),
            "{n} was called lost"
        );
    }
    let during = plane.placement(APP);
    for (comp, node) in placement
        .iter()
        .filter(|(_, n)| TRAIN.contains(&n.as_str()))
    {
        assert_eq!(during.get(comp), Some(node), "{comp} moved off the train");
    }
    let c3 = containers(APP, &names()).unwrap();
    assert!(
        duplicates(&c3).is_empty(),
        "duplicates while the train was cut off: {:?}",
        duplicates(&c3)
    );
    assert!(
        restarted(&c2, &c3).is_empty(),
        "restarted: {:?}",
        restarted(&c2, &c3)
    );
    let mark = log.mark();
    tb.heal_all();
    at("train 1 healed");
    for n in TRAIN {
        if log
            .wait_state(n, NodeState::Online, mark, Duration::from_secs(25))
            .is_none()
        {
            fail(&format!("{n} never came back online"));
        }
    }
    at("train 1 back");
    let c4 = containers(APP, &names()).unwrap();
    assert_eq!(
        plane.placement(APP),
        placement,
        "the placement changed over the train's cut"
    );
    assert!(
        restarted(&c2, &c4).is_empty(),
        "restarted after the train came back: {:?}",
        restarted(&c2, &c4)
    );
    assert!(
        duplicates(&c4).is_empty(),
        "duplicates: {:?}",
        duplicates(&c4)
    );
    println!("done in {:.1} s", t0.elapsed().as_secs_f64());
    drop(plane);
}

/// A cut drops every packet both ways, a heal restores each direction's own spec.
#[test]
fn cut_and_heal_restore_each_direction() {
    if let Some(why) = unavailable_reason() {
        println!("SKIPPED: {why}");
        return;
    }
    use hil_tests::LinkSpec;
    let tb = Testbed::up(&["a", "b", "c"], &[]).unwrap();
    let ab = LinkSpec::new(2.0, 0.0, 0.0);
    let ba = LinkSpec::new(3.0, 0.0, 0.1);
    tb.set_link("a", "b", ab).unwrap();
    tb.set_link("b", "a", ba).unwrap();
    tb.cut_between(&["a"], &["b", "c"]).unwrap();
    assert_eq!(tb.cuts().len(), 4);
    let rx = tb.udp_socket("b", 0).unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let to = std::net::SocketAddr::new(
        tb.addr("b").unwrap().into(),
        rx.local_addr().unwrap().port(),
    );
    let tx = tb.udp_socket("a", 0).unwrap();
    for _ in 0..20 {
        tx.send_to(b"x", to).unwrap();
    }
    let mut buf = [0u8; 8];
    assert!(
        rx.recv_from(&mut buf).is_err(),
        "a packet crossed a cut link"
    );
    // cutting again keeps the spec from before the first cut
    tb.cut("a", "b").unwrap();
    tb.heal("b").unwrap();
    assert_eq!(tb.link("a", "b").unwrap(), ab);
    assert_eq!(tb.link("b", "a").unwrap(), ba);
    assert_eq!(tb.cuts().len(), 2, "a <-> c stays cut");
    tx.send_to(b"y", to).unwrap();
    assert!(
        rx.recv_from(&mut buf).is_ok(),
        "nothing crossed the healed link"
    );
    tb.heal_all();
    assert!(tb.cuts().is_empty());
    assert_eq!(tb.link("a", "c").unwrap(), LinkSpec::default());
}
