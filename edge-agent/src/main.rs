#![forbid(unsafe_code)]

use std::io::IsTerminal;

use anyhow::Context;
use clap::Parser;
use edge_agent::config::{self, Cli, Command, Config};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
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
        None => {
            let cfg = Config::load(cli.overrides)?;
            edge_agent::agent::run(cfg)
        }
    }
}
