#![forbid(unsafe_code)]

use std::io::IsTerminal;

use anyhow::Context;
use clap::Parser;
use edge_agent::config::{self, Cli, Command, Config};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let json = cli.log_format == "json";
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_target(false)
        .with_writer(std::io::stderr);
    if json {
        logs.json().flatten_event(true).init();
    } else {
        logs.with_ansi(std::io::stderr().is_terminal()).init();
    }
    let outcome = run(cli);
    if let (true, Err(e)) = (json, &outcome) {
        // The one line that ends the agent, as JSON like every other.
        tracing::error!("{e:#}");
        std::process::exit(1);
    }
    outcome
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Some(Command::Pubkey { config, state_dir }) => {
            let config = config.or(cli.overrides.config);
            let state_dir = state_dir.or(cli.overrides.state_dir);
            let dir = config::state_dir_only(config.as_deref(), state_dir)?;
            let (key, _) = edge_agent::store::node_key(&dir)
                .with_context(|| format!("node key in {}", dir.display()))?;
            println!(
                "{}",
                acoa_shared::wire::keys::public_hex(&key.verifying_key())
            );
            Ok(())
        }
        Some(Command::CheckConfig {
            cluster,
            templates,
            files,
        }) => check_config(cluster.as_deref(), templates, &files),
        None => {
            let cfg = Config::load(cli.overrides)?;
            edge_agent::agent::run(cfg)
        }
    }
}

/// `edge-agent check-config`: one line per file (`ok FILE: summary` or `FAIL FILE: reasons`).
fn check_config(
    cluster: Option<&std::path::Path>,
    templates: bool,
    files: &[std::path::PathBuf],
) -> anyhow::Result<()> {
    #[cfg(feature = "cluster-check")]
    let cluster = cluster
        .map(config::check::load_cluster)
        .transpose()
        .map_err(|e| anyhow::anyhow!(e))?;
    #[cfg(not(feature = "cluster-check"))]
    let cluster: Option<acoa_shared::model::Cluster> = match cluster {
        Some(_) => anyhow::bail!(
            "this build reads no cluster files (built without the cargo feature cluster-check)"
        ),
        None => None,
    };
    let mut failed = 0;
    for f in files {
        match config::check::check_file(f, cluster.as_ref(), templates) {
            Ok(summary) => println!("ok {}: {summary}", f.display()),
            Err(e) => {
                failed += 1;
                println!("FAIL {}: {e}", f.display());
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} configurations are wrong", files.len());
    }
    Ok(())
}
