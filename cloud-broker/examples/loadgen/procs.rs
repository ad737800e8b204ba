//! The processes of a run: reading their CPU and memory from `/proc`, etcd's own figures,
//! and the children killed when the run ends.

use std::process::Command;

/// What etcd says of itself: its revision (one per write transaction) and its database's size.
pub fn etcd_status(endpoints: &str) -> Option<(u64, u64)> {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", endpoints, "endpoint", "status", "-w", "json"])
        .output()
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let st = &v[0]["Status"];
    Some((st["header"]["revision"].as_u64()?, st["dbSize"].as_u64()?))
}

/// User and system CPU ticks of process `pid` so far (0 if it cannot be read).
pub fn proc_cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // fields after the name: state(0) ... utime(11) stime(12)
    f.get(11).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
}

/// A `kB` field of process `pid`'s `/proc/PID/status` (0 if it cannot be read).
pub fn proc_status_kb(pid: u32, field: &str) -> u64 {
    acoa_test_support::proc_status_kb(Some(pid), field).unwrap_or(0)
}

/// Process `pid`'s anonymous memory (kB, `/proc/PID/smaps_rollup`; 0 if it cannot be read).
pub fn smaps_anon_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("Anonymous:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|x| x.parse().ok())
        .unwrap_or(0)
}

/// A child process killed on drop.
pub struct Killed(pub std::process::Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An external Mosquitto for the run (killed on drop).
pub struct Mosq(pub std::process::Child);
impl Drop for Mosq {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
