//! The health checks the agent runs itself: a TCP connection or an HTTP `GET` to a port of the
//! container, each bounded by its timeout (the whole check, connection and answer). A command
//! check runs in the container, by the runtime (Podman's own health check).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The most of an HTTP answer read: its status line is all that counts.
const HTTP_READ_MAX: usize = 256;

/// Opens a TCP connection to `addr` within `timeout`.
pub async fn tcp(addr: SocketAddr, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("connect to {addr}: {e}")),
        Err(_) => Err(format!(
            "connect to {addr}: no answer within {} s",
            timeout.as_secs()
        )),
    }
}

/// Sends `GET path` to `addr` and reads the status within `timeout`: 2xx and 3xx pass.
pub async fn http(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, http_status(addr, path)).await {
        Ok(Ok(status)) if (200..400).contains(&status) => Ok(()),
        Ok(Ok(status)) => Err(format!("GET {path} on {addr}: status {status}")),
        Ok(Err(e)) => Err(format!("GET {path} on {addr}: {e}")),
        Err(_) => Err(format!(
            "GET {path} on {addr}: no answer within {} s",
            timeout.as_secs()
        )),
    }
}

async fn http_status(addr: SocketAddr, path: &str) -> Result<u16, String> {
    let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let req = format!(
        "GET {path} HTTP/1.0\r\nHost: {}\r\nUser-Agent: acoa-edge-agent\r\nConnection: close\r\n\r\n",
        addr.ip()
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; HTTP_READ_MAX];
    let mut n = 0;
    // until the status line is complete, the answer ends or the buffer is full
    while n < buf.len() && !buf[..n].contains(&b'\n') {
        match s.read(&mut buf[n..]).await.map_err(|e| e.to_string())? {
            0 => break,
            k => n += k,
        }
    }
    status_of(&buf[..n]).ok_or_else(|| "the answer is not HTTP".to_string())
}

/// The status code of an HTTP answer's first line (`HTTP/1.1 200 OK`).
pub fn status_of(answer: &[u8]) -> Option<u16> {
    let line = answer.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_ascii_whitespace();
    if !words.next()?.starts_with("HTTP/") {
        return None;
    }
    let code = words.next()?;
    if code.len() != 3 {
        return None;
    }
    code.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn status_lines_parse() {
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n\r\n"), Some(200));
        assert_eq!(
            status_of(b"HTTP/1.0 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(status_of(b"HTTP/1.1 302"), Some(302));
        assert_eq!(status_of(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(status_of(b"HTTP/1.1 2000 x"), None);
        assert_eq!(status_of(b""), None);
    }

    /// A server that answers every connection with `answer` (after reading the request).
    async fn server(answer: &'static [u8]) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(answer).await;
            }
        });
        addr
    }

    #[test]
    fn tcp_and_http_checks_pass_and_fail_with_the_reason() {
        rt().block_on(async {
            let t = Duration::from_secs(2);
            let ok = server(b"HTTP/1.1 204 No Content\r\n\r\n").await;
            assert_eq!(tcp(ok, t).await, Ok(()));
            assert_eq!(http(ok, "/healthz", t).await, Ok(()));
            let bad = server(b"HTTP/1.1 500 Internal Server Error\r\n\r\n").await;
            let e = http(bad, "/healthz", t).await.unwrap_err();
            assert_eq!(e, format!("GET /healthz on {bad}: status 500"));
            let garbage = server(b"hello\n").await;
            let e = http(garbage, "/", t).await.unwrap_err();
            assert!(e.ends_with("the answer is not HTTP"), "{e}");
            // nothing listens on a port just released
            let closed = {
                let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                l.local_addr().unwrap()
            };
            let e = tcp(closed, t).await.unwrap_err();
            assert!(e.starts_with(&format!("connect to {closed}: ")), "{e}");
            // a server that accepts but never answers: the timeout ends the check
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let silent = l.local_addr().unwrap();
            let start = std::time::Instant::now();
            let e = http(silent, "/", Duration::from_millis(300))
                .await
                .unwrap_err();
            assert!(e.contains("no answer within"), "{e}");
            assert!(start.elapsed() < Duration::from_secs(2));
            drop(l);
        });
    }
}
