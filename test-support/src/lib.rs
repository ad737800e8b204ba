//! What the tests of several crates need from the machine, in one place: Podman's socket, the
//! test images (busybox-static for plain containers, `acoa-workload` built from its source),
//! commands that must succeed, test certificates made by openssl, a process's memory as its
//! `/proc` status gives it. Standard library only; a dev-dependency, never in a binary.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub mod etcd;

/// A TCP port free on 127.0.0.1 right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One field of a process's `/proc/PID/status` (`pid` `None`: this process): its value,
/// trimmed (`"1234 kB"`, `"0"`), or `None` where the kernel does not give it.
pub fn proc_status(pid: Option<u32>, field: &str) -> Option<String> {
    let path = pid.map_or("/proc/self/status".into(), |p| format!("/proc/{p}/status"));
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// A field of `/proc/PID/status` given in kB (`VmRSS`, `VmHWM`, ...), in kB.
pub fn proc_status_kb(pid: Option<u32>, field: &str) -> Option<u64> {
    proc_status(pid, field)?
        .strip_suffix(" kB")?
        .trim()
        .parse()
        .ok()
}

/// Where `.ci/setup` starts Podman's REST service.
pub const PODMAN_SOCKET: &str = "/run/podman/podman.sock";

/// Whether Podman's REST service answers its ping on [`PODMAN_SOCKET`].
pub fn podman_ok() -> bool {
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(PODMAN_SOCKET) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET /v4.0.0/libpod/_ping HTTP/1.0\r\nHost: d\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.contains("OK")
}

/// Runs a command that must succeed; panics with the command and its stderr otherwise.
/// Returns its stdout.
pub fn sh(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Test certificates made by `openssl` in `dir`: a CA (`ca.pem`, `ca.key`), a server
/// certificate for localhost and 127.0.0.1 signed by it (`server.pem`, `server.key`), and an
/// unrelated CA (`other.pem`, `other.key`), each valid two days.
pub fn test_certificates(dir: &Path) {
    let openssl = |args: &[&str]| {
        sh(Command::new("openssl").current_dir(dir).args(args));
    };
    for (name, cn) in [("ca", "acoa-test-ca"), ("other", "other-ca")] {
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={cn}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
        ]);
    }
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "server.pem",
    ]);
}

/// Whether Podman has `image` locally.
pub fn image_exists(image: &str) -> bool {
    Command::new("podman")
        .args(["image", "exists", image])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// A fresh scratch directory for this process and `tag`.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("acoa-ts-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Makes sure every one of `images` exists: a root of busybox-static's binary with `sh` and
/// `sleep`, whose command sleeps (no registry here: `podman import` of a tarball). Images that
/// exist are left as they are.
pub fn busybox_images(images: &[&str]) {
    let missing: Vec<&str> = images
        .iter()
        .copied()
        .filter(|i| !image_exists(i))
        .collect();
    let Some(first) = missing.first() else {
        return;
    };
    import_busybox_root(
        "busybox",
        &["sh", "sleep"],
        |_| {},
        r#"CMD ["/bin/sleep","1000000"]"#,
        first,
    );
    for i in &missing[1..] {
        sh(Command::new("podman").args(["tag", first, i]));
    }
}

/// Makes sure `image` exists: busybox-static's `httpd` serving `/www` on port 8080 (its
/// foreground command), with `/www/healthz` (`ok`); built like [`busybox_images`]. For health
/// check tests: a TCP check on 8080 and an HTTP check of `/healthz` pass, of any other path fail
/// (404).
pub fn busybox_httpd_image(image: &str) {
    if image_exists(image) {
        return;
    }
    import_busybox_root(
        "httpd",
        &["sh"],
        |root| {
            std::fs::create_dir_all(root.join("www")).unwrap();
            std::fs::write(root.join("www/healthz"), "ok\n").unwrap();
        },
        r#"CMD ["/bin/busybox","httpd","-f","-p","8080","-h","/www"]"#,
        image,
    );
}

/// Imports `image` from a root of busybox-static's binary with `links` to it in `/bin`, what
/// `extra` adds to the root, and the image change `cmd` (no registry here: `podman import` of
/// a tarball made in the scratch directory `scratch_name`).
fn import_busybox_root(
    scratch_name: &str,
    links: &[&str],
    extra: impl FnOnce(&Path),
    cmd: &str,
    image: &str,
) {
    let busybox = Path::new("/bin/busybox");
    assert!(
        busybox.is_file(),
        "the test image needs /bin/busybox: apt-get install -y busybox-static"
    );
    let dir = scratch(scratch_name);
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy(busybox, root.join("bin/busybox")).unwrap();
    for l in links {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(l)).unwrap();
    }
    extra(&root);
    let tar = dir.join("root.tar");
    sh(Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-cf")
        .arg(&tar)
        .arg("."));
    sh(Command::new("podman")
        .args(["import", "--change", cmd])
        .arg(&tar)
        .arg(image));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Builds `image` from the current source of `hil-tests/src/bin/acoa-workload.rs` (static, with
/// plain `rustc`, as `hil-tests/images.sh` does; about a second) with `/acoa-workload` as its
/// entry point and `env` (`NAME=value`) baked in. Always rebuilt, so that a test never runs an
/// older workload than the source it is compiled with.
pub fn workload_image(image: &str, env: &[&str]) {
    let dir = scratch("workload");
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../hil-tests/src/bin/acoa-workload.rs"
    );
    sh(Command::new("rustc")
        .args([
            "--edition",
            "2021",
            "-C",
            "panic=abort",
            "-C",
            "target-feature=+crt-static",
            src,
            "-o",
        ])
        .arg(dir.join("acoa-workload")));
    sh(Command::new("tar")
        .arg("-C")
        .arg(&dir)
        .arg("-cf")
        .arg(dir.join("w.tar"))
        .arg("acoa-workload"));
    let mut cmd = Command::new("podman");
    cmd.args([
        "import",
        "--quiet",
        "--change",
        r#"ENTRYPOINT ["/acoa-workload"]"#,
    ]);
    for e in env {
        cmd.args(["--change", &format!("ENV {e}")]);
    }
    sh(cmd.arg(dir.join("w.tar")).arg(image));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Removes (forcibly) every container that carries the label `key=value`; errors are ignored
/// (for drop guards: cleanup must not panic while a test is already failing).
pub fn remove_containers_labelled(key: &str, value: &str) {
    remove_containers_where(&[format!("label={key}={value}")]);
}

/// Removes (forcibly) every container that `podman ps` lists with all of `filters` (each as
/// `--filter` takes it: `label=k=v`, `name=…`); errors are ignored, as above.
pub fn remove_containers_where(filters: &[String]) {
    let mut ps = Command::new("podman");
    ps.arg("ps").arg("-aq");
    for f in filters {
        ps.arg("--filter").arg(f);
    }
    let Ok(out) = ps.output() else {
        return;
    };
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if !ids.is_empty() {
        let _ = Command::new("podman")
            .args(["rm", "-f", "-t", "0"])
            .args(&ids)
            .output();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_status_gives_its_memory_in_kb_and_nothing_for_an_unknown_field() {
        let rss = proc_status_kb(None, "VmRSS").expect("VmRSS");
        assert!(rss > 0);
        assert_eq!(
            proc_status_kb(Some(std::process::id()), "VmRSS").map(|k| k > 0),
            Some(true)
        );
        assert!(proc_status(None, "Name").is_some_and(|n| !n.is_empty()));
        assert_eq!(proc_status(None, "VmRS"), None, "a prefix is not a field");
        assert_eq!(proc_status_kb(None, "Name"), None, "not in kB");
    }
}
