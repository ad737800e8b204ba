//! Namespace plumbing: `ip netns`, `ip link`, and entering a node's namespace from a thread.

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// An `ip` command that failed: the command line and what `ip` said (or why it could not run).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{cmd} failed: {reason}")]
pub struct IpError {
    pub cmd: String,
    pub reason: String,
}

/// Where `ip netns add NAME` puts its namespace handle.
pub fn netns_path(name: &str) -> PathBuf {
    Path::new("/run/netns").join(name)
}

pub fn netns_exists(name: &str) -> bool {
    netns_path(name).exists()
}

/// Runs `ip ARGS`, turning a failure into an error that names the command and what `ip` said.
pub fn ip(args: &[&str]) -> Result<(), IpError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| IpError {
            cmd: format!("ip {}", args.join(" ")),
            reason: format!("cannot run ip: {e}"),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(IpError {
            cmd: format!("ip {}", args.join(" ")),
            reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Creates a namespace with its loopback up.
pub fn add_netns(name: &str) -> Result<(), IpError> {
    ip(&["netns", "add", name])?;
    ip(&["-n", name, "link", "set", "lo", "up"])
}

/// Deletes a namespace; a namespace that does not exist is not an error.
pub fn del_netns(name: &str) -> Result<(), IpError> {
    if !netns_exists(name) {
        return Ok(());
    }
    match ip(&["netns", "del", name]) {
        Ok(()) => Ok(()),
        Err(_) if !netns_exists(name) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The namespaces that exist now (names under /run/netns).
pub fn list_netns() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Deletes every namespace whose name starts with `prefix` (a run's leftovers); returns how many.
pub fn del_prefixed(prefix: &str) -> Result<usize, IpError> {
    let mut n = 0;
    for ns in list_netns() {
        if ns.starts_with(prefix) {
            del_netns(&ns)?;
            n += 1;
        }
    }
    Ok(n)
}

/// Moves the device `dev` (in the root namespace) into namespace `ns`, names it `ifname`, gives
/// it `addr/prefix_len` and brings it up: the whole subnet is then routed through it.
pub fn move_and_configure(
    dev: &str,
    ns: &str,
    ifname: &str,
    addr: Ipv4Addr,
    prefix_len: u8,
) -> Result<(), IpError> {
    ip(&["link", "set", "dev", dev, "netns", ns])?;
    if dev != ifname {
        ip(&["-n", ns, "link", "set", "dev", dev, "name", ifname])?;
    }
    let cidr = format!("{addr}/{prefix_len}");
    ip(&["-n", ns, "addr", "add", &cidr, "dev", ifname])?;
    ip(&["-n", ns, "link", "set", "dev", ifname, "up"])
}

/// Gives the device `dev` in the root namespace `addr/prefix_len` and brings it up.
pub fn configure_host(dev: &str, addr: Ipv4Addr, prefix_len: u8) -> Result<(), IpError> {
    let cidr = format!("{addr}/{prefix_len}");
    ip(&["addr", "add", &cidr, "dev", dev])?;
    ip(&["link", "set", "dev", dev, "up"])
}

/// Runs `f` on a new thread that has entered namespace `ns`; what `f` creates there (sockets)
/// stays in that namespace wherever it is used afterwards.
pub fn in_netns<F, R>(ns: &str, f: F) -> std::io::Result<R>
where
    F: FnOnce() -> std::io::Result<R> + Send + 'static,
    R: Send + 'static,
{
    let handle = File::open(netns_path(ns))?;
    std::thread::spawn(move || {
        nix::sched::setns(&handle, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(std::io::Error::from)?;
        f()
    })
    .join()
    .map_err(|_| std::io::Error::other("namespace thread panicked"))?
}

/// A command that runs `program` inside namespace `ns` (`ip netns exec NS PROGRAM`).
pub fn command_in(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("ip");
    c.arg("netns").arg("exec").arg(ns).arg(program);
    c
}
