//! The fleet and applications the exploration is measured on (issue 16): the file
//! `coords-sim --place --export-dir` writes and cloud-broker's `examples/explore_sim` reads.

use acoa_shared::model::Application;

use super::Assignment;
use crate::Infra;

/// A fleet and its applications to measure exploration on, as `coords-sim --place
/// --export-dir` writes it and cloud-broker's `examples/explore_sim` reads it (JSON): the
/// nodes, their converged coordinates, every ordered pair as measured (row-major, `n` x `n`;
/// loopbacks included), and per application the placement on every measured pair (the
/// reference) with its score there.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Scenario {
    pub nodes: Vec<acoa_shared::model::Node>,
    /// Per node: position (3 dimensions), height (ms), error.
    pub coords: Vec<([f64; 3], f64, f64)>,
    /// The neighbour set size the coordinates converged with.
    pub k: usize,
    pub latency_ms: Vec<f32>,
    pub jitter_ms: Vec<f32>,
    pub success: Vec<f32>,
    /// Every ordered pair's true latency and success rate (row-major like `latency_ms`): what
    /// the network delivers, without the noise of one measurement (the median and the answer
    /// rate of the distribution a measurement samples). Empty in scenarios written before.
    #[serde(default)]
    pub true_latency_ms: Vec<f32>,
    #[serde(default)]
    pub true_success: Vec<f32>,
    pub apps: Vec<ScenarioApp>,
}

/// One application of a [`Scenario`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ScenarioApp {
    pub application: Application,
    /// Placed on every measured pair, and its score there.
    pub reference: Assignment,
    pub score: f64,
}

impl Scenario {
    /// The measured quality and jitter of the pair (from, to).
    pub fn pair(&self, from: usize, to: usize) -> (crate::LinkQ, f64) {
        let i = from * self.nodes.len() + to;
        (
            crate::LinkQ {
                latency_ms: f64::from(self.latency_ms[i]),
                success: f64::from(self.success[i]),
            },
            f64::from(self.jitter_ms[i]),
        )
    }

    /// The true quality of the pair (from, to), if the scenario holds it.
    pub fn true_pair(&self, from: usize, to: usize) -> Option<crate::LinkQ> {
        let i = from * self.nodes.len() + to;
        Some(crate::LinkQ {
            latency_ms: f64::from(*self.true_latency_ms.get(i)?),
            success: f64::from(*self.true_success.get(i)?),
        })
    }

    /// Every ordered pair, each as `link(from, to)` has it: the network a reference is placed
    /// on (n^2 links: about 10 GB at 10,000 nodes).
    pub fn every_pair(&self, link: impl Fn(usize, usize) -> crate::LinkQ) -> Infra {
        let n = self.nodes.len();
        let link = &link;
        Infra::new(
            self.nodes.clone(),
            (0..n).flat_map(|a| (0..n).map(move |b| (a as u32, b as u32, link(a, b)))),
        )
    }
}
