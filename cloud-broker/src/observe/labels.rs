//! The metrics' label values, each from one function over a fixed set (no node or
//! application name becomes a reason), and the process-wide count of dropped publications
//! that the ingest tasks add to.

use std::sync::OnceLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::metrics::ReasonLabel;
use crate::engine::Purpose;
use crate::ingest::Dropped;

/// Every reason [`drop_reason`] can give.
pub const DROP_REASONS: &[&str] = &[
    "unknown-topic",
    "unknown-node",
    "no-key",
    "bad-message",
    "wrong-node",
    "bad-marker",
    "bad-loopback",
    "replay",
    "shed",
];

/// Why a publication was dropped, as a label.
pub fn drop_reason(d: &Dropped) -> &'static str {
    match d {
        Dropped::UnknownTopic(_) => "unknown-topic",
        Dropped::UnknownNode { .. } => "unknown-node",
        Dropped::NoKey { .. } => "no-key",
        Dropped::Bad { .. } => "bad-message",
        Dropped::WrongNode { .. } => "wrong-node",
        Dropped::BadMarker { .. } => "bad-marker",
        Dropped::BadLoopback(_) => "bad-loopback",
        Dropped::Stale { .. } => "replay",
        Dropped::Shed { .. } => "shed",
    }
}

/// Why a placement was computed, as a label: the engine's reasons without the node names.
pub fn placement_reason(p: &Purpose) -> &'static str {
    match p {
        Purpose::Reevaluate => "better placement",
        Purpose::Explore => "exploration",
        Purpose::Place(r) => match r.as_str() {
            "new application" => "new application",
            "definition updated" => "definition updated",
            "start-up" => "start-up",
            "retry" => "retry",
            "a node it uses is not available" => "node not available",
            r if r.starts_with("node ") && r.ends_with(" joined") => "node joined",
            r if r.starts_with("node ") && r.ends_with(" lost") => "node lost",
            _ => "other",
        },
    }
}

static DROPS: OnceLock<Family<ReasonLabel, Counter>> = OnceLock::new();

/// Where [`count_drop`] counts (the first call wins: one control plane per process).
pub(super) fn set_drops(f: Family<ReasonLabel, Counter>) {
    for r in DROP_REASONS {
        let _ = f.get_or_create(&ReasonLabel::new(r));
    }
    let _ = DROPS.set(f);
}

/// Counts a dropped publication (nothing when metrics are off).
pub fn count_drop(d: &Dropped) {
    if let Some(f) = DROPS.get() {
        f.get_or_create(&ReasonLabel::new(drop_reason(d))).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_reasons_carry_no_names() {
        let p = |s: &str| placement_reason(&Purpose::Place(s.into()));
        assert_eq!(p("node train1-a joined"), "node joined");
        assert_eq!(p("node n3 lost"), "node lost");
        assert_eq!(p("retry"), "retry");
        assert_eq!(p("something new"), "other");
        assert_eq!(placement_reason(&Purpose::Reevaluate), "better placement");
    }

    #[test]
    fn every_drop_reason_is_listed() {
        let d = Dropped::Stale {
            kind: "report",
            node: "n1".into(),
            run: 1,
            seq: 1,
            last_run: 1,
            last_seq: 2,
        };
        assert!(DROP_REASONS.contains(&drop_reason(&d)));
        assert!(DROP_REASONS.contains(&drop_reason(&Dropped::UnknownTopic("x".into()))));
        let shed = Dropped::Shed {
            kind: "link metrics",
            node: "n1".into(),
            queue: 1,
        };
        assert!(DROP_REASONS.contains(&drop_reason(&shed)));
        let lb = Dropped::BadLoopback("acoa/v1/control/loopback/0".into());
        assert!(DROP_REASONS.contains(&drop_reason(&lb)));
    }
}
