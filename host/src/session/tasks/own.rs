//! What the session's own tasks say ("A task the runtime starts itself"):
//! a detached command's result, and a resumed launch's report of the
//! commands its last run lost. Each is a task's text, started with
//! [`Hub::start_own`](super::Hub::start_own): plain lines an agent reads,
//! the first saying what the task is.

use std::process::ExitStatus;

use crate::bindings::session::DetachedShell;
use crate::session::process;

/// The end of an output stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tail {
    /// The last bytes the stream gave, at most
    /// [`OUTPUT_TAIL`](super::detached::OUTPUT_TAIL).
    pub bytes: Vec<u8>,
    /// Earlier bytes were dropped.
    pub cut: bool,
}

/// A detached command's result:
///
/// ```text
/// detached command wrk_… ended: exit status 0
/// $ make test
/// stdout:
/// …
/// stderr:
/// …
/// ```
///
/// `exit status N`, `killed by signal N` ([`process::ended`]), or `status
/// unknown` (it could not be waited for). Each output section is there when the stream was not
/// empty, the last bytes of it (`(earlier output cut)` says so), read as
/// UTF-8 with what is not replaced.
pub fn command_result(
    item: &DetachedShell,
    status: Option<ExitStatus>,
    stdout: &Tail,
    stderr: &Tail,
) -> String {
    let ended = status.map_or_else(|| "status unknown".to_string(), process::ended);
    let mut text = format!(
        "detached command {} ended: {ended}\n$ {}\n",
        item.work_id, item.command
    );
    for (name, tail) in [("stdout", stdout), ("stderr", stderr)] {
        if tail.bytes.is_empty() {
            continue;
        }
        text.push_str(name);
        text.push_str(if tail.cut {
            ": (earlier output cut)\n"
        } else {
            ":\n"
        });
        text.push_str(&String::from_utf8_lossy(&tail.bytes));
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    text
}

/// A resumed launch's report of the detached commands its last run left
/// running, which this one cannot follow:
///
/// ```text
/// the last run lost 2 detached commands; their results will not arrive
/// wrk_… started_at_ms 1757068800123: sleep 30
/// …
/// ```
pub fn lost_commands(lost: &[DetachedShell]) -> String {
    let noun = match lost.len() {
        1 => "command",
        _ => "commands",
    };
    let mut text = format!(
        "the last run lost {} detached {noun}; their results will not arrive\n",
        lost.len()
    );
    for item in lost {
        text.push_str(&format!(
            "{} started_at_ms {}: {}\n",
            item.work_id, item.started_at_ms, item.command
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    fn item() -> DetachedShell {
        DetachedShell {
            work_id: "wrk_1".into(),
            binary: "/usr/bin/make".into(),
            command: "make test".into(),
            started_at_ms: 17,
        }
    }

    #[test]
    fn a_result_says_how_the_command_ended_and_what_it_wrote_last() {
        let out = Tail {
            bytes: b"ok".to_vec(),
            cut: false,
        };
        let err = Tail {
            bytes: b"warning\n".to_vec(),
            cut: true,
        };
        assert_eq!(
            command_result(&item(), Some(ExitStatus::from_raw(0)), &out, &err),
            "detached command wrk_1 ended: exit status 0\n$ make test\nstdout:\nok\n\
             stderr: (earlier output cut)\nwarning\n"
        );
        assert_eq!(
            command_result(
                &item(),
                Some(ExitStatus::from_raw(9)),
                &Tail::default(),
                &Tail::default()
            ),
            "detached command wrk_1 ended: killed by signal 9\n$ make test\n"
        );
        assert_eq!(
            command_result(
                &item(),
                Some(ExitStatus::from_raw(3 << 8)),
                &Tail::default(),
                &Tail::default()
            ),
            "detached command wrk_1 ended: exit status 3\n$ make test\n"
        );
    }

    #[test]
    fn a_report_lists_every_lost_command() {
        assert_eq!(
            lost_commands(&[item()]),
            "the last run lost 1 detached command; their results will not arrive\n\
             wrk_1 started_at_ms 17: make test\n"
        );
    }
}
