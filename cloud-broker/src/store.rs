//! Where the control plane's records ([`crate::records`]) are kept: the [`Store`] trait
//! (load everything at start-up, make each operation durable), and [`FileStore`], the
//! crash-safe file store.
//!
//! Invariant of every store: when [`Store::apply`] returns `Ok`, the operation survives a crash
//! (the decision loop publishes nothing before its records are durable); [`Store::load`]
//! returns the records as the last applied operations left them. The decision loop writes
//! what one event decided with [`Store::apply_batch`]: etcd makes it one transaction (a crash
//! leaves all of it or none), the file store one record after the other (a crash between two
//! leaves records that disagree, which the engine repairs at start-up:
//! `Engine::repair_desired`).
//!
//! [`FileStore`] keeps one small file per record, written atomically (write a temporary file,
//! fsync it, rename it over the old one, fsync the directory), so that a crash at any instant
//! leaves either the old record or the new one, never a torn one. Layout under the data
//! directory: `store/apps/{app}.json` (definition, placement), `store/desired/{node}.json`
//! (desired state with its generation), `store/nodes/{node}.json` (the last static properties a
//! node reported), `store/history/{app}.json` (revisions and the rollout under way),
//! `store/meta.json` (counters).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{de::DeserializeOwned, Serialize};

use crate::records::{AppRecord, DesiredDoc, History, NodeInfo};
pub use crate::records::{Meta, PersistOp, Snapshot};

pub mod etcd;
pub mod leader;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: record does not parse: {reason}")]
    Corrupt { path: String, reason: String },
    #[error("etcd: {0}")]
    Etcd(String),
    #[error("this replica no longer leads (its term {term} ended): the write was refused")]
    NotLeader { term: u64 },
}

/// A batch of writes that stopped at an operation: the first `written` are durable, the rest
/// were not written.
#[derive(Debug, thiserror::Error)]
#[error("{error} ({written} of the batch's writes made before)")]
pub struct BatchError {
    pub written: usize,
    pub error: StoreError,
}

/// Which store `serve` keeps its records in.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum StoreKind {
    /// [`FileStore`] in the data directory.
    #[default]
    File,
    /// [`etcd::EtcdStore`].
    Etcd(etcd::EtcdConfig),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `bytes` to `path` atomically and durably.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let tmp = temporary_of(path);
    let written = write_temporary(&tmp, bytes, mode)
        .and_then(|f| f.sync_all())
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        // a full disk must not keep the partial copy's space
        let _ = fs::remove_file(&tmp);
        return Err(io_err(&tmp)(e));
    }
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))?;
    Ok(())
}

/// The temporary a record is written to before it is renamed over `path` (the names
/// [`remove_temporaries`] knows).
fn temporary_of(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    dir.join(format!(
        ".{}.tmp{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("record"),
        std::process::id()
    ))
}

fn write_temporary(tmp: &Path, bytes: &[u8], mode: u32) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(tmp)?;
    f.write_all(bytes)?;
    Ok(f)
}

/// Writes several records, each as [`write_atomic`] would (old or new after a crash, never
/// torn), with two flushes for the lot instead of two per record: every temporary written,
/// the file system flushed once (`syncfs`), each renamed over its record, then each directory
/// flushed. A fleet of 50,000 joining is 50,000 node records; one by one, their 100,000
/// flushes took a fifth of the control plane's CPU in the join.
pub fn write_many_atomic(records: &[(PathBuf, Vec<u8>)], mode: u32) -> Result<(), BatchError> {
    let fail = |written: usize| move |error: StoreError| BatchError { written, error };
    let mut tmps: Vec<PathBuf> = Vec::with_capacity(records.len());
    let cleanup = |tmps: &[PathBuf]| {
        for t in tmps {
            let _ = fs::remove_file(t);
        }
    };
    let mut dirs: Vec<&Path> = Vec::new();
    for (path, bytes) in records {
        let dir = path.parent().unwrap_or(Path::new("."));
        if !dirs.contains(&dir) {
            fs::create_dir_all(dir).map_err(|e| fail(0)(io_err(dir)(e)))?;
            dirs.push(dir);
        }
        let tmp = temporary_of(path);
        if let Err(e) = write_temporary(&tmp, bytes, mode) {
            // a full disk must not keep the partial copies' space
            tmps.push(tmp.clone());
            cleanup(&tmps);
            return Err(fail(0)(io_err(&tmp)(e)));
        }
        tmps.push(tmp);
    }
    let Some(first) = dirs.first() else {
        return Ok(());
    };
    if let Err(e) = fs::File::open(first).and_then(|d| rustix::fs::syncfs(&d).map_err(Into::into)) {
        cleanup(&tmps);
        return Err(fail(0)(io_err(first)(e)));
    }
    for (i, ((path, _), tmp)) in records.iter().zip(&tmps).enumerate() {
        if let Err(e) = fs::rename(tmp, path) {
            cleanup(&tmps[i..]);
            return Err(fail(i)(io_err(tmp)(e)));
        }
    }
    for dir in dirs {
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| fail(records.len())(io_err(dir)(e)))?;
    }
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
    /// Makes `ops` durable before returning, as they would be applied in order. By default one
    /// at a time (each atomic, the set not); a store that can write them together does (etcd:
    /// one transaction, or a few for a large batch).
    fn apply_batch(&self, ops: &[PersistOp]) -> Result<(), BatchError> {
        for (written, op) in ops.iter().enumerate() {
            self.apply(op)
                .map_err(|error| BatchError { written, error })?;
        }
        Ok(())
    }
    /// Makes the node records `ops` ([`PersistOp::PutNode`], the node-records thread's, off the
    /// critical path) durable, each atomic. By default as [`Store::apply_batch`] does; the file
    /// store flushes the lot at once ([`write_many_atomic`]).
    fn apply_nodes(&self, ops: &[PersistOp]) -> Result<(), BatchError> {
        self.apply_batch(ops)
    }
    /// `Ok` when a record of [`PROBE_BYTES`] can be made durable now (after a failure, to
    /// know when writes are possible again).
    fn writable(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// The size of the record [`Store::writable`] writes to see whether the store can write.
pub const PROBE_BYTES: usize = 64 * 1024;

/// Removes the temporary files a crash or a full disk left in `dir` (names `.{record}.tmp{pid}`);
/// returns how many.
pub fn remove_temporaries(dir: &Path) -> Result<usize, StoreError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_err(dir)(e)),
    };
    let mut n = 0;
    for e in entries.filter_map(|e| e.ok()) {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let Some((_, pid)) = name.strip_prefix('.').and_then(|n| n.rsplit_once(".tmp")) else {
            continue;
        };
        // another process (a CLI command) may be writing its own right now
        let live = pid
            .parse::<u32>()
            .is_ok_and(|p| p != std::process::id() && Path::new("/proc").join(pid).exists());
        if !live && e.path().is_file() {
            fs::remove_file(e.path()).map_err(io_err(&e.path()))?;
            n += 1;
        }
    }
    Ok(n)
}

/// The file store in `{data_dir}/store`.
#[derive(Debug, Clone)]
pub struct FileStore {
    root: PathBuf,
}

impl FileStore {
    /// Opens (creates) the store under `data_dir` and removes the temporary files a crash or a
    /// full disk left there and in `data_dir` itself.
    pub fn open(data_dir: &Path) -> Result<FileStore, StoreError> {
        Ok(FileStore::open_cleaned(data_dir)?.0)
    }

    /// [`FileStore::open`], also returning how many temporary files were removed.
    pub fn open_cleaned(data_dir: &Path) -> Result<(FileStore, usize), StoreError> {
        let root = data_dir.join("store");
        let mut removed = remove_temporaries(data_dir)? + remove_temporaries(&root)?;
        for sub in ["apps", "desired", "nodes", "history"] {
            let d = root.join(sub);
            fs::create_dir_all(&d).map_err(io_err(&d))?;
            removed += remove_temporaries(&d)?;
        }
        Ok((FileStore { root }, removed))
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
        let history: Vec<History> = read_dir_json(&self.root.join("history"))?;
        Ok(Snapshot::from_records(apps, desired, nodes, meta).with_history(history))
    }

    fn apply(&self, op: &PersistOp) -> Result<(), StoreError> {
        match op {
            PersistOp::PutApp(a) => {
                write_atomic(&self.file("apps", &a.name), &json(a.as_ref()), 0o600)
            }
            PersistOp::DeleteApp(name) => {
                remove_durable(&self.file("apps", name))?;
                remove_durable(&self.file("history", name))
            }
            PersistOp::PutHistory(h) => {
                write_atomic(&self.file("history", &h.app), &json(h.as_ref()), 0o600)
            }
            PersistOp::PutDesired(d) => {
                write_atomic(&self.file("desired", &d.node), &json(d.as_ref()), 0o600)
            }
            PersistOp::PutNode(n) => {
                write_atomic(&self.file("nodes", &n.name), &json(n.as_ref()), 0o600)
            }
            PersistOp::PutMeta(m) => write_atomic(&self.root.join("meta.json"), &json(m), 0o600),
        }
    }

    fn apply_nodes(&self, ops: &[PersistOp]) -> Result<(), BatchError> {
        let records: Vec<(PathBuf, Vec<u8>)> = ops
            .iter()
            .filter_map(|op| match op {
                PersistOp::PutNode(n) => Some((self.file("nodes", &n.name), json(n.as_ref()))),
                _ => None,
            })
            .collect();
        if records.len() < ops.len() {
            // not node records only: one by one, as the loop's records are
            return self.apply_batch(ops);
        }
        write_many_atomic(&records, 0o600)
    }

    fn writable(&self) -> Result<(), StoreError> {
        let probe = self.root.join("probe");
        write_atomic(&probe, &vec![b' '; PROBE_BYTES], 0o600)?;
        remove_durable(&probe)
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
    fn temporaries_left_by_a_crash_are_removed_on_open_and_records_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        store
            .apply(&PersistOp::PutMeta(Meta { peer_generation: 3 }))
            .unwrap();
        for p in [
            "store/apps/.shop.json.tmp999999998",
            "store/.meta.json.tmp999999998",
            ".endpoint.tmp999999999",
        ] {
            fs::write(dir.path().join(p), b"{torn").unwrap();
        }
        let (store, removed) = FileStore::open_cleaned(dir.path()).unwrap();
        assert_eq!(removed, 3);
        assert!(!dir
            .path()
            .join("store/apps/.shop.json.tmp999999998")
            .exists());
        assert!(dir.path().join("store/meta.json").exists());
        assert_eq!(store.load().unwrap().meta.peer_generation, 3);
        assert!(store.writable().is_ok());
        assert!(!dir.path().join("store/probe").exists());
    }

    #[test]
    fn desired_states_written_as_the_wire_type_load() {
        use acoa_shared::wire::{self, ContainerSpec, DesiredState, EnvVar};
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        let mut old = Box::new(DesiredState {
            node: wire::name("n1").unwrap(),
            generation: 4,
            term: 0,
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
                health: None,
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
