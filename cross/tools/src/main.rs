//! `acoa-wire`: host-side helpers of the cross/ scripts.
//!
//! ```text
//! acoa-wire decode [--key HEX] [FILE]            # one wire frame (FILE or stdin) -> kind line + JSON line
//! acoa-wire render --cluster FILE --profiles DIR --node NAME [--role ROLE] [--set KEY=VALUE]...
//! ```
//!
//! `decode` uses `acoa_shared::wire`: it opens the frame, verifies the signature when a key is
//! given (a frame that is unsigned or does not verify is an error), and prints
//! `<kind> from <node> (<signed|unsigned>[, verified])` then the message as JSON.
//!
//! `render` fills a role profile with a node's facts from the cluster file. Configurations are
//! checked by the agent itself (`edge-agent check-config --cluster FILE [--templates] FILE...`):
//! the agent's configuration schema exists only there.
#![forbid(unsafe_code)]

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use acoa_shared::model::{self, Layer};
use acoa_shared::wire::{self, keys, Message};
use anyhow::{anyhow, bail, Context};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("acoa-wire: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> anyhow::Result<()> {
    match args.first().map(String::as_str) {
        Some("decode") => decode(&args[1..]),
        Some("render") => render(&args[1..]),
        Some("-h") | Some("--help") | None => {
            println!("usage: acoa-wire decode [--key HEX] [FILE]");
            println!("       acoa-wire render --cluster FILE --profiles DIR --node NAME [--role ROLE] [--set KEY=VALUE]...");
            Ok(())
        }
        Some(other) => bail!(
            "unknown command {other:?} (decode, render; configurations: edge-agent check-config)"
        ),
    }
}

fn decode(args: &[String]) -> anyhow::Result<()> {
    let mut key = None;
    let mut file = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--key" => {
                let hex = it.next().ok_or_else(|| anyhow!("--key needs a value"))?;
                key = Some(keys::public_from_hex(hex).context("--key")?);
            }
            f if file.is_none() => file = Some(f.to_string()),
            f => bail!("unexpected argument {f:?}"),
        }
    }
    let bytes = match file.as_deref() {
        None | Some("-") => {
            let mut b = Vec::new();
            std::io::stdin()
                .read_to_end(&mut b)
                .context("reading stdin")?;
            b
        }
        Some(f) => std::fs::read(f).with_context(|| format!("reading {f}"))?,
    };
    let (line, json) = describe(&bytes, key.as_ref())?;
    println!("{line}");
    println!("{json}");
    Ok(())
}

/// Opens, verifies (when a key is given) and decodes one frame: a summary line and the JSON.
fn describe(
    bytes: &[u8],
    key: Option<&ed25519_dalek::VerifyingKey>,
) -> anyhow::Result<(String, String)> {
    if bytes.is_empty() {
        bail!("empty frame");
    }
    let env = wire::open(bytes).context("opening the frame")?;
    if let Some(k) = key {
        env.verify(k).context("checking the signature")?;
    }
    let msg = env.message().context("decoding the body")?;
    // Agent messages: the node, and their (run, seq) the control plane orders them by.
    let (from, numbered) = match &msg {
        Message::NodeReport(r) => (r.node.as_str().to_string(), Some((r.run, r.seq))),
        Message::LinkMetrics(l) => (l.node.as_str().to_string(), Some((l.run, l.seq))),
        Message::DesiredState(d) => (d.node.as_str().to_string(), None),
        Message::ActualState(a) => (a.node.as_str().to_string(), Some((a.run, a.seq))),
        Message::PeerList(_) => ("control plane".to_string(), None),
        Message::ComponentUsage(u) => (u.node.as_str().to_string(), Some((u.run, u.seq))),
        Message::Presence(p) => (p.node.as_str().to_string(), Some((p.run, p.conn))),
    };
    let numbered = numbered
        .map(|(run, seq)| format!(", run {run} seq {seq}"))
        .unwrap_or_default();
    let line = format!(
        "{} from {}{} ({}{})",
        msg.kind(),
        from,
        numbered,
        if env.is_signed() {
            "signed"
        } else {
            "unsigned"
        },
        if key.is_some() { ", verified" } else { "" }
    );
    Ok((line, serde_json::to_string(&msg)?))
}

/// The railway role of a node, which names its profile in `targets/profiles/`.
fn role_of(node: &model::Node) -> &'static str {
    let has = |l: &str| node.hardware.iter().any(|h| h == l);
    if node.layer == Layer::Cloud {
        "cloud-node"
    } else if has("smoke-sensor") {
        "train-security"
    } else if has("dashboard") {
        "train-dashboard"
    } else if has("gps") {
        "train-telemetry"
    } else {
        "station"
    }
}

/// One node's configuration: its role's profile with the node's facts from the cluster file,
/// then `--set` overrides (dotted keys; values in TOML syntax, or plain strings).
fn render(args: &[String]) -> anyhow::Result<()> {
    let (mut cluster_file, mut profiles, mut node_name, mut role) = (None, None, None, None);
    let mut sets = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| anyhow!("{a} needs a value"))
        };
        match a.as_str() {
            "--cluster" => cluster_file = Some(PathBuf::from(val()?)),
            "--profiles" => profiles = Some(PathBuf::from(val()?)),
            "--node" => node_name = Some(val()?),
            "--role" => role = Some(val()?),
            "--set" => sets.push(val()?),
            f => bail!("unexpected argument {f:?}"),
        }
    }
    let cluster_file = cluster_file.ok_or_else(|| anyhow!("--cluster FILE is required"))?;
    let profiles = profiles.ok_or_else(|| anyhow!("--profiles DIR is required"))?;
    let node_name = node_name.ok_or_else(|| anyhow!("--node NAME is required"))?;
    let cluster = model::load_cluster(&cluster_file).map_err(|e| anyhow!("{e}"))?;
    let node = cluster
        .node(&node_name)
        .ok_or_else(|| anyhow!("node {node_name:?} is not in cluster {}", cluster.cluster))?;
    let role = role.unwrap_or_else(|| role_of(node).to_string());
    let profile = profiles.join(format!("{role}.toml"));
    let text = std::fs::read_to_string(&profile)
        .with_context(|| format!("reading profile {}", profile.display()))?;
    let mut t: toml::Table =
        toml::from_str(&text).with_context(|| format!("parsing profile {}", profile.display()))?;
    let strs =
        |v: &[String]| toml::Value::Array(v.iter().cloned().map(toml::Value::String).collect());
    t.insert("node".into(), node.name.clone().into());
    t.insert("datacenter".into(), node.datacenter.clone().into());
    t.insert("layer".into(), node.layer.to_string().into());
    t.insert("arch".into(), node.arch.clone().into());
    t.insert("hardware".into(), strs(&node.hardware));
    t.insert("software".into(), strs(&node.software));
    let mut cap = toml::Table::new();
    cap.insert(
        "cpu_millis".into(),
        toml::Value::Integer(node.capacity.cpu_millis as i64),
    );
    cap.insert(
        "memory_mb".into(),
        toml::Value::Integer(node.capacity.memory_mb as i64),
    );
    cap.insert(
        "disk_mb".into(),
        toml::Value::Integer(node.capacity.disk_mb as i64),
    );
    t.insert("capacity".into(), cap.into());
    if let Some(toml::Value::Table(b)) = t.get_mut("broker") {
        b.insert("username".into(), node.name.clone().into());
    }
    for s in &sets {
        let (key, raw) = s
            .split_once('=')
            .ok_or_else(|| anyhow!("--set {s:?}: expected KEY=VALUE"))?;
        let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(raw.to_string()));
        set_path(&mut t, key, value).with_context(|| format!("--set {key}"))?;
    }
    println!(
        "# {} ({}) of cluster {}: rendered from targets/profiles/{role}.toml by acoa-wire render",
        node.name, role, cluster.cluster
    );
    print!("{}", toml::to_string(&t)?);
    Ok(())
}

fn set_path(t: &mut toml::Table, key: &str, value: toml::Value) -> anyhow::Result<()> {
    match key.split_once('.') {
        None => {
            t.insert(key.to_string(), value);
            Ok(())
        }
        Some((head, rest)) => {
            let sub = t
                .entry(head.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            match sub {
                toml::Value::Table(st) => set_path(st, rest, value),
                _ => bail!("{head} is not a table"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use acoa_shared::model::Cluster;
    use ed25519_dalek::SigningKey;
    use std::path::Path;

    fn cluster() -> Cluster {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/railway/cluster.yaml");
        model::load_cluster(&path).expect("railway cluster")
    }

    fn report(node: &str) -> Message {
        Message::NodeReport(Box::new(wire::NodeReport {
            node: wire::name(node).unwrap(),
            seq: 1,
            run: 3,
            timestamp_ms: 2,
            datacenter: wire::name("train1").unwrap(),
            layer: Layer::Edge,
            arch: wire::name("aarch64").unwrap(),
            hardware: Default::default(),
            software: Default::default(),
            capacity: Default::default(),
            load: Default::default(),
            probe_addr: wire::bounded("probe_addr", "127.0.0.1:7878").unwrap(),
            position: None,
        }))
    }

    #[test]
    fn describe_verifies_and_prints_json() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let frame = wire::encode(&report("n13"), Some(&key)).unwrap();
        let (line, json) = describe(&frame, Some(&key.verifying_key())).unwrap();
        assert_eq!(line, "node report from n13, run 3 seq 1 (signed, verified)");
        assert!(json.contains(r#""arch":"aarch64""#), "{json}");
        let (line, _) = describe(&frame, None).unwrap();
        assert_eq!(line, "node report from n13, run 3 seq 1 (signed)");
    }

    #[test]
    fn describe_rejects_other_keys_unsigned_and_garbage() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let other = SigningKey::from_bytes(&[8; 32]).verifying_key();
        let frame = wire::encode(&report("n13"), Some(&key)).unwrap();
        assert!(describe(&frame, Some(&other)).is_err());
        let unsigned = wire::encode(&report("n13"), None).unwrap();
        assert!(describe(&unsigned, Some(&key.verifying_key())).is_err());
        assert!(describe(&[], None).is_err());
        assert!(describe(&[0xff, 0xff, 0xff], None).is_err());
    }

    #[test]
    fn roles_follow_the_labels() {
        let c = cluster();
        let role = |n: &str| role_of(c.node(n).unwrap());
        assert_eq!(role("n01"), "cloud-node");
        assert_eq!(role("n12"), "cloud-node");
        assert_eq!(role("n13"), "train-security");
        assert_eq!(role("n16"), "train-security");
        assert_eq!(role("n14"), "train-dashboard");
        assert_eq!(role("n15"), "train-telemetry");
        assert_eq!(role("n18"), "train-telemetry");
        assert_eq!(role("n19"), "station");
        assert_eq!(role("n20"), "station");
    }

    #[test]
    fn set_path_creates_tables_and_refuses_non_tables() {
        let mut t = toml::Table::new();
        set_path(&mut t, "broker.url", "mqtt://x".into()).unwrap();
        set_path(&mut t, "node", "n1".into()).unwrap();
        assert_eq!(t["broker"]["url"].as_str(), Some("mqtt://x"));
        assert!(set_path(&mut t, "node.x", 1.into()).is_err());
    }
}
