//! The agent's brokers: URLs and the list it moves along.

use super::{invalid, ConfigError, MAX_BROKERS};

/// One broker of the agent's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerUrl {
    pub host: String,
    pub port: u16,
    pub tls: bool,
}

impl std::fmt::Display for BrokerUrl {
    /// `host:port` (`[v6]:port`), as the agent's log lines name a broker.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Parses `mqtt://host[:port]` or `mqtts://host[:port]`.
pub fn parse_broker_url(url: &str) -> Result<(String, u16, bool), ConfigError> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("mqtt://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("mqtts://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("tcp://") {
        (false, r)
    } else {
        return Err(invalid(
            "broker.url",
            format!("{url:?} must start with mqtt:// or mqtts://"),
        ));
    };
    let rest = rest.trim_end_matches('/');
    let default_port = if tls { 8883 } else { 1883 };
    let (host, port) = if let Some(h) = rest.strip_prefix('[') {
        // [v6]:port
        let (h, p) = h
            .split_once(']')
            .ok_or_else(|| invalid("broker.url", "unclosed [ in host"))?;
        let port = match p.strip_prefix(':') {
            Some(p) => p
                .parse()
                .map_err(|_| invalid("broker.url", format!("bad port {p:?}")))?,
            None => default_port,
        };
        (h.to_owned(), port)
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (
                h.to_owned(),
                p.parse()
                    .map_err(|_| invalid("broker.url", format!("bad port {p:?}")))?,
            ),
            None => (rest.to_owned(), default_port),
        }
    };
    if host.is_empty() {
        return Err(invalid("broker.url", "no host"));
    }
    Ok((host, port, tls))
}

/// The broker list from the flag `--broker` (comma-separated), else the file's `broker.url` or
/// `broker.urls` (not both). Errors name `broker.url` for a single URL, `broker.urls` and the
/// entry's position for a list (the flag's with a comma too).
pub(super) fn broker_list(
    flag: Option<String>,
    url: Option<String>,
    urls: Option<Vec<String>>,
) -> Result<Vec<BrokerUrl>, ConfigError> {
    let (list, field): (Vec<String>, &'static str) = match (flag, url, urls) {
        (Some(f), _, _) => {
            let field = if f.contains(',') {
                "broker.urls"
            } else {
                "broker.url"
            };
            (f.split(',').map(|u| u.trim().to_string()).collect(), field)
        }
        (None, Some(_), Some(_)) => {
            return Err(invalid(
                "broker.urls",
                "set broker.url or broker.urls, not both",
            ))
        }
        (None, Some(u), None) => (vec![u], "broker.url"),
        (None, None, Some(l)) => (l, "broker.urls"),
        (None, None, None) => (vec!["mqtt://127.0.0.1:1883".into()], "broker.url"),
    };
    if list.is_empty() {
        return Err(invalid(field, "empty: at least one broker"));
    }
    if list.len() > MAX_BROKERS {
        return Err(invalid(
            field,
            format!("{} brokers: at most {MAX_BROKERS}", list.len()),
        ));
    }
    let mut out: Vec<BrokerUrl> = Vec::with_capacity(list.len());
    for (i, u) in list.iter().enumerate() {
        let (host, port, tls) = parse_broker_url(u).map_err(|e| match e {
            ConfigError::Invalid { reason, .. } if field == "broker.urls" => {
                invalid(field, format!("entry {}: {reason}", i + 1))
            }
            e => e,
        })?;
        let b = BrokerUrl { host, port, tls };
        if out.contains(&b) {
            return Err(invalid(
                field,
                format!("entry {}: {u:?} is listed twice", i + 1),
            ));
        }
        out.push(b);
    }
    Ok(out)
}
