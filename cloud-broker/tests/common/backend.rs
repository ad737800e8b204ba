//! The store a test's control plane keeps its records in: the file store, or a real etcd (one
//! member on loopback ports, started by the test). The suites that run every test function
//! against both take a [`Kind`].

use std::path::Path;

use acoa_test_support::etcd::EtcdCluster;
use cloud_broker::store::etcd::{EtcdConfig, EtcdStore};
use cloud_broker::store::{FileStore, Store};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Etcd,
}

/// A store of `kind` for one test: its own etcd (killed on drop) or nothing more.
pub struct Backend {
    pub kind: Kind,
    pub etcd: Option<EtcdCluster>,
    pub dir: tempfile::TempDir,
}

impl Backend {
    pub fn new(kind: Kind) -> Backend {
        Backend::with_etcd_flags(kind, &[])
    }

    /// [`Backend::new`], etcd started with `flags` besides the cluster's.
    pub fn with_etcd_flags(kind: Kind, flags: &[&str]) -> Backend {
        let dir = tempfile::tempdir().unwrap();
        let etcd = match kind {
            Kind::File => None,
            Kind::Etcd => Some(EtcdCluster::start_with(1, dir.path(), flags)),
        };
        Backend { kind, etcd, dir }
    }

    pub fn etcd_config(&self) -> EtcdConfig {
        EtcdConfig::new(&self.etcd.as_ref().unwrap().endpoints()).unwrap()
    }

    /// The store a control plane with data directory `data` uses.
    pub fn open(&self, data: &Path) -> Box<dyn Store> {
        match self.kind {
            Kind::File => Box::new(FileStore::open(data).unwrap()),
            Kind::Etcd => Box::new(EtcdStore::connect(&self.etcd_config()).unwrap()),
        }
    }

    /// The store's flags (`serve`, and the inventory's commands).
    pub fn serve_args(&self) -> Vec<String> {
        match self.kind {
            Kind::File => vec![],
            Kind::Etcd => vec![
                "--store".into(),
                "etcd".into(),
                "--etcd-endpoints".into(),
                self.etcd.as_ref().unwrap().endpoints(),
            ],
        }
    }

    /// [`Backend::serve_args`] for `serve`, with a lease of 2 s (a control plane killed and
    /// started again leads after it).
    pub fn serve_flags(&self) -> Vec<String> {
        let mut v = self.serve_args();
        if self.kind == Kind::Etcd {
            v.extend(["--lease-ttl-s".into(), "2".into()]);
        }
        v
    }

    /// Whether the application `app` has a record in the store.
    pub fn has_app(&self, data: &Path, app: &str) -> bool {
        self.open(data).load().unwrap().apps.contains_key(app)
    }
}
