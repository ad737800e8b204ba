//! A component's `health` block: defaults, the three kinds of check, and refusals that name
//! the field.

use acoa_shared::model::{parse_application, Health, HealthCheck, HttpCheck};

const BASE: &str = "application: a\ncomponents:\n- name: c\n  image: localhost/acoa/c:1\n";

/// The health of component `c` with `block` (YAML, indented under `health:`).
fn read(block: &str) -> Result<Option<Health>, String> {
    let text = format!("{BASE}  health: {block}\n");
    parse_application(&text)
        .map(|a| a.components[0].health.clone())
        .map_err(|e| e.to_string())
}

#[test]
fn a_component_without_health_has_none_and_writes_none_back() {
    let app = parse_application(BASE).unwrap();
    assert_eq!(app.components[0].health, None);
    assert!(!serde_json::to_string(&app).unwrap().contains("health"));
}

#[test]
fn the_three_checks_read_with_defaults() {
    let h = read("{check: {cmd: [sh, -c, 'test -f /tmp/ok']}}")
        .unwrap()
        .unwrap();
    assert_eq!(
        h,
        Health {
            check: HealthCheck::Cmd(vec!["sh".into(), "-c".into(), "test -f /tmp/ok".into()]),
            interval_s: 10,
            timeout_s: 2,
            retries: 3,
            start_period_s: 0,
        }
    );
    let h =
        read("{check: {tcp: 8080}, interval_s: 5, timeout_s: 1, retries: 1, start_period_s: 30}")
            .unwrap()
            .unwrap();
    assert_eq!(h.check, HealthCheck::Tcp(8080));
    assert_eq!(
        (h.interval_s, h.timeout_s, h.retries, h.start_period_s),
        (5, 1, 1, 30)
    );
    let h = read("{check: {http: {port: 80}}}").unwrap().unwrap();
    assert_eq!(
        h.check,
        HealthCheck::Http(HttpCheck {
            port: 80,
            path: "/".into()
        })
    );
    // block style, as docs/model.md shows it, and JSON alike
    let text = format!(
        "{BASE}  health:\n    check: {{http: {{port: 8080, path: /healthz}}}}\n    interval_s: 5\n    timeout_s: 2\n    retries: 3\n    start_period_s: 10\n"
    );
    let app = parse_application(&text).unwrap();
    let json = serde_json::to_string(&app).unwrap();
    assert!(
        json.contains(r#""health":{"check":{"http":{"port":8080,"path":"/healthz"}},"interval_s":5,"timeout_s":2,"retries":3,"start_period_s":10}"#),
        "{json}"
    );
    assert_eq!(parse_application(&json).unwrap(), app);
}

#[test]
fn bad_health_blocks_are_refused_naming_the_field() {
    let cases: &[(&str, &str)] = &[
        ("{check: {cmd: []}}", "components[0].health.check.cmd: needs a command"),
        ("{check: {cmd: ['']}}", "components[0].health.check.cmd: needs a command"),
        (
            "{check: {cmd: [a, b, c, d, e, f, g, h, i]}}",
            "components[0].health.check.cmd: 9 entries exceed the limit of 8",
        ),
        (
            "{check: {tcp: 0}}",
            "components[0].health.check.tcp: 0 is not a port (1 to 65535)",
        ),
        (
            "{check: {tcp: 70000}}",
            "components[0].health.check.tcp: 70000 is not a port (1 to 65535)",
        ),
        (
            "{check: {http: {port: 80, path: healthz}}}",
            "components[0].health.check.http.path: must start with `/`",
        ),
        (
            "{check: {http: {port: 80, path: '/a b'}}}",
            "components[0].health.check.http.path: must start with `/`",
        ),
        (
            "{check: {http: {port: 80, paht: /x}}}",
            "components[0].health.check.http.paht: invalid yaml: unknown field `paht`",
        ),
        (
            "{check: {exec: [true]}}",
            "components[0].health.check.exec: invalid yaml: unknown field `exec`, expected one of `cmd`, `tcp`, `http`",
        ),
        (
            "{check: {tcp: 80, http: {port: 80}}}",
            "components[0].health.check: invalid yaml: needs exactly one of `cmd`, `tcp`, `http`",
        ),
        (
            "{check: {}}",
            "components[0].health.check: invalid yaml: needs exactly one of `cmd`, `tcp`, `http`",
        ),
        ("{interval_s: 5}", "components[0].health: invalid yaml: missing field `check`"),
        (
            "{check: {tcp: 1}, interval_s: 0}",
            "components[0].health.interval_s: 0 s is outside 1 to 3600 s",
        ),
        (
            "{check: {tcp: 1}, interval_s: 3601}",
            "components[0].health.interval_s: 3601 s is outside 1 to 3600 s",
        ),
        (
            "{check: {tcp: 1}, timeout_s: 0}",
            "components[0].health.timeout_s: 0 s is outside 1 to 60 s",
        ),
        (
            "{check: {tcp: 1}, interval_s: 5, timeout_s: 6}",
            "components[0].health.timeout_s: 6 s is longer than interval_s, 5 s",
        ),
        (
            "{check: {tcp: 1}, retries: 0}",
            "components[0].health.retries: 0 is outside 1 to 10",
        ),
        (
            "{check: {tcp: 1}, retries: 11}",
            "components[0].health.retries: 11 is outside 1 to 10",
        ),
        (
            "{check: {tcp: 1}, start_period_s: 4000}",
            "components[0].health.start_period_s: 4000 s is outside 0 to 3600 s",
        ),
        (
            "{check: {tcp: 1}, start_period_s: -1}",
            "components[0].health.start_period_s: invalid yaml",
        ),
        (
            "{check: {tcp: 1}, retry: 3}",
            "components[0].health.retry: invalid yaml: unknown field `retry`",
        ),
    ];
    for (block, want) in cases {
        let e = read(block).expect_err(block);
        assert!(e.starts_with(want), "{block}: {e}");
    }
    let long = "x".repeat(128);
    let e = read(&format!("{{check: {{cmd: [sh, '{long}']}}}}")).unwrap_err();
    assert!(
        e.starts_with("components[0].health.check.cmd[1]: must be at most 127 bytes"),
        "{e}"
    );
}
