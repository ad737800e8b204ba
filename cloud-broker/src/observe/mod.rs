//! What operators watch: metrics in the Prometheus text format (`serve --metrics-listen`) and
//! a read-only live web view of the fleet behind a token (`serve --http-listen`).
//!
//! The decision loop hands each event's outcome to an [`Observer`]: it counts from the
//! engine's events and statistics, keeps the recent operator events in a bounded ring, and
//! publishes a [`crate::engine::view::FleetView`] through a `watch` channel at most every
//! [`PUBLISH_EVERY_MS`], and in a large fleet less often: in proportion to its nodes, and so
//! that building it takes no more than a tenth of the loop ([`publish_every_ms`]). Everything
//! else (the fleet document with its paths scored against the optimum, the HTTP servers) runs
//! off the loop.
//!
//! Invariants: off unless asked for (no observer, no listener); the web view never answers
//! without the token; nothing here changes the engine.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use crate::engine::view::FleetView;
use crate::engine::{Engine, Event};

mod events;
pub mod fleet;
mod labels;
pub mod metrics;
pub mod page;
mod web;

pub use events::{OpEvent, EVENTS_KEPT};
pub use labels::{count_drop, drop_reason, placement_reason, DROP_REASONS};
pub use metrics::Metrics;

/// The loop publishes a new view at most this often.
pub const PUBLISH_EVERY_MS: u64 = 250;

/// And in a larger fleet at most every this many ms per 1,000 nodes: 2.5 s at 50,000 nodes,
/// the 250 ms up to 5,000. Each view is cheap (16-126 ms at 50,000 nodes), but four a second
/// and the documents built from them took a quarter of a core on a 2-core machine
/// (BENCHMARKS.md, "What operators watch, at 50,000 nodes"); an operator's page of a fleet
/// that size reloads every 1.5 s and shows counts that do not move four times a second.
pub const PUBLISH_MS_PER_1000_NODES: u64 = 50;

/// Building the view takes at most one part in this of the decision loop's time: every link
/// of a 50,000-node fleet took about 1.6 s to build before views held only the placements'
/// links, which every [`PUBLISH_EVERY_MS`] would stall the loop.
pub const VIEW_SHARE: u64 = 10;

/// The wait before the next view of a fleet of `nodes`, after one that took `took_ms` to
/// build: at least [`PUBLISH_EVERY_MS`], [`PUBLISH_MS_PER_1000_NODES`] per 1,000 nodes, and
/// [`VIEW_SHARE`] times what the last one took.
pub fn publish_every_ms(took_ms: u64, nodes: usize) -> u64 {
    let by_size = (nodes as u64).saturating_mul(PUBLISH_MS_PER_1000_NODES) / 1000;
    PUBLISH_EVERY_MS
        .max(by_size)
        .max(took_ms.saturating_mul(VIEW_SHARE))
}

/// `serve`'s flags for what operators watch.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ObserveArgs {
    /// Serve metrics in the Prometheus text format on http://ADDR/metrics (off by default).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Serve the read-only web view on http://ADDR/ (off by default; needs --http-token-file).
    #[arg(long, value_name = "ADDR", requires = "http_token_file")]
    pub http_listen: Option<SocketAddr>,
    /// The web view's token (the file's first line): `Authorization: Bearer TOKEN` or
    /// `?token=TOKEN`.
    #[arg(long, value_name = "FILE", requires = "http_listen")]
    pub http_token_file: Option<PathBuf>,
}

/// What operators watch, checked.
#[derive(Debug, Clone, Default)]
pub struct ObserveOptions {
    pub metrics_listen: Option<SocketAddr>,
    /// Where the web view listens, and its token.
    pub http: Option<(SocketAddr, String)>,
}

/// Why the observe flags cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("--http-token-file {0}: {1}")]
    TokenFile(PathBuf, std::io::Error),
    #[error("--http-token-file {0} holds no token (its first line is empty)")]
    EmptyToken(PathBuf),
    #[error("--http-listen needs --http-token-file: the web view is never served without a token")]
    NoToken,
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
}

impl ObserveArgs {
    /// The options, with the token read from its file.
    pub fn options(self) -> Result<ObserveOptions, ObserveError> {
        let http = match (self.http_listen, self.http_token_file) {
            (None, _) => None,
            (Some(_), None) => return Err(ObserveError::NoToken),
            (Some(addr), Some(file)) => {
                let text = std::fs::read_to_string(&file)
                    .map_err(|e| ObserveError::TokenFile(file.clone(), e))?;
                let token = text.lines().next().unwrap_or("").trim().to_string();
                if token.is_empty() {
                    return Err(ObserveError::EmptyToken(file));
                }
                Some((addr, token))
            }
        };
        Ok(ObserveOptions {
            metrics_listen: self.metrics_listen,
            http,
        })
    }

    /// Whether anything is to be observed.
    pub fn any(&self) -> bool {
        self.metrics_listen.is_some() || self.http_listen.is_some()
    }
}

/// What the loop publishes: the engine's view and the recent operator events.
#[derive(Debug, Clone)]
pub struct Published {
    pub view: FleetView,
    pub events: Vec<OpEvent>,
}

/// What an event was, noted before the engine takes it.
pub struct Before {
    /// A control event (anything but node telemetry): placements may change.
    control: bool,
    /// A placement result: why it was computed, how long it took (µs).
    scheduled: Option<(&'static str, u64)>,
    tick: bool,
}

/// The loop's side: counts, keeps the events, publishes views.
pub struct Observer {
    metrics: Arc<Metrics>,
    tx: watch::Sender<Option<Arc<Published>>>,
    ring: events::Ring,
    last_pub: Option<u64>,
    /// The wait between views ([`publish_every_ms`]), and the one last logged.
    every_ms: u64,
    said_every_ms: u64,
}

impl Observer {
    /// Starts the listeners `opts` asks for (none: no observer).
    pub async fn start(opts: &ObserveOptions) -> Result<Option<Observer>, ObserveError> {
        if opts.metrics_listen.is_none() && opts.http.is_none() {
            return Ok(None);
        }
        let metrics = Arc::new(Metrics::new());
        labels::set_drops(metrics.drops.clone());
        let (tx, rx) = watch::channel(None);
        let docs = fleet::spawn_builder(rx);
        if let Some(addr) = opts.metrics_listen {
            web::serve_metrics(addr, metrics.clone(), docs.clone()).await?;
        }
        if let Some((addr, token)) = &opts.http {
            web::serve_view(*addr, token.clone(), docs).await?;
        }
        Ok(Some(Observer {
            metrics,
            tx,
            ring: events::Ring::default(),
            last_pub: None,
            every_ms: PUBLISH_EVERY_MS,
            said_every_ms: PUBLISH_EVERY_MS,
        }))
    }

    /// Notes what `ev` is before the engine takes it.
    pub fn before(&self, ev: &Event) -> Before {
        let telemetry = matches!(
            ev,
            Event::Report(_)
                | Event::Links(_)
                | Event::Usage(_)
                | Event::Actual(_)
                | Event::Online { .. }
                | Event::RetainedDesired { .. }
        );
        Before {
            control: !telemetry,
            scheduled: match ev {
                Event::Scheduled(r) => Some((placement_reason(&r.purpose), r.elapsed_us)),
                _ => None,
            },
            tick: matches!(ev, Event::Tick),
        }
    }

    /// Counts what the engine did with the event noted in `before`, and publishes a view
    /// when the last one is older than [`publish_every_ms`] of what it took to build.
    pub fn after(&mut self, engine: &mut Engine, before: Before, now_ms: u64) {
        if let Some((_, us)) = before.scheduled {
            self.metrics.placement_seconds.observe(us as f64 / 1e6);
        }
        if before.control {
            let why = match before.scheduled {
                Some((reason, _)) => reason,
                None if before.tick => "network-aware descheduler",
                None => "other",
            };
            for change in self.ring.placements(engine, why) {
                self.metrics.count_placement(&change);
            }
        }
        let due = self
            .last_pub
            .is_none_or(|t| now_ms.saturating_sub(t) >= self.every_ms);
        if due {
            self.last_pub = Some(now_ms);
            let started = std::time::Instant::now();
            let view = engine.view();
            let nodes = view.nodes.len();
            self.metrics.count_stats(&view.stats);
            self.ring.states(&view);
            let p = Published {
                view,
                events: self.ring.recent(),
            };
            self.tx.send_replace(Some(Arc::new(p)));
            let took = started.elapsed().as_millis() as u64;
            self.every_ms = publish_every_ms(took, nodes);
            if self.every_ms >= self.said_every_ms.saturating_mul(2)
                || self.every_ms.saturating_mul(2) <= self.said_every_ms
            {
                self.said_every_ms = self.every_ms;
                tracing::info!(
                    "the operators' view of {nodes} nodes took {took} ms to build: published every {:.2} s from now on (at least {PUBLISH_MS_PER_1000_NODES} ms per 1,000 nodes; its building takes at most 1/{VIEW_SHARE} of the decision loop)",
                    self.every_ms as f64 / 1000.0
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_that_is_slow_to_build_is_built_less_often() {
        // a small fleet's view (a few ms) every 250 ms, as before
        assert_eq!(publish_every_ms(0, 20), PUBLISH_EVERY_MS);
        assert_eq!(publish_every_ms(25, 20), PUBLISH_EVERY_MS);
        // a view that took 800 ms: every 8 s, a tenth of the loop
        assert_eq!(publish_every_ms(800, 20), 8_000);
        assert_eq!(publish_every_ms(u64::MAX, 20), u64::MAX);
    }

    #[test]
    fn a_large_fleets_view_is_published_less_often_however_cheap() {
        // up to 5,000 nodes every 250 ms
        assert_eq!(publish_every_ms(0, 5_000), PUBLISH_EVERY_MS);
        // 50,000 nodes: a view of 16 ms (the same model) every 2.5 s, not four a second
        assert_eq!(publish_every_ms(16, 50_000), 2_500);
        assert_eq!(publish_every_ms(126, 50_000), 2_500);
        assert_eq!(publish_every_ms(400, 50_000), 4_000);
        assert_eq!(publish_every_ms(0, usize::MAX), u64::MAX / 1000);
    }
}
