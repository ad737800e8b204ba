//! MQTT topic names (v1), from `spec/architecture.md`, and who may use them ([`acl`]).

pub mod acl;

/// Every topic starts with this.
pub const PREFIX: &str = "acoa/v1";
/// Every node topic (the brokers' rules and tests use it).
pub const NODES_WILDCARD: &str = "acoa/v1/nodes/+/+";
/// What the control plane subscribes to for agent traffic: what the agents publish, and its own
/// retained desired states (at start-up they tell what the agents can see). Not the peer lists
/// it publishes itself (one per node: at a fleet's join, thousands a second would come back to
/// it for nothing).
pub const NODES_TELEMETRY: &[&str] = &[
    "acoa/v1/nodes/+/report",
    "acoa/v1/nodes/+/links",
    "acoa/v1/nodes/+/online",
    "acoa/v1/nodes/+/actual",
    "acoa/v1/nodes/+/usage",
    "acoa/v1/nodes/+/desired",
    "acoa/v1/control/loopback/+",
];
/// What the control plane subscribes to for application definitions.
pub const APPS_WILDCARD: &str = "acoa/v1/apps/+";

/// Largest MQTT packet an agent accepts (a full desired state is well under 100 KiB); the
/// brokers refuse larger publications on what agents read ([`acl::receiver_limit`]).
pub const AGENT_MAX_PACKET: usize = 256 * 1024;

/// `acoa/v1/nodes/{node}/report`: node report, agent → cloud (QoS 0).
pub fn report(node: &str) -> String {
    format!("{PREFIX}/nodes/{node}/report")
}
/// `acoa/v1/nodes/{node}/links`: per-peer link metrics, agent → cloud (QoS 0).
pub fn links(node: &str) -> String {
    format!("{PREFIX}/nodes/{node}/links")
}
/// `acoa/v1/nodes/{node}/online`: online / offline marker (QoS 1, retained, also the last will).
pub fn online(node: &str) -> String {
    format!("{PREFIX}/nodes/{node}/online")
}
/// `acoa/v1/nodes/{node}/desired`: the node's desired state, cloud → agent (QoS 1, retained).
pub fn desired(node: &str) -> String {
    format!("{PREFIX}/nodes/{node}/desired")
}
/// `acoa/v1/nodes/{node}/actual`: container states, agent → cloud (QoS 1).
pub fn actual(node: &str) -> String {
    format!("{PREFIX}/nodes/{node}/actual")
}
/// `acoa/v1/nodes/{node}/usage`: per-component CPU, memory and traffic, agent → cloud (QoS 0).
pub fn usage(node: &str) -> String {
    format!("{PREFIX}/nodes/{node}/usage")
}
/// `acoa/v1/nodes/{node}/peers`: the node's signed peer list, cloud → agent (QoS 1, retained;
/// wire v5: each node reads only its own, there is no fleet-wide list).
pub fn peers(node: &str) -> String {
    format!("{PREFIX}/nodes/{node}/peers")
}
/// `acoa/v1/apps/{app}`: an application definition, user → cloud (QoS 1, retained; empty deletes).
pub fn app(app: &str) -> String {
    format!("{PREFIX}/apps/{app}")
}
/// `acoa/v1/apps/{app}/status`: the application's status as JSON, cloud → user (QoS 1, retained).
pub fn app_status(app: &str) -> String {
    format!("{PREFIX}/apps/{app}/status")
}

/// `acoa/v1/control/loopback/{broker}`: the control plane's loopback through its broker number
/// `broker` (in its `--broker-url` order), to itself (QoS 0): how far behind it hears. Only the
/// control plane may publish or read it ([`acl`]: under `acoa/#`, no node's).
///
/// The loopback's number is in its payload, not its topic, although a number in the topic
/// would spare the intake its two special cases (a task by the number, and a waiting loopback
/// replacing none): a broker keeps state per topic published (the embedded broker's router
/// caches each topic's matching filters for good, `vendor/rumqttd/src/router/logs.rs`
/// `publish_filters`), so one new topic a second would grow every broker without bound.
pub fn loopback(broker: usize) -> String {
    format!("{PREFIX}/control/loopback/{broker}")
}

/// The payloads of the online topic.
pub const ONLINE: &[u8] = b"online";
pub const OFFLINE: &[u8] = b"offline";

/// What a topic is about, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic<'a> {
    Report(&'a str),
    Links(&'a str),
    Online(&'a str),
    Desired(&'a str),
    Actual(&'a str),
    Usage(&'a str),
    Peers(&'a str),
    App(&'a str),
    AppStatus(&'a str),
    /// The control plane's loopback through its broker of this number ([`loopback`]).
    Loopback(u8),
}

/// Parses a topic of this scheme; `None` for anything else.
pub fn parse(topic: &str) -> Option<Topic<'_>> {
    let rest = topic.strip_prefix(PREFIX)?.strip_prefix('/')?;
    let parts: heapless::Vec<&str, 4> = rest.split('/').take(4).collect();
    if rest.split('/').count() > 3 {
        return None;
    }
    match parts.as_slice() {
        ["nodes", n, kind] if !n.is_empty() => match *kind {
            "report" => Some(Topic::Report(n)),
            "links" => Some(Topic::Links(n)),
            "online" => Some(Topic::Online(n)),
            "desired" => Some(Topic::Desired(n)),
            "actual" => Some(Topic::Actual(n)),
            "usage" => Some(Topic::Usage(n)),
            "peers" => Some(Topic::Peers(n)),
            _ => None,
        },
        ["apps", a] if !a.is_empty() => Some(Topic::App(a)),
        ["apps", a, "status"] if !a.is_empty() => Some(Topic::AppStatus(a)),
        // digits, no leading zero: the one spelling `loopback` builds
        ["control", "loopback", b]
            if b.bytes().all(|c| c.is_ascii_digit()) && (*b == "0" || !b.starts_with('0')) =>
        {
            b.parse().ok().map(Topic::Loopback)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_parse_back() {
        assert_eq!(parse(&report("n13")), Some(Topic::Report("n13")));
        assert_eq!(parse(&links("n13")), Some(Topic::Links("n13")));
        assert_eq!(parse(&online("n13")), Some(Topic::Online("n13")));
        assert_eq!(parse(&desired("n13")), Some(Topic::Desired("n13")));
        assert_eq!(parse(&actual("n13")), Some(Topic::Actual("n13")));
        assert_eq!(parse(&usage("n13")), Some(Topic::Usage("n13")));
        assert_eq!(parse(&peers("n13")), Some(Topic::Peers("n13")));
        assert_eq!(
            parse("acoa/v1/peers"),
            None,
            "the fleet-wide list is gone (wire v5)"
        );
        assert_eq!(parse(&app("smoke")), Some(Topic::App("smoke")));
        assert_eq!(parse(&app_status("smoke")), Some(Topic::AppStatus("smoke")));
        assert_eq!(parse("acoa/v1/nodes/n1/other"), None);
        assert_eq!(parse("acoa/v2/nodes/n1/peers"), None);
        assert_eq!(parse("acoa/v1/apps/a/status/x"), None);
        assert_eq!(parse("acoa/v1/nodes//report"), None);
        assert_eq!(parse(&loopback(3)), Some(Topic::Loopback(3)));
        assert_eq!(parse("acoa/v1/control/loopback/"), None);
        assert_eq!(parse("acoa/v1/control/loopback/+1"), None);
        assert_eq!(parse("acoa/v1/control/loopback/256"), None);
        assert_eq!(
            parse("acoa/v1/control/loopback/0"),
            Some(Topic::Loopback(0))
        );
        assert_eq!(
            parse("acoa/v1/control/loopback/07"),
            None,
            "one spelling: found by fuzzing"
        );
        assert_eq!(parse("acoa/v1/control/other/1"), None);
    }
}

/// Why a broker address is refused by [`broker_address`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerUrlError {
    #[error("{0}: TLS brokers (mqtts://, ssl://) are not plain addresses")]
    Tls(String),
    #[error("{0}: the port is not a number")]
    Port(String),
    #[error("{0}: no host")]
    NoHost(String),
    #[error("{0}: a bracket stands where a host may not have one")]
    Host(String),
}

/// `mqtt://host:port` (or `tcp://`, or plain `host[:port]`; port 1883 by default, `[v6]` hosts
/// unbracketed) → host, port. TLS schemes are refused: the caller says whether it has TLS.
pub fn broker_address(url: &str) -> Result<(String, u16), BrokerUrlError> {
    if url.starts_with("mqtts://") || url.starts_with("ssl://") {
        return Err(BrokerUrlError::Tls(url.to_string()));
    }
    let rest = url
        .strip_prefix("mqtt://")
        .or_else(|| url.strip_prefix("tcp://"))
        .unwrap_or(url)
        .trim_end_matches('/');
    let port_of = |p: &str| {
        p.parse::<u16>()
            .map_err(|_| BrokerUrlError::Port(url.to_string()))
    };
    let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
        // `[v6]` or `[v6]:port`: the host is what the brackets hold
        let (h, after) = bracketed
            .split_once(']')
            .ok_or_else(|| BrokerUrlError::Port(url.to_string()))?;
        let port = match after {
            "" => 1883,
            _ => port_of(
                after
                    .strip_prefix(':')
                    .ok_or_else(|| BrokerUrlError::Port(url.to_string()))?,
            )?,
        };
        (h.to_string(), port)
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), port_of(p)?),
            None => (rest.to_string(), 1883),
        }
    };
    if host.is_empty() {
        return Err(BrokerUrlError::NoHost(url.to_string()));
    }
    // a host holding a bracket could not be written back as `[host]:port`
    if host.contains(['[', ']']) {
        return Err(BrokerUrlError::Host(url.to_string()));
    }
    Ok((host, port))
}

#[cfg(test)]
mod broker_address_tests {
    use super::*;

    #[test]
    fn addresses_parse_and_bad_ones_are_named() {
        assert_eq!(
            broker_address("mqtt://127.0.0.1:1884/"),
            Ok(("127.0.0.1".into(), 1884))
        );
        assert_eq!(broker_address("tcp://h"), Ok(("h".into(), 1883)));
        assert_eq!(broker_address("[::1]:1"), Ok(("::1".into(), 1)));
        // found by fuzzing: brackets without a port were kept, or refused as a bad port
        assert_eq!(
            broker_address("mqtt://[fe80::1]"),
            Ok(("fe80::1".into(), 1883))
        );
        assert_eq!(broker_address("[h]"), Ok(("h".into(), 1883)));
        assert!(broker_address("[h]x").is_err());
        assert!(broker_address("[h").is_err());
        assert!(broker_address("a]b:5").is_err());
        assert!(broker_address("[a[b]:5").is_err());
        assert_eq!(
            broker_address("mqtts://h:8883"),
            Err(BrokerUrlError::Tls("mqtts://h:8883".into()))
        );
        assert_eq!(
            broker_address("mqtt://h:x").unwrap_err().to_string(),
            "mqtt://h:x: the port is not a number"
        );
        assert_eq!(
            broker_address("mqtt://:1"),
            Err(BrokerUrlError::NoHost("mqtt://:1".into()))
        );
    }
}
