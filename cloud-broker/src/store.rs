//! Where the control plane's records ([`crate::records`]) are kept: the [`Store`] trait
//! (load everything at start-up, make each operation durable), and [`FileStore`], the
//! crash-safe file store.
//!
//! Invariant of every store: when [`Store::apply`] returns `Ok`, the operation survives a crash
//! (the decision loop publishes nothing before its records are durable); [`Store::load`]
//! returns the records as the last applied operations left them.
//!
//! [`FileStore`] keeps one small file per record, written atomically (write a temporary file,
//! fsync it, rename it over the old one, fsync the directory), so that a crash at any instant
//! leaves either the old record or the new one, never a torn one. Layout under the data
//! directory: `store/apps/{app}.json` (definition, placement), `store/desired/{node}.json`
//! (desired state with its generation), `store/nodes/{node}.json` (the last static properties a
//! node reported), `store/meta.json` (counters).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{de::DeserializeOwned, Serialize};

use crate::records::{AppRecord, DesiredDoc, NodeInfo};
pub use crate::records::{Meta, PersistOp, Snapshot};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: record does not parse: {reason}")]
    Corrupt { path: String, reason: String },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `bytes` to `path` atomically and durably.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("record"),
        std::process::id()
    ));
    {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        f.write_all(bytes).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(io_err(path))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))?;
    Ok(())
}

fn remove_durable(path: &Path) -> Result<(), StoreError> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(path)(e)),
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, StoreError> {
    let bytes = fs::read(path).map_err(io_err(path))?;
    serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

fn read_dir_json<T: DeserializeOwned>(dir: &Path) -> Result<Vec<T>, StoreError> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io_err(dir)(e)),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && !p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.'))
        })
        .collect();
    paths.sort();
    for p in paths {
        out.push(read_json(&p)?);
    }
    Ok(out)
}

/// Where the records are kept (see the module documentation): record-oriented, so that a
/// store can keep one entry per application, node and counter set.
pub trait Store: Send + Sync {
    /// Every record (an empty snapshot for a new store).
    fn load(&self) -> Result<Snapshot, StoreError>;
    /// Makes `op` durable before returning.
    fn apply(&self, op: &PersistOp) -> Result<(), StoreError>;
}

/// The file store in `{data_dir}/store`.
#[derive(Debug, Clone)]
pub struct FileStore {
    root: PathBuf,
}

impl FileStore {
    pub fn open(data_dir: &Path) -> Result<FileStore, StoreError> {
        let root = data_dir.join("store");
        for sub in ["apps", "desired", "nodes"] {
            let d = root.join(sub);
            fs::create_dir_all(&d).map_err(io_err(&d))?;
        }
        Ok(FileStore { root })
    }

    fn file(&self, sub: &str, name: &str) -> PathBuf {
        // Names were validated (letters, digits, `_`, `.`, `-`, not starting with `.`).
        self.root.join(sub).join(format!("{name}.json"))
    }

    pub fn remove_node(&self, name: &str) -> Result<(), StoreError> {
        remove_durable(&self.file("nodes", name))?;
        remove_durable(&self.file("desired", name))
    }
}

impl Store for FileStore {
    fn load(&self) -> Result<Snapshot, StoreError> {
        let apps: Vec<AppRecord> = read_dir_json(&self.root.join("apps"))?;
        let desired: Vec<DesiredDoc> = read_dir_json(&self.root.join("desired"))?;
        let nodes: Vec<NodeInfo> = read_dir_json(&self.root.join("nodes"))?;
        let meta_path = self.root.join("meta.json");
        let meta = if meta_path.exists() {
            read_json(&meta_path)?
        } else {
            Meta::default()
        };
        Ok(Snapshot {
            apps: apps.into_iter().map(|a| (a.name.clone(), a)).collect(),
            desired: desired.into_iter().map(|d| (d.node.clone(), d)).collect(),
            nodes: nodes.into_iter().map(|n| (n.name.clone(), n)).collect(),
            meta,
        })
    }

    fn apply(&self, op: &PersistOp) -> Result<(), StoreError> {
        match op {
            PersistOp::PutApp(a) => {
                write_atomic(&self.file("apps", &a.name), &json(a.as_ref()), 0o600)
            }
            PersistOp::DeleteApp(name) => remove_durable(&self.file("apps", name)),
            PersistOp::PutDesired(d) => {
                write_atomic(&self.file("desired", &d.node), &json(d.as_ref()), 0o600)
            }
            PersistOp::PutNode(n) => {
                write_atomic(&self.file("nodes", &n.name), &json(n.as_ref()), 0o600)
            }
            PersistOp::PutMeta(m) => write_atomic(&self.root.join("meta.json"), &json(m), 0o600),
        }
    }
}

fn json<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec_pretty(v).expect("records serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.json");
        write_atomic(&p, b"one", 0o600).unwrap();
        write_atomic(&p, b"two", 0o600).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.path().join("a"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_torn_temporary_is_ignored_on_load() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        store
            .apply(&PersistOp::PutMeta(Meta { peer_generation: 7 }))
            .unwrap();
        fs::write(dir.path().join("store/apps/.x.json.tmp1"), b"{garbage").unwrap();
        fs::write(dir.path().join("store/apps/.y.json"), b"{garbage").unwrap();
        let snap = store.load().unwrap();
        assert_eq!(snap.meta.peer_generation, 7);
        assert!(snap.apps.is_empty());
    }

    #[test]
    fn desired_states_written_as_the_wire_type_load() {
        use acoa_shared::wire::{self, ContainerSpec, DesiredState, EnvVar};
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        let mut old = Box::new(DesiredState {
            node: wire::name("n1").unwrap(),
            generation: 4,
            containers: heapless::Vec::new(),
        });
        let mut env = heapless::Vec::new();
        env.push(EnvVar {
            name: wire::bounded("env name", "ACOA_APP").unwrap(),
            value: wire::bounded("env value", "shop").unwrap(),
        })
        .unwrap();
        old.containers
            .push(ContainerSpec {
                name: wire::name("shop.db").unwrap(),
                app: wire::name("shop").unwrap(),
                component: wire::name("db").unwrap(),
                image: wire::bounded("image", "pg:16").unwrap(),
                cpu_millis: 250,
                memory_mb: 64,
                env,
            })
            .unwrap();
        // as the control plane wrote desired states before they had a type of their own
        fs::write(
            dir.path().join("store/desired/n1.json"),
            serde_json::to_vec_pretty(&*old).unwrap(),
        )
        .unwrap();
        let snap = store.load().unwrap();
        let d = &snap.desired["n1"];
        assert_eq!(*d, DesiredDoc::from_wire(&old));
        assert_eq!(d.to_wire().unwrap(), old);
        store
            .apply(&PersistOp::PutDesired(Box::new(d.clone())))
            .unwrap();
        let again: serde_json::Value =
            serde_json::from_slice(&fs::read(dir.path().join("store/desired/n1.json")).unwrap())
                .unwrap();
        assert_eq!(again, serde_json::to_value(&*old).unwrap());
    }
}
