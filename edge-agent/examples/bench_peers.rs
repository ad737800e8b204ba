//! Helper of `bench/footprint.sh`: N tiny UDP echo responders on loopback, and a
//! peer list naming them, signed with a throwaway control-plane key.
//!
//! `bench_peers N BASE_PORT OUT_DIR [CONTAINERS IMAGE]` writes OUT_DIR/cp.pub (the key's
//! hex), OUT_DIR/peers.bin (the signed peer list) and OUT_DIR/desired.bin (a signed desired
//! state of node `bench` with CONTAINERS containers of IMAGE, default none), then answers
//! probes until killed.

use std::net::UdpSocket;

use acoa_shared::wire::{self, encode, keys, Message, Peer, PeerList};
use edge_agent::prober::{decode_probe, PROBE_LEN, PROBE_LEN_COORD};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    anyhow::ensure!(
        args.len() == 4 || args.len() == 6,
        "usage: bench_peers N BASE_PORT OUT_DIR [CONTAINERS IMAGE]"
    );
    let n: u16 = args[1].parse()?;
    let base: u16 = args[2].parse()?;
    let out = std::path::Path::new(&args[3]);
    let cp = ed25519_dalek::SigningKey::from_bytes(&[77; 32]);
    let mut peers: heapless::Vec<Peer, { wire::MAX_PEERS_PER_NODE }> = heapless::Vec::new();
    let mut socks = Vec::new();
    for i in 0..n {
        let addr = format!("127.0.0.1:{}", base + i);
        socks.push(UdpSocket::bind(&addr)?);
        peers
            .push(Peer {
                node: wire::name(&format!("peer{i:02}"))?,
                addr: wire::bounded("addr", &addr)?,
                group: false,
            })
            .map_err(|_| {
                anyhow::anyhow!("a peer list holds at most {}", wire::MAX_PEERS_PER_NODE)
            })?;
    }
    let frame = encode(
        &Message::PeerList(Box::new(PeerList {
            node: wire::name("bench")?,
            generation: 1,
            peers,
        })),
        Some(&cp),
    )?;
    std::fs::write(out.join("peers.bin"), frame)?;
    let (count, image) = match args.get(4..6) {
        Some([c, i]) => (c.parse::<usize>()?, i.clone()),
        _ => (0, String::new()),
    };
    let containers = (0..count)
        .map(|i| -> anyhow::Result<wire::ContainerSpec> {
            Ok(wire::ContainerSpec {
                name: wire::name(&format!("bench.c{i}"))?,
                app: wire::name("bench")?,
                component: wire::name(&format!("c{i}"))?,
                image: wire::bounded("image", &image)?,
                cpu_millis: 100,
                memory_mb: 32,
                env: heapless::Vec::new(),
                health: None,
            })
        })
        .collect::<anyhow::Result<heapless::Vec<_, { wire::MAX_CONTAINERS }>>>()?;
    let desired = wire::DesiredState {
        node: wire::name("bench")?,
        generation: 1,
        term: 0,
        containers,
    };
    std::fs::write(
        out.join("desired.bin"),
        encode(&Message::DesiredState(Box::new(desired)), Some(&cp))?,
    )?;
    std::fs::write(out.join("cp.pub"), keys::public_hex(&cp.verifying_key()))?;
    let threads: Vec<_> = socks
        .into_iter()
        .map(|s| {
            std::thread::spawn(move || {
                let mut buf = [0u8; 64];
                while let Ok((len, from)) = s.recv_from(&mut buf) {
                    // a long ping's pong is as long, without a coordinate (its flag cleared)
                    if (len == PROBE_LEN || len == PROBE_LEN_COORD)
                        && decode_probe(&buf[..len]).is_some_and(|p| p.0 == 1)
                    {
                        buf[4] = 2; // pong
                        buf[5] = 0;
                        let _ = s.send_to(&buf[..len], from);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}
