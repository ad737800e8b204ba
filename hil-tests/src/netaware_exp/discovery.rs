//! The discovery service: each instance asks it for its port, its service time and the
//! addresses of its downstream calls, answered from the current placement.

use std::collections::HashMap;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Result;

/// The discovery service: answers `C1 app component` with what the component must do.
pub struct Discovery {
    answers: Arc<RwLock<HashMap<(String, String), String>>>,
    stop: Arc<AtomicBool>,
    asked: Arc<AtomicU64>,
}

impl Discovery {
    pub fn start(sock: UdpSocket) -> Result<Self> {
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let answers: Arc<RwLock<HashMap<(String, String), String>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let asked = Arc::new(AtomicU64::new(0));
        let (a, s, n) = (answers.clone(), stop.clone(), asked.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !s.load(Ordering::Relaxed) {
                let Ok((len, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let text = String::from_utf8_lossy(&buf[..len]);
                let mut w = text.split_whitespace();
                let (Some("C1"), Some(app), Some(comp)) = (w.next(), w.next(), w.next()) else {
                    continue;
                };
                let answer = a
                    .read()
                    .ok()
                    .and_then(|m| m.get(&(app.to_string(), comp.to_string())).cloned());
                if let Some(ans) = answer {
                    n.fetch_add(1, Ordering::Relaxed);
                    let _ = sock.send_to(ans.as_bytes(), from);
                }
            }
        });
        Ok(Self {
            answers,
            stop,
            asked,
        })
    }

    pub fn set_app(&self, app: &str, answers: HashMap<String, String>) {
        if let Ok(mut m) = self.answers.write() {
            m.retain(|(a, _), _| a != app);
            for (c, ans) in answers {
                m.insert((app.to_string(), c), ans);
            }
        }
    }

    pub fn asked(&self) -> u64 {
        self.asked.load(Ordering::Relaxed)
    }
}

impl Drop for Discovery {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
