//! What the workload binaries (`acoa-workload`, `na-micro`) share: their environment, the
//! configuration exchange with the testbed (request `C1 app component`, answer
//! `K1 key=value ...`) and how they start. Std only: the workload binaries, built with plain
//! rustc, include this file by path.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// An environment variable, when set and not empty.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A line of the binary `prog` on standard error, about component `comp` of `app`.
pub fn log(prog: &str, app: &str, comp: &str, msg: &str) {
    eprintln!("{prog} {app}/{comp}: {msg}");
}

/// The binary `prog`'s `main`: `run` for the component the environment names (`ACOA_APP`,
/// `ACOA_COMPONENT`); exits with 1 on its error.
pub fn main_with(prog: &str, run: impl FnOnce(&str, &str) -> Result<(), String>) {
    let app = env("ACOA_APP").unwrap_or_else(|| "app".into());
    let comp = env("ACOA_COMPONENT").unwrap_or_else(|| "component".into());
    if let Err(e) = run(&app, &comp) {
        log(prog, &app, &comp, &format!("error: {e}"));
        std::process::exit(1);
    }
}

/// Asks `control` (over `ctl`) for the configuration of `comp` of `app`: its first answer
/// within 500 ms (at most `max_bytes`), as text.
pub fn ask(
    ctl: &UdpSocket,
    control: SocketAddr,
    app: &str,
    comp: &str,
    max_bytes: usize,
) -> Option<String> {
    let _ = ctl.send_to(format!("C1 {app} {comp}").as_bytes(), control);
    let mut buf = vec![0u8; max_bytes];
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(500) {
        if let Ok((n, from)) = ctl.recv_from(&mut buf) {
            if from == control {
                return Some(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
    }
    None
}

/// The `key=value` fields of an answer `K1 key=value ...`.
pub fn fields(answer: &str) -> Result<Vec<(&str, &str)>, String> {
    let mut words = answer.split_whitespace();
    if words.next() != Some("K1") {
        return Err(format!("unexpected answer {answer:?}"));
    }
    words
        .map(|w| w.split_once('=').ok_or_else(|| format!("bad field {w}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_k1_and_key_value_fields() {
        assert_eq!(
            fields("K1 port=9 out=a@10.0.0.1:9").unwrap(),
            vec![("port", "9"), ("out", "a@10.0.0.1:9")]
        );
        assert_eq!(fields("K1").unwrap(), vec![]);
        assert_eq!(
            fields("X1 port=9").unwrap_err(),
            "unexpected answer \"X1 port=9\""
        );
        assert_eq!(fields("K1 port=9 junk").unwrap_err(), "bad field junk");
    }
}
