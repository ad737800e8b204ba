//! The measured links, kept by numbers: each node's name is held once, a link is a pair of
//! numbers. At 50,000 nodes the fleet reports 1.6 million links; keyed by two names each
//! (two heap strings, hashed and compared by their bytes) they took about 170 bytes a link
//! and most of a link report's time went to comparing names in a table that does not fit the
//! cache. Here a link is its 8-byte key and its metrics, and a report looks its sender up
//! once.
//!
//! Invariant: a name is held while a link from or to it is (counted); a name with no link is
//! forgotten and its number taken again.

use std::collections::HashMap;

use super::inventory::LinkEntry;

type Id = u32;
/// Seeded per process (`foldhash::fast`): the names are the inventory's, the numbers ours.
type Fast = foldhash::fast::RandomState;

/// Links by (from, to).
#[derive(Debug, Clone, Default)]
pub(super) struct LinkTable {
    ids: HashMap<String, Id, Fast>,
    /// By number: the name and how many links name it (a free number: empty, 0).
    names: Vec<(String, u32)>,
    free: Vec<Id>,
    map: HashMap<(Id, Id), LinkEntry, Fast>,
}

impl LinkTable {
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    fn id(&self, node: &str) -> Option<Id> {
        self.ids.get(node).copied()
    }

    fn name(&self, id: Id) -> &str {
        &self.names[id as usize].0
    }

    /// A number for `node`, counted as named by one more link.
    fn hold(&mut self, node: &str) -> Id {
        let id = match self.id(node) {
            Some(id) => id,
            None => {
                let id = match self.free.pop() {
                    Some(id) => {
                        self.names[id as usize] = (node.to_string(), 0);
                        id
                    }
                    None => {
                        self.names.push((node.to_string(), 0));
                        (self.names.len() - 1) as Id
                    }
                };
                self.ids.insert(node.to_string(), id);
                id
            }
        };
        self.names[id as usize].1 += 1;
        id
    }

    fn release(&mut self, id: Id) {
        let slot = &mut self.names[id as usize];
        slot.1 -= 1;
        if slot.1 == 0 {
            let name = std::mem::take(&mut slot.0);
            self.ids.remove(&name);
            self.free.push(id);
        }
    }

    pub(super) fn get(&self, from: &str, to: &str) -> Option<&LinkEntry> {
        self.map.get(&(self.id(from)?, self.id(to)?))
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

    /// Every link, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &str, &LinkEntry)> {
        self.map
            .iter()
            .map(|((a, b), e)| (self.name(*a), self.name(*b), e))
    }

    /// The names by number (a free number: "").
    pub(super) fn names(&self) -> Vec<&str> {
        self.names.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The names by number (a free number: "") and every link by the numbers of its ends: a
    /// pass over the links that keeps something per node looks no name up per link.
    pub(super) fn numbered(&self) -> (Vec<&str>, impl Iterator<Item = (usize, usize, &LinkEntry)>) {
        let names = self.names();
        let links = self
            .map
            .iter()
            .map(|(&(a, b), e)| (a as usize, b as usize, e));
        (names, links)
    }

    /// Every link in the order of (from, to) names: the names ranked once (thousands), the
    /// links sorted by their ranks (millions): numbers compared, not names.
    pub(super) fn in_name_order(&self) -> Vec<(&str, &str, &LinkEntry)> {
        let mut order: Vec<Id> = (0..self.names.len() as Id)
            .filter(|i| self.names[*i as usize].1 > 0)
            .collect();
        order.sort_unstable_by(|a, b| self.name(*a).cmp(self.name(*b)));
        let mut rank = vec![0u64; self.names.len()];
        for (r, id) in order.iter().enumerate() {
            rank[*id as usize] = r as u64;
        }
        let mut links: Vec<(u64, Id, Id, &LinkEntry)> = self
            .map
            .iter()
            .map(|(&(a, b), e)| ((rank[a as usize] << 32) | rank[b as usize], a, b, e))
            .collect();
        links.sort_unstable_by_key(|l| l.0);
        links
            .into_iter()
            .map(|(_, a, b, e)| (self.name(a), self.name(b), e))
            .collect()
    }

    /// Keeps the links `keep` accepts.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&str, &str, &LinkEntry) -> bool) {
        let names = &self.names;
        let mut gone: Vec<Id> = Vec::new();
        self.map.retain(|(a, b), e| {
            let k = keep(&names[*a as usize].0, &names[*b as usize].0, e);
            if !k {
                gone.push(*a);
                gone.push(*b);
            }
            k
        });
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
        let key = (self.id?, self.table.id(to)?);
        self.table.map.get_mut(&key)
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
        self.table.map.insert((a, b), e);
    }
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
        assert!(t.ids.is_empty());
    }

    /// A link is held in 24 bytes and gives back what the model read of the sample before:
    /// the quantized latency, the wire's jitter and success rate.
    #[test]
    fn an_entry_is_small_and_gives_back_the_quantized_metrics() {
        use super::super::links::quantize_latency;
        assert_eq!(std::mem::size_of::<LinkEntry>(), 24);
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
