//! What the testbed's integration tests share.
#![allow(dead_code)]

use std::path::PathBuf;

use hil_tests::emu::unavailable_reason;

/// `true`, after saying why, when this machine cannot run the testbed (root and /dev/net/tun).
pub fn skip() -> bool {
    if let Some(reason) = unavailable_reason() {
        println!("SKIPPED: {reason}");
        return true;
    }
    false
}

/// A file of the railway scenario (`scenarios/railway/`).
pub fn railway(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/railway")
        .join(file)
}

/// The railway scenario's cluster.
pub fn railway_cluster() -> acoa_shared::model::Cluster {
    acoa_shared::model::load_cluster(&railway("cluster.yaml")).unwrap()
}

/// `names` with their address numbers: node i of the cluster file gets i + 1.
pub fn numbered(cl: &acoa_shared::model::Cluster, names: &[String]) -> Vec<(String, u32)> {
    names
        .iter()
        .map(|n| {
            let i = cl.nodes.iter().position(|x| &x.name == n).unwrap();
            (n.clone(), i as u32 + 1)
        })
        .collect()
}
