//! `--agent-cmd 'CMD'`: runs `sh -c CMD` for each task, in a process group
//! of its own, with the task's text on stdin. Each line the command writes to
//! stdout is reported as it arrives, a `text` frame `{"text": LINE}` (without
//! its line ending). Exit 0 completes the task with the whole of stdout (one
//! trailing newline trimmed) as its response; any other exit fails it with
//! the last non-empty line of stderr, or `exit status N`. Cancelling the task
//! kills the whole group.
//!
//! A task's images are written, before the command starts, to files in a
//! directory of their own (mode 0700, under the temporary directory, removed
//! when the command ends): `1.png`, `2.jpeg`, … in part order, each named by
//! its place and its media type's subtype (`png`, `jpeg`, `gif`, `webp`),
//! holding the image's bytes. The command receives their paths in
//! `MURMUR_IMAGES`, one a line in part order; it is unset when the task has
//! none.
//!
//! The task ends once the command has exited and its stdout and stderr are
//! closed: a background process that keeps them open keeps the task
//! working (redirect its output, or `detach` it through the script agent).

use std::process::{ExitStatus, Stdio};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};

use super::images::ImageFiles;
use crate::session::process::{self, GroupGuard, shell};
use crate::session::tasks::RunningTask;
use crate::session::tasks::agent::{Agent, AgentFuture, Outcome, TaskInput};

/// The command agent (`--agent-cmd`): one `sh -c` of its command per task.
#[derive(Clone, Debug)]
pub struct CommandAgent {
    command: String,
}

impl CommandAgent {
    /// Runs `command` through `sh -c` for each task.
    pub fn new(command: impl Into<String>) -> CommandAgent {
        CommandAgent {
            command: command.into(),
        }
    }
}

impl Agent for CommandAgent {
    fn run(&self, input: TaskInput, task: RunningTask) -> AgentFuture {
        Box::pin(run(self.command.clone(), input, task))
    }
}

async fn run(command: String, input: TaskInput, task: RunningTask) -> Outcome {
    let images = match ImageFiles::write(&input.task_id, &input.images) {
        Ok(images) => images,
        Err(e) => return Outcome::Failed(format!("cannot write the task's images: {e}")),
    };
    let text = input.text;
    let mut shell = shell(&command);
    if let Some(paths) = images.paths() {
        shell.env("MURMUR_IMAGES", paths);
    }
    // The task's trace context, for the command's own spans; never one the
    // door was started with.
    shell.env_remove("TRACEPARENT").env_remove("TRACESTATE");
    if let Some(trace) = &input.trace {
        shell.env("TRACEPARENT", &trace.traceparent);
        if let Some(state) = &trace.tracestate {
            shell.env("TRACESTATE", state);
        }
    }
    let mut child = match shell
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => return Outcome::Failed(format!("cannot start the agent command: {e}")),
    };
    // Dropping this future (a cancel) kills the command and all it started.
    let mut group = GroupGuard::new(child.id());
    let mut stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let write = async move {
        // A command that does not read its stdin is not an error.
        let _ = stdin.write_all(text.as_bytes()).await;
        let _ = stdin.shutdown().await;
    };
    let mut out = Vec::new();
    let mut err = Vec::new();
    let (_, read_out, read_err, status) = tokio::join!(
        write,
        read_lines(stdout, &mut out, &task),
        stderr.read_to_end(&mut err),
        child.wait(),
    );
    group.disarm();
    let status = match status {
        Ok(status) => status,
        Err(e) => return Outcome::Failed(format!("waiting for the agent command: {e}")),
    };
    if let Err(e) = read_out.and(read_err) {
        return Outcome::Failed(format!("reading the agent command's output: {e}"));
    }
    if status.success() {
        let mut response = String::from_utf8_lossy(&out).into_owned();
        if response.ends_with('\n') {
            response.pop();
        }
        Outcome::Completed(response)
    } else {
        Outcome::Failed(failure(status, &String::from_utf8_lossy(&err)))
    }
}

/// Reads `stdout` to its end into `out`, reporting each line as a text frame
/// as soon as it is whole (the last one at the end, when it has no newline).
async fn read_lines(
    stdout: impl AsyncRead + Unpin,
    out: &mut Vec<u8>,
    task: &RunningTask,
) -> std::io::Result<()> {
    let mut stdout = BufReader::new(stdout);
    loop {
        let start = out.len();
        if stdout.read_until(b'\n', out).await? == 0 {
            return Ok(());
        }
        let line = &out[start..];
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        task.text(&String::from_utf8_lossy(line));
    }
}

/// The last non-empty line of stderr, or how the command exited.
fn failure(status: ExitStatus, stderr: &str) -> String {
    match stderr.lines().rev().map(str::trim).find(|l| !l.is_empty()) {
        Some(line) => line.to_string(),
        None => process::ended(status),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::session::tasks::testing::{TempDir, hub_with, new_task, run, until};
    use crate::session::tasks::{TaskAcceptance, TaskState};

    use super::CommandAgent;

    fn hub(command: &str) -> std::sync::Arc<crate::session::tasks::Hub> {
        hub_with(CommandAgent::new(command), TaskAcceptance::Single)
    }

    #[tokio::test]
    async fn exit_zero_completes_with_stdout() {
        let task = run(&hub("tr a-z A-Z"), "four\n").await;
        assert_eq!(task.status.state, TaskState::Completed);
        // One trailing newline is trimmed, and only one.
        assert_eq!(task.response.as_deref(), Some("FOUR"));
        let task = run(&hub("printf 'a\\n\\n'"), "").await;
        assert_eq!(task.response.as_deref(), Some("a\n"));
        // The text arrives whole on stdin.
        let text = "line 1\nline 2 ```\n".repeat(10_000);
        let task = run(&hub("wc -c"), &text).await;
        assert_eq!(
            task.response.as_deref(),
            Some(text.len().to_string().as_str())
        );
    }

    /// Issue 34: "each image part is written to a file whose path the
    /// command receives"; the files are gone once the command ends.
    #[tokio::test]
    async fn images_reach_the_command_as_files() {
        use crate::session::tasks::Image;
        let shown =
            hub(r#"for f in $MURMUR_IMAGES; do printf '%s %s\n' "${f##*/}" "$(cat "$f")"; done"#);
        let mut new = new_task(None, "look");
        new.images = vec![
            Image {
                media_type: "image/png".into(),
                bytes: b"first".to_vec(),
            },
            Image {
                media_type: "image/webp".into(),
                bytes: b"second".to_vec(),
            },
        ];
        let task = shown.start(new).unwrap();
        let done = crate::session::tasks::testing::settle(&shown, &task.id).await;
        assert_eq!(done.response.as_deref(), Some("1.png first\n2.webp second"));
        let dir = std::env::temp_dir().join(format!("murmur-images-{}", task.id));
        assert!(!dir.exists(), "{} is left", dir.display());
        // Without images, the variable is unset.
        let task = run(&hub(r#"echo "${MURMUR_IMAGES-unset}""#), "").await;
        assert_eq!(task.response.as_deref(), Some("unset"));
    }

    #[tokio::test]
    async fn another_exit_fails_with_the_last_stderr_line() {
        let task = run(
            &hub("echo first >&2; echo 'the model is down' >&2; echo '  ' >&2; exit 3"),
            "",
        )
        .await;
        assert_eq!(task.status.state, TaskState::Failed);
        assert_eq!(task.status.message.as_deref(), Some("the model is down"));
        let task = run(&hub("echo out; exit 4"), "").await;
        assert_eq!(task.status.message.as_deref(), Some("exit status 4"));
        let task = run(&hub("kill -9 $$"), "").await;
        assert_eq!(task.status.message.as_deref(), Some("killed by signal 9"));
    }

    #[tokio::test]
    async fn cancel_kills_the_process_group() {
        let dir = TempDir::new("agent-cmd");
        let pids = dir.path().join("pids");
        // The shell, and a child in the background it waits for.
        let hub = hub(&format!("sleep 30 & echo $$ $! > {}; wait", pids.display()));
        let task = hub.start(new_task(None, "")).unwrap();
        until(&hub, &task.id, TaskState::Working).await;
        let mut written = String::new();
        for _ in 0..400 {
            written = std::fs::read_to_string(&pids).unwrap_or_default();
            if written.ends_with('\n') {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let pids: Vec<i32> = written
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(pids.len(), 2, "{written:?}");
        hub.cancel(&None, &task.id).unwrap();
        let gone = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| {
                    let state = s.rsplit(')').next().unwrap_or("").trim_start().to_string();
                    state.starts_with('Z') || state.starts_with('X')
                })
                .unwrap_or(true)
        };
        for _ in 0..400 {
            if pids.iter().all(|&p| gone(p)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(gone(pids[0]), "the shell still runs");
        assert!(gone(pids[1]), "its background child still runs");
        assert_eq!(
            hub.get(&None, &task.id).unwrap().status.state,
            TaskState::Canceled
        );
    }
}
