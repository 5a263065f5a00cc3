//! One door to a state directory: two would both write its session, and a
//! launch without `--resume` would archive the session another door is
//! serving. The lock is an advisory `flock` on the directory itself, so it
//! is released however the process ends and cannot be defeated by deleting
//! a file; `STATE/lock` only names the holder's pid.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::{Context, bail};

/// The lock file's name in the state directory; it holds the pid of the
/// door that holds it.
pub const LOCK_FILE: &str = "lock";

/// The state directory, held by this process until dropped.
#[derive(Debug)]
pub struct StateLock {
    /// The directory, open and locked.
    directory: File,
}

impl Drop for StateLock {
    /// Unlocks before the descriptor closes. Closing alone would not do:
    /// the lock belongs to the open directory, which a child forked at that
    /// moment (an agent being started) also holds until its exec closes it.
    fn drop(&mut self) {
        // SAFETY: flock on the descriptor this lock owns.
        unsafe { libc::flock(self.directory.as_raw_fd(), libc::LOCK_UN) };
    }
}

impl StateLock {
    /// Takes the lock of `state`, or says which process holds it.
    pub fn acquire(state: &Path) -> anyhow::Result<StateLock> {
        let directory = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(state)
            .with_context(|| format!("opening {}", state.display()))?;
        let path = state.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(directory.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            bail!(
                "the state directory {} is in use by another murmur-door (pid {})",
                state.display(),
                holder.trim()
            );
        }
        file.set_len(0)?;
        file.rewind()?;
        write!(file, "{}", std::process::id())?;
        Ok(StateLock { directory })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = std::env::temp_dir().join(format!("murmur-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = StateLock::acquire(&dir).unwrap();
        let refused = StateLock::acquire(&dir).unwrap_err().to_string();
        assert_eq!(
            refused,
            format!(
                "the state directory {} is in use by another murmur-door (pid {})",
                dir.display(),
                std::process::id()
            )
        );
        // Deleting the pid file does not free the directory.
        std::fs::remove_file(dir.join(LOCK_FILE)).unwrap();
        let refused = StateLock::acquire(&dir).unwrap_err().to_string();
        assert!(refused.starts_with("the state directory"), "{refused}");
        drop(first);
        let again = StateLock::acquire(&dir).unwrap();
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A process forked while the lock is held shares the open directory
    /// until it execs; letting go must not wait for it.
    #[test]
    fn letting_go_frees_the_directory_while_a_copy_of_it_is_open() {
        let dir = std::env::temp_dir().join(format!("murmur-lock-copy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lock = StateLock::acquire(&dir).unwrap();
        // What a fork leaves in the child: the same open directory.
        let copy = lock.directory.try_clone().unwrap();
        drop(lock);
        let again = StateLock::acquire(&dir).unwrap();
        drop((again, copy));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
