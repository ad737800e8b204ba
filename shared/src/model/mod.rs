//! The infrastructure model (`cluster.yaml`) and the workload model (`app.yaml`) of
//! `spec/model.md`, read from YAML or JSON and validated.
//!
//! Every error names the file (when there is one), the field (a path such as
//! `channels[2].to`) and the reason. A document is bounded before and while it is parsed
//! (size, nesting, aliases, tags, string lengths: [`limits`]), so no input makes reading it
//! slow or large; `docs/model.md` documents the formats and every limit.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A model file that could not be read, parsed or validated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ModelError {
    /// The file the model came from, when it came from one.
    pub file: Option<String>,
    /// Where in the document: `components[1].requires.datacenter`; empty for the whole document.
    pub field: String,
    /// What is wrong, lowercase.
    pub reason: String,
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}: ")?;
        }
        if self.field.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.field, self.reason)
        }
    }
}

impl ModelError {
    /// An error at `field` for `reason`. Both may quote what a document holds, so control
    /// characters are escaped (an error is one log line, whatever the document says) and each
    /// is cut at [`limits::MAX_ERROR_LEN`] characters.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ModelError {
            file: None,
            field: one_line(field.into()),
            reason: one_line(reason.into()),
        }
    }

    /// The same error, said of `file`.
    pub fn in_file(mut self, file: impl Into<String>) -> Self {
        self.file = Some(file.into());
        self
    }
}

/// `s` with control characters escaped, at most [`limits::MAX_ERROR_LEN`] characters.
fn one_line(s: String) -> String {
    let max = limits::MAX_ERROR_LEN;
    if s.len() <= max && !s.chars().any(char::is_control) {
        return s;
    }
    let mut out = String::new();
    for (n, c) in s.chars().enumerate() {
        if n == max {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Where a datacenter or node sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    Cloud,
    Edge,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Cloud => "cloud",
            Layer::Edge => "edge",
        })
    }
}

mod application;
mod between;
mod checks;
mod cluster;
mod estimates;
mod health;
pub mod limits;
mod read;
mod scan;
mod update;

pub use application::*;
pub use between::{last_of_each_pair, row_starts, Between};
pub use checks::check_name;
pub use cluster::*;
pub use estimates::*;
pub use health::*;
pub use read::*;
pub use update::{Gate, Update, DEFAULT_BATCH_SIZE, DEFAULT_DEADLINE_S, DEFAULT_HEALTHY_S};
