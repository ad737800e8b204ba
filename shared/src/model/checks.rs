//! Checks shared by both models: names, counts, rates, label lists.

use super::limits::MAX_NAME_LEN;
use super::ModelError;

/// Names travel in MQTT topics and container names: 1 to [`MAX_NAME_LEN`] characters of
/// `[A-Za-z0-9_.-]`, starting with a letter or digit (so never `+`, `#`, `/`, a space or
/// NUL).
pub fn check_name(field: &str, name: &str) -> Result<(), ModelError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(ModelError::new(
            field,
            format!(
                "`{}` is not a valid name (1 to {MAX_NAME_LEN} characters of letters, digits, `_`, `.`, `-`, starting with a letter or digit)",
                shown(name)
            ),
        ))
    }
}

/// A measured or declared rate: finite and >= 0.
pub(crate) fn check_rate(field: &str, v: f64) -> Result<(), ModelError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(ModelError::new(
            field,
            format!("must be a finite number >= 0, got {v}"),
        ))
    }
}

pub(crate) fn check_opt_rate(field: &str, v: Option<f64>) -> Result<(), ModelError> {
    v.map_or(Ok(()), |v| check_rate(field, v))
}

pub(crate) fn check_labels(field: &str, labels: &[String]) -> Result<(), ModelError> {
    for (i, l) in labels.iter().enumerate() {
        check_name(&format!("{field}[{i}]"), l)?;
    }
    Ok(())
}

/// A list of `len` entries at `field`, refused over `max`.
pub(crate) fn check_count(field: &str, len: usize, max: usize) -> Result<(), ModelError> {
    if len > max {
        return Err(ModelError::new(
            field,
            format!("{len} entries exceed the limit of {max}"),
        ));
    }
    Ok(())
}

/// `s` as it may appear in an error: control characters escaped, at most 64 characters.
pub(crate) fn shown(s: &str) -> String {
    let mut out: String = s.chars().take(64).flat_map(char::escape_debug).collect();
    if s.chars().nth(64).is_some() {
        out.push_str("...");
    }
    out
}
