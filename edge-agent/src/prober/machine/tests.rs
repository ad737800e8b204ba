use super::*;
use crate::prober::packet::encode_probe;
use acoa_shared::wire::{encode, name, Peer, PeerList, WireCoord};
use ed25519_dalek::SigningKey;

fn cp() -> SigningKey {
    SigningKey::from_bytes(&[3; 32])
}

/// `me`'s list of peers `p0`.. (at 127.0.0.1:10000..), the first `group` of its group.
fn list_frame(me: &str, generation: u64, n: usize, group: usize, key: &SigningKey) -> Vec<u8> {
    let peers = (0..n)
        .map(|i| Peer {
            node: name(&format!("p{i}")).unwrap(),
            addr: wire::bounded("addr", &format!("127.0.0.1:{}", 10000 + i)).unwrap(),
            group: i < group,
        })
        .collect();
    encode(
        &Message::PeerList(Box::new(PeerList {
            node: name(me).unwrap(),
            generation,
            peers,
        })),
        Some(key),
    )
    .unwrap()
}

fn peers_frame(generation: u64, n: usize, key: &SigningKey) -> Vec<u8> {
    list_frame("me", generation, n, 0, key)
}

#[test]
fn rotation_is_bounded_and_covers_everyone() {
    let mut p = Prober::new("p3", cp().verifying_key(), 20, 4, 1000);
    p.set_peers(&list_frame("p3", 1, 10, 0, &cp()), false)
        .unwrap();
    assert_eq!(p.peer_count(), 9, "itself left out");
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..3u64 {
        let due = p.due(round * 1_000_000_000);
        assert!(due.len() <= 4);
        seen.extend(due.iter().map(|(a, _)| *a));
    }
    assert_eq!(seen.len(), 9, "every peer probed within ceil(9/4) periods");
}

#[test]
fn replies_and_timeouts_make_the_numbers() {
    let mut p = Prober::new("me", cp().verifying_key(), 10, 1, 500).with_run(5);
    p.set_peers(&peers_frame(1, 1, &cp()), false).unwrap();
    for i in 0..10u64 {
        let t0 = i * 1_000_000_000;
        let (_, ping) = p.due(t0)[0];
        // The peer answers: the pong echoes the ping's fields.
        let Received::Reply(pong) = p.on_packet(&ping, t0) else {
            panic!()
        };
        if i % 5 != 4 {
            assert_eq!(p.on_packet(&pong, t0 + 80_000_000), Received::Recorded);
        }
        p.expire(t0 + 600_000_000);
    }
    let s = p.stats("p0").unwrap();
    assert!((s.latency_ms().unwrap() - 40.0).abs() < 1e-6);
    assert!((s.success() - 0.8).abs() < 1e-9);
    let node = name("me").unwrap();
    let mut seq = 0;
    let m = p.metrics(&node, &mut seq, 9_080_000_000);
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].links[0].samples, 10);
    assert_eq!(
        m[0].links[0].last_answer_ms, 1000,
        "the last pong (of ping 8) came 1 s before"
    );
    assert_eq!((m[0].run, m[0].seq), (5, 1));
    // A late pong (already expired) is not counted.
    let (_, ping) = p.due(20_000_000_000)[0];
    p.expire(21_000_000_000);
    let Received::Reply(pong) = p.on_packet(&ping, 0) else {
        panic!()
    };
    assert_eq!(p.on_packet(&pong, 21_000_000_001), Received::Dropped);
}

#[test]
fn peer_lists_are_trusted_only_when_signed_and_newer() {
    let mut p = Prober::new("me", cp().verifying_key(), 10, 1, 500);
    let other = SigningKey::from_bytes(&[4; 32]);
    assert!(p.set_peers(b"junk", false).is_err());
    assert!(p.set_peers(&peers_frame(1, 2, &other), false).is_err());
    let f = peers_frame(5, 2, &cp());
    assert!(p.set_peers(&f, false).unwrap().is_some());
    assert_eq!(p.set_peers(&f, false), Ok(None));
    let e = p.set_peers(&peers_frame(4, 3, &cp()), false).unwrap_err();
    assert!(e.contains("not newer"), "{e}");
    assert_eq!(p.peer_count(), 2);
    let e = p
        .set_peers(&list_frame("other", 9, 3, 0, &cp()), false)
        .unwrap_err();
    assert_eq!(e, "refused peer list generation 9: it is node other's");
    assert_eq!(p.peer_count(), 2);
}

#[test]
fn pongs_carry_coordinates_and_only_peers_outside_the_group_move_ours() {
    let key = cp().verifying_key();
    let mut a = Prober::new("me", key, 10, 1, 500);
    let mut b = Prober::new("p0", key, 10, 1, 500);
    assert_eq!(a.coordinate(), None, "no coordinate before a sample");
    a.set_peers(&peers_frame(1, 1, &cp()), false).unwrap();
    for i in 0..100 {
        exchange(&mut a, &mut b, i * 1_000_000_000, 0, 0, 40.0);
    }
    let c = a.coordinate().expect("a coordinate from the pongs");
    let origin = WireCoord::from_coord(&acoa_shared::coords::Coord::origin(0.01, 1.5));
    // b (never probing) answers from the origin: a's distance to it is the latency
    let d = c
        .to_coord()
        .unwrap()
        .distance_ms(&origin.to_coord().unwrap());
    // within the update filter's threshold (a tenth of the nearest peer's distance) and noise
    assert!((d - 20.0).abs() < 3.0, "predicted {d} ms for 20 ms: {c:?}");
    let mut seq = 0;
    let m = a.metrics(&name("me").unwrap(), &mut seq, 40_000_000_000);
    assert_eq!(m[0].coord, Some(c), "reported with the link metrics");

    // the same peer, of the node's own group: probed, measured, not given to the coordinate
    let mut g = Prober::new("me", key, 10, 1, 500);
    g.set_peers(&list_frame("me", 1, 1, 1, &cp()), false)
        .unwrap();
    for i in 0..40 {
        exchange(&mut g, &mut b, i * 1_000_000_000, 0, 0, 40.0);
    }
    assert!(g.stats("p0").unwrap().samples() > 0);
    assert_eq!(g.coordinate(), None);
    assert_eq!(g.metrics(&name("me").unwrap(), &mut seq, 0)[0].coord, None);
}

#[test]
fn tables_stay_bounded() {
    let mut p = Prober::new("me", cp().verifying_key(), 10, MAX_PEERS, 10_000);
    p.set_peers(&peers_frame(1, MAX_PROBED, &cp()), false)
        .unwrap()
        .unwrap();
    assert_eq!(p.peer_count(), MAX_PROBED);
    for i in 0..5 {
        p.due(i);
    }
    assert!(p.inflight.len() <= MAX_INFLIGHT);
}

#[test]
fn an_old_format_ping_gets_a_pong_with_the_extensions() {
    let mut r = Prober::new("me", cp().verifying_key(), 10, 1, 500);
    let from: SocketAddr = "10.0.0.1:5".parse().unwrap();
    let Received::Reply(pong) = r.on_datagram(&encode_probe(PING, 3, 4), Some(from), 1, 1_000)
    else {
        panic!()
    };
    let p = parse_probe(&pong).unwrap();
    assert_eq!((p.seq, p.t_ns), (3, 4));
    assert_eq!((p.recv_wall_ns, p.count), (Some(1_000), Some(1)));
    // Flags on a ping mean nothing.
}

/// Ping from `a` at (mono `t0`, wall `w0`); the responder stamps `recv_wall`; the pong
/// is back at mono `t0 + rtt_ms`.
fn exchange(
    a: &mut Prober,
    b: &mut Prober,
    t0: u64,
    w0: u64,
    recv_wall: u64,
    rtt_ms: f64,
) -> Received {
    let (_, ping) = a.due_at(t0, w0)[0];
    let from: SocketAddr = "10.0.0.1:7878".parse().unwrap();
    let Received::Reply(pong) = b.on_datagram(&ping, Some(from), t0, recv_wall) else {
        panic!("no reply")
    };
    a.on_datagram(&pong, None, t0 + (rtt_ms * 1e6) as u64, 0)
}

#[test]
fn synchronized_clocks_give_the_forward_delay_free_clocks_half_the_round_trip() {
    let key = cp().verifying_key();
    let w0 = 1_700_000_000_000_000_000u64;
    for (clock, expected) in [(ClockMode::Synchronized, 2.0), (ClockMode::Free, 5.0)] {
        let mut a = Prober::new("me", key, 10, 1, 500).with_clock(clock);
        a.set_peers(&peers_frame(1, 1, &cp()), false).unwrap();
        let mut b = Prober::new("p0", key, 10, 1, 500);
        for i in 0..10u64 {
            let t0 = i * 1_000_000_000;
            // 2 ms out (plus 0.1 ms of alternating noise), 8 ms back.
            let out = 2_000_000 + (i % 2) * 100_000;
            let r = exchange(&mut a, &mut b, t0, w0 + t0, w0 + t0 + out, 10.0);
            assert_eq!(r, Received::Recorded);
        }
        let s = a.stats("p0").unwrap();
        assert!(
            (s.latency_ms().unwrap() - expected).abs() < 0.06,
            "{clock}: {:?}",
            s.latency_ms()
        );
        if clock == ClockMode::Synchronized {
            // RFC 3550 on the one-way samples: |D| = 0.1 ms each time.
            assert!(
                s.jitter_ms() > 0.03 && s.jitter_ms() < 0.1,
                "{}",
                s.jitter_ms()
            );
        } else {
            assert_eq!(s.jitter_ms(), 0.0);
        }
    }
}

#[test]
fn clocks_that_disagree_fall_back_to_half_the_round_trip_with_a_rate_limited_warning() {
    let key = cp().verifying_key();
    let mut a = Prober::new("me", key, 10, 1, 500).with_clock(ClockMode::Synchronized);
    a.set_peers(&peers_frame(1, 1, &cp()), false).unwrap();
    let mut b = Prober::new("p0", key, 10, 1, 500);
    let w0 = 1_700_000_000_000_000_000u64;
    // The peer's clock is 50 ms behind: a negative one-way delay.
    let Received::RecordedWithWarning(line) =
        exchange(&mut a, &mut b, 0, w0, w0 - 50_000_000, 10.0)
    else {
        panic!("no warning")
    };
    assert!(line.contains("p0") && line.contains("rtt/2"), "{line}");
    assert!((a.stats("p0").unwrap().latency_ms().unwrap() - 5.0).abs() < 1e-9);
    // 50 ms ahead: beyond the round trip; warned about again only a minute later.
    for i in 1..30u64 {
        let t0 = i * 1_000_000_000;
        let r = exchange(&mut a, &mut b, t0, w0 + t0, w0 + t0 + 50_000_000, 10.0);
        assert_eq!(r, Received::Recorded, "probe {i}");
    }
    let t0 = 61_000_000_000;
    let r = exchange(&mut a, &mut b, t0, w0 + t0, w0 + t0 + 50_000_000, 10.0);
    let Received::RecordedWithWarning(line) = r else {
        panic!("{r:?}")
    };
    assert!(line.contains("30 such samples"), "{line}");
    assert!((a.stats("p0").unwrap().latency_ms().unwrap() - 5.0).abs() < 1e-9);
    // A peer whose pongs carry no receive time (an older agent): RTT/2, no warning.
    let mut c = Prober::new("me", key, 10, 1, 500).with_clock(ClockMode::Synchronized);
    c.set_peers(&peers_frame(1, 1, &cp()), false).unwrap();
    let (_, ping) = c.due_at(0, w0)[0];
    let Received::Reply(pong) = b.on_packet(&ping, 0) else {
        panic!()
    };
    let mut old = pong;
    old[5] = 0;
    assert_eq!(c.on_datagram(&old, None, 6_000_000, 0), Received::Recorded);
    assert!((c.stats("p0").unwrap().latency_ms().unwrap() - 3.0).abs() < 1e-9);
}

/// 200 probes with every `fwd`th ping and every `rev`th pong lost (0 = none): the
/// success the prober reports and its round-trip success.
fn lossy_run(fwd: u64, rev: u64, counting: bool) -> (f64, f64) {
    let key = cp().verifying_key();
    let mut a = Prober::new("me", key, 20, 1, 500);
    a.set_peers(&peers_frame(1, 1, &cp()), false).unwrap();
    let mut b = Prober::new("p0", key, 20, 1, 500);
    let from: SocketAddr = "10.0.0.1:7878".parse().unwrap();
    let mut pongs = 0u64;
    for i in 1..=200u64 {
        let t0 = i * 1_000_000_000;
        a.expire(t0);
        let (_, ping) = a.due_at(t0, t0)[0];
        if fwd > 0 && i.is_multiple_of(fwd) {
            continue;
        }
        let Received::Reply(pong) =
            b.on_datagram(&ping, counting.then_some(from), t0, t0 + 1_000_000)
        else {
            panic!()
        };
        pongs += 1;
        if rev > 0 && pongs.is_multiple_of(rev) {
            continue;
        }
        a.on_datagram(&pong, None, t0 + 2_000_000, 0);
    }
    a.expire(1_000_000_000_000);
    let s = a.stats("p0").unwrap();
    (s.success(), s.round_trip_success())
}

#[test]
fn loss_is_attributed_to_its_direction() {
    // Pings lost on the way out: the forward direction is lossy.
    let (fwd, rt) = lossy_run(5, 0, true);
    assert!(
        (rt - 0.8).abs() < 0.051 && (fwd - rt).abs() < 1e-9,
        "{fwd} {rt}"
    );
    // Pongs lost on the way back: the forward direction is clean.
    let (fwd, rt) = lossy_run(0, 4, true);
    assert!((rt - 0.75).abs() < 0.051, "{rt}");
    assert!((fwd - 1.0).abs() < 0.06, "{fwd}");
    // Both: 0.8 out, 0.75 back.
    let (fwd, rt) = lossy_run(5, 4, true);
    assert!((rt - 0.6).abs() < 0.06, "{rt}");
    assert!((fwd - 0.8).abs() < 0.06, "{fwd}");
    // A responder that does not count: round-trip success.
    let (fwd, rt) = lossy_run(0, 4, false);
    assert_eq!(fwd, rt);
}

#[test]
fn the_responder_table_is_bounded() {
    let mut r = Prober::new("me", cp().verifying_key(), 10, 1, 500);
    let ping = encode_probe(PING, 1, 1);
    for i in 0..(MAX_PEERS as u64 + 50) {
        let from = SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 7878));
        assert!(matches!(
            r.on_datagram(&ping, Some(from), i, i),
            Received::Reply(_)
        ));
    }
    assert_eq!(r.seen.len(), MAX_PEERS);
    // The most recent prober is still counted.
    let last = SocketAddr::from(([10, 0, 1, 49], 7878));
    let Received::Reply(p) = r.on_datagram(&ping, Some(last), 1000, 1000) else {
        panic!()
    };
    assert_eq!(parse_probe(&p).unwrap().count, Some(2));
}

#[test]
fn a_kernel_send_time_moves_both_delays_to_when_the_ping_left() {
    let key = cp().verifying_key();
    let w0 = 1_700_000_000_000_000_000u64;
    let from: SocketAddr = "10.0.0.1:7878".parse().unwrap();
    for (clock, expected) in [(ClockMode::Synchronized, 1.0), (ClockMode::Free, 1.0)] {
        let mut a = Prober::new("me", key, 10, 1, 500).with_clock(clock);
        a.set_peers(&peers_frame(1, 1, &cp()), false).unwrap();
        let mut b = Prober::new("p0", key, 10, 1, 500);
        // Stamped at t0, left 0.3 ms later (a slow send path), 1 ms each way.
        let (t0, lag) = (5_000_000_000u64, 300_000u64);
        let (_, ping) = a.due_at(t0, w0)[0];
        let seq = parse_probe(&ping).unwrap().seq;
        a.on_sent(seq, w0 - 5); // before the stamp: ignored
        a.on_sent(seq, w0 + 2_000_000_000); // a clock step: ignored
        a.on_sent(seq + 1, w0 + lag); // another ping: ignored
        a.on_sent(seq, w0 + lag / 2); // entering the queue
        a.on_sent(seq, w0 + lag); // leaving the device: the latest counts
        a.on_sent(seq, w0 + lag / 3);
        let recv = w0 + lag + 1_000_000;
        let Received::Reply(pong) = b.on_datagram(&ping, Some(from), t0, recv) else {
            panic!("no reply")
        };
        let r = a.on_datagram(&pong, None, t0 + lag + 2_000_000, 0);
        assert_eq!(r, Received::Recorded);
        let got = a.stats("p0").unwrap().latency_ms().unwrap();
        assert!((got - expected).abs() < 1e-9, "{clock}: {got}");
    }
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_datagram_or_peer_frame_is_harmless(
            bytes in proptest::collection::vec(any::<u8>(), 0..200)
        ) {
            let mut p = Prober::new("me", cp().verifying_key(), 10, 4, 500);
            p.set_peers(&peers_frame(1, 3, &cp()), false).unwrap();
            let r = p.on_packet(&bytes, 1);
            prop_assert!(matches!(r, Received::Dropped | Received::Reply(_)));
            prop_assert!(p.set_peers(&bytes, false).is_err());
            prop_assert_eq!(p.peer_count(), 3);
        }
    }
}
