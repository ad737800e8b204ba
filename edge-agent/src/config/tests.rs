use super::*;

/// The file with every key (the fuzz corpus seeds from it too).
const FULL: &str = include_str!("../../config-full.toml");

const KEY: &str = "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29";

fn load_str(toml_text: &str, o: Overrides) -> Result<Config, ConfigError> {
    let dir = std::env::temp_dir().join(format!("acoa-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // one file per call: tests run on parallel threads of this process, and two documents of
    // one length (the name this had) overwrote each other
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!("{n}.toml"));
    std::fs::write(&path, toml_text).unwrap();
    Config::load(Overrides {
        config: Some(path),
        ..o
    })
}

#[test]
fn the_documented_example_parses_and_flags_override() {
    let text = FULL.replace("CONTROL-PLANE-KEY", KEY);
    let c = load_str(&text, Overrides::default()).unwrap();
    assert_eq!(c.stats.listen.to_string(), "0.0.0.0:7879");
    assert_eq!(c.stats.advertise.as_deref(), Some("10.88.0.1:7879"));
    assert_eq!(c.node, "n13");
    assert_eq!(c.layer, Layer::Edge);
    assert_eq!(c.capacity.cpu_millis, Some(2000));
    assert_eq!(c.broker.urls.len(), 1);
    assert_eq!(c.broker.urls[0].port, 1883);
    assert_eq!(c.probe.advertise.to_string(), "10.0.0.13:7878");
    assert_eq!(c.probe.clock, crate::prober::ClockMode::Synchronized);
    assert_eq!(c.netns.as_deref(), Some("/run/netns/n13"));
    let p = c.position.expect("position");
    assert_eq!((p.lat_deg(), p.lon_deg()), (47.378, 8.540));
    let c = load_str(
        &text,
        Overrides {
            node: Some("n14".into()),
            broker: Some("mqtt://broker.example:2883".into()),
            allow_image: vec!["localhost/other/".into()],
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(c.node, "n14");
    assert_eq!(
        c.broker.urls,
        [BrokerUrl {
            host: "broker.example".into(),
            port: 2883,
            tls: false
        }]
    );
    assert_eq!(c.image_allowlist, vec!["localhost/other/".to_string()]);
}

#[test]
fn bad_values_name_the_field() {
    let e = load_str(
        &format!("node = \"a\"\nlayer = \"fog\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n"),
        Overrides::default(),
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("layer:"), "{e}");
    let e = load_str("node = \"a\"\n", Overrides::default()).unwrap_err();
    assert!(e.to_string().contains("control_plane_key"), "{e}");
    let e = load_str("node = \"a\"\nbogus = 1\n", Overrides::default()).unwrap_err();
    assert!(e.to_string().contains("bogus"), "{e}");
    let e = load_str(
        &format!(
            "node = \"a\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n[probe]\nclock = \"gps\"\n"
        ),
        Overrides::default(),
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("probe.clock:"), "{e}");
    assert!(e.to_string().contains("gps"), "{e}");
    let e = load_str(
        &format!(
            "node = \"a\"\nposition = {{ lat_deg = 47.3, lon_deg = 188.5 }}\n[broker]\ncontrol_plane_key = \"{KEY}\"\n"
        ),
        Overrides::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("longitude 188.5 is not"), "{e}");
    assert!(e.to_string().contains("position"), "{e}");
    let c = load_str(
        &format!("node = \"a\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n"),
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(
        c.probe.clock,
        crate::prober::ClockMode::Free,
        "free by default"
    );
}

#[test]
fn broker_urls() {
    assert_eq!(
        parse_broker_url("mqtt://h").unwrap(),
        ("h".into(), 1883, false)
    );
    assert_eq!(
        parse_broker_url("mqtts://h:1").unwrap(),
        ("h".into(), 1, true)
    );
    assert_eq!(
        parse_broker_url("mqtt://[::1]:5").unwrap(),
        ("::1".into(), 5, false)
    );
    assert!(parse_broker_url("http://h").is_err());
    assert!(parse_broker_url("mqtt://h:x").is_err());
}

#[test]
fn a_broker_list_from_the_file_or_the_flag_and_its_errors_name_the_field() {
    let cfg = |broker: &str, flag: Option<&str>| {
        load_str(
            &format!("node = \"n1\"\n[broker]\n{broker}control_plane_key = \"{KEY}\"\n"),
            Overrides {
                broker: flag.map(String::from),
                ..Default::default()
            },
        )
    };
    let b = |host: &str, port, tls| BrokerUrl {
        host: host.into(),
        port,
        tls,
    };
    // a list, in its order; url stays valid as a list of one
    let c = cfg(
        "urls = [\"mqtt://a:1\", \"mqtts://b\", \"mqtt://[::1]:3\"]\n",
        None,
    )
    .unwrap();
    assert_eq!(
        c.broker.urls,
        [b("a", 1, false), b("b", 8883, true), b("::1", 3, false)]
    );
    assert_eq!(c.broker.urls[2].to_string(), "[::1]:3");
    let c = cfg("url = \"mqtt://a:1\"\n", None).unwrap();
    assert_eq!(c.broker.urls, [b("a", 1, false)]);
    let c = cfg("", None).unwrap();
    assert_eq!(c.broker.urls, [b("127.0.0.1", 1883, false)], "the default");
    // the flag takes a comma list and replaces the file's
    let c = cfg("url = \"mqtt://a:1\"\n", Some("mqtt://x:7, mqtt://y:8")).unwrap();
    assert_eq!(c.broker.urls, [b("x", 7, false), b("y", 8, false)]);
    // what is wrong is named
    for (broker, flag, want) in [
        (
            "url = \"mqtt://a\"\nurls = [\"mqtt://b\"]\n",
            None,
            "broker.urls: set broker.url or broker.urls, not both",
        ),
        ("urls = []\n", None, "broker.urls: empty"),
        (
            "urls = [\"mqtt://a\", \"http://b\"]\n",
            None,
            "broker.urls: entry 2: \"http://b\" must start with mqtt://",
        ),
        (
            "urls = [\"mqtt://a\", \"mqtt://a:1883\"]\n",
            None,
            "broker.urls: entry 2: \"mqtt://a:1883\" is listed twice",
        ),
        (
            "urls = [\"mqtt://a:x\"]\n",
            None,
            "broker.urls: entry 1: bad port",
        ),
        ("url = \"mqtt://a:x\"\n", None, "broker.url: bad port"),
        (
            "",
            Some("mqtt://a,"),
            "broker.urls: entry 2: \"\" must start with mqtt://",
        ),
        ("", Some("mqtt://a:99999"), "broker.url: bad port"),
    ] {
        let e = cfg(broker, flag).unwrap_err().to_string();
        assert!(e.starts_with(want), "{broker} {flag:?}: {e}");
    }
    let many: Vec<String> = (0..=MAX_BROKERS)
        .map(|i| format!("\"mqtt://h{i}\""))
        .collect();
    let e = cfg(&format!("urls = [{}]\n", many.join(", ")), None)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("broker.urls:") && e.contains(&format!("at most {MAX_BROKERS}")),
        "{e}"
    );
}

#[test]
fn stats_listen_on_loopback_by_default() {
    let c = load_str(
        &format!("node = \"a\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n"),
        Overrides {
            stats_advertise: Some(" ".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(c.stats.listen.to_string(), "127.0.0.1:7879");
    assert_eq!(c.stats.advertise, None, "blank means the default");
    let e = load_str(
        &format!(
            "node = \"a\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n[stats]\nlisten = \"nope\"\n"
        ),
        Overrides::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("listen"), "{e}");
}

/// Found by the fuzz target: the agent took names the control plane refuses (`-a`), and a
/// probe time-out so large that the prober's nanoseconds overflowed.
#[test]
fn names_and_probe_times_are_those_the_rest_of_the_system_can_hold() {
    let cfg = |extra: &str| {
        load_str(
            &format!("node = \"n1\"\n{extra}[broker]\ncontrol_plane_key = \"{KEY}\"\n"),
            Overrides::default(),
        )
    };
    assert!(cfg("").is_ok());
    let e = load_str(
        &format!("node = \"-a\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n"),
        Overrides::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("node"), "{e}");
    for (field, value) in [
        ("timeout_ms", "9223372036854775807"),
        ("timeout_ms", "0"),
        ("period_ms", "3600001"),
    ] {
        let doc = format!(
            "node = \"n1\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n[probe]\n{field} = {value}\n"
        );
        let e = load_str(&doc, Overrides::default()).unwrap_err();
        assert!(e.to_string().contains(field), "{field} = {value}: {e}");
    }
    let doc = format!("node = \"n1\"\n[broker]\ncontrol_plane_key = \"{KEY}\"\n[probe]\ntimeout_ms = 3600000\nperiod_ms = 3600000\n");
    assert!(load_str(&doc, Overrides::default()).is_ok());
}
