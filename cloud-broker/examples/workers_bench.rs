//! Time to place K applications on a live model of N nodes, with the placement jobs computed in
//! process, by 1 `scheduler worker` and by 2, in the same run (BENCHMARKS.md "Control plane",
//! "Scheduler workers").
//!
//! For each mode: a fresh `cloud-broker serve` (release, embedded broker) in its own process, N
//! simulated agents in this process (real MQTT clients publishing real signed reports and links
//! every 2 s), the workers as processes; once every node joined and its links arrived, the K
//! applications are published at once (retained, as the CLI does) and the clock runs until the
//! last of their statuses says `placed`.
//!
//! Snapshot: `dcs` datacenters of 20 nodes, a full mesh inside each (with loopbacks), and the 2
//! gateways of every datacenter linked to those of every other; nodes 2-4 of a datacenter have
//! a GPS, 5-7 a dashboard. Application i: a source on a GPS node of datacenter a, two
//! processing components anywhere (500 mCPU and 256 MB each: the ledger matters), a sink on a
//! dashboard of datacenter b; response time and reliability over the path.
//!
//! ```text
//! cargo build --release -p cloud-broker -p acoa-scheduler --bin cloud-broker --bin scheduler --example workers_bench
//! target/release/examples/workers_bench --dcs 50 --apps 50
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use acoa_shared::model::{self, Capacity, Cluster, Layer, Link, Node, Usage};
use acoa_shared::topics;
use acoa_shared::wire::keys;
use acoa_test_support::free_port;
use cloud_broker::identity::DataDir;
use cloud_broker::status::AppStatus;
use cloud_broker::testkit::{samples_of, AgentSpec, SimAgent};
use ed25519_dalek::SigningKey;
use rumqttc::{AsyncClient, Event as MqttEvent, MqttOptions, Packet, QoS};

const PER_DC: usize = 20;
const GATEWAYS: usize = 2;

struct Rng(u64);
impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn name(d: usize, k: usize) -> String {
    format!("dc{d:02}-n{k:02}")
}

fn snapshot(dcs: usize) -> Cluster {
    let mut r = Rng(7);
    let mut nodes = vec![];
    let mut links = vec![];
    for d in 0..dcs {
        for k in 0..PER_DC {
            let hardware = match k {
                2..=4 => vec!["gps".to_string()],
                5..=7 => vec!["dashboard".to_string()],
                _ => vec![],
            };
            nodes.push(Node {
                name: name(d, k),
                datacenter: format!("dc{d:02}"),
                layer: Layer::Edge,
                arch: "aarch64".into(),
                hardware,
                software: vec![],
                capacity: Capacity {
                    cpu_millis: 2000,
                    memory_mb: 2048,
                    disk_mb: 16000,
                    ..Default::default()
                },
                usage: Usage::default(),
                position: None,
            });
            for j in 0..PER_DC {
                let lat = if j == k { 0.5 } else { 1.0 + 4.0 * r.unit() };
                links.push(Link {
                    from: name(d, k),
                    to: name(d, j),
                    latency_ms: lat,
                    jitter_ms: 0.1,
                    success: if j == k { 1.0 } else { 0.95 + 0.05 * r.unit() },
                });
            }
            if k < GATEWAYS {
                for e in (0..dcs).filter(|&e| e != d) {
                    for g in 0..GATEWAYS {
                        links.push(Link {
                            from: name(d, k),
                            to: name(e, g),
                            latency_ms: 10.0 + 40.0 * r.unit(),
                            jitter_ms: 1.0,
                            success: 0.9 + 0.1 * r.unit(),
                        });
                    }
                }
            }
        }
    }
    Cluster {
        cluster: "bench".into(),
        nodes,
        links,
        ..Default::default()
    }
}

fn application(i: usize, dcs: usize) -> String {
    let a = i % dcs;
    let b = (i * 7 + 3) % dcs;
    format!(
        "application: bench-{i:03}\nscheduler: qos\ncomponents:\n\
         - {{name: src, image: localhost/acoa/x:1, requires: {{hardware: [gps], datacenter: dc{a:02}}}}}\n\
         - {{name: proc1, image: localhost/acoa/x:1, resources: {{cpu_millis: 500, memory_mb: 256}}}}\n\
         - {{name: proc2, image: localhost/acoa/x:1, resources: {{cpu_millis: 500, memory_mb: 256}}}}\n\
         - {{name: sink, image: localhost/acoa/x:1, requires: {{hardware: [dashboard], datacenter: dc{b:02}}}}}\n\
         channels:\n- {{name: c1, from: src, to: proc1}}\n- {{name: c2, from: proc1, to: proc2}}\n\
         - {{name: c3, from: proc2, to: sink}}\n\
         paths:\n- {{name: p, channels: [c1, c2, c3]}}\n\
         criteria:\n- {{type: min-e2e-response-time, path: p, weight: 0.6}}\n\
         - {{type: max-e2e-reliability, path: p, weight: 0.4}}\n"
    )
}

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sibling(exe: &str) -> PathBuf {
    let me = std::env::current_exe().unwrap();
    let p = me.parent().unwrap().parent().unwrap().join(exe);
    assert!(
        p.exists(),
        "{} missing: cargo build --release -p cloud-broker -p acoa-scheduler --bin cloud-broker --bin scheduler --example workers_bench",
        p.display()
    );
    p
}

fn count(log: &Path, s: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(s))
        .count()
}

struct Outcome {
    seconds: f64,
    placed: usize,
    collisions: usize,
    republished: usize,
    local: usize,
    jobs_per_worker: Vec<usize>,
}

async fn run_mode(cluster: &Cluster, dcs: usize, apps: usize, workers: usize) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let dd = DataDir::new(&data);
    let mut inv = dd.inventory().unwrap();
    let mut keys_of = BTreeMap::new();
    for n in &cluster.nodes {
        let k = SigningKey::from_bytes(&{
            let mut b = [0u8; 32];
            b[..n.name.len()].copy_from_slice(n.name.as_bytes());
            b
        });
        inv.nodes.insert(
            n.name.clone(),
            cloud_broker::identity::NodeEntry {
                password: format!("pw-{}", n.name),
                public_key: Some(keys::public_hex(&k.verifying_key())),
            },
        );
        keys_of.insert(n.name.clone(), k);
    }
    dd.save_inventory(&inv).unwrap();
    let cp_key = dd.signing_key().unwrap().verifying_key();
    let port = free_port();
    let url = format!("mqtt://127.0.0.1:{port}");
    let log = data.join("cp.log");
    let mut args = vec![
        "serve".to_string(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--node-timeout-ms".into(),
        "30000".into(),
        "--reevaluate-ms".into(),
        "600000".into(),
        "--stats-every-ms".into(),
        "0".into(),
    ];
    if workers > 0 {
        args.extend(["--scheduler-workers".into(), "external".into()]);
    }
    let _cp = Proc(
        Command::new(sibling("cloud-broker"))
            .arg("--data-dir")
            .arg(&data)
            .args(&args)
            .env("RUST_LOG", "info,rumqttd=warn,rumqttc=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let t = Instant::now();
    while count(&log, "connected to the broker") == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "control plane did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut wprocs = vec![];
    let mut wlogs = vec![];
    for w in 0..workers {
        let wname = format!("w{w}");
        let login = dd.add_worker(&wname).unwrap();
        let wlog = data.join(format!("{wname}.log"));
        wprocs.push(Proc(
            Command::new(sibling("scheduler"))
                .args([
                    "worker",
                    "--broker-url",
                    &url,
                    "--username",
                    &login.username,
                    "--password",
                    &login.password,
                    "--control-plane-key",
                    &keys::public_hex(&cp_key),
                    "--threads",
                    "1",
                    "--queue",
                    "64",
                ])
                .env("RUST_LOG", "info")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&wlog).unwrap())
                .spawn()
                .unwrap(),
        ));
        wlogs.push(wlog);
    }
    // the inventory watcher reloads logins within a second
    for wl in &wlogs {
        let t = Instant::now();
        while count(wl, "takes jobs from") == 0 {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "worker did not subscribe"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut agents = vec![];
    for (i, n) in cluster.nodes.iter().enumerate() {
        agents.push(SimAgent::start(AgentSpec {
            url: url.clone(),
            node: n.clone(),
            password: format!("pw-{}", n.name),
            key: keys_of[&n.name].clone(),
            control_plane: cp_key,
            probe_addr: format!("10.0.{}.{}:7878", i / 250, i % 250 + 1),
            links: samples_of(cluster, &n.name),
            period: Duration::from_millis(2000),
            subscribe_desired: false,
        }));
        if i % 100 == 99 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let t = Instant::now();
    while count(&log, " joined: ") < cluster.nodes.len() {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "only {} nodes joined",
            count(&log, " joined: ")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // every agent's links come with its next report
    tokio::time::sleep(Duration::from_millis(4500)).await;

    let creds = dd.credentials().unwrap();
    let mut o = MqttOptions::new("bench-admin", "127.0.0.1", port);
    o.set_credentials(&creds.admin.username, &creds.admin.password);
    o.set_max_packet_size(4 << 20, 4 << 20);
    let (c, mut el) = AsyncClient::new(o, 1000);
    c.subscribe("acoa/v1/apps/+/status", QoS::AtLeastOnce)
        .await
        .unwrap();
    loop {
        if let Ok(MqttEvent::Incoming(Packet::SubAck(_))) = el.poll().await {
            break;
        }
    }
    let t0 = Instant::now();
    for i in 0..apps {
        c.publish(
            topics::app(&format!("bench-{i:03}")),
            QoS::AtLeastOnce,
            true,
            application(i, dcs).into_bytes(),
        )
        .await
        .unwrap();
    }
    let mut done: BTreeMap<String, String> = BTreeMap::new();
    let mut seconds = 0.0;
    while done.len() < apps {
        match tokio::time::timeout(Duration::from_secs(120), el.poll()).await {
            Ok(Ok(MqttEvent::Incoming(Packet::Publish(p)))) => {
                if let Ok(st) = serde_json::from_slice::<AppStatus>(&p.payload) {
                    if st.state == "placed" || st.state == "unplaced" || st.state == "rejected" {
                        if st.state != "placed" && done.len() < 3 {
                            eprintln!("{}: {} ({:?})", st.application, st.state, st.reason);
                        }
                        done.insert(st.application.clone(), st.state.clone());
                        seconds = t0.elapsed().as_secs_f64();
                    }
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("admin connection: {e}"),
            Err(_) => panic!("only {} of {apps} applications placed in 120 s", done.len()),
        }
    }
    let out = Outcome {
        seconds,
        placed: done.values().filter(|s| *s == "placed").count(),
        collisions: count(&log, "collided"),
        republished: count(&log, "published again"),
        local: count(&log, "computed in process"),
        jobs_per_worker: wlogs
            .iter()
            .map(|l| count(l, ": placed with score"))
            .collect(),
    };
    drop(agents);
    drop(wprocs);
    out
}

fn main() {
    let mut dcs = 50;
    let mut apps = 50;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--dcs" => dcs = it.next().unwrap().parse().unwrap(),
            "--apps" => apps = it.next().unwrap().parse().unwrap(),
            _ => panic!("usage: workers_bench [--dcs N] [--apps K]"),
        }
    }
    let cluster = snapshot(dcs);
    let job_bytes = {
        let app = model::parse_application(&application(0, dcs)).unwrap();
        let j = acoa_shared::jobs::Job {
            id: 1,
            nonce: 1,
            app: app.application.clone(),
            application: app,
            cluster: cluster.clone(),
            reserved: BTreeMap::new(),
            // every node counted: the largest a job's counts make it
            containers: cluster.nodes.iter().map(|n| (n.name.clone(), 16)).collect(),
            time_budget_ms: 500,
            count_budget: 100_000,
        };
        let t = Instant::now();
        let packed = acoa_shared::jobs::pack_cluster(&cluster).unwrap();
        let tp = t.elapsed();
        let t = Instant::now();
        let b =
            acoa_shared::jobs::encode_job_packed(&j, &packed, &SigningKey::from_bytes(&[1; 32]))
                .unwrap();
        (b.len(), tp, t.elapsed())
    };
    println!(
        "snapshot: {} nodes, {} links, packed (and checked) once in {:.1} ms; one job frame {} bytes, signed in {:.1} ms; {} applications",
        cluster.nodes.len(),
        cluster.links.len(),
        job_bytes.1.as_secs_f64() * 1000.0,
        job_bytes.0,
        job_bytes.2.as_secs_f64() * 1000.0,
        apps
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(16 << 20)
        .enable_all()
        .build()
        .unwrap();
    println!("| scheduling | time to place all | placed | collisions | re-published | in process after tries | jobs per worker |");
    println!("|---|---|---|---|---|---|---|");
    for workers in [0usize, 1, 2] {
        let o = rt.block_on(run_mode(&cluster, dcs, apps, workers));
        println!(
            "| {} | {:.2} s | {} | {} | {} | {} | {} |",
            match workers {
                0 => "in process".to_string(),
                n => format!("{n} worker{}", if n > 1 { "s" } else { "" }),
            },
            o.seconds,
            o.placed,
            o.collisions,
            o.republished,
            o.local,
            if o.jobs_per_worker.is_empty() {
                "-".to_string()
            } else {
                o.jobs_per_worker
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(" / ")
            }
        );
    }
}
