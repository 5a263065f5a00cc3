//! Detached commands: `sh -c` in a process group of its own, started by a
//! task and outliving it. While they run they are the session's residue and
//! the `runningCommands` of the task that started them, and the store keeps
//! them so a resumed launch can report those it lost; the session kills
//! them when it closes or is dropped. Each one's result, once it exits, is a
//! task of the session's own.
//!
//! A command can also be recorded without being run (the script agent's
//! `detach`: its text is a caller's, which no shell may see). It is residue
//! and `runningCommands` the same way, until the session ends or a cancel
//! of its task ends it; it has no result and no process to lose.

use std::io;
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::bindings::session::{DetachedShell, ResidueItem};
use crate::bindings::task_store::RunningCommand;
use crate::session::process;

use super::ids;
use super::model::now_ms;
use super::own::Tail;

/// `runningCommands[].command` keeps this many characters, then `…`.
pub const COMMAND_CHARS: usize = 200;

/// Every detached command of the session, in the order they started.
#[derive(Default)]
pub(super) struct DetachedCommands(Vec<Detached>);

/// A command a task detached, as the residue lists it.
struct Detached {
    item: DetachedShell,
    task_id: String,
    /// The path `runningCommands[].binary` names (the residue item names
    /// the first word as written).
    binary_path: String,
    /// The process group (the `sh` that leads it); None for a command
    /// recorded and not run.
    pgid: Option<i32>,
    /// Set once the `sh` has exited and been reaped, or, for a command
    /// recorded and not run, once a cancel of its task has ended it.
    done: Arc<AtomicBool>,
}

impl DetachedCommands {
    /// What the session still runs: its detached commands not yet exited.
    pub(super) fn residue(&self) -> Vec<ResidueItem> {
        self.0
            .iter()
            .filter(|d| !d.done.load(Ordering::SeqCst))
            .map(|d| ResidueItem::DetachedShell(d.item.clone()))
            .collect()
    }

    /// Kills the process groups of the detached commands still running, and
    /// ends those recorded and not run.
    pub(super) fn kill(&self) {
        for detached in &self.0 {
            match detached.pgid {
                Some(pgid) if !detached.done.load(Ordering::SeqCst) => process::kill_group(pgid),
                Some(_) => {}
                // The session's end ends what was only recorded.
                None => detached.done.store(true, Ordering::SeqCst),
            }
        }
    }

    /// Records `command` for `task_id` as detached without running it:
    /// residue and `runningCommands` until the session ends or a cancel of
    /// the task ends it.
    pub(super) fn record(&mut self, task_id: &str, command: &str) -> DetachedShell {
        let word = first_word(command);
        let item = DetachedShell {
            work_id: ids::work_id(),
            binary: word.to_string(),
            command: command.to_string(),
            started_at_ms: now_ms() as u64,
        };
        self.0.push(Detached {
            item: item.clone(),
            task_id: task_id.to_string(),
            binary_path: binary_path(word),
            pgid: None,
            done: Arc::new(AtomicBool::new(false)),
        });
        item
    }

    /// Starts `command` for `task_id` in a process group of its own, its
    /// output piped: the command as the residue lists it, and its process
    /// to wait for.
    pub(super) fn start(
        &mut self,
        task_id: &str,
        command: &str,
    ) -> io::Result<(DetachedShell, Exit)> {
        let started_at_ms = now_ms();
        let mut child = process::shell(command)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        let pgid = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .ok_or_else(|| io::Error::other("the command exited at once"))?;
        let word = first_word(command);
        let item = DetachedShell {
            work_id: ids::work_id(),
            binary: word.to_string(),
            command: command.to_string(),
            started_at_ms: started_at_ms as u64,
        };
        let done = Arc::new(AtomicBool::new(false));
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        self.0.push(Detached {
            item: item.clone(),
            task_id: task_id.to_string(),
            binary_path: binary_path(word),
            pgid: Some(pgid),
            done: done.clone(),
        });
        let exit = Exit {
            child,
            stdout,
            stderr,
            reaped: done,
        };
        Ok((item, exit))
    }

    /// Ends the commands recorded for `task_id` and not run: its cancel ends
    /// them. Commands that run go on until they exit or the session ends.
    pub(super) fn end_recorded(&self, task_id: &str) {
        for d in &self.0 {
            if d.pgid.is_none() && d.task_id == task_id {
                d.done.store(true, Ordering::SeqCst);
            }
        }
    }

    /// The detached commands `task_id` started that still run, oldest
    /// first, as the task's metadata says them at `now`.
    pub(super) fn running_commands(&self, task_id: &str, now: i64) -> Vec<RunningCommand> {
        self.0
            .iter()
            .filter(|d| d.task_id == task_id && !d.done.load(Ordering::SeqCst))
            .map(|d| RunningCommand {
                work_id: d.item.work_id.clone(),
                binary: d.binary_path.clone(),
                command: cut(&d.item.command),
                running_ms: (now.max(0) as u64).saturating_sub(d.item.started_at_ms),
            })
            .collect()
    }

    /// The process groups of the commands started.
    #[cfg(test)]
    pub(super) fn pgids(&self) -> Vec<i32> {
        self.0.iter().filter_map(|d| d.pgid).collect()
    }
}

/// A detached command's process, until it exits.
pub(super) struct Exit {
    child: tokio::process::Child,
    stdout: Option<tokio::process::ChildStdout>,
    stderr: Option<tokio::process::ChildStderr>,
    /// The command's `done`.
    reaped: Arc<AtomicBool>,
}

impl Exit {
    /// Waits for the command to exit, and answers how it ended and the last
    /// of what it wrote ([`OUTPUT_TAIL`] bytes of each stream).
    pub(super) async fn wait(self) -> (Option<ExitStatus>, Tail, Tail) {
        let Exit {
            mut child,
            stdout,
            stderr,
            reaped,
        } = self;
        let output = async { tokio::join!(tail(stdout), tail(stderr)) };
        tokio::pin!(output);
        let mut read = None;
        let status = tokio::select! {
            status = child.wait() => status,
            // Its output closed first: wait for the exit alone.
            both = &mut output => {
                read = Some(both);
                child.wait().await
            }
        };
        reaped.store(true, Ordering::SeqCst);
        // What it wrote before it exited; a process it left behind
        // holding its output open is given a moment, not waited for.
        let (out, err) = match read {
            Some(both) => both,
            None => tokio::time::timeout(OUTPUT_GRACE, &mut output)
                .await
                .unwrap_or_default(),
        };
        (status.ok(), out, err)
    }
}

/// Bytes of each of a detached command's output streams its result keeps:
/// the last ones it wrote.
pub const OUTPUT_TAIL: usize = 16 << 10;

/// How long a detached command's output is read after it exits.
const OUTPUT_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// The last [`OUTPUT_TAIL`] bytes `stream` gives before it closes, and
/// whether earlier ones were cut.
async fn tail(stream: Option<impl tokio::io::AsyncRead + Unpin>) -> Tail {
    use tokio::io::AsyncReadExt;
    let mut kept = Tail::default();
    let Some(mut stream) = stream else {
        return kept;
    };
    let mut chunk = [0u8; 4096];
    while let Ok(n) = stream.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        kept.bytes.extend_from_slice(&chunk[..n]);
        if kept.bytes.len() > OUTPUT_TAIL {
            let over = kept.bytes.len() - OUTPUT_TAIL;
            kept.bytes.drain(..over);
            kept.cut = true;
        }
    }
    kept
}

/// A command's first word, as written: what a residue item's `binary`
/// says ("Residue items": `"binary": "sleep"`).
fn first_word(command: &str) -> &str {
    command.split_whitespace().next().unwrap_or("")
}

/// The binary a command's first word names ("Task metadata":
/// `runningCommands[].binary`, `/usr/bin/bash`): a word with a `/` as it
/// is, else the first executable file of that name on `PATH` when the
/// command starts. A word found on none (a shell builtin, a missing
/// command) is given bare.
pub(crate) fn binary_path(word: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    if word.is_empty() || word.contains('/') {
        return word.to_string();
    }
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join(word))
            .find(|candidate| {
                std::fs::metadata(candidate)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    });
    match found.and_then(|path| path.into_os_string().into_string().ok()) {
        Some(path) => path,
        None => word.to_string(),
    }
}

/// A command cut to [`COMMAND_CHARS`] characters followed by `…`.
pub(super) fn cut(command: &str) -> String {
    match command.char_indices().nth(COMMAND_CHARS) {
        Some((at, _)) => format!("{}…", &command[..at]),
        None => command.to_string(),
    }
}

#[cfg(test)]
mod tests {
    /// "Task metadata": `runningCommands[].binary` is the binary's path. A
    /// word is looked up on PATH; a path, or a word found nowhere, stays.
    #[test]
    fn a_binary_is_named_by_its_path() {
        let sleep = super::binary_path("sleep");
        assert!(
            sleep.starts_with('/') && sleep.ends_with("/sleep"),
            "{sleep}"
        );
        assert!(std::path::Path::new(&sleep).is_file());
        assert_eq!(super::binary_path("./run.sh"), "./run.sh");
        assert_eq!(
            super::binary_path("no-such-binary-here"),
            "no-such-binary-here"
        );
    }
}
