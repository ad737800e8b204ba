//! Wire frames: every message round-trips; signatures bind; nothing that arrives
//! makes the decoder panic.

use acoa_shared::model::Layer;
use acoa_shared::topics;
use acoa_shared::wire::{self, *};
use ed25519_dalek::SigningKey;
use proptest::prelude::*;

fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

fn labels(items: &[&str]) -> Labels {
    items.iter().map(|s| name(s).unwrap()).collect()
}

fn samples() -> Vec<Message> {
    let spec = ContainerSpec {
        name: name("smoke.alarm").unwrap(),
        app: name("smoke").unwrap(),
        component: name("alarm").unwrap(),
        image: bounded("image", "localhost/acoa/smoke-alarm:1").unwrap(),
        cpu_millis: 100,
        memory_mb: 64,
        env: [EnvVar {
            name: bounded("env", "ACOA_NEXT").unwrap(),
            value: bounded("env", "10.77.0.14:9000").unwrap(),
        }]
        .into_iter()
        .collect(),
        health: None,
    };
    let mut checked = spec.clone();
    checked.name = name("smoke.level").unwrap();
    checked.health = Some(Box::new(HealthSpec {
        check: CheckSpec::Http {
            port: 8080,
            path: bounded("path", "/healthz").unwrap(),
        },
        interval_s: 5,
        timeout_s: 2,
        retries: 3,
        start_period_s: 10,
    }));
    let mut by_cmd = spec.clone();
    by_cmd.name = name("smoke.storage").unwrap();
    by_cmd.health = Some(Box::new(HealthSpec {
        check: CheckSpec::Cmd(
            ["sh", "-c", "test -f /tmp/ok"]
                .iter()
                .map(|a| bounded("arg", a).unwrap())
                .collect(),
        ),
        interval_s: 1,
        timeout_s: 1,
        retries: 1,
        start_period_s: 0,
    }));
    vec![
        Message::NodeReport(Box::new(NodeReport {
            node: name("n13").unwrap(),
            seq: 7,
            run: 0,
            timestamp_ms: 1_780_000_000_000,
            datacenter: name("train1").unwrap(),
            layer: Layer::Edge,
            arch: name("aarch64").unwrap(),
            hardware: labels(&["smoke-sensor"]),
            software: labels(&[]),
            capacity: NodeCapacity {
                cpu_millis: 2000,
                memory_mb: 2048,
                disk_mb: 16000,
                net_mbps: 100,
            },
            load: NodeLoad {
                cpu_millis: 150,
                memory_used_mb: 300,
                containers: 1,
                ..Default::default()
            },
            probe_addr: bounded("probe_addr", "10.77.0.13:7878").unwrap(),
            position: Some(acoa_shared::wire::WirePosition {
                lat_deg: 47.378,
                lon_deg: 8.54,
            }),
        })),
        Message::LinkMetrics(Box::new(LinkMetrics {
            node: name("n13").unwrap(),
            seq: 1,
            run: 0,
            links: [LinkSample {
                peer: name("n14").unwrap(),
                latency_ms: 1.02,
                jitter_ms: 0.05,
                success: 0.97,
                samples: 20,
                last_answer_ms: 0,
            }]
            .into_iter()
            .collect(),
            coord: Some(WireCoord {
                vec: [1.5, -3.25, 40.0],
                height: 4.5,
                error: 0.25,
            }),
        })),
        Message::DesiredState(Box::new(DesiredState {
            node: name("n14").unwrap(),
            generation: 3,
            term: 0,
            containers: [spec.clone(), checked, by_cmd].into_iter().collect(),
        })),
        Message::ActualState(Box::new(ActualState {
            node: name("n14").unwrap(),
            generation: 3,
            seq: 9,
            run: 0,
            containers: [
                ContainerStatus {
                    name: spec.name.clone(),
                    image: spec.image.clone(),
                    state: ContainerState::Refused,
                    restarts: 0,
                    error: bounded("error", "image outside the allowlist").unwrap(),
                    health: None,
                },
                ContainerStatus {
                    name: name("smoke.level").unwrap(),
                    image: spec.image.clone(),
                    state: ContainerState::Running,
                    restarts: 2,
                    error: heapless::String::new(),
                    health: Some(Health::Unhealthy),
                },
            ]
            .into_iter()
            .collect(),
        })),
        Message::PeerList(Box::new(PeerList {
            node: name("n02").unwrap(),
            generation: 2,
            peers: [Peer {
                node: name("n01").unwrap(),
                addr: bounded("addr", "10.77.0.1:7878").unwrap(),
                group: true,
            }]
            .into_iter()
            .collect(),
        })),
        Message::ComponentUsage(Box::new(ComponentUsage {
            node: name("n01").unwrap(),
            seq: 3,
            run: 0,
            period_ms: 1000,
            components: [ComponentSample {
                app: name("smoke-monitoring").unwrap(),
                component: name("measurement").unwrap(),
                container: name("smoke-monitoring.measurement.r2").unwrap(),
                cpu_millis: Some(120.5),
                memory_mb: None,
                traffic: [TrafficSample {
                    to: name("raw-to-level").unwrap(),
                    bytes_per_s: 12_000.0,
                    messages_per_s: 10.0,
                }]
                .into_iter()
                .collect(),
                service: Some(ServiceSample {
                    mean_ms: 61.25,
                    messages: 40,
                }),
            }]
            .into_iter()
            .collect(),
        })),
        Message::Presence(Presence {
            node: name("n13").unwrap(),
            run: 4,
            conn: 2,
            online: false,
        }),
    ]
}

#[test]
fn every_message_round_trips_signed_and_unsigned() {
    let k = key(1);
    for msg in samples() {
        let signed = encode(&msg, Some(&k)).unwrap();
        assert_eq!(
            decode_verified(&signed, &k.verifying_key()).unwrap(),
            msg,
            "{}",
            msg.kind()
        );
        let unsigned = encode(&msg, None).unwrap();
        assert_eq!(decode_unverified(&unsigned).unwrap(), msg);
        assert_eq!(
            decode_verified(&unsigned, &k.verifying_key()),
            Err(WireError::Unsigned)
        );
    }
}

#[test]
fn a_signature_binds_the_key_and_the_body() {
    let msg = samples().remove(2);
    let frame = encode(&msg, Some(&key(1))).unwrap();
    assert_eq!(
        decode_verified(&frame, &key(2).verifying_key()),
        Err(WireError::BadSignature)
    );
    // flip one bit anywhere in the frame: it either fails to open or fails to verify
    for i in 0..frame.len() {
        let mut bad = frame.clone();
        bad[i] ^= 0x01;
        assert!(
            decode_verified(&bad, &key(1).verifying_key()).is_err(),
            "bit flip at {i} accepted"
        );
    }
}

#[test]
fn an_unknown_version_is_named() {
    let mut frame = encode(&samples()[0], None).unwrap();
    assert_eq!(frame[0], VERSION as u8);
    frame[0] = 8;
    assert_eq!(open(&frame).unwrap_err(), WireError::UnknownVersion(8));
    assert_eq!(
        WireError::UnknownVersion(8).to_string(),
        "unknown message version 8 (this build speaks version 7)"
    );
}

#[test]
fn a_full_peer_list_fits_an_agent_packet_many_times_over() {
    // the largest per-node list (wire v5): MAX_PEERS_PER_NODE peers of the longest names and
    // addresses, signed; the fleet-wide list it replaces passed the agent's 256 KiB near
    // 10,000 nodes
    let long = "n".repeat(63);
    let peers = (0..MAX_PEERS_PER_NODE)
        .map(|i| Peer {
            node: name(&format!("{i:02}{}", &long[2..])).unwrap(),
            addr: bounded("addr", &format!("[fe80::{i}]:{}", "7".repeat(40))).unwrap(),
            group: i % 2 == 0,
        })
        .collect();
    let msg = Message::PeerList(Box::new(PeerList {
        node: name(&long).unwrap(),
        generation: u64::MAX,
        peers,
    }));
    let frame = encode(&msg, Some(&key(1))).unwrap();
    assert!(frame.len() < 10_000, "{} bytes", frame.len());
    assert!(frame.len() < topics::AGENT_MAX_PACKET / 20);
    assert_eq!(
        decode_verified(&frame, &key(1).verifying_key()).unwrap(),
        msg
    );
}

#[test]
fn every_truncation_is_an_error() {
    for msg in samples() {
        let frame = encode(&msg, Some(&key(3))).unwrap();
        for n in 0..frame.len() {
            assert!(
                decode_unverified(&frame[..n]).is_err(),
                "{} truncated to {n}",
                msg.kind()
            );
        }
    }
}

#[test]
fn bounds_are_enforced_with_a_named_error() {
    assert_eq!(
        name(&"x".repeat(65)),
        Err(WireError::TooLong {
            field: "name",
            max: 64
        })
    );
    assert!(name(&"x".repeat(64)).is_ok());
    assert_eq!(
        wire::keys::from_hex("zz"),
        Err(wire::keys::KeyError::Length(2))
    );
    let k = key(9);
    let hex = wire::keys::public_hex(&k.verifying_key());
    assert_eq!(
        wire::keys::public_from_hex(&hex).unwrap(),
        k.verifying_key()
    );
}

#[test]
fn topics_carry_the_node() {
    assert_eq!(topics::desired("n13"), "acoa/v1/nodes/n13/desired");
    assert_eq!(
        topics::parse("acoa/v1/nodes/n13/report"),
        Some(topics::Topic::Report("n13"))
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_unverified(&bytes);
        let _ = decode_verified(&bytes, &key(1).verifying_key());
    }

    #[test]
    fn mutated_frames_never_panic(i in 0usize..5, pos in 0usize..400, byte in any::<u8>()) {
        let mut frame = encode(&samples()[i], Some(&key(1))).unwrap();
        let pos = pos % frame.len();
        frame[pos] = byte;
        let _ = decode_verified(&frame, &key(1).verifying_key());
        let _ = decode_unverified(&frame);
    }
}

/// Found by fuzzing: `from_str_radix` takes a leading `+` as a sign, so `+a+a...` passed as a key.
#[test]
fn a_key_is_hex_digits_only() {
    use acoa_shared::wire::keys::{from_hex, KeyError};
    assert_eq!(from_hex(&"+a".repeat(32)), Err(KeyError::NotHex));
    assert_eq!(from_hex(&"ab".repeat(32)), Ok([0xab; 32]));
}

#[test]
fn a_health_block_converts_to_the_wire_and_back() {
    use acoa_shared::model::{parse_application, HealthCheck};
    let app = parse_application(
        "application: a\ncomponents:\n- name: web\n  image: localhost/acoa/w:1\n  health:\n    check: {http: {port: 8080, path: /healthz}}\n    interval_s: 5\n    start_period_s: 10\n- name: db\n  image: localhost/acoa/d:1\n  health: {check: {cmd: [sh, -c, 'test -f /tmp/ok']}}\n- name: q\n  image: localhost/acoa/q:1\n  health: {check: {tcp: 5672}}\n",
    )
    .unwrap();
    for c in &app.components {
        let h = c.health.as_ref().unwrap();
        let w = HealthSpec::from_model(h).unwrap();
        assert_eq!(&w.to_model(), h, "{}", c.name);
    }
    let web = HealthSpec::from_model(app.components[0].health.as_ref().unwrap()).unwrap();
    assert_eq!(
        (
            web.interval_s,
            web.timeout_s,
            web.retries,
            web.start_period_s
        ),
        (5, 2, 3, 10)
    );
    assert_eq!(web.check.to_string(), "http 8080/healthz");
    let db = HealthSpec::from_model(app.components[1].health.as_ref().unwrap()).unwrap();
    assert_eq!(db.check.to_string(), "cmd sh -c test -f /tmp/ok");
    // a model built as a value and never validated is refused with the field, not cut
    let mut h = app.components[2].health.clone().unwrap();
    h.check = HealthCheck::Tcp(70_000);
    assert_eq!(
        HealthSpec::from_model(&h).unwrap_err().to_string(),
        "health port is more than 65535"
    );
}

#[test]
fn a_service_time_is_read_only_when_it_is_one() {
    let s = |mean_ms| ServiceSample {
        mean_ms,
        messages: 1,
    };
    assert_eq!(s(61.25).checked_ms(), Some(61.25));
    assert_eq!(s(0.0).checked_ms(), Some(0.0));
    for bad in [f32::NAN, f32::INFINITY, -1.0, 60_001.0] {
        assert_eq!(s(bad).checked_ms(), None, "{bad}");
    }
}
