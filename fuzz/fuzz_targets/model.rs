//! Application and cluster definitions (`acoa_shared::model`), from MQTT (`acoa/v1/apps/{app}`)
//! or a file, in YAML or JSON. Parsing never panics; what `parse_application` /
//! `parse_cluster` accept validates, and reads back equal from its own JSON and YAML; what
//! merely parses (`model::parse`, either format) can be validated without panicking.
#![no_main]

use acoa_fuzz::text;
use acoa_shared::model::{self, Application, Cluster, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(text) = text(data) else {
        return;
    };
    if let Ok(app) = model::parse_application(text) {
        app.validate().expect("an accepted application validates");
        let json = serde_json::to_string(&app).expect("an application serializes to json");
        assert_eq!(
            model::parse_application(&json).as_ref(),
            Ok(&app),
            "an accepted application does not read back from its json {json}"
        );
        let yaml = serde_yaml_ng::to_string(&app).expect("an application serializes to yaml");
        assert_eq!(
            model::parse_application(&yaml).as_ref(),
            Ok(&app),
            "an accepted application does not read back from its yaml {yaml}"
        );
    }
    if let Ok(c) = model::parse_cluster(text) {
        c.validate().expect("an accepted cluster validates");
        let json = serde_json::to_string(&c).expect("a cluster serializes to json");
        assert_eq!(
            model::parse_cluster(&json).as_ref(),
            Ok(&c),
            "an accepted cluster does not read back from its json {json}"
        );
        let yaml = serde_yaml_ng::to_string(&c).expect("a cluster serializes to yaml");
        assert_eq!(
            model::parse_cluster(&yaml).as_ref(),
            Ok(&c),
            "an accepted cluster does not read back from its yaml {yaml}"
        );
    }
    for format in [Format::Json, Format::Yaml] {
        if let Ok(app) = model::parse::<Application>(text, format) {
            let _ = app.validate();
        }
        if let Ok(c) = model::parse::<Cluster>(text, format) {
            let _ = c.validate();
        }
    }
});
