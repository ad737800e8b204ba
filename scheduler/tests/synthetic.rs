//! The benchmark's synthetic clusters and applications, small enough for a debug build:
//! the search proves its optimum, deterministically, and a time budget is honoured.

use acoa_scheduler::{place_on, synth, Ledger, Options, Outcome};
use std::time::Duration;

#[test]
fn synthetic_placements_are_proven_and_deterministic() {
    let infra = synth::cluster(10, 10, 142);
    for comps in [5, 10, 20] {
        let app = synth::application(comps, 10, 7 + comps as u64);
        app.validate().unwrap();
        let r = place_on(&infra, &app, &Ledger::new(), &Options::default()).unwrap();
        assert!(r.proven, "{comps} components");
        let Outcome::Placed(p) = &r.outcome else {
            panic!("{comps} components: {:?}", r.outcome)
        };
        assert!(p.score > 0.0 && p.score <= 1.0);
        assert_eq!(p.assignment.len(), comps);
        let again = place_on(&infra, &app, &Ledger::new(), &Options::default()).unwrap();
        assert_eq!(r.outcome, again.outcome);
    }
}

#[test]
fn a_time_budget_stops_the_search_with_an_upper_bound() {
    let infra = synth::cluster(10, 10, 142);
    let app = synth::application(20, 10, 27);
    let opts = Options {
        time_budget: Some(Duration::ZERO),
        ..Options::default()
    };
    let r = place_on(&infra, &app, &Ledger::new(), &opts).unwrap();
    if let Outcome::Placed(p) = &r.outcome {
        assert!(r.upper_bound >= p.score);
        if !r.proven {
            assert!(r.upper_bound <= 1.0 + 1e-12);
        }
    }
}
