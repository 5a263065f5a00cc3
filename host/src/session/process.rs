//! Shell commands in process groups of their own, so ending one ends
//! everything it started.

use tokio::process::Command;

/// `sh -c command`, leading a new process group (its pgid is its pid).
pub fn shell(command: &str) -> Command {
    let mut shell = Command::new("sh");
    shell.arg("-c").arg(command).process_group(0);
    shell
}

/// How a command ended, in the words its task says it with: `exit status
/// N`, or `killed by signal N`.
pub fn ended(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => status.to_string(),
    }
}

/// Sends SIGKILL to every process of group `pgid`. Refuses the groups that
/// are not a command's own: 0 and 1 (0 would be this process's group).
pub fn kill_group(pgid: i32) {
    signal_group(pgid, libc::SIGKILL);
}

/// Sends `signal` to every process of group `pgid`, refusing 0 and 1 as
/// [`kill_group`] does.
pub fn signal_group(pgid: i32, signal: libc::c_int) {
    if pgid > 1 {
        // SAFETY: killpg takes plain integers and touches no memory.
        unsafe {
            libc::killpg(pgid, signal);
        }
    }
}

/// Kills a process group when dropped, unless disarmed first: a command an
/// agent's future owns dies with the future.
pub struct GroupGuard(Option<i32>);

impl GroupGuard {
    /// Guards group `pgid` (a child spawned by [`shell`], not yet reaped:
    /// while it is not, its pgid cannot name another group).
    pub fn new(pgid: Option<u32>) -> GroupGuard {
        GroupGuard(pgid.and_then(|p| i32::try_from(p).ok()))
    }

    /// The group is not killed on drop.
    pub fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            kill_group(pgid);
        }
    }
}
