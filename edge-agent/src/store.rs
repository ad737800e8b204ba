//! Local state on disk: the node key and the last applied signed documents.
//!
//! Documents are kept as the signed frames that arrived, so that on start they are
//! verified again against the pinned control-plane key before anything is restored.
//! Every write is atomic: a temporary file, flushed, then renamed over the old one.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;

pub const NODE_KEY: &str = "node.key";
pub const DESIRED: &str = "desired.bin";
pub const PEERS: &str = "peers.bin";
/// The agent's run counter: how many times it has started on this state directory.
pub const RUN: &str = "run";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a node key (expected 64 hexadecimal digits)")]
    BadKey { path: PathBuf },
    #[error("{path}: not a run counter (expected a decimal number below 2^64 - 1)")]
    BadRun { path: PathBuf },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Loads the node key from `dir/node.key`, creating it (mode 0600) when absent.
/// Returns the key and whether it was created now.
pub fn node_key(dir: &Path) -> Result<(SigningKey, bool), StoreError> {
    fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join(NODE_KEY);
    match fs::read_to_string(&path) {
        Ok(text) => {
            let key = acoa_shared::wire::keys::secret_from_hex(text.trim())
                .map_err(|_| StoreError::BadKey { path: path.clone() })?;
            // Tighten permissions that someone loosened.
            let meta = fs::metadata(&path).map_err(io(&path))?;
            if meta.permissions().mode() & 0o077 != 0 {
                fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).map_err(io(&path))?;
            }
            Ok((key, false))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = SigningKey::generate(&mut rand::rngs::OsRng);
            let tmp = dir.join(format!("{NODE_KEY}.{}.tmp", std::process::id()));
            let _ = fs::remove_file(&tmp);
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(io(&tmp))?;
            let hex = acoa_shared::wire::keys::to_hex(&key.to_bytes());
            f.write_all(format!("{hex}\n").as_bytes())
                .and_then(|_| f.sync_all())
                .map_err(io(&tmp))?;
            drop(f);
            // A link never replaces: when two processes race on one state dir, the
            // first key wins and both use it.
            let linked = fs::hard_link(&tmp, &path);
            let _ = fs::remove_file(&tmp);
            match linked {
                Ok(()) => sync_dir(dir),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let (key, _) = node_key(dir)?;
                    return Ok((key, false));
                }
                Err(e) => return Err(io(&path)(e)),
            }
            Ok((key, true))
        }
        Err(e) => Err(io(&path)(e)),
    }
}

/// Writes `bytes` to `dir/name` atomically (temporary file + rename).
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
    fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(io(&tmp))?;
    drop(f);
    fs::rename(&tmp, &path).map_err(io(&path))?;
    sync_dir(dir);
    Ok(())
}

/// Counts one more start of the agent: the run counter in `dir/run` plus one (1 on the first
/// start), written atomically and synced to disk before it is returned, so that the `run` of
/// every message signed from now on is greater than that of any message of an earlier start,
/// whatever crashed when. A counter that does not read is an error, never a restart from 0.
pub fn next_run(dir: &Path) -> Result<u64, StoreError> {
    let path = dir.join(RUN);
    let last = match read(dir, RUN)? {
        None => 0,
        Some(bytes) => std::str::from_utf8(&bytes)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .ok_or_else(|| StoreError::BadRun { path: path.clone() })?,
    };
    let run = last
        .checked_add(1)
        .ok_or(StoreError::BadRun { path: path.clone() })?;
    write_atomic(dir, RUN, format!("{run}\n").as_bytes())?;
    Ok(run)
}

/// Reads `dir/name`, `None` when it does not exist.
pub fn read(dir: &Path, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
    let path = dir.join(name);
    match fs::read(&path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(&path)(e)),
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("acoa-store-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn node_key_is_created_once_with_0600() {
        let d = tmpdir("key");
        let (k1, created) = node_key(&d).unwrap();
        assert!(created);
        let mode = fs::metadata(d.join(NODE_KEY)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let (k2, created) = node_key(&d).unwrap();
        assert!(!created);
        assert_eq!(k1.to_bytes(), k2.to_bytes());
        fs::write(d.join(NODE_KEY), "zz").unwrap();
        assert!(matches!(node_key(&d), Err(StoreError::BadKey { .. })));
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn the_run_counter_increases_with_every_start_and_is_never_reset() {
        let d = tmpdir("run");
        assert_eq!(next_run(&d).unwrap(), 1);
        assert_eq!(next_run(&d).unwrap(), 2);
        assert_eq!(next_run(&d).unwrap(), 3);
        assert_eq!(read(&d, RUN).unwrap().as_deref(), Some(&b"3\n"[..]));
        // Damaged: an error naming the file, not a silent restart from 1.
        fs::write(d.join(RUN), "x").unwrap();
        assert!(matches!(next_run(&d), Err(StoreError::BadRun { .. })));
        fs::write(d.join(RUN), u64::MAX.to_string()).unwrap();
        assert!(matches!(next_run(&d), Err(StoreError::BadRun { .. })));
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn atomic_write_replaces() {
        let d = tmpdir("atomic");
        assert_eq!(read(&d, DESIRED).unwrap(), None);
        write_atomic(&d, DESIRED, b"one").unwrap();
        write_atomic(&d, DESIRED, b"two").unwrap();
        assert_eq!(read(&d, DESIRED).unwrap().as_deref(), Some(&b"two"[..]));
        assert!(!d.join("desired.bin.tmp").exists());
        let _ = fs::remove_dir_all(&d);
    }
}
