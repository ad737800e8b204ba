//! Helpers for the tests that run the real `cloud-broker` binary.
#![allow(dead_code)]

pub mod backend;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use acoa_shared::wire::keys;
use ed25519_dalek::{SigningKey, VerifyingKey};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_cloud-broker")
}

pub use acoa_test_support::free_port;

/// Runs a test body on a multi-thread runtime (two worker threads); returns what it returns.
pub fn run<T: Send + 'static, F: std::future::Future<Output = T> + Send + 'static>(f: F) -> T {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async { tokio::spawn(f).await.unwrap() })
}

pub fn cli(data: &Path, args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env("RUST_LOG", "info")
        .output()
        .unwrap()
}

/// [`cli`] off the async runtime's threads.
pub async fn cli_async(data: &Path, args: &[&str]) -> std::process::Output {
    let data = data.to_path_buf();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cli(&data, &args)
    })
    .await
    .unwrap()
}

/// `node add NAME --public-key HEX` and `extra`, which must succeed; returns what it prints
/// (the agent's `[broker]` section).
pub fn node_add(data: &Path, name: &str, public_key: &str, extra: &[&str]) -> String {
    let mut args = vec!["node", "add", name, "--public-key", public_key];
    args.extend_from_slice(extra);
    ok(cli(data, &args))
}

/// The output of a command that must have succeeded (else the test fails showing its stderr
/// and stdout): its stdout.
pub fn ok(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `apply FILE` and `extra`.
pub fn apply(data: &Path, file: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["apply", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    cli(data, &args)
}

/// Enrolls `name` with a fresh key; returns (key, password, control plane key).
pub fn enroll(data: &Path, name: &str) -> (SigningKey, String, VerifyingKey) {
    enroll_with(data, name, &[])
}

/// [`enroll`] with `extra` flags (e.g. the store's).
pub fn enroll_with(data: &Path, name: &str, extra: &[&str]) -> (SigningKey, String, VerifyingKey) {
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let out = node_add(data, name, &keys::public_hex(&key.verifying_key()), extra);
    let cfg: toml::Value = toml::from_str(&out).unwrap();
    let b = &cfg["broker"];
    assert_eq!(b["username"].as_str(), Some(name));
    let cp = keys::public_from_hex(b["control_plane_key"].as_str().unwrap()).unwrap();
    (key, b["password"].as_str().unwrap().to_string(), cp)
}

/// Every node's enrollment ([`enroll`]) by name.
pub type Creds = std::collections::BTreeMap<String, (SigningKey, String, VerifyingKey)>;

/// Enrolls every node of `cluster`.
pub fn enroll_all(data: &Path, cluster: &acoa_shared::model::Cluster) -> Creds {
    cluster
        .nodes
        .iter()
        .map(|n| (n.name.clone(), enroll(data, &n.name)))
        .collect()
}

/// Node `i` of the railway scenario's cluster, renamed `name`.
pub fn railway_node(i: usize, name: &str) -> acoa_shared::model::Node {
    let cluster = acoa_shared::model::load_cluster(&scenario("cluster.yaml")).unwrap();
    let mut n = cluster.nodes[i].clone();
    n.name = name.into();
    n
}

/// A simulated agent for `node` with its enrollment `creds` ([`enroll`]) on the broker at
/// `url`: no links, a probe address nobody answers, a report every 300 ms, subscribed to its
/// desired state if `subscribe_desired`.
pub fn quiet_agent(
    url: &str,
    node: acoa_shared::model::Node,
    creds: (SigningKey, String, VerifyingKey),
    subscribe_desired: bool,
) -> cloud_broker::testkit::SimAgent {
    let (key, password, control_plane) = creds;
    cloud_broker::testkit::SimAgent::start(cloud_broker::testkit::AgentSpec {
        url: url.to_string(),
        node,
        password,
        key,
        control_plane,
        probe_addr: "127.0.0.1:1".into(),
        links: vec![],
        period: Duration::from_millis(300),
        subscribe_desired,
    })
}

/// A data directory in a fresh temporary directory (removed when the first value drops)
/// with every node of the railway cluster enrolled: (directory, data, cluster, enrollments).
pub fn railway_enrolled() -> (
    tempfile::TempDir,
    PathBuf,
    acoa_shared::model::Cluster,
    Creds,
) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let cluster = acoa_shared::model::load_cluster(&scenario("cluster.yaml")).unwrap();
    let creds = enroll_all(&data, &cluster);
    (dir, data, cluster, creds)
}

/// Starts a simulated agent for every node of `cluster` (reports every 300 ms, probe ports
/// from `base_port`, its links from the cluster's table) against the broker at `url`, and waits
/// until `cp` has logged every join; returns them by node name.
pub async fn join_all(
    cp: &ControlPlane,
    url: &str,
    cluster: &acoa_shared::model::Cluster,
    creds: &Creds,
    base_port: u16,
    subscribe_desired: bool,
) -> std::collections::BTreeMap<String, cloud_broker::testkit::SimAgent> {
    use cloud_broker::testkit::{samples_of, AgentSpec, SimAgent};
    let mut agents = std::collections::BTreeMap::new();
    for (i, n) in cluster.nodes.iter().enumerate() {
        let (key, password, control_plane) = creds[&n.name].clone();
        let spec = AgentSpec {
            url: url.to_string(),
            node: n.clone(),
            password,
            key,
            control_plane,
            probe_addr: format!("127.0.0.1:{}", usize::from(base_port) + i),
            links: samples_of(cluster, &n.name),
            period: Duration::from_millis(300),
            subscribe_desired,
        };
        agents.insert(n.name.clone(), SimAgent::start(spec));
    }
    let t = Instant::now();
    while cp.count_log(" joined: ") < cluster.nodes.len() {
        assert!(t.elapsed() < Duration::from_secs(20), "{}", cp.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    agents
}

/// A program on PATH or in the usual system directories.
pub fn find_bin(bin: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/usr/bin", "/usr/local/sbin"])
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.exists());
    found
}

/// The `mosquitto` binary when it and `mosquitto_passwd` are installed; else `None`, after
/// saying that the test is skipped.
pub fn mosquitto() -> Option<PathBuf> {
    let Some(m) = find_bin("mosquitto") else {
        eprintln!("SKIPPED: mosquitto is not installed (apt-get install mosquitto)");
        return None;
    };
    if find_bin("mosquitto_passwd").is_none() {
        eprintln!("SKIPPED: mosquitto_passwd is not installed");
        return None;
    }
    Some(m)
}

/// A port for a Mosquitto's fleet listener whose next port, where `mosquitto-config` puts the
/// control plane's listener by default, is free too.
pub fn free_port_pair() -> u16 {
    loop {
        let p = free_port();
        if p < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
}

/// The URL of the control plane's listener of the Mosquitto whose fleet listener is on
/// 127.0.0.1:`port` (the next port: `mosquitto-config`'s default).
pub fn control_url(port: u16) -> String {
    format!("mqtt://127.0.0.1:{}", port + 1)
}

/// Mosquitto, a directory it can reach (`dir`), the railway cluster enrolled in `dir/data`,
/// and the port and URLs the broker is to use: `url` the fleet's listener (agents, workers),
/// `control_url` the control plane's (the control plane, the CLI).
pub struct WithMosquitto {
    pub mosquitto: PathBuf,
    pub dir: tempfile::TempDir,
    pub data: PathBuf,
    pub cluster: acoa_shared::model::Cluster,
    pub creds: Creds,
    pub port: u16,
    pub url: String,
    pub control_url: String,
}

/// Prepares [`WithMosquitto`], or gives `None` after saying the test is skipped.
pub fn with_mosquitto() -> Option<WithMosquitto> {
    let mosquitto = mosquitto()?;
    let dir = tempdir_for_mosquitto();
    let data = dir.path().join("data");
    let cluster = acoa_shared::model::load_cluster(&scenario("cluster.yaml")).unwrap();
    let creds = enroll_all(&data, &cluster);
    let port = free_port_pair();
    let url = format!("mqtt://127.0.0.1:{port}");
    Some(WithMosquitto {
        mosquitto,
        dir,
        data,
        cluster,
        creds,
        port,
        url,
        control_url: control_url(port),
    })
}

/// A running Mosquitto, killed on drop.
pub struct Mosquitto(Child);
impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writes Mosquitto's configuration for the control plane in `data` (`mosquitto-config`: the
/// fleet's listener on 127.0.0.1:`port`, the control plane's on the next port, [`control_url`];
/// take `port` from [`free_port_pair`]) under `dir/mosquitto`, starts `mosquitto` on it (log in
/// `dir/mosquitto.log`, `-v` if `verbose`) and waits until both listen; returns it and the
/// generated ACL. `dir` must be readable by Mosquitto's own user.
pub async fn start_mosquitto(
    mosquitto: &Path,
    dir: &Path,
    data: &Path,
    port: u16,
    verbose: bool,
) -> (Mosquitto, String) {
    let conf = dir.join("mosquitto");
    let out = cli(
        data,
        &[
            "mosquitto-config",
            "--out",
            conf.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{port}"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let acl = std::fs::read_to_string(conf.join("acl")).unwrap();
    let mlog = std::fs::File::create(dir.join("mosquitto.log")).unwrap();
    let mut cmd = Command::new(mosquitto);
    cmd.arg("-c").arg(conf.join("mosquitto.conf"));
    if verbose {
        cmd.arg("-v");
    }
    let m = Mosquitto(cmd.stdout(Stdio::null()).stderr(mlog).spawn().unwrap());
    wait_mosquitto(port).await;
    wait_mosquitto(port + 1).await;
    (m, acl)
}

/// Waits until a Mosquitto just started listens on 127.0.0.1:`port` (at most 10 s).
pub async fn wait_mosquitto(port: u16) {
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "mosquitto did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `node`'s report (sequence `seq`, probe address `probe_addr`) as a frame, signed with `key`
/// if given.
pub fn report_frame(
    node: &acoa_shared::model::Node,
    seq: u64,
    probe_addr: &str,
    key: Option<&SigningKey>,
) -> Vec<u8> {
    use acoa_shared::wire::{encode, Message};
    let report = cloud_broker::testkit::report_of(node, seq, probe_addr);
    encode(&Message::NodeReport(Box::new(report)), key).unwrap()
}

/// MQTT options for client `id` on 127.0.0.1:`port` with the admin login of the control
/// plane in `data` (the admin may publish on every topic).
pub fn admin_options(data: &Path, id: &str, port: u16) -> rumqttc::MqttOptions {
    let admin = cloud_broker::identity::DataDir::new(data)
        .credentials()
        .unwrap()
        .admin;
    let mut o = rumqttc::MqttOptions::new(id, "127.0.0.1", port);
    o.set_credentials(&admin.username, &admin.password);
    o
}

/// Whether the broker accepts an MQTT client with the options `o`: a successful CONNACK
/// within 5 s (a refusal, an error or silence: false).
pub async fn connects(o: rumqttc::MqttOptions) -> bool {
    use rumqttc::{ConnectReturnCode, Event, Packet};
    let (_c, mut el) = rumqttc::AsyncClient::new(o, 10);
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match el.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(a))) => {
                    return a.code == ConnectReturnCode::Success
                }
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    })
    .await
    .unwrap_or(false)
}

/// Enrolls `name` with the key of the agent whose state directory is `state`
/// (`edge-agent pubkey`) on the broker at `url`; returns the agent's `[broker]` section.
pub fn enroll_agent(agent: &Path, state: &Path, data: &Path, name: &str, url: &str) -> String {
    let pk = acoa_test_support::sh(
        Command::new(agent)
            .args(["pubkey", "--state-dir"])
            .arg(state),
    );
    node_add(data, name, pk.trim(), &["--broker-url", url])
}

/// Starts the agent binary `agent` on `config`, its log in `log`.
pub fn spawn_agent(agent: &Path, config: &Path, log: &Path) -> Child {
    Command::new(agent)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// A running control plane whose log goes to a file.
pub struct ControlPlane {
    pub child: Child,
    pub data: PathBuf,
    pub log: PathBuf,
    pub url: String,
}

impl ControlPlane {
    /// `apply FILE` and `extra` on this control plane's data, which must succeed (else the
    /// test fails showing its stderr and the control plane's log); the status it prints.
    pub async fn apply(&self, file: &Path, extra: &[&str]) -> cloud_broker::status::AppStatus {
        let out = spawn_apply(&self.data, file, extra).await.unwrap();
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log_text()
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    pub fn start(data: &Path, port: u16, extra: &[&str]) -> ControlPlane {
        Self::start_logged(data, port, extra, &data.join("cp.log"))
    }

    pub fn start_logged(data: &Path, port: u16, extra: &[&str], log: &Path) -> ControlPlane {
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let listen = format!("127.0.0.1:{port}");
        let child = Command::new(bin())
            .arg("--data-dir")
            .arg(data)
            .args([
                "serve",
                "--listen",
                &listen,
                "--node-timeout-ms",
                "2000",
                "--reevaluate-ms",
                "1000",
            ])
            .args(extra)
            .env("RUST_LOG", "info,rumqttd=warn,rumqttc=warn")
            .stdout(Stdio::null())
            .stderr(f)
            .spawn()
            .unwrap();
        let url = extra
            .windows(2)
            .find(|w| w[0] == "--broker-url")
            .map(|w| w[1].to_string())
            .unwrap_or(format!("mqtt://127.0.0.1:{port}"));
        let cp = ControlPlane {
            child,
            data: data.to_path_buf(),
            log: log.to_path_buf(),
            url,
        };
        cp.wait_log("connected to the broker", Duration::from_secs(20));
        cp
    }

    /// Whether the kernel lets this process use transparent huge pages (`THP_enabled` of its
    /// status; `None` where the kernel does not say).
    pub fn huge_pages(&self) -> Option<bool> {
        acoa_test_support::proc_status(Some(self.child.id()), "THP_enabled").map(|v| v != "0")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn has_log(&self, s: &str) -> bool {
        self.log_text().contains(s)
    }

    pub fn wait_log(&self, s: &str, timeout: Duration) {
        let t = Instant::now();
        while t.elapsed() < timeout {
            if self.has_log(s) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "log line `{s}` did not come within {timeout:?}; log:\n{}",
            self.log_text()
        );
    }

    pub async fn wait_log_async(&self, s: &str, timeout: Duration) {
        let t = Instant::now();
        while t.elapsed() < timeout {
            if self.has_log(s) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "log line `{s}` did not come within {timeout:?}; log:\n{}",
            self.log_text()
        );
    }

    /// Lines of the log that contain `s`.
    pub fn count_log(&self, s: &str) -> usize {
        self.log_text().lines().filter(|l| l.contains(s)).count()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.kill();
        // a failing test shows what the control plane said last (CI keeps nothing else)
        if std::thread::panicking() {
            print_tail(&self.log.display().to_string(), &self.log_text(), 80);
        }
    }
}

/// Prints the last `n` lines of `text` (a process's log, named `what`) to the test's output,
/// after the warnings and errors of the lines before them (at most 60: what went wrong early
/// is often what a failure at the end waited for).
pub fn print_tail(what: &str, text: &str, n: usize) {
    let lines: Vec<&str> = text.lines().collect();
    let (head, tail) = lines.split_at(lines.len().saturating_sub(n));
    let early: Vec<&str> = head
        .iter()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .take(60)
        .copied()
        .collect();
    if !early.is_empty() {
        eprintln!(
            "--- warnings and errors before them in {what} ---\n{}",
            early.join("\n")
        );
    }
    eprintln!(
        "--- last {} lines of {what} ---\n{}",
        tail.len(),
        tail.join("\n")
    );
}

pub fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/railway")
        .join(name)
}

/// The edge-agent binary the workspace build made beside the tests
/// (target/debug/deps/<test>-… → target/debug/edge-agent), or `ACOA_EDGE_AGENT_BIN`.
pub fn agent_bin() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("ACOA_EDGE_AGENT_BIN") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("edge-agent");
    p.exists().then_some(p)
}

/// For the tests that run real agents with Podman: the agent binary, or `None` after saying
/// why the test is skipped (`ACOA_SKIP_PODMAN=1`, no agent binary); Podman's REST service must
/// answer otherwise.
pub fn agent_bin_with_podman() -> Option<PathBuf> {
    if std::env::var("ACOA_SKIP_PODMAN").as_deref() == Ok("1") {
        eprintln!("SKIPPED: ACOA_SKIP_PODMAN=1");
        return None;
    }
    let Some(bin) = agent_bin() else {
        eprintln!(
            "SKIPPED: no edge-agent binary (cargo build -p edge-agent, or set ACOA_EDGE_AGENT_BIN)"
        );
        return None;
    };
    assert!(
        acoa_test_support::podman_ok(),
        "needs the Podman REST socket at {} (or ACOA_SKIP_PODMAN=1)",
        acoa_test_support::PODMAN_SOCKET
    );
    Some(bin)
}

/// Real agents with Podman, killed (and the containers of application `app` removed) however
/// the test ends.
pub struct PodmanAgents {
    pub children: Vec<Child>,
    pub app: String,
}

impl Drop for PodmanAgents {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        acoa_test_support::remove_containers_labelled("acoa.app", &self.app);
    }
}

/// Enrols and starts the agent `name` (a cloud node of 4 CPUs and 4 GB, Podman, reports every
/// 500 ms, probes on loopback) with its state, configuration and log in `dir`; `extra` is
/// appended to its configuration (a `[stats]` section, say).
pub fn start_podman_agent(
    bin: &Path,
    dir: &Path,
    data: &Path,
    url: &str,
    name: &str,
    extra: &str,
) -> Child {
    let state = dir.join(format!("{name}-state"));
    let broker = enroll_agent(bin, &state, data, name, url);
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "node = \"{name}\"\ndatacenter = \"cloud1\"\nlayer = \"cloud\"\narch = \"x86_64\"\nstate_dir = \"{}\"\nreport_period_ms = 500\nruntime = \"podman\"\nimage_allowlist = [\"localhost/acoa/\"]\n[capacity]\ncpu_millis = 4000\nmemory_mb = 4096\ndisk_mb = 10000\n{broker}\n[probe]\nlisten = \"127.0.0.1:{}\"\nperiod_ms = 300\n[podman]\nsocket = \"unix://{}\"\n{extra}",
            state.display(),
            free_port(),
            acoa_test_support::PODMAN_SOCKET
        ),
    )
    .unwrap();
    spawn_agent(bin, &config, &dir.join(format!("{name}.log")))
}

/// Polls `f` every 300 ms until it gives a value; fails naming `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let t = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            t.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

impl Mosquitto {
    /// Stops Mosquitto as a service manager would (SIGTERM, so that it saves its database) and
    /// waits for it to exit.
    pub fn stop(mut self) {
        let pid = self.0.id().to_string();
        let st = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(st.success());
        let _ = self.0.wait();
    }
}

/// A fresh data directory with node n1 enrolled and a control plane serving it with its
/// embedded broker.
pub struct WithN1 {
    pub cp: ControlPlane,
    pub data: PathBuf,
    /// n1's enrollment ([`enroll`]).
    pub n1: (SigningKey, String, VerifyingKey),
    pub dir: tempfile::TempDir,
}

/// Enrolls n1 in a fresh data directory and starts a control plane there.
pub fn control_plane_with_n1_enrolled() -> WithN1 {
    control_plane_with_n1_enrolled_with(&[])
}

/// [`control_plane_with_n1_enrolled`], `serve` with `extra` flags (e.g. the store's).
pub fn control_plane_with_n1_enrolled_with(extra: &[String]) -> WithN1 {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let n1 = enroll(&data, "n1");
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let cp = ControlPlane::start(&data, free_port(), &extra);
    WithN1 { cp, data, n1, dir }
}

/// Node n1 (the railway scenario's first node, renamed) as a simulated agent against the broker
/// at `url`: no links, a probe address nobody answers, a report every 300 ms. Waits until `cp`
/// has logged its join.
pub async fn start_n1(
    cp: &ControlPlane,
    url: &str,
    creds: (SigningKey, String, VerifyingKey),
    subscribe_desired: bool,
) -> cloud_broker::testkit::SimAgent {
    let agent = quiet_agent(url, railway_node(0, "n1"), creds, subscribe_desired);
    cp.wait_log_async("node n1 joined", Duration::from_secs(10))
        .await;
    agent
}

/// `apply FILE EXTRA...` through the CLI in `data`, on a blocking thread started now.
pub fn spawn_apply(
    data: &Path,
    file: &Path,
    extra: &[&str],
) -> tokio::task::JoinHandle<std::process::Output> {
    let (d, f) = (data.to_path_buf(), file.to_path_buf());
    let extra: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        apply(&d, &f, &extra)
    })
}

/// Writes `dir/NAME.yaml`: application NAME, then `head` (whole lines), then `k` components
/// `c0`.. with `image`, each pinned to `node` and followed by `extra` (e.g. `, resources: {..}`);
/// returns its path.
pub fn write_pinned(
    dir: &Path,
    name: &str,
    head: &str,
    image: &str,
    node: &str,
    k: usize,
    extra: &str,
) -> PathBuf {
    let mut text = format!("application: {name}\n{head}components:\n");
    for i in 0..k {
        text.push_str(&format!(
            "- {{name: c{i}, image: {image}, requires: {{node: {node}}}{extra}}}\n"
        ));
    }
    let p = dir.join(format!("{name}.yaml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// A temporary directory Mosquitto can reach: it drops to its own user (mode 0755).
pub fn tempdir_for_mosquitto() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// A replica `name` of the control plane in `data` (log `data/{name}.log`), not waited for.
pub fn replica(data: &Path, name: &str, broker: &str, etcd: &str) -> ControlPlane {
    let listen = format!("127.0.0.1:{}", free_port());
    let extra = ["--listen", &listen, "--broker-url", broker];
    spawn_replica(data, name, etcd, 2, &extra, broker.to_string())
}

/// A replica `name` of the control plane in `data` with its embedded broker on `port` (a cold
/// standby: it starts its broker once it leads), lease `ttl_s`; log `data/{name}.log`, not
/// waited for.
pub fn replica_embedded(
    data: &Path,
    name: &str,
    port: u16,
    etcd: &str,
    ttl_s: u64,
) -> ControlPlane {
    std::fs::create_dir_all(data).unwrap();
    let listen = format!("127.0.0.1:{port}");
    let url = format!("mqtt://127.0.0.1:{port}");
    spawn_replica(data, name, etcd, ttl_s, &["--listen", &listen], url)
}

/// `serve` on etcd with lease `ttl_s` and `extra` flags, logging to `data/{name}.log`; agents
/// reach it at `url`.
fn spawn_replica(
    data: &Path,
    name: &str,
    etcd: &str,
    ttl_s: u64,
    extra: &[&str],
    url: String,
) -> ControlPlane {
    let log = data.join(format!("{name}.log"));
    let f = std::fs::File::create(&log).unwrap();
    let child = Command::new(bin())
        .arg("--data-dir")
        .arg(data)
        .arg("serve")
        .args(extra)
        .args(["--node-timeout-ms", "2000"])
        .args(["--store", "etcd", "--etcd-endpoints", etcd])
        .args(["--lease-ttl-s", &ttl_s.to_string()])
        .env("RUST_LOG", "info,rumqttd=warn,rumqttc=warn")
        .stdout(Stdio::null())
        .stderr(f)
        .spawn()
        .unwrap();
    ControlPlane {
        child,
        data: data.to_path_buf(),
        log,
        url,
    }
}

pub fn signal(cp: &ControlPlane, sig: &str) {
    let pid = cp.child.id().to_string();
    assert!(Command::new("kill")
        .args([sig, &pid])
        .status()
        .unwrap()
        .success());
}

pub async fn apply_ok(data: &Path, file: &Path, cp: &ControlPlane) {
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

/// The term a replica's log says it leads in (its last `leading: term N (...)` line).
pub fn term_of(cp: &ControlPlane) -> u64 {
    let log = cp.log_text();
    let at = log.rfind("leading: term ").expect("a leader") + "leading: term ".len();
    log[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no term in {log}"))
}
