//! The application's `disconnect` policy: defaults, values, and refusals that name the field.

use acoa_shared::model::limits::DEFAULT_TOLERATE_S;
use acoa_shared::model::{parse_application, Disconnect, OnReturn};

const BASE: &str = "application: a\ncomponents:\n- {name: c, image: img}\n";

fn read(extra: &str) -> Result<Disconnect, String> {
    let text = format!("{BASE}{extra}");
    parse_application(&text)
        .map(|a| a.disconnect)
        .map_err(|e| e.to_string())
}

#[test]
fn the_defaults_suit_a_railway() {
    let d = read("").unwrap();
    assert_eq!(d.tolerate_s, DEFAULT_TOLERATE_S);
    assert_eq!(DEFAULT_TOLERATE_S, 600);
    assert_eq!(d.on_return, OnReturn::Original);
    assert!(d.is_default());
    // a default policy is not written back (status documents and records stay as they were)
    let app = parse_application(BASE).unwrap();
    assert!(!serde_json::to_string(&app).unwrap().contains("disconnect"));
}

#[test]
fn values_are_read_and_written_back() {
    let d = read("disconnect: {tolerate_s: 30, on_return: best}\n").unwrap();
    assert_eq!((d.tolerate_s, d.on_return), (30, OnReturn::Best));
    let d = read("disconnect:\n  on_return: replacement\n").unwrap();
    assert_eq!((d.tolerate_s, d.on_return), (600, OnReturn::Replacement));
    assert_eq!(d.on_return.as_str(), "replacement");
    let d = read("disconnect: {tolerate_s: 0}\n").unwrap();
    assert_eq!(d.tolerate_s, 0);
    let app = parse_application(&format!("{BASE}disconnect: {{tolerate_s: 30}}\n")).unwrap();
    let json = serde_json::to_string(&app).unwrap();
    assert!(
        json.contains(r#""disconnect":{"tolerate_s":30,"on_return":"original"}"#),
        "{json}"
    );
}

#[test]
fn a_bad_policy_is_refused_naming_the_field() {
    let e = read("disconnect: {tolerate_s: 700000}\n").unwrap_err();
    assert!(e.contains("disconnect.tolerate_s"), "{e}");
    assert!(e.contains("604800"), "{e}");
    let e = read("disconnect: {on_return: newest}\n").unwrap_err();
    assert!(e.contains("newest"), "{e}");
    let e = read("disconnect: {tolerate: 5}\n").unwrap_err();
    assert!(e.contains("tolerate"), "{e}");
    let e = read("disconnect: {tolerate_s: -1}\n").unwrap_err();
    assert!(e.contains("disconnect"), "{e}");
}
