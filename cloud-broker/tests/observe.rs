//! What operators watch, with real processes: the real control plane (embedded broker) with
//! `--metrics-listen` and `--http-listen`, simulated agents that are real MQTT clients for the
//! railway cluster, the railway applications applied through the CLI. `/metrics` is scraped
//! over a real socket and its values checked against what the control plane did (its log, the
//! applications' status, the links the agents report); the web view answers with the fleet only
//! with its token.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use acoa_shared::model;
use cloud_broker::engine::{quantize_latency, LOOPBACK_LATENCY_MS};
use cloud_broker::status::AppStatus;
use common::*;

/// One HTTP/1.1 GET (the connection closed after it): status and body.
fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        unchunk(body)
    } else {
        body.to_string()
    };
    (status, body)
}

fn unchunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The samples of a scrape: `name{labels}` → value.
fn scrape(addr: SocketAddr) -> BTreeMap<String, f64> {
    let (status, text) = get(addr, "/metrics", &[]);
    assert_eq!(status, 200, "{text}");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn val(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    *m.get(key)
        .unwrap_or_else(|| panic!("no sample {key} in {m:#?}"))
}

/// The sum of every sample of `name` (over its labels).
fn sum(m: &BTreeMap<String, f64>, name: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| k.as_str() == name || k.starts_with(&format!("{name}{{")))
        .map(|(_, v)| v)
        .sum()
}

fn apply(data: &Path, file: &Path) -> AppStatus {
    let out = cli(
        data,
        &[
            "apply",
            file.to_str().unwrap(),
            "--wait-s",
            "60",
            "--agents-wait-s",
            "0",
        ],
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn local(port: u16) -> SocketAddr {
    format!("127.0.0.1:{port}").parse().unwrap()
}

/// Waits until `f` holds, else fails with what it last said.
async fn eventually(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<(), String>) {
    let t = Instant::now();
    loop {
        match f() {
            Ok(()) => return,
            Err(e) if t.elapsed() > timeout => panic!("{what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The score the log gives the latest placement of `app`.
fn logged_score(cp: &ControlPlane, app: &str) -> f64 {
    let log = cp.log_text();
    let line = log
        .lines()
        .rfind(|l| {
            l.contains(&format!("application {app} placed ("))
                || l.contains(&format!("application {app} re-placed ("))
        })
        .expect("a placement line");
    let s = line.split("with score ").nth(1).unwrap();
    s.split([' ', ':']).next().unwrap().parse().unwrap()
}

/// The latency of the longest route over `path`'s channels under `placement`, from the links
/// the agents report (as the control plane rounds them).
fn expected_latency(
    cluster: &model::Cluster,
    app: &model::Application,
    path: &str,
    placement: &BTreeMap<String, String>,
) -> f64 {
    let link = |a: &str, b: &str| -> f64 {
        match cluster.links.iter().find(|l| l.from == a && l.to == b) {
            Some(l) => quantize_latency(l.latency_ms as f32 as f64),
            None if a == b => LOOPBACK_LATENCY_MS,
            None => panic!("no link {a}→{b}"),
        }
    };
    let p = app.paths.iter().find(|p| p.name == path).unwrap();
    let mut ends: BTreeMap<&str, f64> = BTreeMap::new();
    for _ in 0..p.channels.len() {
        for name in &p.channels {
            let c = app.channels.iter().find(|c| &c.name == name).unwrap();
            let w = link(&placement[&c.from], &placement[&c.to]);
            let d = ends.get(c.from.as_str()).copied().unwrap_or(0.0) + w;
            let e = ends.entry(c.to.as_str()).or_insert(0.0);
            *e = e.max(d);
        }
    }
    ends.values().copied().fold(0.0, f64::max)
}

#[test]
fn metrics_count_what_the_control_plane_did() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_path_buf();
        let cluster = model::load_cluster(&scenario("cluster.yaml")).unwrap();
        let creds = enroll_all(&data, &cluster);
        let metrics = local(free_port());
        let m_arg = metrics.to_string();
        let cp = ControlPlane::start(&data, free_port(), &["--metrics-listen", &m_arg]);
        cp.wait_log_async(
            &format!("metrics on http://{metrics}/"),
            Duration::from_secs(10),
        )
        .await;
        let mut agents = join_all(&cp, &cp.url, &cluster, &creds, 18400, false).await;
        // every agent's links are in before anything is placed
        let n = cluster.nodes.len() as f64;
        eventually(
            "every agent reported its links",
            Duration::from_secs(10),
            || {
                let got = val(
                    &scrape(metrics),
                    "acoa_reports_ingested_total{kind=\"links\"}",
                );
                (got >= n)
                    .then_some(())
                    .ok_or(format!("{got} link reports"))
            },
        )
        .await;

        let mut placed = BTreeMap::new();
        for f in ["smoke-monitoring.yaml", "speed-profiling.yaml"] {
            let (d, f) = (data.clone(), scenario(f));
            let st = tokio::task::spawn_blocking(move || apply(&d, &f))
                .await
                .unwrap();
            placed.insert(st.application.clone(), st.placement.clone().unwrap());
        }
        // three publications that are not reports, on a node's own report topic
        let garbage = agents.values().next().unwrap();
        let topic = acoa_shared::topics::report(&garbage.name);
        for i in 0..3u8 {
            garbage.publish_raw(&topic, vec![0xff, i, 7], false).await;
        }
        // a node that runs a free component of smoke-monitoring leaves the inventory (its
        // components are placed elsewhere at once, whatever the liveness policy)
        let smoke = &placed["smoke-monitoring"];
        let pinned = [&smoke["measurement"], &smoke["alarm"]];
        let victim = smoke
            .values()
            .find(|n| !pinned.contains(n))
            .expect("a node of a free component")
            .clone();
        ok(cli_async(&data, &["node", "remove", &victim]).await);
        agents.remove(&victim).unwrap().kill();
        cp.wait_log_async(
            "application smoke-monitoring re-placed (",
            Duration::from_secs(20),
        )
        .await;

        eventually("metrics match the log", Duration::from_secs(15), || {
            let m = scrape(metrics);
            let checks = [
                (
                    "acoa_nodes{state=\"online\"}",
                    val(&m, "acoa_nodes{state=\"online\"}"),
                    n - 1.0,
                ),
                (
                    "acoa_nodes{state=\"lost\"}",
                    val(&m, "acoa_nodes{state=\"lost\"}"),
                    0.0,
                ),
                ("nodes", sum(&m, "acoa_nodes"), n - 1.0),
                ("placements", sum(&m, "acoa_placements_total"), 2.0),
                (
                    "placements logged",
                    sum(&m, "acoa_placements_total"),
                    cp.count_log(" placed (") as f64,
                ),
                (
                    "re-placements logged",
                    sum(&m, "acoa_replacements_total"),
                    cp.count_log(" re-placed (") as f64,
                ),
                (
                    "collisions logged",
                    val(&m, "acoa_commit_collisions_total"),
                    cp.count_log("collided with another commit") as f64,
                ),
                (
                    "bad messages",
                    val(&m, "acoa_reports_dropped_total{reason=\"bad-message\"}"),
                    3.0,
                ),
            ];
            for (what, got, want) in checks {
                if got != want {
                    return Err(format!("{what}: {got}, expected {want}\n{m:#?}"));
                }
            }
            Ok(())
        })
        .await;

        let m = scrape(metrics);
        assert!(sum(&m, "acoa_replacements_total") >= 1.0, "{m:#?}");
        assert_eq!(
            val(&m, "acoa_reports_dropped_total{reason=\"replay\"}"),
            0.0
        );
        assert!(
            val(&m, "acoa_reports_ingested_total{kind=\"report\"}") >= n,
            "{m:#?}"
        );
        assert!(
            val(&m, "acoa_reports_ingested_total{kind=\"links\"}") >= n,
            "{m:#?}"
        );
        // every placement computation was timed, each under the histogram's largest bucket
        let jobs = val(&m, "acoa_placement_seconds_count");
        assert!(jobs >= 3.0, "{m:#?}");
        assert_eq!(val(&m, "acoa_placement_seconds_bucket{le=\"+Inf\"}"), jobs);
        // the gauges follow the fleet as published (a few hundred ms behind the loop)
        eventually("scores as logged", Duration::from_secs(5), || {
            let m = scrape(metrics);
            for app in ["smoke-monitoring", "speed-profiling"] {
                let score = val(&m, &format!("acoa_application_score{{app=\"{app}\"}}"));
                let logged = logged_score(&cp, app);
                if (score - logged).abs() > 1e-6 {
                    return Err(format!("{app}: {score} vs {logged}"));
                }
            }
            Ok(())
        })
        .await;
        let m = scrape(metrics);
        // each application's first revision runs; no rollout has happened
        for app in ["smoke-monitoring", "speed-profiling"] {
            let label = format!("{{app=\"{app}\"}}");
            assert_eq!(val(&m, &format!("acoa_application_revision{label}")), 1.0);
        }
        assert_eq!(sum(&m, "acoa_rollout_phase"), 0.0, "{m:#?}");

        // the alarm path against its optimum, and as the agents' links make it
        let log = cp.log_text();
        let mut smoke_now = smoke.clone();
        for line in log
            .lines()
            .filter(|l| l.contains("application smoke-monitoring re-placed ("))
        {
            for mv in line.rsplit(": ").next().unwrap().split(", ") {
                let (c, nodes) = mv.split_once(' ').unwrap();
                smoke_now.insert(c.into(), nodes.rsplit('→').next().unwrap().into());
            }
        }
        let app = model::load_application(&scenario("smoke-monitoring.yaml")).unwrap();
        let label = "{app=\"smoke-monitoring\",path=\"alarm\"}";
        let latency = val(&m, &format!("acoa_path_latency_ms{label}"));
        let optimum = val(&m, &format!("acoa_path_latency_optimum_ms{label}"));
        let want = expected_latency(&cluster, &app, "alarm", &smoke_now);
        assert!(
            (latency - want).abs() < 1e-6,
            "alarm latency {latency}, expected {want}"
        );
        assert!(
            optimum > 0.0 && optimum <= latency + 1e-9,
            "{optimum} vs {latency}"
        );
        let r = val(&m, &format!("acoa_path_reliability{label}"));
        let r_opt = val(&m, &format!("acoa_path_reliability_optimum{label}"));
        assert!(
            r > 0.0 && r <= r_opt + 1e-9 && r_opt <= 1.0,
            "{r} vs {r_opt}"
        );
        drop(agents);
    });
}

#[test]
fn the_web_view_needs_its_token_and_shows_the_fleet() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_path_buf();
        let cluster = model::load_cluster(&scenario("cluster.yaml")).unwrap();
        let creds = enroll_all(&data, &cluster);

        // no web view without a token
        let out = cli(&data, &["serve", "--http-listen", "127.0.0.1:1"]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--http-token-file"), "{err}");
        let empty = data.join("empty-token");
        std::fs::write(&empty, "\n").unwrap();
        let out = cli(
            &data,
            &[
                "serve",
                "--http-listen",
                "127.0.0.1:1",
                "--http-token-file",
                empty.to_str().unwrap(),
            ],
        );
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("holds no token"), "{err}");

        let token = "s3cret-token_42";
        let token_file = data.join("web-token");
        std::fs::write(&token_file, format!("{token}\n")).unwrap();
        let web = local(free_port());
        let w_arg = web.to_string();
        let cp = ControlPlane::start(
            &data,
            free_port(),
            &[
                "--http-listen",
                &w_arg,
                "--http-token-file",
                token_file.to_str().unwrap(),
            ],
        );
        cp.wait_log_async(
            &format!("web view on http://{web}/"),
            Duration::from_secs(10),
        )
        .await;
        let agents = join_all(&cp, &cp.url, &cluster, &creds, 18500, false).await;
        let bearer = format!("Bearer {token}");
        eventually(
            "every link is in the fleet document",
            Duration::from_secs(10),
            || {
                let (status, body) = get(web, "/api/fleet", &[("Authorization", &bearer)]);
                let doc: serde_json::Value =
                    serde_json::from_str(&body).map_err(|e| format!("{status} {e}"))?;
                let links = doc["links"].as_array().map_or(0, |l| l.len());
                (links >= cluster.links.len())
                    .then_some(())
                    .ok_or(format!("{links} links"))
            },
        )
        .await;
        let d = data.clone();
        let st = tokio::task::spawn_blocking(move || apply(&d, &scenario("smoke-monitoring.yaml")))
            .await
            .unwrap();
        let placement = st.placement.clone().unwrap();

        // refused without the right token, and nothing of the fleet in the answer
        for path in ["/", "/api/fleet", "/fragment", "/?token=wrong"] {
            let (status, body) = get(web, path, &[]);
            assert_eq!(status, 401, "{path}: {body}");
            assert!(!body.contains("n01") && !body.contains("smoke"), "{body}");
        }
        let (status, _) = get(web, "/api/fleet", &[("Authorization", "Bearer wrong")]);
        assert_eq!(status, 401);

        // the data endpoint: every node by datacenter, the application on its nodes
        let mut doc = serde_json::Value::Null;
        eventually(
            "the fleet document shows the application",
            Duration::from_secs(10),
            || {
                let (status, body) = get(web, "/api/fleet", &[("Authorization", &bearer)]);
                if status != 200 {
                    return Err(format!("{status}: {body}"));
                }
                doc = serde_json::from_str(&body).map_err(|e| e.to_string())?;
                let placed = |a: &serde_json::Value| {
                    a["components"]
                        .as_array()
                        .is_some_and(|c| c.iter().all(|c| c["node"].is_string()))
                };
                if doc["apps"]
                    .as_array()
                    .is_some_and(|a| a.len() == 1 && placed(&a[0]))
                {
                    Ok(())
                } else {
                    Err(body)
                }
            },
        )
        .await;
        let mut by_dc: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for dc in doc["datacenters"].as_array().unwrap() {
            for n in dc["nodes"].as_array().unwrap() {
                assert_eq!(n["state"], "online", "{n}");
                by_dc
                    .entry(dc["name"].as_str().unwrap().into())
                    .or_default()
                    .push(n["name"].as_str().unwrap().into());
            }
        }
        let mut want: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for n in &cluster.nodes {
            want.entry(n.datacenter.clone())
                .or_default()
                .push(n.name.clone());
        }
        assert_eq!(by_dc, want);
        let app = &doc["apps"][0];
        assert_eq!(app["name"], "smoke-monitoring");
        for c in app["components"].as_array().unwrap() {
            let name = c["name"].as_str().unwrap();
            assert_eq!(c["node"].as_str(), Some(placement[name].as_str()), "{c}");
        }
        let paths: Vec<&str> = app["paths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(paths, ["data-storage", "event-storage", "alarm"]);
        assert!(app["paths"][2]["latency_ms"].as_f64().is_some(), "{app}");
        assert!(!doc["links"].as_array().unwrap().is_empty());
        assert!(doc["events"].as_array().unwrap().iter().any(|e| e["text"]
            .as_str()
            .unwrap()
            .starts_with("smoke-monitoring placed")));

        // the page, with the token in the query (as a browser opens it) and as a header
        let (status, page) = get(web, &format!("/?token={token}"), &[]);
        assert_eq!(status, 200, "{page}");
        for id in ["fleet", "apps", "links", "events", "summary"] {
            assert!(page.contains(&format!("id=\"{id}\"")), "no #{id}");
        }
        for n in &cluster.nodes {
            assert!(
                page.contains(&format!("data-node=\"{}\"", n.name)),
                "{}",
                n.name
            );
        }
        assert!(page.contains("data-app=\"smoke-monitoring\""));
        for (c, n) in &placement {
            assert!(
                page.contains(&format!("data-component=\"{c}\" data-node=\"{n}\"")),
                "{c} on {n}"
            );
        }
        let (status, frag) = get(web, "/fragment", &[("Authorization", &bearer)]);
        assert_eq!(status, 200);
        assert!(frag.contains("id=\"links\"") && !frag.contains("<html"));
        drop(agents);
    });
}
