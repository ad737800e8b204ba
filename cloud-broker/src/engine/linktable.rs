//! The measured links, kept by numbers: each node's name is held once, a link is a pair of
//! numbers. At 50,000 nodes the fleet reports 1.6 million links; keyed by two names each
//! (two heap strings, hashed and compared by their bytes) they took about 170 bytes a link
//! and most of a link report's time went to comparing names in a table that does not fit the
//! cache. Here a link is its peer's 4-byte number and its metrics, in its source's row, and a
//! report looks its sender up once.
//!
//! The rows and the names are shared, copied on write ([`Arc::make_mut`]): a live model's
//! copy of the table ([`LinkTable::clone`]) costs a pointer a node on the decision loop, and a
//! row is copied when the loop first writes to it after a model was taken (a node reports its
//! links together: one row, about a kilobyte). Before, the loop copied the whole hash map for
//! each model (1.6 million entries: 70-90 MiB and 100-280 ms at 50,000 nodes).
//!
//! Invariants: a name is held while a link from or to it is (counted); a name with no link is
//! forgotten and its number taken again. A row is sorted by its peers' numbers, holds each
//! peer once and is absent when empty; `len` is the number of links in all rows.

use std::collections::HashMap;
use std::sync::Arc;

use super::inventory::LinkEntry;

type Id = u32;
/// Seeded per process (`foldhash::fast`): the names are the inventory's, the numbers ours.
type Fast = foldhash::fast::RandomState;

/// One node's links: (peer, metrics), sorted by the peer's number.
type Row = Vec<(Id, LinkEntry)>;

/// The names by number; shared with the models, changed when a name comes or is forgotten.
#[derive(Debug, Clone, Default)]
struct Names {
    ids: HashMap<String, Id, Fast>,
    /// By number (a free number: empty).
    names: Vec<String>,
}

/// Links by (from, to).
#[derive(Debug, Clone, Default)]
pub(super) struct LinkTable {
    names: Arc<Names>,
    /// By number: how many links name it (a free number: 0).
    held: Vec<u32>,
    free: Vec<Id>,
    /// By the source's number.
    rows: Vec<Option<Arc<Row>>>,
    len: usize,
}

impl LinkTable {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn id(&self, node: &str) -> Option<Id> {
        self.names.ids.get(node).copied()
    }

    fn name(&self, id: Id) -> &str {
        &self.names.names[id as usize]
    }

    fn row(&self, id: Id) -> &[(Id, LinkEntry)] {
        self.rows
            .get(id as usize)
            .and_then(Option::as_deref)
            .map_or(&[], Vec::as_slice)
    }

    /// A number for `node`, counted as named by one more link.
    fn hold(&mut self, node: &str) -> Id {
        let id = match self.id(node) {
            Some(id) => id,
            None => {
                let names = Arc::make_mut(&mut self.names);
                let id = match self.free.pop() {
                    Some(id) => {
                        names.names[id as usize] = node.to_string();
                        id
                    }
                    None => {
                        names.names.push(node.to_string());
                        self.held.push(0);
                        self.rows.push(None);
                        (names.names.len() - 1) as Id
                    }
                };
                names.ids.insert(node.to_string(), id);
                id
            }
        };
        self.held[id as usize] += 1;
        id
    }

    fn release(&mut self, id: Id) {
        let held = &mut self.held[id as usize];
        *held -= 1;
        if *held == 0 {
            let names = Arc::make_mut(&mut self.names);
            let name = std::mem::take(&mut names.names[id as usize]);
            names.ids.remove(&name);
            self.free.push(id);
        }
    }

    pub(super) fn get(&self, from: &str, to: &str) -> Option<&LinkEntry> {
        let (a, b) = (self.id(from)?, self.id(to)?);
        let row = self.row(a);
        row.binary_search_by_key(&b, |(p, _)| *p)
            .ok()
            .map(|i| &row[i].1)
    }

    pub(super) fn contains(&self, from: &str, to: &str) -> bool {
        self.get(from, to).is_some()
    }

    /// `from`'s links, its name looked up once ([`From`]).
    pub(super) fn from<'a>(&'a mut self, from: &'a str) -> From<'a> {
        From {
            id: self.id(from),
            name: from,
            table: self,
        }
    }

    /// Every link by the numbers of its ends, in the order of the numbers.
    fn by_number(&self) -> impl Iterator<Item = (Id, Id, &LinkEntry)> {
        self.rows.iter().enumerate().flat_map(|(a, row)| {
            row.iter()
                .flat_map(|r| r.iter())
                .map(move |(b, e)| (a as Id, *b, e))
        })
    }

    /// Every link, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &str, &LinkEntry)> {
        self.by_number()
            .map(|(a, b, e)| (self.name(a), self.name(b), e))
    }

    /// The names by number (a free number: "").
    pub(super) fn names(&self) -> Vec<&str> {
        self.names.names.iter().map(String::as_str).collect()
    }

    /// The names by number (a free number: "") and every link by the numbers of its ends: a
    /// pass over the links that keeps something per node looks no name up per link.
    pub(super) fn numbered(&self) -> (Vec<&str>, impl Iterator<Item = (usize, usize, &LinkEntry)>) {
        let links = self
            .by_number()
            .map(|(a, b, e)| (a as usize, b as usize, e));
        (self.names(), links)
    }

    /// Every link in the order of (from, to) names: the names ranked once (thousands), the
    /// links sorted by their ranks (millions): numbers compared, not names.
    pub(super) fn in_name_order(&self) -> Vec<(&str, &str, &LinkEntry)> {
        let mut order: Vec<Id> = (0..self.held.len() as Id)
            .filter(|i| self.held[*i as usize] > 0)
            .collect();
        order.sort_unstable_by(|a, b| self.name(*a).cmp(self.name(*b)));
        let mut rank = vec![0u64; self.held.len()];
        for (r, id) in order.iter().enumerate() {
            rank[*id as usize] = r as u64;
        }
        let mut links: Vec<(u64, Id, Id, &LinkEntry)> = self
            .by_number()
            .map(|(a, b, e)| ((rank[a as usize] << 32) | rank[b as usize], a, b, e))
            .collect();
        links.sort_unstable_by_key(|l| l.0);
        links
            .into_iter()
            .map(|(_, a, b, e)| (self.name(a), self.name(b), e))
            .collect()
    }

    /// Keeps the links `keep` accepts (a row shared with a model is copied only if it loses
    /// one).
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&str, &str, &LinkEntry) -> bool) {
        let mut gone: Vec<Id> = Vec::new();
        let mut kept: Vec<bool> = Vec::new();
        for a in 0..self.rows.len() {
            let Some(row) = &self.rows[a] else { continue };
            kept.clear();
            let from = &self.names.names[a];
            kept.extend(
                row.iter()
                    .map(|(b, e)| keep(from, &self.names.names[*b as usize], e)),
            );
            if kept.iter().all(|k| *k) {
                continue;
            }
            let slot = &mut self.rows[a];
            let row = Arc::make_mut(slot.as_mut().expect("a row"));
            let mut k = kept.iter();
            row.retain(|(b, _)| {
                let keep = *k.next().expect("a verdict per link");
                if !keep {
                    gone.push(a as Id);
                    gone.push(*b);
                }
                keep
            });
            self.len -= kept.iter().filter(|k| !**k).count();
            if row.is_empty() {
                *slot = None;
            }
        }
        for id in gone {
            self.release(id);
        }
    }
}

/// One node's links ([`LinkTable::from`]).
pub(super) struct From<'a> {
    table: &'a mut LinkTable,
    name: &'a str,
    id: Option<Id>,
}

impl From<'_> {
    pub(super) fn get_mut(&mut self, to: &str) -> Option<&mut LinkEntry> {
        let (a, b) = (self.id?, self.table.id(to)?);
        let row = self.table.rows[a as usize].as_mut()?;
        let i = row.binary_search_by_key(&b, |(p, _)| *p).ok()?;
        Some(&mut Arc::make_mut(row)[i].1)
    }

    /// Adds the link to `to` (or replaces it).
    pub(super) fn insert(&mut self, to: &str, e: LinkEntry) {
        if let Some(o) = self.get_mut(to) {
            *o = e;
            return;
        }
        let a = self.table.hold(self.name);
        self.id = Some(a);
        let b = self.table.hold(to);
        let row = Arc::make_mut(self.table.rows[a as usize].get_or_insert_with(Arc::default));
        let i = row
            .binary_search_by_key(&b, |(p, _)| *p)
            .expect_err("a link not held yet");
        insert_snug(row, i, (b, e));
        self.table.len += 1;
    }
}

/// `v.insert(i, x)`, growing a full vector by an eighth instead of doubling it: a row of
/// 33 links took 64 places, and at 50,000 nodes the rows of links and of witness samples
/// (millions of entries) held about as much unused as used (BENCHMARKS.md, "Datacenter pairs
/// by number"). Still amortised O(1) a push.
pub(super) fn insert_snug<T>(v: &mut Vec<T>, i: usize, x: T) {
    if v.len() == v.capacity() {
        v.reserve_exact(v.len() / 8 + 1);
    }
    v.insert(i, x);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(latency_ms: f64) -> LinkEntry {
        LinkEntry::new(latency_ms, 0.0, 1.0, 20, 0)
    }

    #[test]
    fn links_are_found_by_their_names_both_ways_apart() {
        let mut t = LinkTable::default();
        t.from("a").insert("b", e(1.0));
        t.from("b").insert("a", e(2.0));
        t.from("a").insert("b", e(3.0));
        assert_eq!(t.len(), 2);
        assert_eq!(t.get("a", "b").map(|l| l.latency_ms()), Some(3.0));
        assert_eq!(t.get("b", "a").map(|l| l.latency_ms()), Some(2.0));
        assert!(!t.contains("a", "c"));
        assert!(!t.contains("c", "a"));
        let mut all: Vec<(&str, &str)> = t.iter().map(|(a, b, _)| (a, b)).collect();
        all.sort();
        assert_eq!(all, [("a", "b"), ("b", "a")]);
        // in name order, whatever the order names were first seen in
        t.from("c").insert("a", e(1.0));
        t.from("a").insert("c", e(1.0));
        t.from("0").insert("c", e(1.0));
        let ordered: Vec<(&str, &str)> =
            t.in_name_order().iter().map(|(a, b, _)| (*a, *b)).collect();
        assert_eq!(
            ordered,
            [("0", "c"), ("a", "b"), ("a", "c"), ("b", "a"), ("c", "a")]
        );
        let mut from_a = t.from("a");
        *from_a.get_mut("b").unwrap() = e(4.0);
        assert_eq!(t.get("a", "b").map(|l| l.latency_ms()), Some(4.0));
    }

    #[test]
    fn a_name_no_link_names_is_forgotten_and_its_number_taken_again() {
        let mut t = LinkTable::default();
        t.from("a").insert("b", e(1.0));
        t.from("a").insert("c", e(1.0));
        t.retain(|_, to, _| to != "b");
        assert_eq!(t.len(), 1);
        // "b" is named by no link: forgotten, its number free
        assert_eq!(t.id("b"), None);
        assert_eq!(t.free.len(), 1);
        assert_eq!(t.names.names[1], "");
        t.from("d").insert("a", e(5.0));
        assert!(t.free.is_empty(), "d took b's number");
        assert_eq!(t.get("d", "a").map(|l| l.latency_ms()), Some(5.0));
        assert!(!t.contains("a", "b"));
        assert!(!t.contains("b", "a"));
        // a node's own loopback holds its name twice
        t.from("e").insert("e", e(0.1));
        t.retain(|a, _, _| a != "e");
        assert_eq!(t.id("e"), None);
        t.retain(|_, _, _| false);
        assert_eq!(t.len(), 0);
        assert!(t.names.ids.is_empty());
        assert!(t.rows.iter().all(Option::is_none));
    }

    /// A copy (a live model's) shares the rows and names, and never sees what the table
    /// does after it: an update, a new link, a new name, a link forgotten.
    #[test]
    fn a_copy_shares_its_rows_and_keeps_what_it_was_given() {
        let mut t = LinkTable::default();
        t.from("a").insert("b", e(1.0));
        t.from("a").insert("c", e(2.0));
        t.from("b").insert("a", e(3.0));
        let copy = t.clone();
        let shared = |t: &LinkTable, c: &LinkTable, i: usize| {
            Arc::ptr_eq(t.rows[i].as_ref().unwrap(), c.rows[i].as_ref().unwrap())
        };
        assert!(Arc::ptr_eq(&t.names, &copy.names));
        assert!(shared(&t, &copy, 0) && shared(&t, &copy, 1));
        *t.from("a").get_mut("b").unwrap() = e(9.0);
        assert!(!shared(&t, &copy, 0), "a's row copied on write");
        assert!(shared(&t, &copy, 1), "b's row untouched, still shared");
        t.from("d").insert("a", e(4.0));
        t.retain(|_, to, _| to != "a");
        let all = |t: &LinkTable| {
            let mut v: Vec<(String, String, f64)> = t
                .iter()
                .map(|(a, b, e)| (a.to_string(), b.to_string(), e.latency_ms()))
                .collect();
            v.sort_by(|x, y| x.partial_cmp(y).unwrap());
            v
        };
        let s = |a: &str, b: &str, l: f64| (a.to_string(), b.to_string(), l);
        assert_eq!(
            all(&copy),
            [s("a", "b", 1.0), s("a", "c", 2.0), s("b", "a", 3.0)]
        );
        assert_eq!(copy.len(), 3);
        assert_eq!(copy.get("b", "a").map(|l| l.latency_ms()), Some(3.0));
        assert_eq!(all(&t), [s("a", "b", 9.0), s("a", "c", 2.0)]);
        assert_eq!(t.len(), 2);
        assert!(!t.contains("d", "a") && t.id("d").is_none());
        assert_eq!(copy.names(), ["a", "b", "c"]);
    }

    /// A link is held in 24 bytes (28 with its peer's number in a row) and gives back what
    /// the model read of the sample before: the quantized latency, the wire's jitter and
    /// success rate, when it came.
    #[test]
    fn an_entry_is_small_and_gives_back_the_quantized_metrics() {
        use super::super::links::quantize_latency;
        assert_eq!(std::mem::size_of::<LinkEntry>(), 24);
        assert_eq!(std::mem::size_of::<(Id, LinkEntry)>(), 28);
        for at in [0, 7, u64::from(u32::MAX) + 3, 1_796_000_000_000, u64::MAX] {
            assert_eq!(LinkEntry::new(1.0, 0.0, 1.0, 1, at).at(), at);
        }
        for lat in [
            0.0f32, 0.04, 0.26, 0.81, 3.0, 24.057, 77.35, 1234.56, 99_999.9,
        ] {
            for (jit, suc) in [(0.0f32, 1.0f32), (0.3, 0.95), (12.5, 0.05)] {
                let e = LinkEntry::new(lat as f64, jit as f64, suc as f64, 20, 7);
                assert_eq!(e.latency_ms(), quantize_latency(lat as f64), "{lat}");
                assert_eq!(e.jitter_ms(), jit as f64);
                assert_eq!(e.success(), suc as f64);
            }
        }
    }
}
