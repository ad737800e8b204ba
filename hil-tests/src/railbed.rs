//! The railway testbed for whole-system experiments (`tunnels`, `rollouts`): the scenario's
//! nodes in numbered namespaces under a prefix of their own, the host endpoint (the control
//! plane's broker) and the `obs` endpoint (the workload collector, which no cut touches), the
//! workload images under the run's own names, the collector and the agents' options.

use std::path::PathBuf;
use std::process::Command;

use acoa_shared::model::{Application, Cluster};
use anyhow::{bail, Context, Result};

use crate::agents::AgentOptions;
use crate::emu::Testbed;
use crate::partition;
use crate::tunnels::{self, OBS};
use crate::workload::{Collector, COLLECTOR_PORT};

/// The command-line options of the testbed, shared by the experiments' binaries.
#[derive(clap::Args, Debug, Clone)]
pub struct BedArgs {
    #[arg(long, default_value = "scenarios/railway/cluster.yaml")]
    pub cluster: PathBuf,
    #[arg(long, default_value = "scenarios/railway/smoke-monitoring.yaml")]
    pub app: PathBuf,
    #[arg(long, default_value = "target/debug/cloud-broker")]
    pub cloud_bin: PathBuf,
    #[arg(long, default_value = "target/debug/edge-agent")]
    pub agent_bin: PathBuf,
    /// aarch64 build of the agent for the aarch64 nodes, run under qemu-aarch64-static
    #[arg(long)]
    pub agent_bin_aarch64: Option<PathBuf>,
    /// The agents' probe period, ms
    #[arg(long, default_value_t = 1000)]
    pub probe_period_ms: u64,
    /// Skip building the workload images (`hil-tests/images.sh` with the obs endpoint as the
    /// collector)
    #[arg(long)]
    pub no_images: bool,
    /// Namespace prefix (runs at the same time need their own, and their own --subnet,
    /// --node-prefix and --image-prefix; each experiment has its own defaults)
    #[arg(long)]
    pub prefix: Option<String>,
    /// Prefix of the node names (agents own the containers labelled with their node's name:
    /// a run must not share node names with another system on this Podman)
    #[arg(long)]
    pub node_prefix: Option<String>,
    /// The workload images are `localhost/acoa/<this><image name>` (their collector address is
    /// baked in)
    #[arg(long)]
    pub image_prefix: Option<String>,
    #[arg(long)]
    pub subnet: Option<String>,
}

/// The names a run takes on this machine (see [`BedArgs`]), and an experiment's defaults.
#[derive(Clone, Debug)]
pub struct Names {
    pub prefix: String,
    pub node_prefix: String,
    pub image_prefix: String,
    pub subnet: String,
}

impl BedArgs {
    /// The names given, `default`'s where none is.
    pub fn names(&self, default: Names) -> Names {
        Names {
            prefix: self.prefix.clone().unwrap_or(default.prefix),
            node_prefix: self.node_prefix.clone().unwrap_or(default.node_prefix),
            image_prefix: self.image_prefix.clone().unwrap_or(default.image_prefix),
            subnet: self.subnet.clone().unwrap_or(default.subnet),
        }
    }
}

/// The testbed up, with what every experiment on it needs.
pub struct Bed {
    pub tb: Testbed,
    /// The scenario's cluster, its nodes renamed with the node prefix.
    pub cluster: Cluster,
    pub app: Application,
    pub collector: Collector,
    pub agent: AgentOptions,
    pub names: Names,
}

impl Bed {
    /// Loads the scenario, deletes the prefix's leftover namespaces, brings the testbed up
    /// (calibrated), builds the workload images (unless `--no-images`) and starts the
    /// collector. The caller guards its signals first ([`crate::agents::guard_signals`]).
    pub fn up(a: &BedArgs, names: Names) -> Result<Bed> {
        if names.prefix.is_empty() {
            bail!("--prefix must not be empty");
        }
        let cl =
            acoa_shared::model::load_cluster(&a.cluster).map_err(|e| anyhow::anyhow!("{e}"))?;
        let cluster = partition::prefixed(&cl, &names.node_prefix);
        let app =
            acoa_shared::model::load_application(&a.app).map_err(|e| anyhow::anyhow!("{e}"))?;
        crate::netns::del_prefixed(&names.prefix)?;
        let mut numbered: Vec<(String, u32)> = cluster
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i as u32 + 1))
            .collect();
        numbered.push((OBS.into(), 250));
        let tb = Testbed::builder()
            .prefix(&names.prefix)
            .subnet(
                names
                    .subnet
                    .parse()
                    .map_err(|e| anyhow::anyhow!("--subnet: {e}"))?,
            )
            .host(true)
            .up_numbered(&numbered, &cluster.links)?;
        tunnels::check_testbed(&tb)?;
        let comp = tb.calibrate(&cluster.nodes[0].name, &cluster.nodes[1].name)?;
        tb.set_compensation(comp);
        if !a.no_images {
            let images_of: Vec<String> = app
                .components
                .iter()
                .map(|c| tunnels::retag(&c.image, &names.image_prefix))
                .collect();
            images(
                &images_of,
                &names.image_prefix,
                &format!("{}:{COLLECTOR_PORT}", tb.addr(OBS)?),
            )?;
        }
        let collector = tunnels::collector(&tb)?;
        let mut agent = AgentOptions::new(&a.agent_bin);
        agent.aarch64_bin = a.agent_bin_aarch64.clone();
        agent.period_ms = a.probe_period_ms;
        agent.window = 20;
        Ok(Bed {
            tb,
            cluster,
            app,
            collector,
            agent,
            names,
        })
    }
}

/// Builds the workload images `names` (`hil-tests/images.sh`), with `control` (the obs
/// endpoint's collector) baked in; runs with their own `prefix` build in their own directory.
pub fn images(names: &[String], prefix: &str, control: &str) -> Result<()> {
    let st = Command::new("bash")
        .arg("hil-tests/images.sh")
        .args(names)
        .env("ACOA_CONTROL", control)
        .env(
            "OUT",
            std::env::temp_dir().join(format!("acoa-{prefix}workload")),
        )
        .status()
        .context("hil-tests/images.sh")?;
    if !st.success() {
        bail!("hil-tests/images.sh failed");
    }
    Ok(())
}
