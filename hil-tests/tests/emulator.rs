//! The link emulator on its own: real namespaces, real TUN devices, real UDP packets.
//! Needs root and /dev/net/tun; otherwise each test prints why it skipped.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::skip;
use hil_tests::control::{self, ControlServer};
use hil_tests::emu::Testbed;
use hil_tests::netns;
use hil_tests::probe::{self, EchoServer, Rtts};
use hil_tests::LinkSpec;

const PORT: u16 = 9000;

/// The tests take turns: on a 2-core machine two emulators and their probes at once measure
/// each other's CPU use as much as the emulated links.
fn measuring_alone() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// `count` echo probes from `from` to `to`'s echo server.
fn rtts(tb: &Testbed, from: &str, to: &str, count: usize, interval_ms: u64) -> Rtts {
    let sock = tb.udp_socket(from, 0).unwrap();
    let dst = SocketAddr::new(tb.addr(to).unwrap().into(), PORT);
    probe::measure(
        &sock,
        dst,
        count,
        Duration::from_millis(interval_ms),
        Duration::from_millis(500),
    )
    .unwrap()
}

fn echo(tb: &Testbed, node: &str) -> EchoServer {
    EchoServer::start(tb.udp_socket(node, PORT).unwrap()).unwrap()
}

fn set_both(tb: &Testbed, a: &str, b: &str, ab: LinkSpec, ba: LinkSpec) {
    tb.set_link(a, b, ab).unwrap();
    tb.set_link(b, a, ba).unwrap();
}

fn check(ok: bool, what: String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what)
    }
}

/// This machine is a VM whose vCPUs stall now and then for milliseconds, which moves a mean of
/// a few hundred round trips by more than the bound however exact the emulator is: a setting
/// passes when one of three measurements of it meets the bounds (every failed attempt is
/// printed).
fn within_attempts(mut measure: impl FnMut() -> Result<(), String>) {
    let mut failures = Vec::new();
    for _ in 0..3 {
        match measure() {
            Ok(()) => return,
            Err(e) => {
                println!("attempt failed: {e} (load average {})", load_average());
                failures.push(e);
            }
        }
    }
    panic!("three attempts failed: {}", failures.join("; "));
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Probes `a` -> `measured` and `a` -> `reference` in alternating blocks of 20 (0.1-0.2 s each),
/// `count` probes each at the same interval: the reference is a link of known fixed delays, so
/// what a busy machine adds to a round trip (CI runs other work beside the tests; this VM's
/// wake-ups vary by tenths of a millisecond from one second to the next) is in both, and the
/// emulator's setting is judged by the difference. One prober at a time: two at once would
/// measure each other. Returns both and the noise the reference saw (its robust jitter, about
/// 0.1 ms on a quiet machine), the extra tolerance it calls for.
fn side_by_side(
    tb: &Testbed,
    measured: &str,
    reference: &str,
    count: usize,
    interval_ms: u64,
) -> (Rtts, Rtts, f64) {
    const BLOCK: usize = 20;
    let (mut r, mut base) = (Rtts::default(), Rtts::default());
    while r.sent < count {
        for (to, acc) in [(measured, &mut r), (reference, &mut base)] {
            let block = rtts(tb, "a", to, BLOCK.min(count - acc.sent), interval_ms);
            acc.sent += block.sent;
            acc.rtts_ms.extend(block.rtts_ms);
        }
    }
    let noise = base.robust_jitter();
    println!(
        "reference a->{reference}: median {:.3} ms, robust jitter {noise:.3} ms, load average {}",
        base.median(),
        load_average()
    );
    (r, base, noise)
}

#[test]
fn udp_round_trip_matches_configured_latency() {
    if skip() {
        return;
    }
    let _turn = measuring_alone();
    // b behind the configured links, c behind 1 ms each way: the reference (a delayed packet
    // waits on the emulator's timer, an undelayed one does not; a busy machine wakes timers late)
    let tb = Testbed::up(&["a", "b", "c"], &[]).unwrap();
    let _eb = echo(&tb, "b");
    let _ec = echo(&tb, "c");
    const REF_MS: f64 = 1.0;
    set_both(
        &tb,
        "a",
        "c",
        LinkSpec::new(REF_MS, 0.0, 0.0),
        LinkSpec::new(REF_MS, 0.0, 0.0),
    );
    for (ab, ba) in [(10.0, 15.0), (0.5, 0.3), (24.4, 19.0)] {
        set_both(
            &tb,
            "a",
            "b",
            LinkSpec::new(ab, 0.0, 0.0),
            LinkSpec::new(ba, 0.0, 0.0),
        );
        within_attempts(|| {
            tb.reset_stats();
            let (r, base, noise) = side_by_side(&tb, "b", "c", 200, 5);
            check(
                base.lost() == 0,
                format!("{} lost on the reference", base.lost()),
            )?;
            let added = ab + ba - 2.0 * REF_MS;
            let expected = added + base.median();
            let bound = 0.2 + noise;
            let late = tb.stats().lateness_us;
            println!(
                "a->b {ab} ms, b->a {ba} ms: rtt median {:.3} mean {:.3} p99 {:.3} ms, expected {:.3} \
                 within {bound:.3} (reference {:.3}); emulator lateness p50 {} p99 {} max {:.0} µs",
                r.median(), r.mean(), r.quantile(0.99), expected, base.median(), late.p50, late.p99, late.max
            );
            check(r.lost() == 0, format!("{} lost", r.lost()))?;
            check(
                (r.median() - expected).abs() < bound,
                format!("median rtt {:.3} ms, expected {expected:.3} ms", r.median()),
            )?;
            // trimmed: a bias of the emulator moves it, a stalled vCPU's few late rounds do not
            let expected = added + base.trimmed_mean(0.05);
            check(
                (r.trimmed_mean(0.05) - expected).abs() < bound,
                format!(
                    "trimmed mean rtt {:.3} ms, expected {expected:.3} ms",
                    r.trimmed_mean(0.05)
                ),
            )?;
            // the emulator releases on time: its own measure of lateness, not the machine's
            check(
                late.p50 < 100.0,
                format!("emulator delivery lateness p50 {} µs", late.p50),
            )
        });
    }
}

#[test]
fn loss_matches_configured_rate() {
    if skip() {
        return;
    }
    let _turn = measuring_alone();
    let tb = Testbed::up(&["a", "b"], &[]).unwrap();
    let _e = echo(&tb, "b");
    set_both(
        &tb,
        "a",
        "b",
        LinkSpec::new(1.0, 0.0, 0.2),
        LinkSpec::new(1.0, 0.0, 0.1),
    );
    let r = rtts(&tb, "a", "b", 3000, 1);
    let expected = 0.8 * 0.9;
    let stats = tb.stats();
    let ab = stats.links.iter().find(|l| l.from == "a").unwrap();
    let one_way = ab.dropped as f64 / (ab.dropped + ab.forwarded) as f64;
    println!(
        "round-trip success {:.4} (expected {expected:.4}), a->b loss {one_way:.4} (expected 0.2)",
        r.success()
    );
    assert!(
        (r.success() - expected).abs() < 0.03,
        "success {}",
        r.success()
    );
    assert!((one_way - 0.2).abs() < 0.03, "a->b loss {one_way}");
}

#[test]
fn jitter_matches_configured() {
    if skip() {
        return;
    }
    let _turn = measuring_alone();
    // b behind a jittered link, c behind the same delays without jitter: the reference
    let tb = Testbed::up(&["a", "b", "c"], &[]).unwrap();
    let _eb = echo(&tb, "b");
    let _ec = echo(&tb, "c");
    set_both(
        &tb,
        "a",
        "b",
        LinkSpec::new(10.0, 1.0, 0.0),
        LinkSpec::new(5.0, 0.0, 0.0),
    );
    set_both(
        &tb,
        "a",
        "c",
        LinkSpec::new(10.0, 0.0, 0.0),
        LinkSpec::new(5.0, 0.0, 0.0),
    );
    within_attempts(|| {
        let (r, base, noise) = side_by_side(&tb, "b", "c", 600, 10);
        // independent spreads add in quadrature: the emulator's 1 ms and the machine's own
        let expected_jitter = (1.0 + noise * noise).sqrt();
        println!(
            "rtt mean {:.3} trimmed {:.3} ms (expected {:.3}), jitter {:.3} robust {:.3} ms \
             (expected {expected_jitter:.3})",
            r.mean(),
            r.trimmed_mean(0.05),
            base.median(),
            r.jitter(),
            r.robust_jitter()
        );
        // from the median of the differences: a few rounds a stalled vCPU delayed do not move it
        check(
            (r.robust_jitter() - expected_jitter).abs() < 0.15 + noise / 2.0,
            format!(
                "jitter {:.3} (robust estimate), expected {expected_jitter:.3}",
                r.robust_jitter()
            ),
        )?;
        // the mean of 600 draws with sigma 0.89 ms is within 0.11 ms (3 sigma) of the reference's
        let expected = base.trimmed_mean(0.05);
        check(
            (r.trimmed_mean(0.05) - expected).abs() < 0.2 + 0.11 + noise,
            format!("trimmed mean {} expected {expected}", r.trimmed_mean(0.05)),
        )
    });
}

#[test]
fn live_latency_change_through_the_control_socket() {
    if skip() {
        return;
    }
    let _turn = measuring_alone();
    let tb = Testbed::up(&["a", "b", "c"], &[]).unwrap();
    let sock = std::env::temp_dir().join(format!("linkemu-test-{}.sock", std::process::id()));
    let _srv = ControlServer::start(&sock, tb.shared().clone(), tb.nodes().to_vec(), None).unwrap();
    let _e = echo(&tb, "c");
    control::request(&sock, "set c a latency_ms=5").unwrap();
    within_attempts(|| {
        control::request(&sock, "set a c latency_ms=5").unwrap();
        let before = rtts(&tb, "a", "c", 50, 10);
        control::request(&sock, "set a c latency_ms=20").unwrap();
        let after = rtts(&tb, "a", "c", 50, 10);
        // what the busy machine added to the round trips of either block (CI once saw 15.45 ms)
        let noise = before.robust_jitter().max(after.robust_jitter());
        println!(
            "before {:.3} ms, after {:.3} ms, noise {noise:.3} ms",
            before.median(),
            after.median(),
        );
        check(
            (after.median() - before.median() - 15.0).abs() < 0.3 + noise,
            format!(
                "change {:.3} ms, expected 15",
                after.median() - before.median()
            ),
        )?;
        // the first probe after the change already sees it
        check(
            after.rtts_ms[0] > before.median() + 14.0,
            format!("first probe after the change {:.3} ms", after.rtts_ms[0]),
        )
    });
    // b's links are untouched
    let v = control::request(&sock, "get a b").unwrap();
    assert_eq!(v["link"]["latency_ms"], 0.0);
    // bad requests say what is wrong
    let e = control::request(&sock, "set a zz latency_ms=1").unwrap_err();
    assert!(e.to_string().contains("unknown node zz"), "{e}");
    let e = control::request(&sock, "set a b loss=2").unwrap_err();
    assert!(e.to_string().contains("loss"), "{e}");
}

#[test]
fn dropping_the_testbed_deletes_its_namespaces() {
    if skip() {
        return;
    }
    // its emulator's threads would be measured by the others
    let _turn = measuring_alone();
    let tb = Testbed::up(&["x", "y"], &[]).unwrap();
    let names: Vec<String> = tb.nodes().iter().map(|n| n.netns.clone()).collect();
    assert!(names.iter().all(|n| netns::netns_exists(n)));
    // a process inside a node's namespace sees only lo and emu0
    let out = tb.command("x", "ip").args(["-o", "link"]).output().unwrap();
    let links = String::from_utf8_lossy(&out.stdout);
    assert!(
        links.contains("emu0") && links.lines().count() == 2,
        "{links}"
    );
    drop(tb);
    assert!(names.iter().all(|n| !netns::netns_exists(n)));
}

fn write_cluster(dir: &std::path::Path) -> std::path::PathBuf {
    let yaml = r#"
cluster: t
datacenters:
- {name: dc, layer: edge}
nodes:
- {name: p1, datacenter: dc, layer: edge, arch: x86_64, capacity: {cpu_millis: 1000, memory_mb: 512, disk_mb: 1000}}
- {name: p2, datacenter: dc, layer: edge, arch: x86_64, capacity: {cpu_millis: 1000, memory_mb: 512, disk_mb: 1000}}
links:
- {from: p1, to: p2, latency_ms: 3.0, jitter_ms: 0.0, success: 1.0}
- {from: p2, to: p1, latency_ms: 4.0, jitter_ms: 0.0, success: 1.0}
"#;
    let p = dir.join("cluster.yaml");
    std::fs::write(&p, yaml).unwrap();
    p
}

struct KillOnDrop(Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn linkemu(name: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_linkemu"));
    c.arg("--name").arg(name);
    c
}

fn wait_for(path: &std::path::Path) {
    let t = Instant::now();
    while !path.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn linkemu_cli_up_set_down_and_down_after_a_crash() {
    if skip() {
        return;
    }
    // its emulator's threads would be measured by the others
    let _turn = measuring_alone();
    let dir = std::env::temp_dir().join(format!("linkemu-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cluster = write_cluster(&dir);
    let name = format!("clitest{}", std::process::id());
    let prefix = format!("lc{}-", std::process::id());
    let sock = std::path::PathBuf::from(format!("/run/acoa-linkemu/{name}.sock"));
    for crash in [false, true] {
        let child = linkemu(&name)
            .args(["up", "--cluster"])
            .arg(&cluster)
            .args(["--prefix", &prefix, "--subnet", "10.78.0.0/16"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut child = KillOnDrop(child);
        wait_for(&sock);
        let ns1 = format!("{prefix}p1");
        assert!(netns::netns_exists(&ns1));
        let out = linkemu(&name).args(["get", "p1", "p2"]).output().unwrap();
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["link"]["latency_ms"], 3.0);
        let st = linkemu(&name)
            .args([
                "set",
                "p1",
                "p2",
                "--latency-ms",
                "7.5",
                "--loss",
                "0.1",
                "--both",
            ])
            .status()
            .unwrap();
        assert!(st.success());
        let out = linkemu(&name).args(["get", "p2", "p1"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["link"]["latency_ms"], 7.5);
        assert_eq!(v["link"]["loss"], 0.1);
        // a bad value is refused with a reason, and the link keeps its value
        let out = linkemu(&name)
            .args(["set", "p1", "p2", "--loss", "3"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("loss"));
        if crash {
            child.0.kill().unwrap(); // SIGKILL: no chance to tear down
            child.0.wait().unwrap();
            assert!(netns::netns_exists(&ns1));
        }
        let st = linkemu(&name).arg("down").status().unwrap();
        assert!(st.success());
        assert!(!netns::netns_exists(&ns1), "namespace left after down");
        assert!(!netns::netns_exists(&format!("{prefix}p2")));
        // idempotent
        assert!(linkemu(&name).arg("down").status().unwrap().success());
        let _ = child.0.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
