//! `edge-agent check-config`: configuration files judged by the agent's own reading of them (the
//! schema and rules of [`Config::load`], the very code that runs at start), then by the rules of a
//! deployment (the broker login is the node's name, no placeholder left, absolute paths) and,
//! given a cluster file, against the file's node there: datacenter, layer, arch, labels and
//! capacity agree.
//!
//! Invariant: one schema. A file this check accepts is one the agent starts with (but for the
//! `CHANGE-ME` placeholders that `templates` allows), and the reason for a refusal is the one
//! the agent would give, naming the field.

use std::collections::BTreeSet;
use std::path::Path;

use acoa_shared::model::Cluster;
use acoa_shared::wire::keys;

use super::{read_file, Config, ConfigError, Overrides};

/// What the role profiles and the package's default configuration hold where a node's own value
/// goes (`broker.password`, `broker.control_plane_key`, in the package also `node`).
pub const PLACEHOLDER: &str = "CHANGE-ME";

/// Why a configuration file does not pass.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The agent would not start with it.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// It reads, but disagrees with the deployment's rules or with the cluster file.
    #[error("{}", .0.join("; "))]
    Disagrees(Vec<String>),
}

/// Checks the configuration file `path`: `Ok` with a one-line summary of what the node is, or
/// what is wrong. With `templates`, [`PLACEHOLDER`] values are accepted for the broker's
/// password and the control plane's key.
pub fn check_file(
    path: &Path,
    cluster: Option<&Cluster>,
    templates: bool,
) -> Result<String, CheckError> {
    let f = read_file(Some(path))?;
    let arch_set = f.arch.is_some();
    let placeholder =
        |s: &Option<String>| templates && s.as_deref().is_some_and(|s| s.starts_with(PLACEHOLDER));
    // A template's key is checked as if it were filled in.
    let control_plane_key = placeholder(&f.broker.control_plane_key).then(|| {
        keys::public_hex(&ed25519_dalek::SigningKey::from_bytes(&[1; 32]).verifying_key())
    });
    let password_is_placeholder = f
        .broker
        .password
        .as_deref()
        .is_some_and(|p| p.starts_with(PLACEHOLDER));
    let cfg = Config::resolve(
        Overrides {
            control_plane_key,
            ..Overrides::default()
        },
        f,
    )?;
    let mut errs = Vec::new();
    if let Some(u) = &cfg.broker.username {
        if *u != cfg.node {
            errs.push(format!(
                "broker.username {u:?} is not the node name (the broker's ACL keys on it)"
            ));
        }
    }
    if password_is_placeholder && !templates {
        errs.push(format!("broker.password is still {PLACEHOLDER}"));
    }
    if cfg.image_allowlist.is_empty() {
        errs.push("image_allowlist is empty: the node would run nothing".to_string());
    }
    if let Some(n) = &cfg.netns {
        if !n.starts_with('/') {
            errs.push(format!("podman.netns {n:?} is not an absolute path"));
        }
    }
    if !cfg.state_dir.is_absolute() {
        errs.push(format!(
            "state_dir {:?} is not an absolute path",
            cfg.state_dir.display()
        ));
    }
    if let Some(cluster) = cluster {
        match cluster.node(&cfg.node) {
            None => errs.push(format!(
                "node {:?} is not in cluster {}",
                cfg.node, cluster.cluster
            )),
            Some(node) => errs.extend(disagreements(&cfg, arch_set, node)),
        }
    }
    if !errs.is_empty() {
        return Err(CheckError::Disagrees(errs));
    }
    let mut summary = format!("{} {} {}", cfg.node, cfg.datacenter, cfg.layer);
    let labels: Vec<&String> = cfg.hardware.iter().chain(&cfg.software).collect();
    summary.push_str(&format!(" {labels:?}"));
    if cfg.broker.urls.iter().any(|u| u.tls) && cfg.broker.ca_file.is_none() {
        summary.push_str(" (mqtts with the system's root certificates)");
    }
    Ok(summary)
}

/// Where `cfg` and the cluster's `node` of the same name disagree (the arch only when the file
/// sets one: else the agent reports its own binary's).
fn disagreements(cfg: &Config, arch_set: bool, node: &acoa_shared::model::Node) -> Vec<String> {
    let mut errs = Vec::new();
    if cfg.datacenter != node.datacenter {
        errs.push(format!(
            "datacenter {:?}, cluster says {:?}",
            cfg.datacenter, node.datacenter
        ));
    }
    if cfg.layer != node.layer {
        errs.push(format!("layer {}, cluster says {}", cfg.layer, node.layer));
    }
    if arch_set && cfg.arch != node.arch {
        errs.push(format!("arch {:?}, cluster says {:?}", cfg.arch, node.arch));
    }
    let set = |v: &[String]| v.iter().cloned().collect::<BTreeSet<_>>();
    if set(&cfg.hardware) != set(&node.hardware) {
        errs.push(format!(
            "hardware {:?}, cluster says {:?}",
            cfg.hardware, node.hardware
        ));
    }
    if set(&cfg.software) != set(&node.software) {
        errs.push(format!(
            "software {:?}, cluster says {:?}",
            cfg.software, node.software
        ));
    }
    // a position both give, more than 100 m apart (the cluster file's may be rounded)
    if let (Some(p), Some(q)) = (cfg.position, node.position) {
        let km = p.chord_km(&q);
        if km > 0.1 {
            errs.push(format!(
                "position {}, {} is {km:.1} km from the cluster's {}, {}",
                p.lat_deg(),
                p.lon_deg(),
                q.lat_deg(),
                q.lon_deg()
            ));
        }
    }
    let c = cfg.capacity;
    for (name, got, want) in [
        ("cpu_millis", c.cpu_millis, node.capacity.cpu_millis),
        ("memory_mb", c.memory_mb, node.capacity.memory_mb),
        ("disk_mb", c.disk_mb, node.capacity.disk_mb),
    ] {
        if let Some(got) = got.filter(|g| *g != want) {
            errs.push(format!("capacity.{name} {got}, cluster says {want}"));
        }
    }
    errs
}

/// Reads and validates the cluster file at `path` (YAML or JSON). Behind the cargo feature
/// `cluster-check`: the YAML reader would otherwise grow the shipped agent.
#[cfg(feature = "cluster-check")]
pub fn load_cluster(path: &Path) -> Result<Cluster, String> {
    acoa_shared::model::load_cluster(path).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29";

    fn cluster() -> Cluster {
        acoa_shared::model::parse_cluster(
            r#"
cluster: t
datacenters:
  - {name: train1, layer: edge}
nodes:
  - name: n13
    datacenter: train1
    layer: edge
    arch: aarch64
    hardware: [smoke-sensor]
    capacity: {cpu_millis: 2000, memory_mb: 2048, disk_mb: 16000}
links: []
"#,
        )
        .unwrap()
    }

    /// `body` (after the node's facts) in a file of its own.
    fn file(tag: &str, body: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("acoa-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{tag}.toml"));
        let text = format!(
            "node = \"n13\"\ndatacenter = \"train1\"\nlayer = \"edge\"\narch = \"aarch64\"\n\
             hardware = [\"smoke-sensor\"]\nimage_allowlist = [\"localhost/acoa/\"]\n{body}"
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_file_the_agent_starts_with_and_that_agrees_passes() {
        let p = file(
            "good",
            &format!("[capacity]\ncpu_millis = 2000\n[broker]\nusername = \"n13\"\ncontrol_plane_key = \"{KEY}\"\n"),
        );
        let s = check_file(&p, Some(&cluster()), false).unwrap();
        assert!(s.starts_with("n13 train1 edge"), "{s}");
    }

    #[test]
    fn what_the_agent_refuses_at_start_is_refused_with_its_reason() {
        for (tag, body, field) in [
            ("window", "[probe]\nwindow = 100\n", "probe.window"),
            ("period", "[probe]\nperiod_ms = 5\n", "probe.period_ms"),
            (
                "peers",
                "[probe]\npeers_per_period = 1000\n",
                "probe.peers_per_period",
            ),
            ("report", "report_period_ms = 50\n", "report_period_ms"),
            (
                "report-max",
                "report_max_interval_s = 0\n",
                "report_max_interval_s",
            ),
        ] {
            let p = file(
                tag,
                &format!("{body}[broker]\ncontrol_plane_key = \"{KEY}\"\n"),
            );
            let e = check_file(&p, Some(&cluster()), false).unwrap_err();
            assert!(matches!(e, CheckError::Config(_)), "{tag}: {e}");
            assert!(e.to_string().starts_with(field), "{tag}: {e}");
        }
        // The reason is the agent's own.
        let p = file(
            "window",
            &format!("[probe]\nwindow = 100\n[broker]\ncontrol_plane_key = \"{KEY}\"\n"),
        );
        let at_start = Config::load(Overrides {
            config: Some(p.clone()),
            ..Overrides::default()
        })
        .unwrap_err();
        assert_eq!(
            check_file(&p, None, false).unwrap_err().to_string(),
            at_start.to_string()
        );
    }

    #[test]
    fn placeholders_pass_only_as_templates_and_the_cluster_must_agree() {
        let p = file(
            "template",
            "[broker]\nusername = \"n13\"\npassword = \"CHANGE-ME\"\ncontrol_plane_key = \"CHANGE-ME: 64 hex digits\"\n",
        );
        check_file(&p, Some(&cluster()), true).unwrap();
        let e = check_file(&p, Some(&cluster()), false).unwrap_err();
        assert!(e.to_string().starts_with("broker.control_plane_key"), "{e}");
        let p = file(
            "disagree",
            &format!("software = [\"x\"]\n[capacity]\nmemory_mb = 1\n[broker]\nusername = \"n14\"\ncontrol_plane_key = \"{KEY}\"\n"),
        );
        let e = check_file(&p, Some(&cluster()), false)
            .unwrap_err()
            .to_string();
        for part in [
            "broker.username",
            "software",
            "capacity.memory_mb 1, cluster says 2048",
        ] {
            assert!(e.contains(part), "{part}: {e}");
        }
        // a position 11 km from the cluster's is named; one within 100 m passes
        let mut placed = cluster();
        placed.nodes[0].position = Some(acoa_shared::geo::Position::new(47.3, 8.5).unwrap());
        let key = format!("[broker]\nusername = \"n13\"\ncontrol_plane_key = \"{KEY}\"\n");
        let p = file(
            "far",
            &format!("position = {{ lat_deg = 47.4, lon_deg = 8.5 }}\n{key}"),
        );
        let e = check_file(&p, Some(&placed), false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("position 47.4, 8.5 is 11.1 km from the cluster's 47.3, 8.5"),
            "{e}"
        );
        let p = file(
            "near",
            &format!("position = {{ lat_deg = 47.3005, lon_deg = 8.5 }}\n{key}"),
        );
        check_file(&p, Some(&placed), false).unwrap();
    }
}
