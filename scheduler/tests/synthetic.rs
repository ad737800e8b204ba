//! The benchmark's synthetic clusters and applications, small enough for a debug build:
//! the search proves its optimum, deterministically, and a time budget is honoured.

use acoa_scheduler::{place_on, score_all_on, score_on, synth, Ledger, Options, Outcome};
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

/// Several deployments scored at once (l_min searched once) score as each alone: the
/// placement, each component moved to other nodes (some miss a link or a constraint: the
/// same error), a
/// node the cluster does not have.
#[test]
fn scoring_several_deployments_at_once_is_scoring_each() {
    let infra = synth::cluster(10, 10, 142);
    let app = synth::application(10, 10, 17);
    let r = place_on(&infra, &app, &Ledger::new(), &Options::default()).unwrap();
    let Outcome::Placed(p) = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    let mut all = vec![p.assignment.clone()];
    for (c, at) in &p.assignment {
        let dc = &infra.node(infra.index_of(at).unwrap()).datacenter;
        // the nodes of its datacenter (linked), and a node far away (often not)
        for n in infra
            .nodes()
            .iter()
            .filter(|n| &n.datacenter == dc)
            .chain([infra.node(55)])
        {
            let mut a = p.assignment.clone();
            a.insert(c.clone(), n.name.clone());
            all.push(a);
        }
    }
    let mut unknown = p.assignment.clone();
    unknown.insert(app.components[0].name.clone(), "nowhere".into());
    all.push(unknown);
    let at_once = score_all_on(&infra, &app, &all, None);
    assert_eq!(at_once.len(), all.len());
    assert!(at_once.iter().filter(|s| s.is_ok()).count() > 1);
    assert!(at_once.iter().any(|s| s.is_err()));
    for (a, s) in all.iter().zip(&at_once) {
        assert_eq!(*s, score_on(&infra, &app, a), "{a:?}");
    }
    assert_eq!(at_once[0].as_ref().unwrap().0, p.score);
}
