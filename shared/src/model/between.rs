//! The median latency between two datacenters, per pair with measured links between them
//! ([`Between`], the `between` of [`super::LinkEstimates`]), held by number.
//!
//! A fleet of trains has many datacenters, and their random and nearest peers put measured
//! links between most pairs of trains that any of their nodes probe: the 50,000-node load
//! fleet (4,752 datacenters) has hundreds of thousands of such pairs. Kept as a map of maps of
//! names, they took about 75 bytes a pair, once in each model's estimates and again in each
//! scheduler's estimator (`acoa_scheduler::Estimator`); the heap profile of a 50,000-node
//! control plane put 240 MiB there (BENCHMARKS.md, "Datacenter pairs by number"). Here a
//! pair is two numbers and its median (16 bytes), in one table shared, not copied, by
//! whoever reads it ([`Arc`]).
//!
//! Invariants: `names` is sorted and without repeats; the row of a name holds each other
//! name at most once, sorted by number. A table built here ([`Between::from_pairs`],
//! [`Between::from_numbered`]) holds each pair once, in the row of the lesser name (the
//! numbers follow the names' order); one parsed holds the pairs as written, and
//! `LinkEstimates::validate` refuses a pair that names the greater first.

use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, SerializeMap, Serializer};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Per pair of datacenters, the median latency measured between them, ms (see the module
/// doc). Cloning shares the table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Between(Arc<Table>);

#[derive(Debug, Default, PartialEq)]
struct Table {
    /// The datacenters named, in name order: a datacenter's number is its index here.
    names: Vec<String>,
    /// Per number, where its row starts in `to` (one more entry than `names`).
    start: Vec<u32>,
    /// The rows: (the other datacenter's number, the median ms), sorted by number.
    to: Vec<(u32, f64)>,
}

impl Table {
    /// The row of number `a` (`None`: no such number).
    #[inline]
    fn row(&self, a: usize) -> Option<&[(u32, f64)]> {
        Some(&self.to[*self.start.get(a)? as usize..*self.start.get(a + 1)? as usize])
    }
}

impl Between {
    /// From pairs of names in either order (a pair of one name twice is skipped; of a pair
    /// given twice, the last median is kept).
    pub fn from_pairs<S: AsRef<str>>(pairs: impl IntoIterator<Item = (S, S, f64)>) -> Between {
        let pairs: Vec<(S, S, f64)> = pairs.into_iter().collect();
        let (names, numbered) =
            by_number(pairs.iter().map(|(a, b, ms)| (a.as_ref(), b.as_ref(), *ms)));
        Between::build(names, numbered)
    }

    /// From pairs of numbers into `names` (each name once, in any order), in either order
    /// (as [`Between::from_pairs`]; a number out of range is skipped). No name is compared
    /// per pair: what the control plane builds a model's estimates with.
    pub fn from_numbered(
        names: &[String],
        pairs: impl IntoIterator<Item = (u32, u32, f64)>,
    ) -> Between {
        let mut order: Vec<u32> = (0..names.len() as u32).collect();
        order.sort_unstable_by(|a, b| names[*a as usize].cmp(&names[*b as usize]));
        let mut renumber = vec![0u32; names.len()];
        for (i, o) in order.iter().enumerate() {
            renumber[*o as usize] = i as u32;
        }
        let numbered: Vec<(u32, u32, f64)> = pairs
            .into_iter()
            .filter(|(a, b, _)| (*a as usize) < names.len() && (*b as usize) < names.len())
            .map(|(a, b, ms)| (renumber[a as usize], renumber[b as usize], ms))
            .collect();
        let sorted: Vec<String> = order.iter().map(|o| names[*o as usize].clone()).collect();
        Between::build(sorted, numbered)
    }

    /// `names` sorted, each once; every pair put in the row of its lesser number.
    fn build(names: Vec<String>, mut pairs: Vec<(u32, u32, f64)>) -> Between {
        pairs.retain(|(a, b, _)| a != b);
        for p in &mut pairs {
            if p.0 > p.1 {
                (p.0, p.1) = (p.1, p.0);
            }
        }
        Between::of_rows(names, last_of_each_pair(pairs))
    }

    /// The table of `pairs`, sorted by (row, other), each in the row of its first number;
    /// only the names of a pair are kept.
    fn of_rows(mut names: Vec<String>, mut pairs: Vec<(u32, u32, f64)>) -> Between {
        let mut used = vec![false; names.len()];
        for (a, b, _) in &pairs {
            used[*a as usize] = true;
            used[*b as usize] = true;
        }
        if !used.iter().all(|u| *u) {
            // renumbered in the same order: the pairs stay sorted
            let mut renumber = vec![0u32; names.len()];
            let mut n = 0u32;
            for (i, u) in used.iter().enumerate() {
                renumber[i] = n;
                n += u32::from(*u);
            }
            let mut i = 0;
            names.retain(|_| {
                i += 1;
                used[i - 1]
            });
            for p in &mut pairs {
                (p.0, p.1) = (renumber[p.0 as usize], renumber[p.1 as usize]);
            }
        }
        let start = row_starts(names.len(), pairs.iter().map(|p| p.0));
        let to = pairs.into_iter().map(|(_, b, ms)| (b, ms)).collect();
        Between(Arc::new(Table { names, start, to }))
    }

    /// How many pairs.
    pub fn len(&self) -> usize {
        self.0.to.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.to.is_empty()
    }

    /// The datacenters named, in name order (a datacenter's number is its index).
    pub fn names(&self) -> &[String] {
        &self.0.names
    }

    /// The number of datacenter `name`, if a pair names it.
    pub fn number(&self, name: &str) -> Option<u32> {
        let i = self.0.names.binary_search_by(|x| x.as_str().cmp(name));
        i.ok().map(|i| i as u32)
    }

    /// The median between datacenters `a` and `b` (either order), if measured; `None` for
    /// `a == b`.
    pub fn get(&self, a: &str, b: &str) -> Option<f64> {
        self.get_numbered(self.number(a)?, self.number(b)?)
    }

    /// [`Between::get`] by numbers (either order).
    #[inline]
    pub fn get_numbered(&self, a: u32, b: u32) -> Option<f64> {
        let (lo, hi) = (a.min(b) as usize, a.max(b));
        let row = self.0.row(lo)?;
        let i = row.binary_search_by_key(&hi, |(o, _)| *o).ok()?;
        Some(row[i].1)
    }

    /// Every pair as numbers, (row, other, median), in order.
    pub fn numbered(&self) -> impl Iterator<Item = (u32, u32, f64)> + '_ {
        let t = &self.0;
        (0..t.names.len()).flat_map(move |a| {
            let row = t.row(a).unwrap_or_default();
            row.iter().map(move |(b, ms)| (a as u32, *b, *ms))
        })
    }

    /// The median of the `i`-th pair in [`Between::numbered`]'s order.
    #[inline]
    pub fn median_at(&self, i: usize) -> f64 {
        self.0.to[i].1
    }

    /// Every pair as names, (row, other, median), in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, f64)> + '_ {
        let n = &self.0.names;
        self.numbered()
            .map(|(a, b, ms)| (n[a as usize].as_str(), n[b as usize].as_str(), ms))
    }

    /// Every median multiplied by `f`.
    pub fn scaled(&self, f: f64) -> Between {
        let t = &self.0;
        Between(Arc::new(Table {
            names: t.names.clone(),
            start: t.start.clone(),
            to: t.to.iter().map(|(b, ms)| (*b, ms * f)).collect(),
        }))
    }
}

/// Where each of `rows` rows starts (and, last, where the entries end) when the entries'
/// rows are `of`: a counting sort's offsets.
pub fn row_starts(rows: usize, of: impl Iterator<Item = u32>) -> Vec<u32> {
    let mut at = vec![0u32; rows + 1];
    for r in of {
        at[r as usize + 1] += 1;
    }
    for r in 0..rows {
        at[r + 1] += at[r];
    }
    at
}

/// `pairs` sorted by (first, second) number; of a pair given more than once, the last one
/// given is kept (a stable sort, then each run of one pair reduced to its last).
pub fn last_of_each_pair<V>(mut pairs: Vec<(u32, u32, V)>) -> Vec<(u32, u32, V)> {
    pairs.sort_by_key(|(a, b, _)| (*a, *b));
    pairs.dedup_by(|later, kept| {
        let same = (later.0, later.1) == (kept.0, kept.1);
        if same {
            std::mem::swap(later, kept);
        }
        same
    });
    pairs
}

/// The names of `pairs` in name order, each once, and the pairs by those numbers (in the
/// order given).
fn by_number<'a>(
    pairs: impl Iterator<Item = (&'a str, &'a str, f64)> + Clone,
) -> (Vec<String>, Vec<(u32, u32, f64)>) {
    let mut names: Vec<String> = pairs
        .clone()
        .flat_map(|(a, b, _)| [a, b])
        .map(str::to_string)
        .collect();
    names.sort_unstable();
    names.dedup();
    let number = |n: &str| names.binary_search_by(|x| x.as_str().cmp(n)).unwrap_or(0) as u32;
    let numbered = pairs.map(|(a, b, ms)| (number(a), number(b), ms)).collect();
    (names, numbered)
}

/// As a map of the row's name to a map of the other's name to the median (the format of the
/// `estimates.between` field).
impl Serialize for Between {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = &self.0;
        let rows =
            (0..t.names.len()).filter_map(|a| Some((a, t.row(a)?)).filter(|r| !r.1.is_empty()));
        let mut m = s.serialize_map(Some(rows.clone().count()))?;
        for (a, row) in rows {
            m.serialize_entry(
                &t.names[a],
                &Row {
                    names: &t.names,
                    row,
                },
            )?;
        }
        m.end()
    }
}

struct Row<'a> {
    names: &'a [String],
    row: &'a [(u32, f64)],
}

impl Serialize for Row<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.row.len()))?;
        for (b, ms) in self.row {
            m.serialize_entry(&self.names[*b as usize], ms)?;
        }
        m.end()
    }
}

/// The pairs as written (a pair that names the greater first too: validation refuses it).
impl<'de> Deserialize<'de> for Between {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Between, D::Error> {
        let rows = BTreeMap::<String, BTreeMap<String, f64>>::deserialize(d)?;
        let (names, pairs) = by_number(
            rows.iter()
                .flat_map(|(a, to)| to.iter().map(move |(b, ms)| (a.as_str(), b.as_str(), *ms))),
        );
        // the map's order is the names' order: the pairs are sorted by (row, other)
        Ok(Between::of_rows(names, pairs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Built from names or numbers in either order, the table answers both orders, keeps
    /// the last median of a pair given twice, skips a pair of one name, and is written as the
    /// map of maps it is read from.
    #[test]
    fn a_pair_is_found_in_either_order_and_written_as_the_map_of_maps() {
        let b = Between::from_pairs([
            ("dc3", "dc1", 1.0),
            ("dc1", "dc2", 2.0),
            ("dc2", "dc2", 9.0),
            ("dc1", "dc3", 3.0),
        ]);
        assert_eq!(b.len(), 2);
        assert_eq!(
            (b.get("dc1", "dc3"), b.get("dc3", "dc1")),
            (Some(3.0), Some(3.0))
        );
        assert_eq!(b.get("dc2", "dc1"), Some(2.0));
        assert_eq!((b.get("dc2", "dc3"), b.get("dc2", "dc2")), (None, None));
        assert_eq!(b.get("dc9", "dc1"), None);
        let names = ["dc3".to_string(), "dc2".into(), "dc1".into(), "dc4".into()];
        let n =
            Between::from_numbered(&names, [(0, 2, 1.0), (2, 1, 2.0), (1, 1, 9.0), (2, 0, 3.0)]);
        assert_eq!(n, b, "the unused dc4 is not kept");
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(json, r#"{"dc1":{"dc2":2.0,"dc3":3.0}}"#);
        assert_eq!(serde_json::from_str::<Between>(&json).unwrap(), b);
        assert_eq!(b.scaled(2.0).get("dc3", "dc1"), Some(6.0));
        let pairs: Vec<_> = b.iter().collect();
        assert_eq!(pairs, [("dc1", "dc2", 2.0), ("dc1", "dc3", 3.0)]);
    }

    /// A pair written the greater name first is read as written (validation refuses it).
    #[test]
    fn a_pair_written_the_wrong_way_round_is_kept_as_written() {
        let b: Between = serde_json::from_str(r#"{"dc2":{"dc1":4.5},"dc3":{}}"#).unwrap();
        assert_eq!(b.iter().collect::<Vec<_>>(), [("dc2", "dc1", 4.5)]);
        assert_eq!(b.names(), ["dc1", "dc2"]);
    }
}
