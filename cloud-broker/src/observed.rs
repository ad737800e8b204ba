//! Run-time measurements of the applications' components, folded from the agents' usage
//! messages ([`ComponentUsage`]) into the live model's [`Cluster::observed`]
//! (`acoa_shared::model::Cluster`): per application, each component's CPU and memory (the sum
//! over the nodes it runs on) and the traffic between components, each a mean over the last
//! `window` reports of its node (the smoothing window).
//!
//! Pure and bounded: one entry per (application, component, node) that a verified message of
//! that node reported *and* that the current placement puts on that node (a container left
//! behind by a move, or one the control plane never placed there, is not counted); a node's
//! message is the complete list for that node; entries of a lost node, of a deleted
//! application, or not refreshed for `max_age_ms` are dropped.

use std::collections::{BTreeMap, VecDeque};

use acoa_shared::model::{Application, Observed, ObservedTraffic, ObservedUsage};
use acoa_shared::wire::ComponentUsage;

/// Downstream names kept per entry at most (the wire carries 8 per message; names that stop
/// coming are kept while their window holds anything but zeros).
const MAX_TO: usize = 16;

#[derive(Debug, Clone, Default)]
struct Window {
    vals: VecDeque<f64>,
}

impl Window {
    fn push(&mut self, v: f64, cap: usize) {
        self.vals.push_back(v);
        while self.vals.len() > cap.max(1) {
            self.vals.pop_front();
        }
    }

    fn mean(&self) -> Option<f64> {
        (!self.vals.is_empty()).then(|| self.vals.iter().sum::<f64>() / self.vals.len() as f64)
    }

    fn all_zero(&self) -> bool {
        self.vals.iter().all(|v| *v == 0.0)
    }
}

#[derive(Debug, Clone, Default)]
struct Entry {
    at: u64,
    cpu: Window,
    memory: Window,
    /// By the name the workload gave (a component or a channel of the application).
    traffic: BTreeMap<String, Window>,
}

fn sane(v: f32) -> Option<f64> {
    let v = v as f64;
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// The measurements of every running component (see the module documentation).
#[derive(Debug, Clone)]
pub struct ObservedTable {
    window: usize,
    /// (application, component, node) → smoothed samples.
    entries: BTreeMap<(String, String, String), Entry>,
}

impl ObservedTable {
    /// Means over the last `window` reports (at least 1).
    pub fn new(window: usize) -> Self {
        ObservedTable {
            window: window.max(1),
            entries: BTreeMap::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Folds one verified message at `now`; `placed(app, component)` is the node the current
    /// placement puts the component on. Returns whether anything changed.
    pub fn fold(
        &mut self,
        now: u64,
        u: &ComponentUsage,
        placed: impl Fn(&str, &str) -> Option<String>,
    ) -> bool {
        let node = u.node.as_str();
        let before = self.entries.len();
        // the message is the node's complete list
        self.entries.retain(|(a, c, n), _| {
            n != node
                || u.components
                    .iter()
                    .any(|s| s.app.as_str() == a && s.component.as_str() == c)
        });
        let mut changed = self.entries.len() != before;
        for s in &u.components {
            let (app, comp) = (s.app.as_str(), s.component.as_str());
            let key = (app.to_string(), comp.to_string(), node.to_string());
            if placed(app, comp).as_deref() != Some(node) {
                changed |= self.entries.remove(&key).is_some();
                continue;
            }
            let w = self.window;
            let e = self.entries.entry(key).or_default();
            e.at = now;
            if let Some(v) = s.cpu_millis.and_then(sane) {
                e.cpu.push(v, w);
            }
            if let Some(v) = s.memory_mb.and_then(sane) {
                e.memory.push(v, w);
            }
            for (to, win) in e.traffic.iter_mut() {
                if !s.traffic.iter().any(|t| t.to.as_str() == to) {
                    win.push(0.0, w);
                }
            }
            for t in &s.traffic {
                let Some(v) = sane(t.bytes_per_s) else {
                    continue;
                };
                if !e.traffic.contains_key(t.to.as_str()) && e.traffic.len() >= MAX_TO {
                    continue;
                }
                e.traffic.entry(t.to.to_string()).or_default().push(v, w);
            }
            e.traffic.retain(|_, win| !win.all_zero());
            changed = true;
        }
        changed
    }

    /// Forgets what `node` reported (it is lost). Returns whether anything changed.
    pub fn forget_node(&mut self, node: &str) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(_, _, n), _| n != node);
        self.entries.len() != before
    }

    /// Forgets an application (deleted). Returns whether anything changed.
    pub fn forget_app(&mut self, app: &str) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(a, _, _), _| a != app);
        self.entries.len() != before
    }

    /// Drops entries not refreshed for `max_age_ms`. Returns whether anything changed.
    pub fn expire(&mut self, now: u64, max_age_ms: u64) -> bool {
        let before = self.entries.len();
        self.entries
            .retain(|_, e| now.saturating_sub(e.at) <= max_age_ms);
        self.entries.len() != before
    }

    /// What `app` was measured to use, `None` before anything was. Traffic reported towards a
    /// channel is counted towards the channel's `to`; towards a name that is neither a
    /// component nor a channel of `app`, it is left out; traffic of a component to itself too.
    pub fn observed(&self, app: &Application) -> Option<Observed> {
        let name = app.application.as_str();
        let mut o = Observed::default();
        let mut traffic: BTreeMap<(String, String), f64> = BTreeMap::new();
        let lo = (name.to_string(), String::new(), String::new());
        for ((a, comp, _), e) in self.entries.range(lo..) {
            if a != name {
                break;
            }
            if app.component(comp).is_none() {
                continue;
            }
            let (cpu, mem) = (e.cpu.mean(), e.memory.mean());
            if cpu.is_some() || mem.is_some() {
                let u = o.components.entry(comp.clone()).or_insert(ObservedUsage {
                    cpu_millis: 0.0,
                    memory_mb: 0.0,
                });
                u.cpu_millis += cpu.unwrap_or(0.0);
                u.memory_mb += mem.unwrap_or(0.0);
            }
            for (to, w) in &e.traffic {
                let to = if app.component(to).is_some() {
                    to.clone()
                } else if let Some(ch) = app
                    .channels
                    .iter()
                    .find(|ch| ch.name == *to && ch.from == *comp)
                {
                    ch.to.clone()
                } else {
                    continue;
                };
                if to == *comp {
                    continue;
                }
                *traffic.entry((comp.clone(), to)).or_default() += w.mean().unwrap_or(0.0);
            }
        }
        o.traffic = traffic
            .into_iter()
            .map(|((from, to), bytes_per_s)| ObservedTraffic {
                from,
                to,
                bytes_per_s,
            })
            .collect();
        (!o.components.is_empty() || !o.traffic.is_empty()).then_some(o)
    }
}

/// `o` rounded for the status document (CPU and memory to 0.1, traffic to 3 significant
/// digits), so that the retained status changes when the measurements do, not with their noise.
pub fn rounded(o: &Observed) -> Observed {
    let r1 = |v: f64| (v * 10.0).round() / 10.0;
    let sig3 = |v: f64| {
        if v <= 0.0 || !v.is_finite() {
            return 0.0;
        }
        let scale = 10f64.powi(2 - v.log10().floor() as i32);
        (v * scale).round() / scale
    };
    Observed {
        components: o
            .components
            .iter()
            .map(|(c, u)| {
                (
                    c.clone(),
                    ObservedUsage {
                        cpu_millis: r1(u.cpu_millis),
                        memory_mb: r1(u.memory_mb),
                    },
                )
            })
            .collect(),
        traffic: o
            .traffic
            .iter()
            .map(|t| ObservedTraffic {
                from: t.from.clone(),
                to: t.to.clone(),
                bytes_per_s: sig3(t.bytes_per_s),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use acoa_shared::model::parse_application;
    use acoa_shared::wire::{self, ComponentSample, TrafficSample};

    fn app() -> Application {
        parse_application(
            "application: smoke\n\
             components:\n\
             - {name: a, image: 'localhost/acoa/x:1'}\n\
             - {name: b, image: 'localhost/acoa/x:1'}\n\
             - {name: c, image: 'localhost/acoa/x:1'}\n\
             channels:\n\
             - {name: a-to-b, from: a, to: b}\n\
             - {name: b-to-c, from: b, to: c}\n",
        )
        .unwrap()
    }

    /// (component, CPU, [(to, bytes/s)])
    type Sample<'a> = (&'a str, Option<f32>, &'a [(&'a str, f32)]);

    fn usage(node: &str, samples: &[Sample]) -> ComponentUsage {
        ComponentUsage {
            node: wire::name(node).unwrap(),
            seq: 1,
            run: 0,
            period_ms: 1000,
            components: samples
                .iter()
                .map(|(c, cpu, t)| ComponentSample {
                    app: wire::name("smoke").unwrap(),
                    component: wire::name(c).unwrap(),
                    container: wire::name(&format!("smoke.{c}")).unwrap(),
                    cpu_millis: *cpu,
                    memory_mb: cpu.map(|_| 10.0),
                    traffic: t
                        .iter()
                        .map(|(to, b)| TrafficSample {
                            to: wire::name(to).unwrap(),
                            bytes_per_s: *b,
                            messages_per_s: 1.0,
                        })
                        .collect(),
                    service: None,
                })
                .collect(),
        }
    }

    fn placed(a: &str, c: &str) -> Option<String> {
        (a == "smoke").then(|| match c {
            "a" => "n1".to_string(),
            _ => "n2".to_string(),
        })
    }

    #[test]
    fn samples_are_smoothed_summed_and_channels_resolved() {
        let mut t = ObservedTable::new(2);
        assert!(t.observed(&app()).is_none(), "nothing measured yet");
        assert!(t.fold(
            0,
            &usage("n1", &[("a", Some(100.0), &[("a-to-b", 1000.0)])]),
            placed
        ));
        t.fold(
            1,
            &usage("n1", &[("a", Some(200.0), &[("a-to-b", 3000.0)])]),
            placed,
        );
        t.fold(
            1,
            &usage("n2", &[("b", Some(50.0), &[("c", 10.0)]), ("c", None, &[])]),
            placed,
        );
        let o = t.observed(&app()).unwrap();
        assert_eq!(o.components["a"].cpu_millis, 150.0, "mean over the window");
        assert_eq!(o.components["a"].memory_mb, 10.0);
        assert_eq!(o.components["b"].cpu_millis, 50.0);
        assert!(
            !o.components.contains_key("c"),
            "nothing known about c's use"
        );
        assert_eq!(
            o.traffic,
            vec![
                ObservedTraffic {
                    from: "a".into(),
                    to: "b".into(),
                    bytes_per_s: 2000.0
                },
                ObservedTraffic {
                    from: "b".into(),
                    to: "c".into(),
                    bytes_per_s: 10.0
                },
            ]
        );
        // the window slides: 200 and 400
        t.fold(2, &usage("n1", &[("a", Some(400.0), &[])]), placed);
        let o = t.observed(&app()).unwrap();
        assert_eq!(o.components["a"].cpu_millis, 300.0);
        assert_eq!(
            o.traffic[0].bytes_per_s, 1500.0,
            "a silent channel counts 0 in the window"
        );
    }

    #[test]
    fn replicas_on_two_nodes_add_up_and_strays_are_not_counted() {
        let mut t = ObservedTable::new(5);
        let everywhere = |_: &str, _: &str| None::<String>;
        assert!(!t.fold(0, &usage("n1", &[("a", Some(1.0), &[])]), everywhere));
        assert!(t.is_empty(), "not placed there: not counted");
        // a placed on n1 and n3 (two replicas)
        let two = |_: &str, c: &str| (c == "a").then(|| "n1".to_string());
        let three = |_: &str, c: &str| (c == "a").then(|| "n3".to_string());
        t.fold(0, &usage("n1", &[("a", Some(10.0), &[("b", 5.0)])]), two);
        t.fold(0, &usage("n3", &[("a", Some(30.0), &[("b", 7.0)])]), three);
        let o = t.observed(&app()).unwrap();
        assert_eq!(o.components["a"].cpu_millis, 40.0);
        assert_eq!(o.traffic[0].bytes_per_s, 12.0);
        // unknown names and self-traffic are left out
        t.fold(
            1,
            &usage("n1", &[("a", Some(10.0), &[("zz", 5.0), ("a", 1.0)])]),
            two,
        );
        assert_eq!(t.observed(&app()).unwrap().traffic.len(), 1);
    }

    #[test]
    fn entries_go_with_their_node_app_message_or_age() {
        let mut t = ObservedTable::new(3);
        t.fold(0, &usage("n1", &[("a", Some(1.0), &[])]), placed);
        t.fold(0, &usage("n2", &[("b", Some(1.0), &[])]), placed);
        assert_eq!(t.len(), 2);
        // n2's next message lists nothing: b runs there no longer
        assert!(t.fold(1, &usage("n2", &[]), placed));
        assert_eq!(t.len(), 1);
        assert!(t.expire(100, 50));
        assert!(t.is_empty());
        t.fold(0, &usage("n1", &[("a", Some(1.0), &[])]), placed);
        assert!(t.forget_node("n1"));
        t.fold(0, &usage("n1", &[("a", Some(1.0), &[])]), placed);
        assert!(!t.forget_app("other"));
        assert!(t.forget_app("smoke"));
        assert!(t.is_empty());
        // nonsense values are ignored, not folded
        t.fold(
            0,
            &usage("n1", &[("a", Some(f32::NAN), &[("b", -1.0)])]),
            placed,
        );
        let o = t.observed(&app()).unwrap();
        assert_eq!(o.components["a"].cpu_millis, 0.0, "NaN CPU not folded");
        assert_eq!(o.components["a"].memory_mb, 10.0);
        assert!(o.traffic.is_empty(), "negative traffic not folded");
    }

    #[test]
    fn rounding_for_the_status() {
        let o = Observed {
            components: [(
                "a".to_string(),
                ObservedUsage {
                    cpu_millis: 12.345,
                    memory_mb: 3.21,
                },
            )]
            .into_iter()
            .collect(),
            traffic: vec![ObservedTraffic {
                from: "a".into(),
                to: "b".into(),
                bytes_per_s: 123_456.0,
            }],
        };
        let r = rounded(&o);
        assert_eq!(r.components["a"].cpu_millis, 12.3);
        assert_eq!(r.components["a"].memory_mb, 3.2);
        assert_eq!(r.traffic[0].bytes_per_s, 123_000.0);
    }
}
