//! A real etcd cluster for tests: 1 or 3 members on loopback ports, data in a directory the
//! test owns, every member killed on drop. `.ci/setup` installs etcd (Debian's `etcd-server`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

/// Where Debian installs etcd.
pub const ETCD: &str = "/usr/bin/etcd";

/// Whether etcd is installed.
pub fn etcd_installed() -> bool {
    Path::new(ETCD).exists()
}

struct Member {
    name: String,
    client: u16,
    peer: u16,
    child: Option<Child>,
}

/// A running etcd cluster (see the module documentation).
pub struct EtcdCluster {
    dir: PathBuf,
    members: Vec<Member>,
    /// Flags every member gets besides the cluster's.
    flags: Vec<String>,
}

impl EtcdCluster {
    /// Starts `n` members with their data under `dir` and waits until the cluster answers.
    pub fn start(n: usize, dir: &Path) -> EtcdCluster {
        EtcdCluster::start_with(n, dir, &[])
    }

    /// [`EtcdCluster::start`], every member with `flags` besides the cluster's (e.g.
    /// `--quota-backend-bytes`).
    pub fn start_with(n: usize, dir: &Path, flags: &[&str]) -> EtcdCluster {
        assert!(
            etcd_installed(),
            "needs etcd at {ETCD} (.ci/setup installs it)"
        );
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client: free_port(),
                peer: free_port(),
                child: None,
            })
            .collect();
        let mut c = EtcdCluster {
            dir: dir.to_path_buf(),
            members,
            flags: flags.iter().map(|f| f.to_string()).collect(),
        };
        for i in 0..n {
            c.spawn(i);
        }
        c.wait_healthy(Duration::from_secs(20));
        c
    }

    fn spawn(&mut self, i: usize) {
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect();
        let m = &self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client);
        let peer = format!("http://127.0.0.1:{}", m.peer);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}.log", m.name)))
            .unwrap();
        let child = Command::new(ETCD)
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(self.dir.join(&m.name))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial.join(",")])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "acoa-test"])
            .args(["--heartbeat-interval", "100", "--election-timeout", "1000"])
            .args(&self.flags)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.members[i].child = Some(child);
    }

    /// Every member's client URL, comma-separated (for `--etcd-endpoints`).
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Kills member `i` (SIGKILL); its data stays.
    pub fn stop(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again on its data.
    pub fn restart(&mut self, i: usize) {
        self.stop(i);
        self.spawn(i);
    }

    /// Waits until a write through the running members succeeds (a quorum is up).
    pub fn wait_healthy(&self, timeout: Duration) {
        let t = Instant::now();
        let live: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.child.is_some())
            .map(|m| format!("http://127.0.0.1:{}", m.client))
            .collect();
        loop {
            let ok = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &live.join(","), "--command-timeout=2s"])
                .args(["put", "/acoa-test/health", "ok"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            assert!(
                t.elapsed() < timeout,
                "etcd did not answer within {timeout:?}; logs in {}",
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.stop(i);
        }
    }
}
