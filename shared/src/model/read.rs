//! Reading model documents: YAML or JSON text, bounded by [`super::limits`] before and while
//! it is parsed, then validated.

use super::limits::{self, DocumentLimits};
use super::{scan, Application, Cluster, ModelError};
use std::path::Path;

/// How a model document is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Format {
    /// JSON when the document starts with `{`, YAML otherwise (YAML also reads most JSON).
    pub fn sniff(text: &str) -> Format {
        if text.trim_start().starts_with('{') {
            Format::Json
        } else {
            Format::Yaml
        }
    }
}

/// Parses (without validating) a document of type `T` from YAML or JSON text, within the
/// looser [`limits::CLUSTER`] bounds.
pub fn parse<T: serde::de::DeserializeOwned>(text: &str, format: Format) -> Result<T, ModelError> {
    parse_within(text, format, &limits::CLUSTER)
}

/// Parses (without validating) a document of type `T` from YAML or JSON text; a text that
/// breaks a bound of `lim` is refused before the typed parser sees it.
pub fn parse_within<T: serde::de::DeserializeOwned>(
    text: &str,
    format: Format,
    lim: &DocumentLimits,
) -> Result<T, ModelError> {
    if format == Format::Yaml && text.trim().is_empty() {
        return Err(ModelError::new("", "the document is empty"));
    }
    scan::check(text, format == Format::Json, lim)?;
    match format {
        Format::Json => {
            let de = &mut serde_json::Deserializer::from_str(text);
            serde_path_to_error::deserialize(de).map_err(|e| {
                let field = field_of(e.path());
                ModelError::new(field, format!("invalid json: {}", e.inner()))
            })
        }
        Format::Yaml => {
            let de = serde_yaml_ng::Deserializer::from_str(text);
            serde_path_to_error::deserialize(de).map_err(|e| {
                let field = field_of(e.path());
                // serde_yaml_ng prefixes its message with the path we already name.
                let msg = e.inner().to_string();
                let msg = match msg.split_once(": ") {
                    Some((head, tail)) if !head.contains(' ') => tail.to_string(),
                    _ => msg,
                };
                ModelError::new(field, format!("invalid yaml: {msg}"))
            })
        }
    }
}

fn field_of(path: &serde_path_to_error::Path) -> String {
    let s = path.to_string();
    if s == "." {
        String::new()
    } else {
        s
    }
}

/// Parses and validates an application definition (YAML or JSON, sniffed).
pub fn parse_application(text: &str) -> Result<Application, ModelError> {
    let app: Application = parse_within(text, Format::sniff(text), &limits::APPLICATION)?;
    app.validate()?;
    Ok(app)
}

/// Parses and validates a cluster snapshot (YAML or JSON, sniffed).
pub fn parse_cluster(text: &str) -> Result<Cluster, ModelError> {
    let c: Cluster = parse_within(text, Format::sniff(text), &limits::CLUSTER)?;
    c.validate()?;
    Ok(c)
}

/// The text of the file at `path`, refused before reading when it is over `lim`'s size.
fn read(path: &Path, lim: &DocumentLimits) -> Result<String, ModelError> {
    let file = path.display().to_string();
    let cannot = |e: std::io::Error| {
        ModelError::new("", format!("cannot read the file: {e}")).in_file(file.clone())
    };
    let len = std::fs::metadata(path).map_err(cannot)?.len();
    scan::check_size(usize::try_from(len).unwrap_or(usize::MAX), lim)
        .map_err(|e| e.in_file(file.clone()))?;
    std::fs::read_to_string(path).map_err(cannot)
}

/// Reads, parses and validates a cluster file; errors name the file.
pub fn load_cluster(path: &Path) -> Result<Cluster, ModelError> {
    parse_cluster(&read(path, &limits::CLUSTER)?).map_err(|e| e.in_file(path.display().to_string()))
}

/// Reads, parses and validates an application file; errors name the file.
pub fn load_application(path: &Path) -> Result<Application, ModelError> {
    parse_application(&read(path, &limits::APPLICATION)?)
        .map_err(|e| e.in_file(path.display().to_string()))
}
