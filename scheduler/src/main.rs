//! `scheduler`: offline placement (`scheduler place`, model.md), the list of algorithms, and
//! (feature `worker`, on by default) `scheduler worker`, which computes the control plane's
//! placement jobs taken from MQTT.
#![forbid(unsafe_code)]

#[cfg(feature = "worker")]
mod worker;

use acoa_scheduler::{place_on, Infra, Ledger, Options, Outcome, Report};
use acoa_shared::model::{load_application, load_cluster, Application};
use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(name = "scheduler", version, about = "ACOA placement engine")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Places applications on a cluster snapshot and prints the placements.
    Place {
        /// The cluster snapshot (YAML or JSON).
        #[arg(long)]
        cluster: PathBuf,
        /// An application definition (YAML or JSON); repeat for several. They are placed
        /// in order, each around the resource requests of those before it.
        #[arg(long = "app", required = true)]
        apps: Vec<PathBuf>,
        /// Enumerate every deployment (small cases only): adds worst_score and mean_score.
        #[arg(long)]
        enumerate: bool,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Stop the branch and bound after this many milliseconds with the best placement
        /// found (then not proven optimal; the output gives the upper bound).
        #[arg(long)]
        time_budget_ms: Option<u64>,
    },
    /// Lists the placement algorithms.
    Algorithms,
    /// Computes the control plane's placement jobs, taken from the broker through a shared
    /// subscription (several workers share the load), until stopped.
    #[cfg(feature = "worker")]
    Worker {
        /// The control plane's broker.
        #[arg(long, env = "ACOA_BROKER_URL")]
        broker_url: String,
        /// The worker login (`cloud-broker worker add NAME`).
        #[arg(long, env = "ACOA_WORKER_USERNAME")]
        username: String,
        #[arg(long, env = "ACOA_WORKER_PASSWORD", hide_env_values = true)]
        password: String,
        /// The control plane's public key (64 hex digits): only jobs it signed are computed.
        #[arg(long, env = "ACOA_CONTROL_PLANE_KEY")]
        control_plane_key: String,
        /// The shared-subscription group: each job goes to one worker of the group.
        #[arg(long, default_value = acoa_shared::jobs::DEFAULT_GROUP)]
        group: String,
        /// This worker's name, in its results' topic (default: the login).
        #[arg(long)]
        name: Option<String>,
        /// Jobs computed at once (default: the available cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Jobs waiting at most; more are dropped (the control plane re-publishes them).
        #[arg(long, default_value_t = 16)]
        queue: usize,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Serialize)]
struct Line<'a> {
    application: &'a str,
    scheduler: &'a str,
    placement: &'a BTreeMap<String, String>,
    score: f64,
    criteria: Vec<Grade<'a>>,
    feasible_deployments: u128,
    elapsed_us: u128,
    #[serde(skip_serializing_if = "Option::is_none")]
    worst_score: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mean_score: Option<f64>,
    /// Present (false) only when the time budget stopped the search before the proof.
    #[serde(skip_serializing_if = "Option::is_none")]
    proven: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    upper_bound: Option<f64>,
    /// Present (false) only when the count of feasible deployments is the product of the
    /// candidate counts rather than the exact count.
    #[serde(skip_serializing_if = "Option::is_none")]
    feasible_exact: Option<bool>,
    /// What a `topsis` or `network-aware` decision rested on.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    notes: &'a [String],
}

#[derive(Serialize)]
struct Grade<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    component: Option<&'a str>,
    weight: f64,
    grade: f64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        #[cfg(feature = "worker")]
        Cmd::Worker {
            broker_url,
            username,
            password,
            control_plane_key,
            group,
            name,
            threads,
            queue,
        } => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| "info,rumqttc=warn".into()),
                )
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .init();
            worker::run(worker::WorkerArgs {
                broker_url,
                name: name.unwrap_or_else(|| username.clone()),
                username,
                password,
                control_plane_key,
                group,
                threads: threads.unwrap_or_else(|| {
                    std::thread::available_parallelism()
                        .map(|n| n.get())
                        .unwrap_or(1)
                }),
                queue,
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Algorithms => {
            for a in acoa_scheduler::algorithms() {
                println!("{a}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Place {
            cluster,
            apps,
            enumerate,
            format,
            time_budget_ms,
        } => {
            let cluster = load_cluster(&cluster)?;
            let apps: Vec<Application> = apps
                .iter()
                .map(|p| load_application(p))
                .collect::<Result<_, _>>()?;
            let infra = Infra::from_cluster(&cluster);
            let opts = Options {
                enumerate,
                time_budget: time_budget_ms.map(Duration::from_millis),
                ..Options::default()
            };
            let mut ledger = Ledger::new();
            let mut failed = false;
            for app in &apps {
                let start = Instant::now();
                let report = place_on(&infra, app, &ledger, &opts)
                    .with_context(|| format!("application `{}`", app.application))?;
                let elapsed = start.elapsed();
                match &report.outcome {
                    Outcome::Placed(p) => {
                        for c in &app.components {
                            if let Some(r) = c.resources {
                                ledger.reserve(&p.assignment[&c.name], r);
                            }
                        }
                        print_placement(app, &report, elapsed, format)?;
                    }
                    Outcome::Infeasible(i) => {
                        eprintln!(
                            "error: application `{}` cannot be placed: {}",
                            app.application, i.reason
                        );
                        failed = true;
                    }
                }
            }
            Ok(if failed {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}

fn print_placement(
    app: &Application,
    report: &Report,
    elapsed: Duration,
    format: Format,
) -> anyhow::Result<()> {
    let Outcome::Placed(p) = &report.outcome else {
        return Ok(());
    };
    match format {
        Format::Json => {
            let line = Line {
                application: &app.application,
                scheduler: &app.scheduler,
                placement: &p.assignment,
                score: p.score,
                criteria: p
                    .criteria
                    .iter()
                    .map(|c| Grade {
                        kind: c.kind.as_str(),
                        path: c.path.as_deref(),
                        component: c.component.as_deref(),
                        weight: c.weight,
                        grade: c.grade,
                    })
                    .collect(),
                feasible_deployments: p.feasible_deployments,
                elapsed_us: elapsed.as_micros(),
                worst_score: report.worst_score,
                mean_score: report.mean_score,
                proven: (!report.proven).then_some(false),
                upper_bound: (!report.proven).then_some(report.upper_bound),
                feasible_exact: (!report.feasible_exact).then_some(false),
                notes: &p.notes,
            };
            println!("{}", serde_json::to_string(&line)?);
        }
        Format::Text => {
            let proof = if app.scheduler != "qos" {
                format!("{}, component by component", app.scheduler)
            } else if report.proven {
                "optimum proven".to_string()
            } else {
                format!(
                    "not proven: the optimum is at most {:.6}",
                    report.upper_bound
                )
            };
            let count = if report.feasible_exact {
                format!("{}", p.feasible_deployments)
            } else {
                format!("at most {}", p.feasible_deployments)
            };
            println!(
                "{}: score {:.6} ({proof}; {count} feasible deployments; {} us)",
                app.application,
                p.score,
                elapsed.as_micros()
            );
            for c in &app.components {
                println!("  {:<24} -> {}", c.name, p.assignment[&c.name]);
            }
            for n in &p.notes {
                println!("  note: {n}");
            }
            for c in &p.criteria {
                let target = c
                    .path
                    .as_deref()
                    .map(|t| format!("path {t}"))
                    .or_else(|| c.component.as_deref().map(|t| format!("component {t}")))
                    .unwrap_or_default();
                println!(
                    "  {:<22} {:<28} weight {:<6} grade {:.6}",
                    c.kind.as_str(),
                    target,
                    c.weight,
                    c.grade
                );
            }
            if let (Some(w), Some(m)) = (report.worst_score, report.mean_score) {
                println!("  worst score {w:.6}, mean score {m:.6} (enumeration)");
            }
        }
    }
    Ok(())
}
