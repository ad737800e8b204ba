//! The pre-scan: a document's text is walked as a stream of events, in time linear in its
//! size, and refused at the first event that breaks a [`DocumentLimits`] bound, before the
//! typed parser sees it. The typed parser (serde_yaml_ng over libyaml) loads a whole
//! document before it checks any depth, takes time quadratic in the nesting depth, and
//! expands aliases into copies; after this scan it only ever sees bounded documents.
//!
//! YAML is walked with yaml-rust2's event parser (pure Rust, no recursion); JSON with a
//! byte scanner (the typed JSON parser is linear and has no aliases or tags).

use super::limits::DocumentLimits;
use super::ModelError;
use std::collections::HashMap;
use yaml_rust2::parser::{Event, Parser, Tag};

/// The YAML core schema tags (`!!str`, ...): the only tags a model document may carry.
const CORE_TAGS: [&str; 7] = ["str", "int", "float", "bool", "null", "seq", "map"];
const CORE_PREFIX: &str = "tag:yaml.org,2002:";

/// Where a collection being walked is, for the field path of an error.
enum Pos {
    Seq { index: usize },
    Map { key: Option<String>, in_value: bool },
}

struct Frame {
    pos: Pos,
    items: usize,
    anchor: usize,
    nodes_at_start: u64,
    bytes_at_start: u64,
}

/// Expanded size of a complete anchored node.
#[derive(Clone, Copy)]
struct Size {
    nodes: u64,
    bytes: u64,
}

struct YamlScan<'l> {
    lim: &'l DocumentLimits,
    stack: Vec<Frame>,
    anchors: HashMap<usize, Size>,
    nodes: u64,
    bytes: u64,
    alias_uses: u64,
    alias_nodes: u64,
    alias_bytes: u64,
}

/// Refuses `text` at the first bound of `lim` it breaks (size first, then while walking it).
pub(crate) fn check(text: &str, json: bool, lim: &DocumentLimits) -> Result<(), ModelError> {
    check_size(text.len(), lim)?;
    if json {
        json_scan(text, lim)
    } else {
        yaml_scan(text, lim)?;
        bracket_guard(text, lim)
    }
}

/// A bound on flow nesting that does not depend on any YAML parser: the brackets open at
/// any point of the raw text, quotes and comments included, stay within four times the
/// depth bound. The typed parser's cost grows with the square of the flow nesting, so this
/// holds even where two YAML parsers might read a bracket differently; no model document
/// comes near it.
fn bracket_guard(text: &str, lim: &DocumentLimits) -> Result<(), ModelError> {
    let max = 4 * lim.max_depth;
    let (mut open, mut line) = (0usize, 1usize);
    for c in text.bytes() {
        match c {
            b'[' | b'{' => {
                open += 1;
                if open > max {
                    return Err(ModelError::new(
                        "",
                        format!(
                            "nesting depth exceeds {} at line {line} ({max} brackets open)",
                            lim.max_depth
                        ),
                    ));
                }
            }
            b']' | b'}' => open = open.saturating_sub(1),
            b'\n' => line += 1,
            _ => {}
        }
    }
    Ok(())
}

/// Refuses a document of `len` bytes over the size bound.
pub(crate) fn check_size(len: usize, lim: &DocumentLimits) -> Result<(), ModelError> {
    if len > lim.max_bytes {
        return Err(ModelError::new(
            "",
            format!(
                "document size {len} bytes exceeds the limit of {} bytes",
                lim.max_bytes
            ),
        ));
    }
    Ok(())
}

fn yaml_scan(text: &str, lim: &DocumentLimits) -> Result<(), ModelError> {
    let mut parser = Parser::new_from_str(text);
    let mut s = YamlScan {
        lim,
        stack: Vec::new(),
        anchors: HashMap::new(),
        nodes: 0,
        bytes: 0,
        alias_uses: 0,
        alias_nodes: 0,
        alias_bytes: 0,
    };
    loop {
        let (event, mark) = parser.next_token().map_err(|e| {
            // The scanner's own bound on flow nesting (255) lies beyond ours.
            if e.info() == "recursion limit exceeded" {
                s.at(
                    format!("nesting depth exceeds {}", lim.max_depth),
                    e.marker().line(),
                )
            } else {
                ModelError::new(s.path(), format!("invalid yaml: {e}"))
            }
        })?;
        let line = mark.line();
        match event {
            Event::StreamEnd => return Ok(()),
            Event::Nothing | Event::StreamStart | Event::DocumentStart | Event::DocumentEnd => {}
            Event::Scalar(value, _, anchor, tag) => {
                s.node_starts(line)?;
                s.check_tag(tag.as_ref(), line)?;
                if value.len() > lim.max_scalar_bytes {
                    return Err(s.at(
                        format!(
                            "string of {} bytes exceeds the limit of {} bytes",
                            value.len(),
                            lim.max_scalar_bytes
                        ),
                        line,
                    ));
                }
                s.count(1, value.len() as u64, line)?;
                if anchor != 0 {
                    s.anchors.insert(
                        anchor,
                        Size {
                            nodes: 1,
                            bytes: value.len() as u64,
                        },
                    );
                }
                s.take_key(Some(value));
                s.node_ends();
            }
            Event::Alias(anchor) => {
                s.node_starts(line)?;
                let Some(size) = s.anchors.get(&anchor).copied() else {
                    return Err(s.at("alias refers to a node that encloses it", line));
                };
                s.alias_uses += 1;
                s.alias_nodes += size.nodes;
                s.alias_bytes += size.bytes;
                if s.alias_uses > lim.max_alias_uses {
                    return Err(s.at(
                        format!("alias uses exceed the limit of {}", lim.max_alias_uses),
                        line,
                    ));
                }
                if s.alias_nodes > lim.max_alias_nodes {
                    return Err(s.at(
                        format!(
                            "aliases expand to {} nodes, more than the limit of {}",
                            s.alias_nodes, lim.max_alias_nodes
                        ),
                        line,
                    ));
                }
                if s.alias_bytes > lim.max_alias_bytes {
                    return Err(s.at(
                        format!(
                            "aliases expand to {} bytes of strings, more than the limit of {}",
                            s.alias_bytes, lim.max_alias_bytes
                        ),
                        line,
                    ));
                }
                s.count(size.nodes, size.bytes, line)?;
                s.take_key(None);
                s.node_ends();
            }
            Event::SequenceStart(anchor, ref tag) | Event::MappingStart(anchor, ref tag) => {
                let is_seq = matches!(event, Event::SequenceStart(..));
                s.node_starts(line)?;
                s.check_tag(tag.as_ref(), line)?;
                s.take_key(None);
                if s.stack.len() >= lim.max_depth {
                    return Err(s.at(format!("nesting depth exceeds {}", lim.max_depth), line));
                }
                let (nodes_at_start, bytes_at_start) = (s.nodes, s.bytes);
                s.count(1, 0, line)?;
                s.stack.push(Frame {
                    pos: if is_seq {
                        Pos::Seq { index: 0 }
                    } else {
                        Pos::Map {
                            key: None,
                            in_value: false,
                        }
                    },
                    items: 0,
                    anchor,
                    nodes_at_start,
                    bytes_at_start,
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some(f) = s.stack.pop() {
                    if f.anchor != 0 {
                        s.anchors.insert(
                            f.anchor,
                            Size {
                                nodes: s.nodes - f.nodes_at_start,
                                bytes: s.bytes - f.bytes_at_start,
                            },
                        );
                    }
                }
                s.node_ends();
            }
        }
    }
}

impl YamlScan<'_> {
    /// The field path of the current position: `components[1].requires.hardware`.
    fn path(&self) -> String {
        let mut out = String::new();
        for f in &self.stack {
            match &f.pos {
                Pos::Seq { index } => out.push_str(&format!("[{index}]")),
                Pos::Map {
                    key: Some(k),
                    in_value: true,
                } => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Pos::Map { .. } => {}
            }
        }
        out
    }

    fn at(&self, reason: impl std::fmt::Display, line: usize) -> ModelError {
        ModelError::new(self.path(), format!("{reason} at line {line}"))
    }

    /// A node begins in the current collection: one more entry there (a mapping's key
    /// begins an entry, its value does not).
    fn node_starts(&mut self, line: usize) -> Result<(), ModelError> {
        let max = self.lim.max_items;
        let Some(f) = self.stack.last_mut() else {
            return Ok(());
        };
        let starts_entry = match &f.pos {
            Pos::Seq { .. } => true,
            Pos::Map { in_value, .. } => !in_value,
        };
        if starts_entry {
            f.items += 1;
            if f.items > max {
                return Err(self.at(
                    format!("more than {max} entries in one sequence or mapping"),
                    line,
                ));
            }
        }
        Ok(())
    }

    /// When the node that begins is a mapping's key, remember it (for paths).
    fn take_key(&mut self, scalar: Option<String>) {
        if let Some(Frame {
            pos: Pos::Map {
                key,
                in_value: false,
            },
            ..
        }) = self.stack.last_mut()
        {
            *key = scalar;
        }
    }

    /// A node is complete: the collection it is in moves on.
    fn node_ends(&mut self) {
        if let Some(f) = self.stack.last_mut() {
            match &mut f.pos {
                Pos::Seq { index } => *index += 1,
                Pos::Map { in_value, .. } => *in_value = !*in_value,
            }
        }
    }

    fn count(&mut self, nodes: u64, bytes: u64, line: usize) -> Result<(), ModelError> {
        self.nodes += nodes;
        self.bytes += bytes;
        if self.nodes > self.lim.max_nodes {
            return Err(self.at(
                format!("more than {} nodes in the document", self.lim.max_nodes),
                line,
            ));
        }
        Ok(())
    }

    fn check_tag(&self, tag: Option<&Tag>, line: usize) -> Result<(), ModelError> {
        let Some(tag) = tag else { return Ok(()) };
        if tag.handle == CORE_PREFIX && CORE_TAGS.contains(&tag.suffix.as_str()) {
            return Ok(());
        }
        let shown = if tag.handle == CORE_PREFIX {
            format!("!!{}", tag.suffix)
        } else {
            format!("{}{}", tag.handle, tag.suffix)
        };
        Err(self.at(
            format!(
                "tag `{shown}` is not allowed (only the core tags !!str, !!int, !!float, !!bool, !!null, !!seq, !!map)"
            ),
            line,
        ))
    }
}

/// Where a JSON collection being walked is.
struct JsonFrame {
    object: bool,
    items: usize,
    /// Objects: the key of the entry being read (as written), and whether its value is
    /// being read.
    key: String,
    in_value: bool,
}

fn json_path(stack: &[JsonFrame]) -> String {
    let mut out = String::new();
    for f in stack {
        if f.object {
            if f.in_value {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&f.key);
            }
        } else if f.items > 0 {
            out.push_str(&format!("[{}]", f.items - 1));
        }
    }
    out
}

/// JSON: nesting depth, string length and entries per collection, in one pass over the
/// bytes. Syntax is left to the typed parser (it is linear); this only has to be exact
/// about where strings begin and end.
fn json_scan(text: &str, lim: &DocumentLimits) -> Result<(), ModelError> {
    let b = text.as_bytes();
    let mut stack: Vec<JsonFrame> = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let at = |stack: &[JsonFrame], reason: String, line: usize| {
        ModelError::new(json_path(stack), format!("{reason} at line {line}"))
    };
    // A value or key begins at the current position: count the entry.
    let begins = |stack: &mut Vec<JsonFrame>, line: usize| -> Result<(), ModelError> {
        if let Some(f) = stack.last_mut() {
            if !f.object || !f.in_value {
                f.items += 1;
                if f.items > lim.max_items {
                    return Err(at(
                        stack,
                        format!(
                            "more than {} entries in one sequence or mapping",
                            lim.max_items
                        ),
                        line,
                    ));
                }
            }
        }
        Ok(())
    };
    while i < b.len() {
        match b[i] {
            b'\n' => line += 1,
            b'"' => {
                // The string's length is counted as the bytes of its value (escapes decoded),
                // as for a YAML scalar.
                let start = i + 1;
                let mut j = start;
                let mut len = 0;
                while j < b.len() && b[j] != b'"' {
                    if b[j] != b'\\' {
                        len += 1;
                        j += 1;
                    } else if b.get(j + 1) == Some(&b'u') {
                        let unit = text
                            .get(j + 2..j + 6)
                            .and_then(|h| u32::from_str_radix(h, 16).ok())
                            .unwrap_or(0);
                        // A surrogate is half of a 4-byte character.
                        len += match unit {
                            0..=0x7f => 1,
                            0x80..=0x7ff | 0xd800..=0xdfff => 2,
                            _ => 3,
                        };
                        j += 6;
                    } else {
                        len += 1;
                        j += 2;
                    }
                }
                let is_key = stack.last().is_some_and(|f| f.object && !f.in_value);
                begins(&mut stack, line)?;
                if len > lim.max_scalar_bytes {
                    return Err(at(
                        &stack,
                        format!(
                            "string of {len} bytes exceeds the limit of {} bytes",
                            lim.max_scalar_bytes
                        ),
                        line,
                    ));
                }
                if is_key {
                    if let Some(f) = stack.last_mut() {
                        f.key = text.get(start..j).unwrap_or("?").to_string();
                    }
                }
                i = j;
            }
            c @ (b'[' | b'{') => {
                begins(&mut stack, line)?;
                stack.push(JsonFrame {
                    object: c == b'{',
                    items: 0,
                    key: String::new(),
                    in_value: false,
                });
                if stack.len() > lim.max_depth {
                    return Err(at(
                        &stack,
                        format!("nesting depth exceeds {}", lim.max_depth),
                        line,
                    ));
                }
            }
            b']' | b'}' => {
                stack.pop();
            }
            b':' => {
                if let Some(f) = stack.last_mut() {
                    f.in_value = true;
                }
            }
            b',' => {
                if let Some(f) = stack.last_mut() {
                    f.in_value = false;
                }
            }
            c if !c.is_ascii_whitespace() => {
                // The first byte of a number or literal; the rest of it is skipped.
                begins(&mut stack, line)?;
                while i + 1 < b.len() && !b"[]{},:\" \t\r\n".contains(&b[i + 1]) {
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}
