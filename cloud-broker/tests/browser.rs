//! The web view in a real browser: Debian's headless Chromium loads the page of a control plane
//! that serves the railway testbed (every node a simulated agent: a real MQTT client sending
//! signed reports) with both railway applications placed. The DOM after the page's scripts ran
//! names the applications and the nodes they were placed on, and the screenshot is a picture
//! of the page (its size, many colours, not one flat background). Skips when chromium is
//! missing, except under CI=true, where `.ci/setup` installs it. `ACOA_WEB_VIEW_PNG=FILE`
//! copies the checked screenshot to FILE.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use acoa_shared::model;
use cloud_broker::status::AppStatus;
use common::*;

const WIDTH: u32 = 1400;
const HEIGHT: u32 = 900;

/// Debian's chromium on PATH; `None` after saying why the test is skipped. Under CI=true a
/// missing browser fails the test.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but there is no chromium on PATH (.ci/setup installs it)"
        );
        eprintln!("SKIPPED: no chromium on PATH (apt-get install chromium, or run .ci/setup)");
    }
    found
}

/// Runs headless chromium with `args` then `url` (a fresh profile in `profile`); its stdout.
/// Killed after 60 s.
fn run_chromium(bin: &Path, profile: &Path, args: &[String], url: &str) -> String {
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            // the page's scripts get this much (virtual) time to fetch and draw
            "--virtual-time-budget=8000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).ok();
        s
    });
    let t = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 60 s on {url}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.join().unwrap()
}

/// The rendered DOM of `url` and its screenshot, written to `png`.
fn render(bin: &Path, url: &str, png: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let dom = run_chromium(bin, profile.path(), &["--dump-dom".into()], url);
    let _ = std::fs::remove_file(png);
    run_chromium(
        bin,
        profile.path(),
        &[
            format!("--screenshot={}", png.display()),
            format!("--window-size={WIDTH},{HEIGHT}"),
        ],
        url,
    );
    dom
}

/// The screenshot is a WIDTH x HEIGHT PNG of a drawn page: many colours, and no one colour
/// covers nearly all of it.
fn check_screenshot(png: &Path) {
    let bytes =
        std::fs::read(png).unwrap_or_else(|e| panic!("no screenshot {}: {e}", png.display()));
    let decoder = png::Decoder::new(bytes.as_slice());
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a PNG frame");
    assert_eq!(
        (info.width, info.height),
        (WIDTH, HEIGHT),
        "screenshot size"
    );
    let px = info.color_type.samples();
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let mut counts: HashMap<&[u8], usize> = HashMap::new();
    for p in buf[..info.buffer_size()].chunks_exact(px) {
        *counts.entry(p).or_default() += 1;
    }
    let total = (WIDTH * HEIGHT) as usize;
    let top = counts.values().max().copied().unwrap_or(0);
    eprintln!(
        "screenshot {}: {} bytes, {} colours, the most common covers {:.1} %",
        png.display(),
        bytes.len(),
        counts.len(),
        100.0 * top as f64 / total as f64
    );
    assert!(counts.len() >= 32, "only {} colours", counts.len());
    assert!(
        (top as f64) < 0.97 * total as f64,
        "one colour covers {top} of {total} pixels: an empty page"
    );
}

fn status_of(data: &Path, app: &str) -> AppStatus {
    let out = cli(data, &["status", app]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn web_view_of_the_railway_testbed_renders_its_applications_and_nodes() {
    let Some(browser) = chromium() else { return };
    run(async move {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_path_buf();
        let cluster = model::load_cluster(&scenario("cluster.yaml")).unwrap();
        let creds = enroll_all(&data, &cluster);
        let token = "browser-test-token";
        std::fs::write(data.join("http.token"), format!("{token}\n")).unwrap();
        let http = format!("127.0.0.1:{}", free_port());
        let token_file = data.join("http.token");
        let cp = ControlPlane::start(
            &data,
            free_port(),
            &[
                "--http-listen",
                &http,
                "--http-token-file",
                token_file.to_str().unwrap(),
            ],
        );
        let _agents = join_all(&cp, &cp.url, &cluster, &creds, 17300, true).await;
        tokio::time::sleep(Duration::from_millis(800)).await;

        let mut nodes = BTreeSet::new();
        for app in ["smoke-monitoring", "speed-profiling"] {
            let file = scenario(&format!("{app}.yaml"));
            let out = spawn_apply(&data, &file, &["--agents-wait-s", "0"])
                .await
                .unwrap();
            assert!(
                out.status.success(),
                "{app}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let placement = status_of(&data, app).placement.expect("placed");
            nodes.extend(placement.into_values());
        }

        let url = format!("http://{http}/?token={token}");
        let png = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-view.png");
        let (b, u, p) = (browser.clone(), url.clone(), png.clone());
        let dom = tokio::task::spawn_blocking(move || render(&b, &u, &p))
            .await
            .unwrap();
        for name in ["smoke-monitoring", "speed-profiling"]
            .into_iter()
            .chain(nodes.iter().map(String::as_str))
        {
            assert!(dom.contains(name), "the page does not show {name}:\n{dom}");
        }
        check_screenshot(&png);
        if let Some(out) = std::env::var_os("ACOA_WEB_VIEW_PNG") {
            std::fs::copy(&png, &out).expect("ACOA_WEB_VIEW_PNG is writable");
        }

        // Without the token the browser gets no fleet.
        let denied = tokio::task::spawn_blocking(move || {
            let profile = tempfile::tempdir().unwrap();
            run_chromium(
                &browser,
                profile.path(),
                &["--dump-dom".into()],
                &format!("http://{http}/"),
            )
        })
        .await
        .unwrap();
        assert!(
            !denied.contains("smoke-monitoring"),
            "the page without a token shows the applications:\n{denied}"
        );
    });
}
