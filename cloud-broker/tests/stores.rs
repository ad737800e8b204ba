//! One suite for both stores: every test function runs against the file store and against a
//! real etcd (one member on loopback ports, started by the test), through the `Store` trait
//! and through the real control plane (`serve --store etcd`).

mod common;

use std::path::Path;
use std::time::Duration;

use cloud_broker::records::{ContainerDoc, DesiredDoc, History, Meta, NodeInfo, PersistOp};
use cloud_broker::store::etcd::{EtcdStore, Fence};
use cloud_broker::store::{Store, StoreError};
use common::backend::{Backend, Kind};
use common::*;

fn desired(node: &str, generation: u64) -> DesiredDoc {
    let c: acoa_shared::model::Component = serde_json::from_value(serde_json::json!({
        "name": "db", "image": "pg:16", "resources": {"cpu_millis": 250, "memory_mb": 64},
    }))
    .unwrap();
    DesiredDoc {
        node: node.into(),
        generation,
        term: 0,
        containers: vec![ContainerDoc::new("shop", &c).unwrap()],
    }
}

fn node(name: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        datacenter: "dc1".into(),
        layer: acoa_shared::model::Layer::Edge,
        arch: "x86_64".into(),
        hardware: vec!["camera".into()],
        software: vec![],
        capacity: Default::default(),
        probe_addr: "127.0.0.1:1".into(),
        position: None,
    }
}

/// `etcdctl ARGS` against the backend's etcd; its output.
fn etcdctl(b: &Backend, args: &[&str]) -> String {
    acoa_test_support::sh(
        std::process::Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &b.etcd.as_ref().unwrap().endpoints()])
            .args(args),
    )
}

/// The create revision of `key` (the leadership key's: a term).
fn create_revision(b: &Backend, key: &str) -> i64 {
    let v: serde_json::Value =
        serde_json::from_str(&etcdctl(b, &["get", key, "-w", "json"])).unwrap();
    v["kvs"][0]["create_revision"].as_i64().unwrap()
}

fn records_load_as_the_last_operations_left_them(kind: Kind) {
    let b = Backend::new(kind);
    let data = b.dir.path().join("data");
    let store = b.open(&data);
    assert_eq!(
        store.load().unwrap(),
        Default::default(),
        "a new store is empty"
    );
    let ops = [
        PersistOp::PutMeta(Meta { peer_generation: 2 }),
        PersistOp::PutDesired(Box::new(desired("n1", 1))),
        PersistOp::PutDesired(Box::new(desired("n2", 1))),
        PersistOp::PutDesired(Box::new(desired("n1", 2))),
        PersistOp::PutNode(Box::new(node("n1"))),
        PersistOp::PutMeta(Meta { peer_generation: 3 }),
    ];
    for op in &ops {
        store.apply(op).unwrap();
    }
    store.writable().unwrap();
    drop(store);
    // a new process reads what the last one wrote
    let snap = b.open(&data).load().unwrap();
    assert_eq!(snap.meta.peer_generation, 3);
    assert_eq!(snap.desired.len(), 2);
    assert_eq!(snap.desired["n1"], desired("n1", 2));
    assert_eq!(snap.nodes["n1"], node("n1"));
    assert!(snap.apps.is_empty());
    b.open(&data)
        .apply(&PersistOp::DeleteApp("nothing-here".into()))
        .unwrap();
}

#[test]
fn records_load_as_the_last_operations_left_them_file() {
    records_load_as_the_last_operations_left_them(Kind::File);
}

#[test]
fn records_load_as_the_last_operations_left_them_etcd() {
    records_load_as_the_last_operations_left_them(Kind::Etcd);
}

/// A batch (what one event decided) loads as its operations applied one by one would leave
/// the records: a key written twice keeps its last value, a deletion after a write deletes,
/// a write after a deletion writes.
fn a_batch_loads_as_its_operations_one_by_one(kind: Kind) {
    let b = Backend::new(kind);
    let data = b.dir.path().join("data");
    let store = b.open(&data);
    let mut shop = History::new("shop");
    shop.push("d1", "application: shop\n");
    let mut depot = History::new("depot");
    depot.push("e1", "application: depot\n");
    let ops = [
        PersistOp::PutHistory(Box::new(shop.clone())),
        PersistOp::PutDesired(Box::new(desired("n1", 1))),
        PersistOp::PutDesired(Box::new(desired("n2", 1))),
        PersistOp::PutHistory(Box::new(depot.clone())),
        PersistOp::PutDesired(Box::new(desired("n1", 2))),
        PersistOp::DeleteApp("depot".into()),
        PersistOp::DeleteApp("shop".into()),
        PersistOp::PutHistory(Box::new(shop.clone())),
        PersistOp::PutMeta(Meta { peer_generation: 7 }),
    ];
    store.apply_batch(&ops).unwrap();
    drop(store);
    let snap = b.open(&data).load().unwrap();
    assert_eq!(snap.desired["n1"], desired("n1", 2));
    assert_eq!(snap.desired["n2"], desired("n2", 1));
    assert_eq!(snap.history.keys().collect::<Vec<_>>(), ["shop"]);
    assert_eq!(snap.history["shop"], shop);
    assert_eq!(snap.meta.peer_generation, 7);
}

#[test]
fn a_batch_loads_as_its_operations_one_by_one_file() {
    a_batch_loads_as_its_operations_one_by_one(Kind::File);
}

#[test]
fn a_batch_loads_as_its_operations_one_by_one_etcd() {
    a_batch_loads_as_its_operations_one_by_one(Kind::Etcd);
}

/// The node-records thread writes its records together (`Store::apply_nodes`; the file store
/// flushes them at once): they load as written, a node's latest replacing its earlier record,
/// next to what was written one by one, and no temporary is left behind.
fn node_records_written_together_load_as_written(kind: Kind) {
    let b = Backend::new(kind);
    let data = b.dir.path().join("data");
    let store = b.open(&data);
    store
        .apply(&PersistOp::PutNode(Box::new(node("n0"))))
        .unwrap();
    let mut moved = node("n1");
    moved.probe_addr = "127.0.0.1:2".into();
    let ops: Vec<PersistOp> = (1..=300)
        .map(|i| PersistOp::PutNode(Box::new(node(&format!("n{i}")))))
        .chain([PersistOp::PutNode(Box::new(moved.clone()))])
        .collect();
    store.apply_nodes(&ops[..300]).unwrap();
    store.apply_nodes(&ops[300..]).unwrap();
    drop(store);
    let snap = b.open(&data).load().unwrap();
    assert_eq!(snap.nodes.len(), 301);
    assert_eq!(snap.nodes["n0"], node("n0"));
    assert_eq!(snap.nodes["n300"], node("n300"));
    assert_eq!(snap.nodes["n1"], moved);
    if kind == Kind::File {
        let left: Vec<String> = std::fs::read_dir(data.join("store/nodes"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "temporaries left: {left:?}");
    }
}

#[test]
fn node_records_written_together_load_as_written_file() {
    node_records_written_together_load_as_written(Kind::File);
}

#[test]
fn node_records_written_together_load_as_written_etcd() {
    node_records_written_together_load_as_written(Kind::Etcd);
}

/// With etcd, what one event decided is one transaction (one revision: a crash or a lost
/// leadership leaves all of it or none), or one per 128 keys (etcd's default limit); a batch
/// fenced on a lost leadership lands nowhere.
#[test]
fn a_decisions_records_are_written_in_one_transaction_etcd() {
    let b = Backend::new(Kind::Etcd);
    let cfg = b.etcd_config();
    let store = EtcdStore::connect(&cfg).unwrap();
    let etcdctl = |args: &[&str]| etcdctl(&b, args);
    let revision = || -> i64 {
        let out = etcdctl(&["get", "nothing", "-w", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["header"]["revision"].as_i64().unwrap()
    };
    let mut h = History::new("shop");
    h.push("d1", "application: shop\n");
    let decision = [
        PersistOp::PutHistory(Box::new(h)),
        PersistOp::PutDesired(Box::new(desired("n1", 1))),
        PersistOp::PutDesired(Box::new(desired("n2", 1))),
        PersistOp::PutDesired(Box::new(desired("n3", 1))),
        PersistOp::PutDesired(Box::new(desired("n1", 2))),
        PersistOp::PutMeta(Meta { peer_generation: 2 }),
    ];
    let before = revision();
    store.apply_batch(&decision).unwrap();
    assert_eq!(revision(), before + 1, "one transaction");
    // a start-up's repair of 300 nodes' desired states: 3 transactions of at most 128 keys
    let many: Vec<PersistOp> = (0..300)
        .map(|i| PersistOp::PutDesired(Box::new(desired(&format!("m{i:03}"), 1))))
        .collect();
    let before = revision();
    store.apply_batch(&many).unwrap();
    assert_eq!(revision(), before + 3);
    assert_eq!(store.load().unwrap().desired.len(), 303);
    // fenced, the leadership lost: nothing of the batch lands, and the error says how much did
    let key = format!("{}leader", cfg.prefix);
    etcdctl(&["put", &key, "old"]);
    store.set_fence(Some(Fence {
        key: key.clone(),
        create_revision: create_revision(&b, &key),
    }));
    etcdctl(&["del", &key]);
    etcdctl(&["put", &key, "new"]);
    let next: Vec<PersistOp> = (0..3)
        .map(|i| PersistOp::PutDesired(Box::new(desired(&format!("n{}", i + 1), 3))))
        .collect();
    let e = store.apply_batch(&next).unwrap_err();
    assert!(matches!(e.error, StoreError::NotLeader { .. }), "{e}");
    assert_eq!(e.written, 0);
    let snap = EtcdStore::connect(&cfg).unwrap().load().unwrap();
    assert_eq!(
        snap.desired["n1"].generation, 2,
        "the fenced batch did not land"
    );
    assert_eq!(snap.desired["n3"].generation, 1);
}

/// An application's revisions and its rollout are kept (the last ones written), and go with
/// the application when it is deleted.
fn revisions_load_as_written_and_go_with_their_application(kind: Kind) {
    let b = Backend::new(kind);
    let data = b.dir.path().join("data");
    let store = b.open(&data);
    let mut h = History::new("shop");
    for i in 0..12 {
        h.push(&format!("d{i}"), &format!("application: shop # {i}\n"));
    }
    h.current = 11;
    h.fail(12, "rolled back: b on n2: the new copy is unhealthy");
    assert_eq!(h.revisions.len(), cloud_broker::records::REVISIONS_KEPT);
    store
        .apply(&PersistOp::PutHistory(Box::new(h.clone())))
        .unwrap();
    let mut other = History::new("depot");
    other.push("e1", "application: depot\n");
    store
        .apply(&PersistOp::PutHistory(Box::new(other.clone())))
        .unwrap();
    drop(store);
    let snap = b.open(&data).load().unwrap();
    assert_eq!(snap.history.len(), 2);
    assert_eq!(snap.history["shop"], h);
    assert_eq!(
        snap.history["shop"].revisions[0].number, 3,
        "the oldest two are forgotten"
    );
    let store = b.open(&data);
    store.apply(&PersistOp::DeleteApp("shop".into())).unwrap();
    let snap = store.load().unwrap();
    assert_eq!(snap.history.keys().collect::<Vec<_>>(), ["depot"]);
}

#[test]
fn revisions_load_as_written_and_go_with_their_application_file() {
    revisions_load_as_written_and_go_with_their_application(Kind::File);
}

#[test]
fn revisions_load_as_written_and_go_with_their_application_etcd() {
    revisions_load_as_written_and_go_with_their_application(Kind::Etcd);
}

/// The real control plane on `kind`: an application placed on n1, the control plane killed and
/// started again: the same desired state (generation and containers) is published again from
/// the store, and the application's status comes back.
fn placement_kept_across_a_restart(kind: Kind) {
    let b = Backend::new(kind);
    let data = b.dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let n1 = enroll(&data, "n1");
    let args = b.serve_args();
    let port = free_port();
    let app = write_pinned(b.dir.path(), "shop", "", "busybox:1", "n1", 2, "");
    let data2 = data.clone();
    run(async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cp = ControlPlane::start(&data2, port, &args);
        let mut agent = start_n1(&cp, &cp.url, n1.clone(), true).await;
        let out = spawn_apply(&data2, &app, &["--agents-wait-s", "0"])
            .await
            .unwrap();
        assert!(out.status.success(), "{}", cp.log_text());
        let first = wait_desired(&mut agent, 2).await;
        cp.kill();
        drop(agent);

        let cp = ControlPlane::start(&data2, port, &args);
        let mut agent = start_n1(&cp, &cp.url, n1, true).await;
        let again = wait_desired(&mut agent, 2).await;
        assert_eq!(again, first, "the desired state comes back unchanged");
        let out = tokio::task::spawn_blocking(move || cli(&data2, &["status", "shop"]));
        let st: cloud_broker::status::AppStatus =
            serde_json::from_slice(&out.await.unwrap().stdout).unwrap();
        assert_eq!(st.state, "placed", "{st:?}");
    });
    let on_disk = data.join("store/apps/shop.json").exists();
    match kind {
        Kind::File => assert!(on_disk),
        Kind::Etcd => assert!(!on_disk, "with etcd nothing is kept in the data directory"),
    }
    let snap = b.open(&data).load().unwrap();
    assert!(snap.apps.contains_key("shop"));
    assert_eq!(snap.desired["n1"].containers.len(), 2);
}

/// The first desired state for n1 with `k` containers.
async fn wait_desired(
    agent: &mut cloud_broker::testkit::SimAgent,
    k: usize,
) -> Box<acoa_shared::wire::DesiredState> {
    loop {
        let d = tokio::time::timeout(Duration::from_secs(15), agent.desired.recv())
            .await
            .expect("a desired state within 15 s")
            .expect("the agent runs");
        if d.containers.len() == k {
            return d;
        }
    }
}

#[test]
fn placement_kept_across_a_restart_file() {
    placement_kept_across_a_restart(Kind::File);
}

#[test]
fn placement_kept_across_a_restart_etcd() {
    placement_kept_across_a_restart(Kind::Etcd);
}

/// Fencing (etcd only: the file store has one writer): once the leadership key is taken by
/// another replica, a write conditioned on the old one is refused and lands nowhere.
#[test]
fn a_write_fenced_on_a_lost_leadership_is_refused_etcd() {
    let b = Backend::new(Kind::Etcd);
    let cfg = b.etcd_config();
    let old = EtcdStore::connect(&cfg).unwrap();
    let key = format!("{}leader", cfg.prefix);
    let etcdctl = |args: &[&str]| etcdctl(&b, args);
    etcdctl(&["put", &key, "old"]);
    let first = create_revision(&b, &key);
    old.set_fence(Some(Fence {
        key: key.clone(),
        create_revision: first,
    }));
    old.apply(&PersistOp::PutDesired(Box::new(desired("n1", 1))))
        .unwrap();
    // the lease ran out and another replica was elected
    etcdctl(&["del", &key]);
    etcdctl(&["put", &key, "new"]);
    assert!(create_revision(&b, &key) > first);
    let e = old
        .apply(&PersistOp::PutDesired(Box::new(desired("n1", 2))))
        .unwrap_err();
    assert!(matches!(e, StoreError::NotLeader { .. }), "{e}");
    assert!(old.writable().is_err());
    let snap = EtcdStore::connect(&cfg).unwrap().load().unwrap();
    assert_eq!(
        snap.desired["n1"].generation, 1,
        "the fenced write did not land"
    );
}

/// The node and worker inventories with the enrolled keys are kept by the store: the command
/// line writes them through it (`--store etcd` given to `node`/`worker`), commands enrolling at
/// once lose nobody, and with etcd a data directory on another machine (only the signing key
/// copied) reads the same inventory while none is on the first one's disk.
fn inventory_is_kept_in_the_store(kind: Kind) {
    use acoa_shared::topics::acl::Role;
    use acoa_shared::wire::keys;
    let b = Backend::new(kind);
    let data = b.dir.path().join("data");
    let args = b.serve_args();
    let with = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
        v.extend(args.iter().cloned());
        v
    };
    let run_ok = |data: &Path, extra: &[&str]| -> String {
        let a = with(extra);
        ok(cli(data, &a.iter().map(String::as_str).collect::<Vec<_>>()))
    };
    let store_args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_k1, pw1, _) = enroll_with(&data, "n1", &store_args);
    run_ok(&data, &["worker", "add", "w1"]);
    // eight enrolments at once
    std::thread::scope(|s| {
        for i in 0..8 {
            let run_ok = &run_ok;
            let data = &data;
            s.spawn(move || run_ok(data, &["node", "add", &format!("m{i}")]));
        }
    });
    let k = ed25519_dalek::SigningKey::from_bytes(&[9; 32]).verifying_key();
    run_ok(&data, &["node", "set-key", "m0", &keys::public_hex(&k)]);
    run_ok(&data, &["node", "remove", "m7"]);
    let listed = run_ok(&data, &["node", "list"]);
    let names: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split('\t').next())
        .collect();
    assert_eq!(
        names,
        ["m0", "m1", "m2", "m3", "m4", "m5", "m6", "n1"],
        "{listed}"
    );
    assert!(listed.contains(&keys::public_hex(&k)), "{listed}");
    assert_eq!(run_ok(&data, &["worker", "list"]).trim(), "w1");

    let on_disk = data.join("inventory.json").exists();
    let elsewhere = b.dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::copy(
        data.join("control-plane.key"),
        elsewhere.join("control-plane.key"),
    )
    .unwrap();
    let there = run_ok(&elsewhere, &["node", "list"]);
    let cfg = match kind {
        Kind::File => {
            assert!(on_disk);
            assert_eq!(there, "", "another machine's data directory has its own");
            return;
        }
        Kind::Etcd => {
            assert!(!on_disk, "with etcd the inventory is not on the disk");
            b.etcd_config()
        }
    };
    assert_eq!(there, listed, "another machine reads the same inventory");
    let etcd = std::sync::Arc::new(EtcdStore::connect(&cfg).unwrap());
    let (dd, imported) = cloud_broker::identity::DataDir::new(&elsewhere)
        .with_etcd(etcd)
        .unwrap();
    assert_eq!(imported, 0);
    let logins = dd.logins().unwrap();
    assert_eq!(logins["n1"].password, pw1);
    assert_eq!(logins["n1"].role, Role::Node);
    assert_eq!(logins["w1"].role, Role::Worker);
    assert_eq!(dd.inventory().unwrap().keys()["m0"], Some(k));
}

#[test]
fn inventory_is_kept_in_the_store_file() {
    inventory_is_kept_in_the_store(Kind::File);
}

#[test]
fn inventory_is_kept_in_the_store_etcd() {
    inventory_is_kept_in_the_store(Kind::Etcd);
}

/// A data directory whose nodes were enrolled before `--store etcd`: its `inventory.json` is
/// imported into an etcd that has no inventory yet, nothing lost, and the file renamed so that
/// nobody edits it believing it counts.
#[test]
fn an_inventory_file_is_imported_into_etcd_etcd() {
    let b = Backend::new(Kind::Etcd);
    let data = b.dir.path().join("data");
    let (_k, pw, _) = enroll(&data, "n1");
    ok(cli(&data, &["worker", "add", "w1"]));
    let args = b.serve_args();
    let mut list = vec!["node", "list"];
    list.extend(args.iter().map(String::as_str));
    let out = cli(&data, &list);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        stderr.contains("inventory.json imported into etcd: 2 nodes and workers"),
        "{stderr}"
    );
    assert!(ok(out).starts_with("n1\t"));
    assert!(!data.join("inventory.json").exists());
    assert!(data.join("inventory.json.imported").exists());
    let etcd = std::sync::Arc::new(EtcdStore::connect(&b.etcd_config()).unwrap());
    let (dd, _) = cloud_broker::identity::DataDir::new(&data)
        .with_etcd(etcd)
        .unwrap();
    assert_eq!(dd.logins().unwrap()["n1"].password, pw);
}
