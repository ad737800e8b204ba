//! The bounds on model documents (`acoa_shared::model::limits`): hostile inputs are refused
//! before the typed parser does any deep work, each with the limit, the field and the value;
//! just under every limit is accepted, just over is refused.

use acoa_shared::model::limits::{self, APPLICATION};
use acoa_shared::model::{load_application, parse_application, parse_within, Format, ModelError};
use proptest::prelude::*;
use serde_json::Value as Json;
use serde_yaml_ng::Value as Yaml;
use std::time::{Duration, Instant};

/// Hostile inputs are refused this fast even in a debug build (main took 30 s in release
/// for the first one).
const FAST: Duration = Duration::from_secs(2);

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed())
}

fn yaml(text: &str) -> Result<Yaml, ModelError> {
    parse_within(text, Format::Yaml, &APPLICATION)
}

fn json(text: &str) -> Result<Json, ModelError> {
    parse_within(text, Format::Json, &APPLICATION)
}

fn nested_flow(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn deep_nesting_is_refused_at_the_limit_before_parsing() {
    // 100,000 `[` (200 KB): main loaded it for 30 s before its recursion limit
    let (r, t) = timed(|| parse_application(&nested_flow(100_000)));
    let err = r.unwrap_err();
    assert_eq!(err.reason, "nesting depth exceeds 32 at line 1", "{err}");
    assert!(t < FAST, "{t:?}");
    // block sequences nest without indentation: `- - - - 1`
    let text = format!("{}1\n", "- ".repeat(100_000));
    let (r, t) = timed(|| parse_application(&text));
    let err = r.unwrap_err();
    assert_eq!(err.reason, "nesting depth exceeds 32 at line 1", "{err}");
    assert_eq!(err.field, "[0]".repeat(32), "{err}");
    assert!(t < FAST, "{t:?}");
    // a nested flow mapping of 50,000 levels
    let text = format!("{}1{}", "{a: ".repeat(50_000), "}".repeat(50_000));
    let (r, t) = timed(|| parse_application(&text));
    let err = r.unwrap_err();
    assert!(err.reason.starts_with("nesting depth exceeds 32"), "{err}");
    // (the scanner looks ahead for a possible key, up to its own bound, before it emits the
    // events that would name the field)
    assert!(vec!["a"; 32].join(".").starts_with(&err.field), "{err}");
    assert!(t < FAST, "{t:?}");
    // block nesting names the line and the field
    let mut text = String::new();
    for d in 0..40 {
        text.push_str(&format!("{}k{d}:\n", " ".repeat(d)));
    }
    let err = yaml(&text).unwrap_err();
    assert_eq!(err.reason, "nesting depth exceeds 32 at line 33", "{err}");
    assert!(err.field.starts_with("k0.k1.k2."), "{err}");
    assert!(err.field.ends_with(".k31"), "{err}");
    // inside a real application
    let text = format!(
        "application: x\ncomponents:\n- name: a\n  image: i\n  requires: {{hardware: {}}}\n",
        nested_flow(40)
    );
    let err = parse_application(&text).unwrap_err();
    let field = format!("components[0].requires.hardware{}", "[0]".repeat(28));
    assert_eq!(err.field, field, "{err}");
    assert_eq!(err.reason, "nesting depth exceeds 32 at line 5", "{err}");
    // JSON
    let text = format!("{}1{}", "{\"a\":".repeat(40_000), "}".repeat(40_000));
    let (r, t) = timed(|| parse_application(&text));
    let err = r.unwrap_err();
    assert_eq!(err.reason, "nesting depth exceeds 32 at line 1", "{err}");
    assert!(t < FAST, "{t:?}");
}

#[test]
fn brackets_open_in_the_raw_text_are_bounded_whatever_a_parser_reads() {
    // 128 brackets open inside a quoted string are still a valid document
    let quoted = format!("a: '{}'\n", "[".repeat(4 * APPLICATION.max_depth));
    yaml(&quoted).unwrap();
    let quoted = format!("a: '{}'\n", "[".repeat(4 * APPLICATION.max_depth + 1));
    let err = yaml(&quoted).unwrap_err();
    assert_eq!(
        err.reason,
        "nesting depth exceeds 32 at line 1 (128 brackets open)"
    );
}

#[test]
fn depth_just_under_the_limit_is_accepted_just_over_refused() {
    let max = APPLICATION.max_depth;
    yaml(&nested_flow(max)).unwrap();
    json(&format!("[{}]", nested_flow(max - 1))).unwrap();
    assert!(yaml(&nested_flow(max + 1))
        .unwrap_err()
        .reason
        .contains("nesting depth exceeds 32"));
    assert!(json(&nested_flow(max + 1))
        .unwrap_err()
        .reason
        .contains("nesting depth exceeds 32"));
}

/// One anchored requirement with `labels` labels, reused by `uses` more components.
fn alias_bomb(labels: usize, uses: usize) -> String {
    let list: Vec<String> = (0..labels).map(|i| format!("l{i}")).collect();
    let mut text = format!(
        "application: bomb\ncomponents:\n- name: c0\n  image: i\n  requires: &r {{hardware: [{}]}}\n",
        list.join(", ")
    );
    for i in 1..=uses {
        text.push_str(&format!("- {{name: c{i:05}, image: i, requires: *r}}\n"));
    }
    text
}

#[test]
fn alias_amplification_is_refused_while_parsing() {
    // the attack as found: 1,000 labels reused by 12,000 components, 498 KB (main: a 674 MB
    // record and 4.9 GB of memory)
    let text = alias_bomb(1000, 12_000);
    let (r, t) = timed(|| parse_application(&text));
    let err = r.unwrap_err();
    assert_eq!(
        err.reason,
        "document size 497970 bytes exceeds the limit of 262144 bytes"
    );
    assert!(t < FAST, "{t:?}");
    // within the size bound: refused at the alias that goes over
    for uses in [6_000, 2_000] {
        let text = alias_bomb(1000, uses);
        assert!(text.len() < APPLICATION.max_bytes);
        let (r, t) = timed(|| parse_application(&text));
        let err = r.unwrap_err();
        assert_eq!(err.field, "components[17].requires", "{err}");
        assert_eq!(
            err.reason, "aliases expand to 17051 nodes, more than the limit of 16384 at line 22",
            "{err}"
        );
        assert!(t < FAST, "{t:?}");
    }
    // nested anchors ("billion laughs")
    let mut text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n".to_string();
    for i in 1..10 {
        let prev = format!("*a{}", i - 1);
        text.push_str(&format!("a{i}: &a{i} [{}]\n", vec![prev; 10].join(", ")));
    }
    let (r, t) = timed(|| yaml(&text));
    let err = r.unwrap_err();
    assert!(err.reason.starts_with("aliases expand to"), "{err}");
    assert!(err.field.starts_with("a4"), "{err}");
    assert!(t < FAST, "{t:?}");
}

#[test]
fn alias_limits_just_under_accepted_just_over_refused() {
    // uses: 1,024 aliases of a scalar
    let uses = |n: usize| {
        format!(
            "a: &x v\nb: [{}]\nc: [{}]\n",
            vec!["*x"; 512].join(", "),
            vec!["*x"; n - 512].join(", ")
        )
    };
    let v = yaml(&uses(APPLICATION.max_alias_uses as usize)).unwrap();
    assert_eq!(v["c"].as_sequence().unwrap().len(), 512);
    let err = yaml(&uses(APPLICATION.max_alias_uses as usize + 1)).unwrap_err();
    assert_eq!(err.reason, "alias uses exceed the limit of 1024 at line 3");
    assert_eq!(err.field, "c[512]");
    // expanded nodes: an anchored list of 1,023 scalars (1,024 nodes) used 16 times
    let nodes = |n: usize| {
        let list = vec!["v"; 1023].join(", ");
        format!("a: &x [{list}]\nb: [{}]\n", vec!["*x"; n].join(", "))
    };
    yaml(&nodes(16)).unwrap();
    let err = yaml(&nodes(17)).unwrap_err();
    assert!(
        err.reason
            .starts_with("aliases expand to 17408 nodes, more than the limit of 16384"),
        "{err}"
    );
    // expanded bytes: a scalar of 1,024 bytes used 128 times is 128 KiB
    let bytes = |n: usize| {
        format!(
            "a: &x {}\nb: [{}]\n",
            "v".repeat(1024),
            vec!["*x"; n].join(", ")
        )
    };
    yaml(&bytes(128)).unwrap();
    let err = yaml(&bytes(129)).unwrap_err();
    assert!(
        err.reason.starts_with(
            "aliases expand to 132096 bytes of strings, more than the limit of 131072"
        ),
        "{err}"
    );
    // an alias to the node that encloses it never resolves
    assert!(yaml("a: &x [1, *x]\n").is_err());
}

#[test]
fn size_just_under_the_limit_is_accepted_just_over_refused() {
    let max = APPLICATION.max_bytes;
    let pad = |len: usize| {
        let head = "a: b\n#";
        format!("{head}{}", "x".repeat(len - head.len()))
    };
    assert_eq!(pad(max).len(), max);
    yaml(&pad(max)).unwrap();
    let err = yaml(&pad(max + 1)).unwrap_err();
    assert_eq!(
        err.reason,
        "document size 262145 bytes exceeds the limit of 262144 bytes"
    );
    assert_eq!(err.field, "");
    // a file is refused before it is read
    let dir = std::env::temp_dir().join(format!("acoa-bounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("big.yaml");
    std::fs::write(&big, pad(max + 1)).unwrap();
    let err = load_application(&big).unwrap_err();
    assert!(
        err.to_string().starts_with(&big.display().to_string()),
        "{err}"
    );
    assert!(
        err.reason.contains("exceeds the limit of 262144 bytes"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn string_length_just_under_the_limit_is_accepted_just_over_refused() {
    let max = APPLICATION.max_scalar_bytes;
    yaml(&format!("a: {}\n", "v".repeat(max))).unwrap();
    let err = yaml(&format!("a: [ok, {}]\n", "v".repeat(max + 1))).unwrap_err();
    assert_eq!(err.field, "a[1]");
    assert_eq!(
        err.reason,
        "string of 1025 bytes exceeds the limit of 1024 bytes at line 1"
    );
    json(&format!("{{\"a\": \"{}\"}}", "v".repeat(max))).unwrap();
    let err = json(&format!("{{\"a\": [\"ok\", \"{}\"]}}", "v".repeat(max + 1))).unwrap_err();
    assert_eq!(err.field, "a[1]");
    assert!(err.reason.starts_with("string of 1025 bytes"), "{err}");
    // JSON escapes count as the bytes they stand for (`\u00e9` is 2, `\n` is 1)
    let escaped = format!(
        "{{\"a\": \"{}{}\"}}",
        "\\u00e9".repeat(510),
        "\\n".repeat(4)
    );
    json(&escaped).unwrap();
    let escaped = format!(
        "{{\"a\": \"{}{}\"}}",
        "\\u00e9".repeat(510),
        "\\n".repeat(5)
    );
    assert!(json(&escaped)
        .unwrap_err()
        .reason
        .starts_with("string of 1025 bytes"));
    // a key is a string too
    assert!(yaml(&format!("{}: 1\n", "k".repeat(max + 1))).is_err());
}

#[test]
fn entries_and_nodes_just_under_the_limit_are_accepted_just_over_refused() {
    let list = |n: usize| format!("[{}]", vec!["1"; n].join(", "));
    let max = APPLICATION.max_items;
    yaml(&format!("a: {}\n", list(max))).unwrap();
    let err = yaml(&format!("a: {}\n", list(max + 1))).unwrap_err();
    assert_eq!(err.field, "a[1024]");
    assert_eq!(
        err.reason,
        "more than 1024 entries in one sequence or mapping at line 1"
    );
    json(&format!("{{\"a\": {}}}", list(max))).unwrap();
    let err = json(&format!("{{\"a\": {}}}", list(max + 1))).unwrap_err();
    assert!(err.reason.starts_with("more than 1024 entries"), "{err}");
    // nodes: 1 + 64 * (1 + 1,022) + (1 + 62) = 65,536
    let nodes = |last: usize| {
        let mut outer = vec![list(1022); 64];
        outer.push(list(last));
        format!("[{}]", outer.join(", "))
    };
    yaml(&nodes(62)).unwrap();
    let err = yaml(&nodes(63)).unwrap_err();
    assert!(
        err.reason
            .starts_with("more than 65536 nodes in the document"),
        "{err}"
    );
    assert_eq!(err.field, "[64][62]");
}

/// An application of `comps` components in a chain, `extra` more channels from `c0` to
/// `c1`, `paths` one-channel paths, `criteria` criteria and `labels` labels on `c0`.
fn app(comps: usize, extra: usize, paths: usize, criteria: usize, labels: usize) -> String {
    let mut t = "application: big\ncomponents:\n".to_string();
    let hw: Vec<String> = (0..labels).map(|i| format!("h{i}")).collect();
    t.push_str(&format!(
        "- {{name: c0, image: i, requires: {{hardware: [{}]}}}}\n",
        hw.join(", ")
    ));
    for i in 1..comps {
        t.push_str(&format!("- {{name: c{i}, image: i}}\n"));
    }
    t.push_str("channels:\n");
    for i in 1..comps {
        t.push_str(&format!("- {{name: ch{i}, from: c{}, to: c{i}}}\n", i - 1));
    }
    for i in 0..extra {
        t.push_str(&format!("- {{name: x{i}, from: c0, to: c1}}\n"));
    }
    t.push_str("paths:\n");
    for i in 0..paths {
        t.push_str(&format!("- {{name: p{i}, channels: [ch1]}}\n"));
    }
    t.push_str("criteria:\n");
    for i in 0..criteria {
        t.push_str(&format!(
            "- {{type: max-e2e-reliability, path: p{}, weight: 1}}\n",
            i % paths
        ));
    }
    t
}

#[test]
fn counts_just_under_the_limits_are_accepted_just_over_refused() {
    use limits::{MAX_CHANNELS, MAX_COMPONENTS, MAX_CRITERIA, MAX_LABELS, MAX_PATHS};
    let chain = MAX_COMPONENTS - 1;
    let at_limits = app(
        MAX_COMPONENTS,
        MAX_CHANNELS - chain,
        MAX_PATHS,
        MAX_CRITERIA,
        MAX_LABELS,
    );
    let a = parse_application(&at_limits).unwrap();
    assert_eq!(
        (
            a.components.len(),
            a.channels.len(),
            a.paths.len(),
            a.criteria.len(),
            a.components[0].requires.hardware.len()
        ),
        (256, 1024, 256, 256, 32)
    );
    // what is accepted reads back from its own JSON and YAML
    let json = serde_json::to_string(&a).unwrap();
    assert_eq!(parse_application(&json).unwrap(), a);
    let yaml = serde_yaml_ng::to_string(&a).unwrap();
    assert_eq!(parse_application(&yaml).unwrap(), a);
    for (text, field, value, limit) in [
        (app(MAX_COMPONENTS + 1, 0, 1, 1, 0), "components", 257, 256),
        (app(3, 0, MAX_PATHS + 1, 1, 0), "paths", 257, 256),
        (app(3, 0, 1, MAX_CRITERIA + 1, 0), "criteria", 257, 256),
        (
            app(3, 0, 1, 1, MAX_LABELS + 1),
            "components[0].requires.hardware",
            33,
            32,
        ),
    ] {
        let err = parse_application(&text).unwrap_err();
        assert_eq!(err.field, field, "{err}");
        assert_eq!(
            err.reason,
            format!("{value} entries exceed the limit of {limit}")
        );
    }
    // 1,025 channels: the pre-scan's bound on one list is the channel count
    let err = parse_application(&app(3, MAX_CHANNELS - 1, 1, 1, 0)).unwrap_err();
    assert_eq!(err.field, "channels[1024]", "{err}");
    assert!(
        err.reason
            .starts_with("more than 1024 entries in one sequence or mapping"),
        "{err}"
    );
    // and validate() holds an application built as a value to every count
    let mut big = parse_application(&at_limits).unwrap();
    big.channels.push(big.channels[0].clone());
    big.channels.last_mut().unwrap().name = "one-more".to_string();
    let err = big.validate().unwrap_err();
    assert_eq!(err.field, "channels", "{err}");
    assert_eq!(err.reason, "1025 entries exceed the limit of 1024");
}

#[test]
fn the_scheduler_benchmark_shapes_fit_comfortably() {
    // the largest synthetic benchmark application: 20 components, ~30 channels, 6 paths
    let text = app(20, 10, 6, 12, 2);
    let lim = APPLICATION;
    assert!(text.len() * 20 < lim.max_bytes);
    parse_application(&text).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// At any depth, nesting is accepted up to the limit and refused beyond it, in YAML
    /// flow and block forms and in JSON.
    #[test]
    fn nesting_is_accepted_exactly_up_to_the_limit(depth in 1usize..80) {
        let max = APPLICATION.max_depth;
        let flow = yaml(&nested_flow(depth));
        prop_assert_eq!(flow.is_ok(), depth <= max, "{:?}", flow);
        let js = json(&nested_flow(depth));
        prop_assert_eq!(js.is_ok(), depth <= max, "{:?}", js);
        let mut block = String::new();
        for d in 0..depth {
            block.push_str(&format!("{}- \n", "  ".repeat(d)));
        }
        let b = yaml(&block);
        prop_assert_eq!(b.is_ok(), depth <= max, "{:?}", b);
    }

    /// Around the bounds on one scalar and on one list, at any size: accepted exactly up to
    /// the bound.
    #[test]
    fn strings_and_lists_are_accepted_exactly_up_to_their_bound(
        len in 1000usize..1050,
        items in 1000usize..1050,
    ) {
        let s = yaml(&format!("a: {}\n", "v".repeat(len)));
        prop_assert_eq!(s.is_ok(), len <= APPLICATION.max_scalar_bytes);
        let j = json(&format!("{{\"a\": \"{}\"}}", "v".repeat(len)));
        prop_assert_eq!(j.is_ok(), len <= APPLICATION.max_scalar_bytes);
        let list = format!("[{}]", vec!["1"; items].join(","));
        prop_assert_eq!(yaml(&list).is_ok(), items <= APPLICATION.max_items);
        prop_assert_eq!(json(&list).is_ok(), items <= APPLICATION.max_items);
    }

    /// No text makes the bounded reader panic, and none is accepted with a name that
    /// could break a topic.
    #[test]
    fn arbitrary_text_never_panics(text in "(application|components|name|image|\\[|\\]|\\{|\\}|&a|\\*a|!!binary|:|-|,| |\n|[a-z+#/])*") {
        if let Ok(app) = parse_application(&text) {
            prop_assert!(!app.application.contains(['+', '#', '/', '\0']));
        }
    }
}
