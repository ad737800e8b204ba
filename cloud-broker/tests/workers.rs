//! Scheduler workers with real processes: the real control plane (embedded broker) with
//! `--scheduler-workers external`, two real `scheduler worker` processes, simulated agents that
//! are real MQTT clients, the railway applications and synthetic ones. The placements equal
//! those of an in-process control plane on the same agents; a worker killed mid-run loses no
//! application; garbage and forged jobs do not stop a worker; forged results are dropped.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use acoa_shared::jobs;
use acoa_shared::model;
use cloud_broker::identity::DataDir;
use cloud_broker::status::AppStatus;
use common::*;
use ed25519_dalek::SigningKey;
use rumqttc::{AsyncClient, Event as MqttEvent, MqttOptions, Packet, QoS};

/// The `scheduler` binary of this build (the workspace build makes it); else built here, in a
/// target directory of its own (the running `cargo test` may hold the lock of its own).
fn scheduler_bin() -> PathBuf {
    let p = Path::new(bin()).with_file_name("scheduler");
    if p.exists() {
        return p;
    }
    let own = Path::new(bin())
        .parent()
        .unwrap()
        .join("workers-test-build");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .args([
            "build",
            "-p",
            "acoa-scheduler",
            "--bin",
            "scheduler",
            "--target-dir",
        ])
        .arg(&own)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap();
    assert!(st.success(), "cannot build the scheduler binary");
    let p = own.join("debug").join("scheduler");
    assert!(p.exists(), "{} missing", p.display());
    p
}

/// A worker process, killed when dropped.
struct Worker {
    child: Child,
    log: PathBuf,
}

impl Worker {
    fn start(data: &Path, name: &str) -> Worker {
        Self::spawn(data, name, &Self::add(data, name, &[]))
    }

    /// `cloud-broker worker add`: the worker's command-line options.
    fn add(data: &Path, name: &str, extra: &[&str]) -> Vec<String> {
        let mut a = vec!["worker", "add", name];
        a.extend(extra);
        let flags = ok(cli(data, &a));
        let args: Vec<String> = flags.split_whitespace().map(String::from).collect();
        assert_eq!(args.len(), 8, "{flags}");
        args
    }

    fn spawn(data: &Path, name: &str, args: &[String]) -> Worker {
        let log = data.join(format!("{name}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let child = Command::new(scheduler_bin())
            .arg("worker")
            .args(args)
            .args(["--threads", "1"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(f)
            .spawn()
            .unwrap();
        let w = Worker { child, log };
        w.wait_log("takes jobs from $share/acoa-schedulers/", 1);
        w
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn count(&self, s: &str) -> usize {
        self.text().lines().filter(|l| l.contains(s)).count()
    }

    fn wait_log(&self, s: &str, n: usize) {
        let t = Instant::now();
        while self.count(s) < n {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "worker log lacks {n} x `{s}`:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Synthetic applications on the railway cluster: a source on a train, a free middle, a sink
/// on a dashboard, different weights, some with resource requests.
fn synthetic(dir: &Path, i: usize) -> PathBuf {
    let train = if i.is_multiple_of(2) {
        "train1"
    } else {
        "train2"
    };
    let w = 0.2 + 0.15 * i as f64;
    let res = if i.is_multiple_of(3) {
        ", resources: {cpu_millis: 250, memory_mb: 128}"
    } else {
        ""
    };
    let text = format!(
        "application: syn-{i}\nscheduler: qos\ncomponents:\n\
         - {{name: src, image: localhost/acoa/x:1, requires: {{hardware: [gps], datacenter: {train}}}}}\n\
         - {{name: mid, image: localhost/acoa/x:1{res}}}\n\
         - {{name: sink, image: localhost/acoa/x:1, requires: {{hardware: [dashboard]}}}}\n\
         channels:\n- {{name: a, from: src, to: mid}}\n- {{name: b, from: mid, to: sink}}\n\
         paths:\n- {{name: p, channels: [a, b]}}\n\
         criteria:\n- {{type: min-e2e-response-time, path: p, weight: {w:.2}}}\n\
         - {{type: max-e2e-reliability, path: p, weight: {:.2}}}\n",
        1.0 - w
    );
    let p = dir.join(format!("syn-{i}.yaml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// Publishes `payloads` on `topic` with the admin login (the embedded broker has no topic rules).
async fn publish_as_admin(data: &Path, url: &str, topic: &str, payloads: Vec<Vec<u8>>) {
    let creds = DataDir::new(data).credentials().unwrap();
    let (host, port) = cloud_broker::conn::parse_url(url).unwrap();
    let mut o = MqttOptions::new("forger", host, port);
    o.set_credentials(&creds.admin.username, &creds.admin.password);
    o.set_max_packet_size(2 << 20, 2 << 20);
    let (c, mut el) = AsyncClient::new(o, 16);
    let n = payloads.len();
    for p in payloads {
        c.publish(topic, QoS::AtLeastOnce, false, p).await.unwrap();
    }
    let mut acks = 0;
    let t = Instant::now();
    while acks < n && t.elapsed() < Duration::from_secs(10) {
        if let Ok(Ok(MqttEvent::Incoming(Packet::PubAck(_)))) =
            tokio::time::timeout(Duration::from_secs(1), el.poll()).await
        {
            acks += 1;
        }
    }
    assert_eq!(acks, n, "the broker did not take the forged messages");
    let _ = c.disconnect().await;
}

/// Jobs nobody may act on: garbage, an unsigned job, a job signed with another key.
fn forged_jobs(cluster: &model::Cluster) -> Vec<Vec<u8>> {
    let app = model::load_application(&scenario("smoke-monitoring.yaml")).unwrap();
    let job = jobs::Job {
        id: 424_242,
        nonce: 1,
        app: app.application.clone(),
        application: app,
        cluster: cluster.clone(),
        reserved: BTreeMap::new(),
        containers: BTreeMap::new(),
        time_budget_ms: 100,
        count_budget: 1000,
    };
    let wrong = SigningKey::generate(&mut rand::rngs::OsRng);
    let signed_wrong = jobs::encode_job(&job, &wrong).unwrap();
    let (v, body, _sig): (u16, Vec<u8>, Vec<u8>) = postcard::from_bytes(&signed_wrong).unwrap();
    let unsigned = postcard::to_allocvec(&(v, body, Vec::<u8>::new())).unwrap();
    vec![b"garbage".to_vec(), unsigned, signed_wrong]
}

/// A control plane on `data` whose placement jobs go to external workers, each job waited
/// for `timeout_ms`, with `extra` options.
fn with_workers(data: &Path, timeout_ms: &str, extra: &[&str]) -> ControlPlane {
    let mut args = vec![
        "--scheduler-workers",
        "external",
        "--worker-timeout-ms",
        timeout_ms,
    ];
    args.extend_from_slice(extra);
    ControlPlane::start(data, free_port(), &args)
}

/// `apply FILE`, which must place the application.
async fn placed(data: &Path, file: &Path) -> AppStatus {
    let out = spawn_apply(data, file, &["--wait-s", "60", "--agents-wait-s", "0"]);
    let st: AppStatus = serde_json::from_str(&ok(out.await.unwrap())).unwrap();
    assert_eq!(st.state, "placed", "{st:?}");
    st
}

/// One control plane with the railway agents; applies the applications in order and returns
/// their placements and scores. With `external`, two workers compute the jobs, one is killed
/// half-way, and forged jobs and results are sent.
async fn run_phase(external: bool) -> BTreeMap<String, (BTreeMap<String, String>, f64)> {
    let (_dir, data, cluster, creds) = railway_enrolled();
    let cp = if external {
        with_workers(&data, "2000", &[])
    } else {
        ControlPlane::start(&data, free_port(), &[])
    };
    let mut workers = vec![];
    if external {
        let d = data.clone();
        workers = tokio::task::spawn_blocking(move || {
            vec![Worker::start(&d, "w1"), Worker::start(&d, "w2")]
        })
        .await
        .unwrap();
    }
    let agents = join_all(&cp, &cp.url, &cluster, &creds, 18000, false).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;

    let mut files = vec![
        scenario("smoke-monitoring.yaml"),
        scenario("speed-profiling.yaml"),
    ];
    for i in 0..6 {
        files.push(synthetic(&data, i));
    }
    let mut out = BTreeMap::new();
    for (k, f) in files.iter().enumerate() {
        if external && k == 4 {
            // both workers took jobs (placements and re-evaluations every second)
            let ws = std::mem::take(&mut workers);
            let ws = tokio::task::spawn_blocking(move || {
                for w in &ws {
                    w.wait_log("placed with score", 1);
                }
                ws
            })
            .await
            .unwrap();
            workers = ws;
            // kill one mid-run; jobs it held are published again
            workers[0].kill();
            // garbage and forged jobs on the jobs topic
            publish_as_admin(&data, &cp.url, jobs::JOBS, forged_jobs(&cluster)).await;
            // forged and garbage results
            let forged = jobs::encode_result(&jobs::JobResult {
                id: 1,
                nonce: 12345,
                worker: "w2".into(),
                outcome: jobs::ResultOutcome::Placed {
                    assignment: BTreeMap::new(),
                    score: 1.0,
                    feasible_deployments: 1,
                },
                elapsed_us: 1,
            })
            .unwrap();
            publish_as_admin(
                &data,
                &cp.url,
                &jobs::results("w2"),
                vec![forged, b"junk".to_vec()],
            )
            .await;
        }
        let st = placed(&data, f).await;
        out.insert(
            st.application.clone(),
            (st.placement.clone().unwrap(), st.score.unwrap()),
        );
    }
    if external {
        let w2 = &mut workers[1];
        // the survivor refused the three forged jobs and is still computing
        let t = Instant::now();
        while w2.count("job dropped") < 3 {
            assert!(t.elapsed() < Duration::from_secs(20), "{}", w2.text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let log = w2.text();
        assert!(log.contains("job dropped (7 bytes)"), "{log}");
        assert!(log.contains("job is not signed"), "{log}");
        assert!(log.contains("does not verify"), "{log}");
        assert!(w2.alive(), "{log}");
        let before = w2.count("placed with score");
        let t = Instant::now();
        while w2.count("placed with score") <= before {
            assert!(t.elapsed() < Duration::from_secs(20), "{}", w2.text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // the control plane dropped the forged and garbage results, and kept serving
        let t = Instant::now();
        while !(cp.has_log("result dropped") && cp.has_log("dropped")) {
            assert!(t.elapsed() < Duration::from_secs(20), "{}", cp.log_text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let text = cp.log_text();
        assert!(
            text.contains("no such job is outstanding")
                || text.contains("the nonce does not match"),
            "{text}"
        );
        assert!(cp.has_log("placement jobs go to scheduler workers"));
    } else {
        assert!(!cp.has_log("scheduler workers"));
    }
    drop(agents);
    drop(workers);
    drop(cp);
    out
}

#[test]
fn two_workers_place_as_in_process_survive_a_kill_and_refuse_forgeries() {
    run(async {
        let in_process = run_phase(false).await;
        let external = run_phase(true).await;
        assert_eq!(in_process.len(), 8);
        for (app, (p, s)) in &in_process {
            let (q, t) = &external[app];
            assert_eq!(p, q, "{app}");
            assert!((s - t).abs() < 1e-12, "{app}: {s} vs {t}");
        }
    });
}

#[test]
fn with_no_worker_jobs_go_out_again_then_run_in_process() {
    run(async {
        let (_dir, data, cluster, creds) = railway_enrolled();
        let cp = with_workers(&data, "300", &["--worker-tries", "2"]);
        let agents = join_all(&cp, &cp.url, &cluster, &creds, 18100, false).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let st = placed(&data, &scenario("smoke-monitoring.yaml")).await;
        assert!(st.placement.is_some());
        let log = cp.log_text();
        assert!(log.contains("published again (try 2 of 2)"), "{log}");
        assert!(log.contains("computed in process"), "{log}");
        drop(agents);
    });
}

/// `k` components pinned to `node`, without channels.
fn pinned(dir: &Path, name: &str, node: &str, k: usize) -> PathBuf {
    write_pinned(
        dir,
        name,
        "scheduler: qos\n",
        "localhost/acoa/x:1",
        node,
        k,
        "",
    )
}

/// A node that other applications filled to its container limit is not given one more by a
/// worker: the job carries the node's count, and the worker's answer names the node and the
/// limit.
#[test]
fn a_worker_gives_no_container_to_a_full_node() {
    run(async {
        let (_dir, data, cluster, creds) = railway_enrolled();
        let cp = with_workers(&data, "5000", &[]);
        let d = data.clone();
        let w = tokio::task::spawn_blocking(move || Worker::start(&d, "w1"))
            .await
            .unwrap();
        let agents = join_all(&cp, &cp.url, &cluster, &creds, 18200, false).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let node = cluster.nodes[0].name.clone();
        let (full, one) = (
            pinned(&data, "filler", &node, 32),
            pinned(&data, "late", &node, 1),
        );
        let st = placed(&data, &full).await;
        assert_eq!(st.placement.unwrap().len(), 32);
        let out = spawn_apply(&data, &one, &["--wait-s", "30", "--agents-wait-s", "0"])
            .await
            .unwrap();
        let st: AppStatus = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert_eq!(st.state, "unplaced", "{st:?}");
        let why = format!("{node} already runs 32 containers");
        assert!(st.reason.unwrap_or_default().contains(&why), "{}", w.text());
        // the worker computed it, with the count the job carried
        let log = w.text();
        assert!(
            log.lines()
                .any(|l| l.contains("for late: cannot be placed") && l.contains(&why)),
            "{log}"
        );
        drop(agents);
    });
}

/// Mosquitto with the generated ACL lets a worker take jobs through its shared subscription and
/// answer on its own results topic, and nothing else.
#[test]
fn a_worker_through_mosquitto_with_the_generated_acl() {
    let Some(t) = with_mosquitto() else {
        return;
    };
    run(async move {
        let (data, port, url) = (t.data.clone(), t.port, t.url.clone());
        let wargs = Worker::add(&data, "w1", &["--broker-url", &url]);
        let (_m, acl) = start_mosquitto(&t.mosquitto, t.dir.path(), &data, port, false).await;
        assert!(
            acl.contains(
                "user w1\ntopic read acoa/v1/sched/jobs\ntopic write acoa/v1/sched/results/w1\n"
            ),
            "{acl}"
        );
        let cp = ControlPlane::start(
            &data,
            free_port(),
            &[
                "--broker-url",
                &t.control_url,
                "--scheduler-workers",
                "external",
            ],
        );
        let (d, a) = (data.clone(), wargs.clone());
        let w = tokio::task::spawn_blocking(move || Worker::spawn(&d, "w1", &a))
            .await
            .unwrap();
        let agents = join_all(&cp, &url, &t.cluster, &t.creds, 18200, false).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let st = placed(&data, &scenario("smoke-monitoring.yaml")).await;
        assert!(st.placement.is_some());
        assert!(w.count("placed with score") >= 1, "{}", w.text());
        assert!(!cp.has_log("computed in process"), "{}", cp.log_text());
        // the worker's login may not read other topics: the retained desired states of the
        // placement just made do not come to it (the worker stopped first: on the fleet's
        // listener a second connection of its login would take its session)
        drop(w);
        let (host, p) = cloud_broker::conn::parse_url(&url).unwrap();
        let mut o = MqttOptions::new("w1-snooping", host, p);
        o.set_credentials(&wargs[3], &wargs[5]);
        let (c, mut el) = AsyncClient::new(o, 16);
        c.subscribe("acoa/v1/nodes/+/desired", QoS::AtLeastOnce)
            .await
            .unwrap();
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(1500) {
            if let Ok(Ok(MqttEvent::Incoming(Packet::Publish(p)))) =
                tokio::time::timeout(Duration::from_millis(300), el.poll()).await
            {
                panic!("a worker login read {}", p.topic);
            }
        }
        drop(agents);
    });
}
