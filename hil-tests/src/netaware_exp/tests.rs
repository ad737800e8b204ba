//! The workflow's application and cluster, discovery answers, cross-node calls, percentiles.

use super::*;

fn all_on(setup: &Setup, node: &str) -> BTreeMap<String, String> {
    setup
        .wf
        .names
        .iter()
        .map(|c| (c.clone(), node.to_string()))
        .collect()
}

#[test]
fn application_and_cluster_definitions_are_valid() {
    let s = Setup::paper(5).unwrap();
    assert_eq!(s.nodes, ["cp", "w1", "w2", "w3", "w4", "w5"]);
    let pins = all_on(&s, "w2");
    let app =
        acoa_shared::model::parse_application(&s.app_yaml("na-x", "qos", Some(&pins))).unwrap();
    assert_eq!(app.components.len(), 17);
    assert_eq!(app.channels.len(), 18);
    assert!(app
        .components
        .iter()
        .all(|c| c.requires.datacenter.as_deref() == Some("w2")));
    let mut s2 = s.clone();
    s2.declare_users = Some(40.0);
    let req =
        acoa_shared::model::parse_application(&s2.app_yaml("na-z", "network-aware", None)).unwrap();
    // db1: 2 visits x 4 ms x 40 users
    let db1 = req.components.iter().find(|c| c.name == "db1").unwrap();
    assert_eq!(
        db1.resources.as_ref().map(|r| (r.cpu_millis, r.memory_mb)),
        Some((320, 256))
    );
    let free = acoa_shared::model::parse_application(&s.app_yaml("na-y", "qos", None)).unwrap();
    assert!(free.components.iter().all(|c| c.resources.is_none()));
    assert!(free
        .components
        .iter()
        .all(|c| c.requires.datacenter.is_none()));
    // left to the control plane: requests enter at cp and go to m0
    let ing = free.ingress.as_ref().expect("an ingress");
    assert_eq!((ing.node.as_str(), ing.component.as_str()), ("cp", "m0"));
    let pinned =
        acoa_shared::model::parse_application(&s.app_yaml("na-x", "qos", Some(&BTreeMap::new())))
            .unwrap();
    assert_eq!(pinned.ingress, None);
    let with_cp =
        acoa_shared::model::parse_cluster(&s.cluster_yaml_cp(Some((20000, 65536)))).unwrap();
    let cp = with_cp.node("cp").expect("cp in the cluster");
    assert_eq!((cp.capacity.cpu_millis, cp.capacity.memory_mb), (0, 0));
    assert_eq!(with_cp.nodes.len(), s.nodes.len());
    let cl = acoa_shared::model::parse_cluster(&s.cluster_yaml()).unwrap();
    assert_eq!(cl.nodes.len(), 5);
    assert!(Setup::paper(0).is_err() && Setup::paper(6).is_err());
}

#[test]
fn discovery_answers_name_every_downstream_call() {
    let s = Setup::paper(2).unwrap();
    let mut p = all_on(&s, "w1");
    p.insert("m7".into(), "w2".into());
    let addr = |n: &str| match n {
        "w1" => Some(Ipv4Addr::new(10, 78, 0, 2)),
        "w2" => Some(Ipv4Addr::new(10, 78, 0, 3)),
        _ => None,
    };
    let a = s.answers(&p, &addr, 9200);
    // m2 (index 2) calls m6, then m7 (index 7, on w2)
    assert_eq!(
        a["m2"],
        "K1 port=9202 service_ms=2 resp=1000 stages=m6@10.78.0.2:9206;m7@10.78.0.3:9207"
    );
    assert_eq!(
        a["m0"],
        "K1 port=9200 service_ms=2 resp=1000 stages=m1@10.78.0.2:9201+m2@10.78.0.2:9202+m3@10.78.0.2:9203"
    );
    assert_eq!(a["db1"], "K1 port=9213 service_ms=4 resp=1400 stages=");
    assert_eq!(
        s.entry_addr(&p, &addr, 9200),
        Some("10.78.0.2:9200".parse().unwrap())
    );
}

#[test]
fn cross_node_calls_and_the_degraded_node() {
    let s = Setup::paper(3).unwrap();
    let mut p = all_on(&s, "w1");
    assert_eq!(remote_calls(&s, &p), 1.0); // the ingress only
    assert_eq!(degraded_node(&s, &p).unwrap(), "w1");
    for c in ["m9", "m12", "db4"] {
        p.insert(c.into(), "w3".into());
    }
    p.insert("db3".into(), "w2".into());
    // ingress + m3->m9 + m8->db3
    assert_eq!(remote_calls(&s, &p), 3.0);
    assert_eq!(degraded_node(&s, &p).unwrap(), "w3");
}

#[test]
fn percentiles_of_successful_requests_failed_ones_apart() {
    let mut v: Vec<Sample> = (1..=100)
        .map(|i| Sample {
            sent_s: i as f64,
            rt_ms: Some(i as f64),
            ok: true,
        })
        .collect();
    v.push(Sample {
        sent_s: 0.0,
        rt_ms: None,
        ok: false,
    });
    v.push(Sample {
        sent_s: 0.0,
        rt_ms: Some(8000.0),
        ok: false,
    });
    let s = stats(&v);
    assert_eq!((s.requests, s.answered, s.failed), (102, 101, 2));
    assert_eq!((s.p50, s.p95, s.p99), (50.0, 95.0, 99.0));
    assert!(stats(&[]).p95.is_nan());
}

#[test]
fn reductions_against_the_baseline() {
    let st = |p95| Stats {
        p95,
        ..Stats::default()
    };
    let r = |sched, p: f64| SettingResult {
        latency_ms: 10.0,
        sched,
        placement: BTreeMap::new(),
        steps: vec![(10, st(p)), (20, st(p * 2.0))],
        remote_calls: 0.0,
    };
    let red = reductions(&r(Sched::Baseline, 100.0), &r(Sched::NetAware, 60.0));
    assert_eq!(red.len(), 2);
    assert!((red[0].1 - 0.4).abs() < 1e-12 && (red[1].1 - 0.4).abs() < 1e-12);
    assert!(
        parse_sched("cp:network-aware").unwrap() == Sched::ControlPlane("network-aware".into())
    );
    assert!(parse_sched("nope").is_err());
}
