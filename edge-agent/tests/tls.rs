//! mqtts:// to a real Mosquitto TLS listener, with a CA made here by openssl.
//! Needs mosquitto and openssl; fails clearly without them unless ACOA_SKIP_PODMAN=1.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

#[test]
fn agent_connects_over_tls_and_refuses_an_unknown_ca() {
    if skip_or_require("agent_connects_over_tls", false) {
        return;
    }
    require_bin("openssl", "apt-get install -y openssl");
    let dir = scratch_dir("tls");
    // A CA, a server certificate for localhost/127.0.0.1, and an unrelated CA.
    acoa_test_support::test_certificates(&dir);
    // Mosquitto started as root drops to its own user: let it read its key.
    std::fs::set_permissions(
        dir.join("server.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let port = free_port();
    let conf = dir.join("mosquitto.conf");
    std::fs::write(
        &conf,
        format!(
            "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n\
             cafile {d}/ca.pem\ncertfile {d}/server.pem\nkeyfile {d}/server.key\n",
            d = dir.display()
        ),
    )
    .unwrap();
    let mut broker = Command::new("mosquitto")
        .arg("-c")
        .arg(&conf)
        .stderr(std::fs::File::create(dir.join("mosquitto.log")).unwrap())
        .spawn()
        .expect("mosquitto starts");
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _k = Kill(&mut broker);
    wait_until("the TLS listener", Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let probe = "listen = \"127.0.0.1:0\"";
    let url = format!("mqtts://localhost:{port}");
    let mut good = Agent::new(&node_name("tls-ok"), &dir, &url, "", probe);
    std::fs::write(
        &good.config,
        std::fs::read_to_string(&good.config).unwrap().replace(
            "[broker]\n",
            &format!("[broker]\nca_file = \"{}/ca.pem\"\n", dir.display()),
        ),
    )
    .unwrap();
    let mut cmd = Command::new(agent_bin());
    cmd.args(["--podman-socket", "unix:///nonexistent/podman.sock"]);
    good.start_with(cmd);
    good.wait_log("connected to broker localhost", Duration::from_secs(30));

    let mut bad = Agent::new(&node_name("tls-bad"), &dir, &url, "", probe);
    let mut cmd = Command::new(agent_bin());
    cmd.args(["--podman-socket", "unix:///nonexistent/podman.sock"])
        .arg("--ca-file")
        .arg(dir.join("other.pem"));
    bad.start_with(cmd);
    bad.wait_log("broker connection lost", Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !bad.logs().contains("connected to broker"),
        "{}",
        bad.logs()
    );
    assert!(bad.is_running());
}
