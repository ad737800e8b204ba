//! Who is who: the control plane's signing key, the broker credentials of the control plane
//! and of the admin (CLI), and the node inventory (name, broker password, enrolled public key).
//!
//! Files in the data directory, all mode 0600 and written atomically:
//! `control-plane.key` (hex secret), `credentials.json`, and with the file store
//! `inventory.json`. With `--store etcd` the inventory (nodes with their enrolled keys,
//! workers) is the same JSON document under the etcd key `{prefix}inventory`, so that every
//! replica knows every enrolled node; the key and the credentials stay files (copied to each
//! replica, never in etcd). A change of the etcd inventory is a transaction on the revision it
//! was read at: two commands enrolling at once do not lose each other's node.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use acoa_shared::topics::acl::{self, Role};
use acoa_shared::wire::keys;
use ed25519_dalek::{SigningKey, VerifyingKey};
use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::store::etcd::EtcdStore;
use crate::store::{write_atomic, StoreError};

/// The etcd key of the inventory, under the store's prefix.
pub const INVENTORY_KEY: &str = "inventory";
/// The largest inventory document written to etcd (etcd takes requests of 1.5 MiB by default):
/// about 8,000 nodes with keys.
pub const MAX_ETCD_INVENTORY_BYTES: usize = 1024 * 1024;

/// The user name the control plane connects with (publishes desired states).
pub const CONTROL_PLANE_USER: &str = "acoa-control-plane";
/// The user name of the CLI (publishes application definitions, reads statuses).
pub const ADMIN_USER: &str = "acoa-admin";

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{path}: {reason}")]
    Bad { path: String, reason: String },
    #[error("`{0}` is already in the inventory")]
    Exists(String),
    #[error("`{0}` is not in the inventory")]
    Unknown(String),
    #[error("`{0}` is reserved: names beginning `acoa-` are the system's own")]
    Reserved(String),
    #[error("invalid node name: {0}")]
    Name(String),
    #[error("invalid public key: {0}")]
    Key(#[from] keys::KeyError),
}

fn bad(path: &Path, reason: impl ToString) -> IdentityError {
    IdentityError::Bad {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// A random password of 32 hex digits (128 bits).
pub fn random_password() -> String {
    let mut b = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Login {
    pub username: String,
    pub password: String,
}

/// A broker login's password and what it may publish and read (`topics::acl`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub password: String,
    pub role: Role,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    pub control_plane: Login,
    pub admin: Login,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEntry {
    pub password: String,
    /// The node's ed25519 public key, 64 hex digits; reports are dropped until it is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    pub nodes: BTreeMap<String, NodeEntry>,
    /// `scheduler worker` logins: name → broker password (they read jobs, write results).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub workers: BTreeMap<String, String>,
}

impl Inventory {
    /// Enrolled public keys by node name (nodes without a key are absent).
    pub fn keys(&self) -> BTreeMap<String, Option<VerifyingKey>> {
        self.nodes
            .iter()
            .map(|(n, e)| {
                (
                    n.clone(),
                    e.public_key
                        .as_deref()
                        .and_then(|k| keys::public_from_hex(k).ok()),
                )
            })
            .collect()
    }
}

/// Where the inventory is kept.
#[derive(Debug, Clone)]
enum InventoryAt {
    /// `inventory.json` in the data directory.
    File,
    /// `{prefix}inventory` in etcd.
    Etcd(Arc<EtcdStore>),
}

/// The data directory and what lives in it (and the inventory, in it or in etcd).
#[derive(Debug, Clone)]
pub struct DataDir {
    pub root: PathBuf,
    inventory_at: InventoryAt,
}

impl DataDir {
    pub fn new(root: impl Into<PathBuf>) -> DataDir {
        DataDir {
            root: root.into(),
            inventory_at: InventoryAt::File,
        }
    }

    /// The same data directory with its inventory in `etcd`. An `inventory.json` left in the
    /// data directory is imported when etcd has no inventory yet (and renamed
    /// `inventory.json.imported`); returns how many nodes and workers were imported.
    pub fn with_etcd(self, etcd: Arc<EtcdStore>) -> Result<(DataDir, usize), IdentityError> {
        let file = self.inventory()?;
        let dd = DataDir {
            inventory_at: InventoryAt::Etcd(etcd),
            ..self
        };
        let p = dd.inventory_path();
        if !p.exists() {
            return Ok((dd, 0));
        }
        let n = file.nodes.len() + file.workers.len();
        let imported = dd.write_inventory(&file, 0)?;
        let done = p.with_extension("json.imported");
        match std::fs::rename(&p, &done) {
            // another replica of this data directory, started at the same time, imported it
            // and moved it first (its write and ours are one transaction each: one wins)
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            r => r.map_err(|e| bad(&p, e))?,
        }
        Ok((dd, if imported { n } else { 0 }))
    }

    /// The data directory `root` with its inventory where `store` keeps the records
    /// (connecting to etcd for [`crate::store::StoreKind::Etcd`]).
    pub fn open(
        root: impl Into<PathBuf>,
        store: &crate::store::StoreKind,
    ) -> Result<(DataDir, usize), IdentityError> {
        let dd = DataDir::new(root);
        match store {
            crate::store::StoreKind::File => Ok((dd, 0)),
            crate::store::StoreKind::Etcd(cfg) => dd.with_etcd(Arc::new(EtcdStore::connect(cfg)?)),
        }
    }

    pub fn key_path(&self) -> PathBuf {
        self.root.join("control-plane.key")
    }
    pub fn credentials_path(&self) -> PathBuf {
        self.root.join("credentials.json")
    }
    pub fn inventory_path(&self) -> PathBuf {
        self.root.join("inventory.json")
    }
    /// Where `serve` writes the broker URL it serves or uses, for the CLI.
    pub fn endpoint_path(&self) -> PathBuf {
        self.root.join("endpoint")
    }
    /// Present while `serve` uses external brokers (`--broker-url`): their URLs in `endpoint`
    /// are the control plane's listeners, which take no node.
    fn endpoint_external_path(&self) -> PathBuf {
        self.root.join("endpoint-external")
    }

    fn ensure_root(&self) -> Result<(), IdentityError> {
        std::fs::create_dir_all(&self.root).map_err(|e| bad(&self.root, e))
    }

    /// The control plane's signing key, created on first use.
    pub fn signing_key(&self) -> Result<SigningKey, IdentityError> {
        self.ensure_root()?;
        let p = self.key_path();
        if p.exists() {
            let text = std::fs::read_to_string(&p).map_err(|e| bad(&p, e))?;
            return keys::secret_from_hex(&text).map_err(|e| bad(&p, e));
        }
        let key = SigningKey::generate(&mut rand::rngs::OsRng);
        write_atomic(&p, keys::to_hex(&key.to_bytes()).as_bytes(), 0o600)?;
        Ok(key)
    }

    /// The control plane's and the admin's broker credentials, created on first use.
    pub fn credentials(&self) -> Result<Credentials, IdentityError> {
        self.ensure_root()?;
        let p = self.credentials_path();
        if p.exists() {
            let text = std::fs::read(&p).map_err(|e| bad(&p, e))?;
            return serde_json::from_slice(&text).map_err(|e| bad(&p, e));
        }
        let c = Credentials {
            control_plane: Login {
                username: CONTROL_PLANE_USER.into(),
                password: random_password(),
            },
            admin: Login {
                username: ADMIN_USER.into(),
                password: random_password(),
            },
        };
        write_atomic(&p, &serde_json::to_vec_pretty(&c).unwrap(), 0o600)?;
        Ok(c)
    }

    pub fn inventory(&self) -> Result<Inventory, IdentityError> {
        Ok(self.read_inventory()?.0)
    }

    /// The inventory and its revision (etcd's mod revision, 0: none yet; always 0 for a file).
    fn read_inventory(&self) -> Result<(Inventory, i64), IdentityError> {
        match &self.inventory_at {
            InventoryAt::File => {
                let p = self.inventory_path();
                if !p.exists() {
                    return Ok((Inventory::default(), 0));
                }
                let text = std::fs::read(&p).map_err(|e| bad(&p, e))?;
                Ok((serde_json::from_slice(&text).map_err(|e| bad(&p, e))?, 0))
            }
            InventoryAt::Etcd(etcd) => match etcd.get_doc(INVENTORY_KEY)? {
                (None, _) => Ok((Inventory::default(), 0)),
                (Some(bytes), rev) => {
                    let inv =
                        serde_json::from_slice(&bytes).map_err(|e| bad(&self.etcd_key(etcd), e))?;
                    Ok((inv, rev))
                }
            },
        }
    }

    fn etcd_key(&self, etcd: &EtcdStore) -> PathBuf {
        PathBuf::from(format!("etcd {}{INVENTORY_KEY}", etcd.prefix()))
    }

    /// Something that changes whenever the inventory does (the file's modification time,
    /// etcd's mod revision); `None` while there is none.
    pub fn inventory_version(&self) -> Result<Option<u128>, IdentityError> {
        match &self.inventory_at {
            InventoryAt::File => Ok(std::fs::metadata(self.inventory_path())
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_nanos())),
            InventoryAt::Etcd(etcd) => {
                let rev = etcd.doc_revision(INVENTORY_KEY)?;
                Ok((rev > 0).then_some(rev as u128))
            }
        }
    }

    /// Writes `inv`; in etcd only if the inventory is still at revision `seen` (returns
    /// `false` otherwise: read it again).
    fn write_inventory(&self, inv: &Inventory, seen: i64) -> Result<bool, IdentityError> {
        let bytes = serde_json::to_vec_pretty(inv).unwrap();
        match &self.inventory_at {
            InventoryAt::File => {
                self.ensure_root()?;
                write_atomic(&self.inventory_path(), &bytes, 0o600)?;
                Ok(true)
            }
            InventoryAt::Etcd(etcd) => {
                if bytes.len() > MAX_ETCD_INVENTORY_BYTES {
                    return Err(bad(
                        &self.etcd_key(etcd),
                        format!(
                            "the inventory would take {} bytes, more than the {MAX_ETCD_INVENTORY_BYTES} one etcd record may",
                            bytes.len()
                        ),
                    ));
                }
                Ok(etcd.put_doc_if(INVENTORY_KEY, bytes, seen)?)
            }
        }
    }

    /// An exclusive lock on `inventory.lock` in the data directory, until dropped.
    fn lock_inventory(&self) -> Result<std::fs::File, IdentityError> {
        self.ensure_root()?;
        let p = self.root.join("inventory.lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(|e| bad(&p, e))?;
        f.lock().map_err(|e| bad(&p, e))?;
        Ok(f)
    }

    /// Replaces the inventory with `inv` (whatever it was).
    pub fn save_inventory(&self, inv: &Inventory) -> Result<(), IdentityError> {
        self.update(|cur| {
            *cur = inv.clone();
            Ok(())
        })
    }

    /// Reads the inventory, changes it with `f` and writes it, again from the read when another
    /// writer came in between (etcd); returns what `f` returned.
    fn update<T>(
        &self,
        mut f: impl FnMut(&mut Inventory) -> Result<T, IdentityError>,
    ) -> Result<T, IdentityError> {
        // the file: one command at a time (etcd: the revision tells)
        let _lock = match self.inventory_at {
            InventoryAt::File => Some(self.lock_inventory()?),
            InventoryAt::Etcd(_) => None,
        };
        loop {
            let (mut inv, seen) = self.read_inventory()?;
            let out = f(&mut inv)?;
            if self.write_inventory(&inv, seen)? {
                return Ok(out);
            }
        }
    }

    /// Enrolls a node; returns its entry (with a fresh password).
    pub fn add_node(
        &self,
        name: &str,
        public_key: Option<&str>,
    ) -> Result<NodeEntry, IdentityError> {
        acoa_shared::model::check_name("node", name).map_err(|e| IdentityError::Name(e.reason))?;
        if acl::is_system_name(name) {
            return Err(IdentityError::Reserved(name.into()));
        }
        let public_key = match public_key {
            Some(k) => Some(keys::public_hex(&keys::public_from_hex(k)?)),
            None => None,
        };
        self.update(|inv| {
            if inv.nodes.contains_key(name) || inv.workers.contains_key(name) {
                return Err(IdentityError::Exists(name.into()));
            }
            let entry = NodeEntry {
                password: random_password(),
                public_key: public_key.clone(),
            };
            inv.nodes.insert(name.into(), entry.clone());
            Ok(entry)
        })
    }

    pub fn set_key(&self, name: &str, public_key: &str) -> Result<(), IdentityError> {
        let key = keys::public_hex(&keys::public_from_hex(public_key)?);
        self.update(|inv| {
            let e = inv
                .nodes
                .get_mut(name)
                .ok_or_else(|| IdentityError::Unknown(name.into()))?;
            e.public_key = Some(key.clone());
            Ok(())
        })
    }

    pub fn remove_node(&self, name: &str) -> Result<(), IdentityError> {
        self.update(|inv| match inv.nodes.remove(name) {
            Some(_) => Ok(()),
            None => Err(IdentityError::Unknown(name.into())),
        })
    }

    /// Adds a `scheduler worker` login; returns it (with a fresh password).
    pub fn add_worker(&self, name: &str) -> Result<Login, IdentityError> {
        acoa_shared::model::check_name("worker", name)
            .map_err(|e| IdentityError::Name(e.reason))?;
        if acl::is_system_name(name) {
            return Err(IdentityError::Reserved(name.into()));
        }
        self.update(|inv| {
            if inv.nodes.contains_key(name) || inv.workers.contains_key(name) {
                return Err(IdentityError::Exists(name.into()));
            }
            let password = random_password();
            inv.workers.insert(name.into(), password.clone());
            Ok(Login {
                username: name.into(),
                password,
            })
        })
    }

    pub fn remove_worker(&self, name: &str) -> Result<(), IdentityError> {
        self.update(|inv| match inv.workers.remove(name) {
            Some(_) => Ok(()),
            None => Err(IdentityError::Unknown(name.into())),
        })
    }

    /// The broker URL `serve` last wrote, if any.
    pub fn endpoint(&self) -> Option<String> {
        std::fs::read_to_string(self.endpoint_path())
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    /// Whether the brokers `serve` last used were external ones ([`DataDir::endpoint_external_path`]).
    pub fn endpoint_is_external(&self) -> bool {
        self.endpoint_external_path().exists()
    }

    /// Marks the brokers `serve` uses as external, or as the embedded one; writes nothing when
    /// the mark already says so.
    pub fn mark_endpoint_external(&self, external: bool) -> Result<(), IdentityError> {
        let p = self.endpoint_external_path();
        match (external, p.exists()) {
            (true, false) => write_atomic(&p, b"external\n", 0o644)?,
            (false, true) => std::fs::remove_file(&p).map_err(|e| bad(&p, e))?,
            _ => {}
        }
        Ok(())
    }

    /// Every login the broker must accept (nodes, workers, control plane, admin) with its role.
    pub fn logins(&self) -> Result<BTreeMap<String, Account>, IdentityError> {
        let creds = self.credentials()?;
        let inv = self.inventory()?;
        let account = |password, role| Account { password, role };
        let mut m: BTreeMap<String, Account> = inv
            .nodes
            .into_iter()
            .map(|(n, e)| (n, account(e.password, Role::Node)))
            .collect();
        m.extend(
            inv.workers
                .into_iter()
                .map(|(w, p)| (w, account(p, Role::Worker))),
        );
        let (cp, admin) = (creds.control_plane, creds.admin);
        m.insert(cp.username, account(cp.password, Role::ControlPlane));
        m.insert(admin.username, account(admin.password, Role::Admin));
        Ok(m)
    }
}

/// The `[broker]` section an agent's configuration needs: `url`, or `urls` for a
/// comma-separated list of brokers.
pub fn agent_broker_config(
    url: &str,
    node: &str,
    entry: &NodeEntry,
    cp_key: &VerifyingKey,
) -> String {
    let urls: Vec<String> = url
        .split(',')
        .map(|u| format!("\"{}\"", u.trim()))
        .collect();
    let urls = match urls.as_slice() {
        [one] => format!("url = {one}"),
        list => format!("urls = [{}]", list.join(", ")),
    };
    format!(
        "[broker]\n{urls}\nusername = \"{node}\"\npassword = \"{}\"\ncontrol_plane_key = \"{}\"\n",
        entry.password,
        keys::public_hex(cp_key)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_external_brokers_mark_is_set_and_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let dd = DataDir::new(dir.path());
        assert!(!dd.endpoint_is_external());
        dd.mark_endpoint_external(true).unwrap();
        dd.mark_endpoint_external(true).unwrap();
        assert!(dd.endpoint_is_external());
        dd.mark_endpoint_external(false).unwrap();
        assert!(!dd.endpoint_is_external());
        dd.mark_endpoint_external(false).unwrap();
    }

    #[test]
    fn node_add_set_key_remove_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let dd = DataDir::new(dir.path());
        let e = dd.add_node("n13", None).unwrap();
        assert_eq!(e.password.len(), 32);
        assert!(matches!(
            dd.add_node("n13", None),
            Err(IdentityError::Exists(_))
        ));
        assert!(matches!(
            dd.add_node("bad/name", None),
            Err(IdentityError::Name(_))
        ));
        for reserved in [
            ADMIN_USER,
            CONTROL_PLANE_USER,
            "acoa-control-plane-apps",
            "acoa-x",
        ] {
            assert!(matches!(
                dd.add_node(reserved, None),
                Err(IdentityError::Reserved(_))
            ));
            assert!(matches!(
                dd.add_worker(reserved),
                Err(IdentityError::Reserved(_))
            ));
        }
        let k = SigningKey::from_bytes(&[7; 32]).verifying_key();
        dd.set_key("n13", &keys::public_hex(&k)).unwrap();
        assert!(dd.set_key("n13", "zz").is_err());
        assert_eq!(dd.inventory().unwrap().keys()["n13"], Some(k));
        let logins = dd.logins().unwrap();
        assert_eq!(logins["n13"].password, e.password);
        assert_eq!(logins["n13"].role, Role::Node);
        assert!(logins.contains_key(CONTROL_PLANE_USER));
        dd.remove_node("n13").unwrap();
        assert!(dd.remove_node("n13").is_err());
        // the key is stable across calls
        assert_eq!(dd.signing_key().unwrap(), dd.signing_key().unwrap());
        let cfg = agent_broker_config("mqtt://127.0.0.1:1883", "n13", &e, &k);
        let parsed: toml::Value = toml::from_str(&cfg).unwrap();
        assert_eq!(parsed["broker"]["username"].as_str(), Some("n13"));
        assert_eq!(
            parsed["broker"]["url"].as_str(),
            Some("mqtt://127.0.0.1:1883")
        );
        let cfg = agent_broker_config("mqtt://a:1, mqtt://b:2", "n13", &e, &k);
        let parsed: toml::Value = toml::from_str(&cfg).unwrap();
        let urls: Vec<&str> = parsed["broker"]["urls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u.as_str().unwrap())
            .collect();
        assert_eq!(urls, ["mqtt://a:1", "mqtt://b:2"]);
        assert!(parsed["broker"].get("url").is_none());
    }
}
