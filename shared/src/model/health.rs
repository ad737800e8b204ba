//! A component's health check (`health:` in `app.yaml`): what to check (a command run in the
//! container, a TCP connection or an HTTP request by the agent), how often, how long to wait,
//! how many failures in a row make it unhealthy and how long after a start failures do not
//! count (`docs/model.md`, "health").

use super::limits::{
    MAX_HEALTH_ARGS, MAX_HEALTH_ARG_LEN, MAX_HEALTH_PERIOD_S, MAX_HEALTH_RETRIES,
    MAX_HEALTH_TIMEOUT_S,
};
use super::ModelError;
use serde::{Deserialize, Serialize};

/// `health.interval_s` when not given.
pub const DEFAULT_HEALTH_INTERVAL_S: u32 = 10;
/// `health.timeout_s` when not given.
pub const DEFAULT_HEALTH_TIMEOUT_S: u32 = 2;
/// `health.retries` when not given.
pub const DEFAULT_HEALTH_RETRIES: u32 = 3;

/// A component's health check and its timing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    pub check: HealthCheck,
    /// Seconds between the end of one check and the start of the next.
    #[serde(default = "default_interval_s")]
    pub interval_s: u32,
    /// Seconds one check may take; a check that takes longer failed.
    #[serde(default = "default_timeout_s")]
    pub timeout_s: u32,
    /// Failed checks in a row (past the start period) that make the container unhealthy.
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Seconds after each start during which failed checks do not count (a passed one does).
    #[serde(default)]
    pub start_period_s: u32,
}

fn default_interval_s() -> u32 {
    DEFAULT_HEALTH_INTERVAL_S
}

fn default_timeout_s() -> u32 {
    DEFAULT_HEALTH_TIMEOUT_S
}

fn default_retries() -> u32 {
    DEFAULT_HEALTH_RETRIES
}

/// What is checked. Written as a mapping of exactly one of `cmd`, `tcp`, `http` (`{tcp: 8080}`:
/// the YAML reader takes enums only as tags, which model documents do not allow).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "CheckFields", into = "CheckFields")]
pub enum HealthCheck {
    /// A command run in the container (no shell unless it names one); it passes when it
    /// exits with 0.
    Cmd(Vec<String>),
    /// The agent connects to this port of the container; it passes when the connection opens.
    Tcp(u32),
    /// The agent sends `GET path` to this port of the container; it passes on a 2xx or 3xx
    /// status.
    Http(HttpCheck),
}

/// How [`HealthCheck`] is written.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cmd: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tcp: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    http: Option<HttpCheck>,
}

impl TryFrom<CheckFields> for HealthCheck {
    type Error = String;

    fn try_from(f: CheckFields) -> Result<Self, String> {
        match (f.cmd, f.tcp, f.http) {
            (Some(c), None, None) => Ok(HealthCheck::Cmd(c)),
            (None, Some(p), None) => Ok(HealthCheck::Tcp(p)),
            (None, None, Some(h)) => Ok(HealthCheck::Http(h)),
            _ => Err("needs exactly one of `cmd`, `tcp`, `http`".into()),
        }
    }
}

impl From<HealthCheck> for CheckFields {
    fn from(c: HealthCheck) -> Self {
        let mut f = CheckFields {
            cmd: None,
            tcp: None,
            http: None,
        };
        match c {
            HealthCheck::Cmd(c) => f.cmd = Some(c),
            HealthCheck::Tcp(p) => f.tcp = Some(p),
            HealthCheck::Http(h) => f.http = Some(h),
        }
        f
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpCheck {
    pub port: u32,
    #[serde(default = "default_path")]
    pub path: String,
}

fn default_path() -> String {
    "/".into()
}

fn port(field: &str, p: u32) -> Result<(), ModelError> {
    if (1..=65535).contains(&p) {
        Ok(())
    } else {
        Err(ModelError::new(
            field,
            format!("{p} is not a port (1 to 65535)"),
        ))
    }
}

fn between(field: &str, v: u32, min: u32, max: u32, unit: &str) -> Result<(), ModelError> {
    if (min..=max).contains(&v) {
        Ok(())
    } else {
        Err(ModelError::new(
            field,
            format!("{v}{unit} is outside {min} to {max}{unit}"),
        ))
    }
}

impl Health {
    /// Checks the health block of the component at `field` (`components[3].health`).
    pub fn validate(&self, field: &str) -> Result<(), ModelError> {
        match &self.check {
            HealthCheck::Cmd(args) => {
                let f = format!("{field}.check.cmd");
                if args.is_empty() || args[0].is_empty() {
                    return Err(ModelError::new(f, "needs a command (its first entry)"));
                }
                if args.len() > MAX_HEALTH_ARGS {
                    return Err(ModelError::new(
                        f,
                        format!(
                            "{} entries exceed the limit of {MAX_HEALTH_ARGS}",
                            args.len()
                        ),
                    ));
                }
                for (i, a) in args.iter().enumerate() {
                    if a.len() > MAX_HEALTH_ARG_LEN || a.contains('\0') {
                        return Err(ModelError::new(
                            format!("{f}[{i}]"),
                            format!(
                                "must be at most {MAX_HEALTH_ARG_LEN} bytes without NUL characters"
                            ),
                        ));
                    }
                }
            }
            HealthCheck::Tcp(p) => port(&format!("{field}.check.tcp"), *p)?,
            HealthCheck::Http(h) => {
                port(&format!("{field}.check.http.port"), h.port)?;
                let ok = h.path.starts_with('/')
                    && h.path.len() <= MAX_HEALTH_ARG_LEN
                    && h.path.bytes().all(|b| b.is_ascii_graphic());
                if !ok {
                    return Err(ModelError::new(
                        format!("{field}.check.http.path"),
                        format!("must start with `/` and be at most {MAX_HEALTH_ARG_LEN} printable characters without spaces"),
                    ));
                }
            }
        }
        between(
            &format!("{field}.interval_s"),
            self.interval_s,
            1,
            MAX_HEALTH_PERIOD_S,
            " s",
        )?;
        between(
            &format!("{field}.timeout_s"),
            self.timeout_s,
            1,
            MAX_HEALTH_TIMEOUT_S,
            " s",
        )?;
        if self.timeout_s > self.interval_s {
            return Err(ModelError::new(
                format!("{field}.timeout_s"),
                format!(
                    "{} s is longer than interval_s, {} s (a check would overlap the next)",
                    self.timeout_s, self.interval_s
                ),
            ));
        }
        between(
            &format!("{field}.retries"),
            self.retries,
            1,
            MAX_HEALTH_RETRIES,
            "",
        )?;
        between(
            &format!("{field}.start_period_s"),
            self.start_period_s,
            0,
            MAX_HEALTH_PERIOD_S,
            " s",
        )
    }
}
