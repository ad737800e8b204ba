//! Helpers of the integration tests: real Mosquitto, real Podman, the real agent binary.
#![allow(dead_code)]

use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use acoa_shared::wire::{
    self, decode_verified, encode, ActualState, ContainerSpec, DesiredState, Message,
};
use ed25519_dalek::{SigningKey, VerifyingKey};

pub const IMAGE: &str = "localhost/acoa/test-sleeper:1";
pub const PODMAN_SOCKET: &str = "/run/podman/podman.sock";

/// The control plane's key in these tests.
pub fn cp_key() -> SigningKey {
    SigningKey::from_bytes(&[42; 32])
}

/// `true` when the test must skip (ACOA_SKIP_PODMAN=1); panics with a clear message
/// when something the test needs is missing.
pub fn skip_or_require(what: &str, podman: bool) -> bool {
    if std::env::var("ACOA_SKIP_PODMAN").as_deref() == Ok("1") {
        println!("skipped {what}: ACOA_SKIP_PODMAN=1");
        return true;
    }
    require_bin(
        "mosquitto",
        "apt-get install -y mosquitto (the test starts its own on a free port)",
    );
    require_bin("mosquitto_pub", "apt-get install -y mosquitto-clients");
    if podman {
        require_bin("podman", "apt-get install -y podman runc");
        assert!(
            acoa_test_support::podman_ok(),
            "{what} needs the Podman REST socket at {PODMAN_SOCKET}: \
             run `podman system service --time=0 unix://{PODMAN_SOCKET} &` \
             (or set ACOA_SKIP_PODMAN=1 to skip)"
        );
        ensure_image();
    }
    false
}

pub fn require_bin(bin: &str, hint: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`{bin}` is not on PATH: {hint} (or set ACOA_SKIP_PODMAN=1 to skip)"
    );
}

/// Builds the test image from busybox-static's binary, once.
pub fn ensure_image() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| acoa_test_support::busybox_images(&[IMAGE]));
}

pub use acoa_test_support::sh as run;

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

pub use acoa_test_support::free_port;

pub fn scratch_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("acoa-agent-test-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

// ------------------------------------------------------------------ broker

/// A Mosquitto of our own on a free loopback port (or a given address).
pub struct Broker {
    pub host: String,
    pub port: u16,
    conf: PathBuf,
    child: Option<Child>,
}

impl Broker {
    pub fn start(dir: &Path) -> Broker {
        Self::start_on("127.0.0.1", free_port(), dir)
    }

    pub fn start_on(host: &str, port: u16, dir: &Path) -> Broker {
        let conf = dir.join("mosquitto.conf");
        fs::write(
            &conf,
            format!(
                "listener {port} {host}\nallow_anonymous true\npersistence false\n\
                 max_queued_messages 1000\n"
            ),
        )
        .unwrap();
        let mut b = Broker {
            host: host.into(),
            port,
            conf,
            child: None,
        };
        b.restart();
        b
    }

    pub fn url(&self) -> String {
        format!("mqtt://{}:{}", self.host, self.port)
    }

    pub fn restart(&mut self) {
        assert!(self.child.is_none());
        let log = fs::File::create(self.conf.with_extension("log")).unwrap();
        let child = Command::new("mosquitto")
            .arg("-c")
            .arg(&self.conf)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("mosquitto starts");
        self.child = Some(child);
        let addr = format!("{}:{}", self.host, self.port);
        wait_until("mosquitto to listen", Duration::from_secs(10), || {
            TcpStream::connect(&addr).is_ok()
        });
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Publishes with mosquitto_pub (QoS 1).
    pub fn publish(&self, topic: &str, payload: &[u8], retain: bool) {
        let f = self.conf.with_file_name(format!(
            "payload-{}.bin",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        fs::write(&f, payload).unwrap();
        let mut cmd = Command::new("mosquitto_pub");
        cmd.args([
            "-h",
            &self.host,
            "-p",
            &self.port.to_string(),
            "-q",
            "1",
            "-t",
            topic,
        ])
        .arg("-f")
        .arg(&f);
        if retain {
            cmd.arg("-r");
        }
        run(&mut cmd);
        let _ = fs::remove_file(f);
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
    }
}

// ------------------------------------------------------------------ watcher

/// Topic, payload, time of arrival.
pub type Received = (String, Vec<u8>, Instant);

/// Collects every message under a topic filter, reconnecting after outages.
pub struct Watcher {
    pub msgs: Arc<Mutex<Vec<Received>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Watcher {
    pub fn new(host: &str, port: u16, filter: &str) -> Watcher {
        let msgs = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut opts = rumqttc::MqttOptions::new(
            format!("watch-{}-{}", std::process::id(), free_port()),
            host,
            port,
        );
        opts.set_keep_alive(Duration::from_secs(5));
        opts.set_max_packet_size(1 << 20, 1 << 20);
        let (client, mut conn) = rumqttc::Client::new(opts, 16);
        let (m, s, f) = (msgs.clone(), stop.clone(), filter.to_owned());
        std::thread::spawn(move || {
            for ev in conn.iter() {
                if s.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                match ev {
                    Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_))) => {
                        let _ = client.subscribe(f.clone(), rumqttc::QoS::AtLeastOnce);
                    }
                    Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p))) => {
                        m.lock().unwrap().push((
                            p.topic.clone(),
                            p.payload.to_vec(),
                            Instant::now(),
                        ));
                    }
                    Ok(_) => {}
                    Err(_) => std::thread::sleep(Duration::from_millis(300)),
                }
            }
        });
        Watcher { msgs, stop }
    }

    pub fn count(&self, topic: &str) -> usize {
        self.msgs
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _, _)| t == topic)
            .count()
    }

    pub fn last(&self, topic: &str) -> Option<Vec<u8>> {
        self.msgs
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(t, _, _)| t == topic)
            .map(|(_, p, _)| p.clone())
    }

    /// Messages on `topic` received after `since`.
    pub fn since(&self, topic: &str, since: Instant) -> Vec<Vec<u8>> {
        self.msgs
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _, at)| t == topic && *at >= since)
            .map(|(_, p, _)| p.clone())
            .collect()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

// ------------------------------------------------------------------ agent

pub struct Agent {
    pub node: String,
    pub dir: PathBuf,
    pub config: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
    runs: u32,
}

pub fn agent_bin() -> &'static str {
    env!("CARGO_BIN_EXE_edge-agent")
}

impl Agent {
    /// Writes the configuration; `extra` is appended to the top-level table.
    pub fn new(node: &str, dir: &Path, broker_url: &str, extra: &str, probe: &str) -> Agent {
        let cp = wire::keys::public_hex(&cp_key().verifying_key());
        let config = dir.join(format!("{node}.toml"));
        fs::write(
            &config,
            format!(
                r#"node = "{node}"
datacenter = "test"
layer = "edge"
state_dir = "{state}"
report_period_ms = 500
runtime = "podman"
image_allowlist = ["localhost/acoa/"]
{extra}
[broker]
url = "{broker_url}"
control_plane_key = "{cp}"
[probe]
{probe}
[podman]
socket = "unix://{PODMAN_SOCKET}"
"#,
                state = dir.join(format!("{node}-state")).display(),
            ),
        )
        .unwrap();
        Agent {
            node: node.into(),
            dir: dir.to_owned(),
            log: dir.join(format!("{node}.log")),
            config,
            child: None,
            runs: 0,
        }
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.join(format!("{}-state", self.node))
    }

    pub fn start(&mut self) {
        self.start_with(Command::new(agent_bin()));
    }

    /// Starts the agent through `cmd` (e.g. `ip netns exec NS edge-agent`).
    pub fn start_with(&mut self, mut cmd: Command) {
        assert!(self.child.is_none());
        self.runs += 1;
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = cmd
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the agent starts");
        self.child = Some(child);
    }

    /// SIGKILL, as a crash or a power cut.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => c.try_wait().map(|s| s.is_none()).unwrap_or(false),
            None => false,
        }
    }

    pub fn logs(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn wait_log(&self, needle: &str, timeout: Duration) {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if self.logs().contains(needle) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "timed out after {timeout:?} waiting for log line {needle:?}; log:\n{}",
            self.logs()
        );
    }

    /// The node's public key, as `edge-agent pubkey` prints it.
    pub fn public_key(&self) -> VerifyingKey {
        let out = run(Command::new(agent_bin())
            .arg("pubkey")
            .arg("--config")
            .arg(&self.config));
        wire::keys::public_from_hex(out.trim()).expect("pubkey prints a key")
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("---- agent {} log ----\n{}", self.node, self.logs());
        }
    }
}

// ------------------------------------------------------------------ podman

/// Removes the node's containers when the test ends, however it ends. Once more a second
/// later when the first pass found any: a container the killed agent had asked Podman to
/// create is created after the agent is gone (such leftovers were seen on this machine).
pub struct Cleanup(pub String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if remove_all(&self.0) {
            std::thread::sleep(std::time::Duration::from_secs(1));
            remove_all(&self.0);
        }
    }
}

/// Removes every container of the node; whether there was any.
pub fn remove_all(node: &str) -> bool {
    let ids = Command::new("podman")
        .args(["ps", "-aq", "--filter", &format!("label=acoa.node={node}")])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let ids: Vec<&str> = ids.split_whitespace().collect();
    if !ids.is_empty() {
        let _ = Command::new("podman")
            .args(["rm", "-f", "-t", "0"])
            .args(&ids)
            .output();
    }
    !ids.is_empty()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ps {
    pub name: String,
    pub running: bool,
    pub id: String,
}

/// `podman ps -a` of the node's containers, by name.
pub fn ps(node: &str) -> Vec<Ps> {
    let out = run(Command::new("podman").args([
        "ps",
        "-a",
        "--filter",
        &format!("label=acoa.node={node}"),
        "--format",
        "{{.Names}}|{{.State}}|{{.ID}}",
    ]));
    let mut v: Vec<Ps> = out
        .lines()
        .filter_map(|l| {
            let mut it = l.split('|');
            Some(Ps {
                name: it.next()?.to_owned(),
                running: {
                    let s = it.next()?.to_lowercase();
                    s.starts_with("running") || s.starts_with("up")
                },
                id: it.next()?.to_owned(),
            })
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

pub fn running_names(node: &str) -> Vec<String> {
    ps(node)
        .into_iter()
        .filter(|p| p.running)
        .map(|p| p.name)
        .collect()
}

// ------------------------------------------------------------------ documents

pub fn spec(name: &str, image: &str) -> ContainerSpec {
    let (app, component) = name.split_once('.').unwrap_or(("app", name));
    ContainerSpec {
        name: wire::name(name).unwrap(),
        app: wire::name(app).unwrap(),
        component: wire::name(component).unwrap(),
        image: wire::bounded("image", image).unwrap(),
        cpu_millis: 100,
        memory_mb: 32,
        env: heapless::Vec::new(),
        health: None,
    }
}

pub fn desired(
    node: &str,
    generation: u64,
    specs: &[ContainerSpec],
    key: Option<&SigningKey>,
) -> Vec<u8> {
    let ds = DesiredState {
        node: wire::name(node).unwrap(),
        generation,
        term: 0,
        containers: specs.iter().cloned().collect(),
    };
    encode(&Message::DesiredState(Box::new(ds)), key).unwrap()
}

pub fn actual(bytes: &[u8], node_key: &VerifyingKey) -> ActualState {
    match decode_verified(bytes, node_key).expect("actual state signed by the node key") {
        Message::ActualState(a) => *a,
        other => panic!("expected an actual state, got {}", other.kind()),
    }
}

/// A node name unique to this test run (container names derive from it).
pub fn node_name(tag: &str) -> String {
    format!("t{}-{tag}", std::process::id() % 100_000)
}

/// The agent's probe section in these tests: any free port, a period of 500 ms.
pub const PROBE: &str = "listen = \"127.0.0.1:0\"\nperiod_ms = 500";

/// One node's test rig: a Mosquitto of its own, the agent connected to it, a watcher of the
/// node's topics; the node's containers are removed before and after.
pub struct Rig {
    pub broker: Broker,
    pub agent: Agent,
    pub watcher: Watcher,
    pub _cleanup: Cleanup,
}

/// The rig for test `tag` (`None`: the test skips, see [`skip_or_require`]); waits at most
/// `wait` for the agent's first connection.
pub fn rig(tag: &str, wait: Duration) -> Option<Rig> {
    if skip_or_require(tag, true) {
        return None;
    }
    let node = node_name(tag);
    remove_all(&node);
    let dir = scratch_dir(tag);
    let broker = Broker::start(&dir);
    let watcher = Watcher::new(
        &broker.host,
        broker.port,
        &format!("acoa/v1/nodes/{node}/+"),
    );
    let mut agent = Agent::new(&node, &dir, &broker.url(), "", PROBE);
    agent.start();
    agent.wait_log("connected to broker", wait);
    Some(Rig {
        broker,
        agent,
        watcher,
        _cleanup: Cleanup(node),
    })
}
