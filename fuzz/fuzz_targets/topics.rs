//! MQTT topics (`acoa_shared::topics`): every topic a client publishes to reaches `parse`;
//! a topic that parses is exactly the one its builder makes. Broker addresses
//! (`broker_address`) read back from the bracketed form of what they parse to, with and
//! without the port.
#![no_main]

use acoa_fuzz::text;
use acoa_shared::topics::{self, Topic};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(text) = text(data) else {
        return;
    };
    if let Some(t) = topics::parse(text) {
        let built = match t {
            Topic::Report(n) => topics::report(n),
            Topic::Links(n) => topics::links(n),
            Topic::Online(n) => topics::online(n),
            Topic::Desired(n) => topics::desired(n),
            Topic::Actual(n) => topics::actual(n),
            Topic::Usage(n) => topics::usage(n),
            Topic::Peers(n) => topics::peers(n),
            Topic::App(a) => topics::app(a),
            Topic::AppStatus(a) => topics::app_status(a),
            Topic::Loopback(b) => topics::loopback(b.into()),
        };
        assert_eq!(
            built, text,
            "topic {text:?} parses to {t:?}, built back differently"
        );
        // every topic names one node or application (since wire v5 the peer list too), but
        // the control plane's loopback, which names a broker by its number
        let (Topic::Report(n)
        | Topic::Links(n)
        | Topic::Online(n)
        | Topic::Desired(n)
        | Topic::Actual(n)
        | Topic::Usage(n)
        | Topic::Peers(n)
        | Topic::App(n)
        | Topic::AppStatus(n)) = t
        else {
            return;
        };
        assert!(
            !n.is_empty() && !n.contains('/'),
            "topic {text:?} names {n:?}"
        );
    }
    if let Ok((host, port)) = topics::broker_address(text) {
        assert!(!host.is_empty(), "{text:?} parses to an empty host");
        let again = format!("mqtt://[{host}]:{port}");
        assert_eq!(
            topics::broker_address(&again),
            Ok((host.clone(), port)),
            "{text:?} parses to {host:?}:{port}, which {again:?} does not"
        );
        let default_port = format!("mqtt://[{host}]");
        assert_eq!(
            topics::broker_address(&default_port),
            Ok((host.clone(), 1883)),
            "{text:?} parses to host {host:?}, which {default_port:?} does not (port 1883)"
        );
    }
});
