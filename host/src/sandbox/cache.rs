//! Compiled doors kept on disk, so a launch or a swap of a door this host
//! has compiled before runs no Cranelift.
//!
//! An entry is named by the SHA-256 of the component's bytes and a hash of
//! the engine's compatibility key (`Engine::precompile_compatibility_hash`:
//! wasmtime's version and every setting that shapes compiled code), so an
//! upgraded host or another configuration never finds an entry it cannot
//! use. Each entry starts with the SHA-256 of the artifact that follows it;
//! an entry that does not match is compiled again and replaced, never
//! loaded. The directory is the host's own (created 0700, refused when
//! another user owns it or others may write it): wasmtime's deserializing
//! trusts its input, so nothing another user could have written is read.

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Bytes of the SHA-256 that heads an entry.
const CHECK: usize = 32;
/// Entries the cache keeps; past it the least recently written go. A door
/// compiled is 2 to 3 times its component's size (about 1.5 MB here).
pub const MAX_ENTRIES: usize = 32;

/// A directory of compiled doors.
#[derive(Clone, Debug)]
pub struct CompileCache {
    dir: PathBuf,
}

/// Where a compiled door came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compiled {
    /// Compiled, and stored when a cache is set.
    Fresh,
    /// Loaded from the cache: no compile.
    Cached,
}

impl CompileCache {
    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cache in `dir`, created (0700) when missing.
    pub fn open(dir: &Path) -> anyhow::Result<CompileCache> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating the compile cache {}", dir.display()))?;
        let meta = fs::metadata(dir)?;
        // SAFETY: geteuid reads the process's effective user id.
        let me = unsafe { libc::geteuid() };
        anyhow::ensure!(
            meta.is_dir() && meta.uid() == me && meta.permissions().mode() & 0o022 == 0,
            "the compile cache {} must be a directory of this user that others cannot write",
            dir.display()
        );
        Ok(CompileCache {
            dir: dir.to_path_buf(),
        })
    }

    /// The default place: `$XDG_CACHE_HOME/murmur-door`, or
    /// `$HOME/.cache/murmur-door`; None without either.
    pub fn default_dir() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|home| PathBuf::from(home).join(".cache"))
            })?;
        Some(base.join("murmur-door"))
    }

    /// The entry of `bytes` compiled for `engine`.
    pub fn entry(&self, engine: &Engine, bytes: &[u8]) -> PathBuf {
        let mut key = KeyHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut key);
        let engine_key = hex::encode(&key.0.finalize()[..16]);
        let component = hex::encode(Sha256::digest(bytes));
        self.dir.join(format!("{component}-{engine_key}.cwasm"))
    }

    /// The compiled `bytes`: from the cache when its entry is sound, else
    /// compiled by `compile` and stored.
    pub fn load(
        &self,
        engine: &Engine,
        bytes: &[u8],
        compile: impl FnOnce() -> anyhow::Result<Component>,
    ) -> anyhow::Result<(Component, Compiled)> {
        let entry = self.entry(engine, bytes);
        match read_entry(&entry) {
            Ok(Some(artifact)) => {
                // SAFETY: the artifact is one this host serialized for an
                // engine of this compatibility key (the entry's name), in a
                // directory only this user can write, and its checksum
                // matches: it is the bytes `Component::serialize` gave.
                match unsafe { Component::deserialize(engine, &artifact) } {
                    Ok(component) => return Ok((component, Compiled::Cached)),
                    Err(e) => {
                        tracing::warn!(path = %entry.display(), error = %e, "a compile cache entry does not load: compiling again")
                    }
                }
            }
            Ok(None) => {}
            Err(why) => {
                tracing::warn!(path = %entry.display(), error = %why, "a compile cache entry is damaged: compiling again")
            }
        }
        let component = compile()?;
        match write_entry(&entry, &component) {
            Ok(()) => self.prune(),
            Err(e) => {
                tracing::warn!(path = %entry.display(), error = %format!("{e:#}"), "the compiled door is not cached")
            }
        }
        Ok((component, Compiled::Fresh))
    }

    /// Removes the oldest entries past [`MAX_ENTRIES`].
    fn prune(&self) {
        let Ok(dir) = fs::read_dir(&self.dir) else {
            return;
        };
        let mut entries: Vec<(std::time::SystemTime, PathBuf)> = dir
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
            .filter_map(|p| Some((fs::metadata(&p).ok()?.modified().ok()?, p)))
            .collect();
        if entries.len() <= MAX_ENTRIES {
            return;
        }
        entries.sort();
        for (_, old) in &entries[..entries.len() - MAX_ENTRIES] {
            let _ = fs::remove_file(old);
        }
    }
}

/// The artifact in `entry`: None when there is none, an error when it is
/// not whole.
fn read_entry(entry: &Path) -> Result<Option<Vec<u8>>, String> {
    let mut bytes = match fs::read(entry) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if bytes.len() < CHECK {
        return Err(format!("{} bytes, shorter than its checksum", bytes.len()));
    }
    let artifact = bytes.split_off(CHECK);
    if Sha256::digest(&artifact)[..] != bytes[..] {
        return Err("its checksum does not match".into());
    }
    Ok(Some(artifact))
}

/// Writes `component`'s artifact to `entry` whole or not at all: to a
/// temporary file beside it, synced, then renamed over it.
fn write_entry(entry: &Path, component: &Component) -> anyhow::Result<()> {
    let artifact = component.serialize().map_err(anyhow::Error::from)?;
    let temporary = entry.with_extension(format!("tmp{}", std::process::id()));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)?;
    let written = file
        .write_all(&Sha256::digest(&artifact))
        .and_then(|()| file.write_all(&artifact))
        .and_then(|()| file.sync_all());
    if let Err(e) = written {
        let _ = fs::remove_file(&temporary);
        return Err(e.into());
    }
    fs::rename(&temporary, entry)?;
    Ok(())
}

/// Feeds what `Hash` writes into a SHA-256, for a key stable across runs
/// (std's hashers are seeded per process).
struct KeyHasher(Sha256);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        0
    }
}
