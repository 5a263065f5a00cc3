//! One agent process: started in its own process group, its stdin fed from
//! a bounded outbox, its stdout read line by line into the session, its
//! stderr logged; when it ends, the session hears why.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, watch};

use super::lines::{self, HostLine, MAX_LINE_BYTES, Read};
use crate::session::process::{self, shell};

/// Between SIGTERM and SIGKILL when a session closes.
pub const TERM_GRACE: Duration = Duration::from_secs(1);

/// A process whose stdout closed and that has not exited within this is
/// taken to have closed its output, and is ended.
const EXIT_AFTER_CLOSE: Duration = Duration::from_millis(200);

/// A stderr line is logged up to this many bytes.
const MAX_LOGGED_LINE: usize = 4096;

/// What a process is started from: the command, where it runs, whose it
/// is, and the bytes of lines that may wait for it.
pub struct Launch<'a> {
    pub command: &'a str,
    pub workdir: &'a Path,
    pub capsule: &'a str,
    pub max_waiting: usize,
}

/// Where a process reports what it wrote, and its end: the session it
/// serves.
pub trait Reports: Send + Sync + 'static {
    /// A line process `generation` wrote; `outbox` reaches it.
    fn line(&self, generation: u64, outbox: &Outbox, line: &[u8]);
    /// A line over [`MAX_LINE_BYTES`], dropped whole.
    fn line_too_long(&self);
    /// Process `generation` ended after `lived`, for `why`.
    fn ended(&self, generation: u64, lived: Duration, why: String);
}

/// Where the lines for one process wait, [`Outbox::max`] bytes at most.
#[derive(Clone)]
pub struct Outbox {
    lines: mpsc::UnboundedSender<Vec<u8>>,
    waiting: Arc<AtomicUsize>,
    max: usize,
}

impl Outbox {
    /// Queues `line` for the agent's stdin, or says why it cannot wait.
    pub fn send(&self, line: Vec<u8>) -> Result<(), String> {
        let len = line.len();
        if len > MAX_LINE_BYTES {
            return Err(format!(
                "the line for the agent is {len} bytes, over the {MAX_LINE_BYTES} a line holds"
            ));
        }
        let before = self.waiting.fetch_add(len, Ordering::SeqCst);
        if before + len > self.max {
            self.waiting.fetch_sub(len, Ordering::SeqCst);
            return Err(format!(
                "the agent is not reading its input: {before} bytes of lines wait for it"
            ));
        }
        if self.lines.send(line).is_err() {
            self.waiting.fetch_sub(len, Ordering::SeqCst);
            return Err("the agent has ended".into());
        }
        Ok(())
    }
}

/// A running agent process.
pub struct Process {
    /// Which of the session's processes it is, from 1.
    pub generation: u64,
    /// Its pid, which leads its group.
    pub pgid: i32,
    pub outbox: Outbox,
    /// `true` once it has ended and been reaped.
    ended: watch::Receiver<bool>,
}

/// What closing a session needs of its process.
pub struct Stopping {
    pgid: i32,
    outbox: Outbox,
    ended: watch::Receiver<bool>,
}

impl Process {
    /// Starts the session's command; a task of its own reads it until it
    /// ends, then tells the session.
    pub fn spawn(
        launch: &Launch<'_>,
        reports: Arc<dyn Reports>,
        generation: u64,
    ) -> std::io::Result<Process> {
        let mut child = shell(launch.command)
            .current_dir(launch.workdir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(false)
            .spawn()?;
        let pgid = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .ok_or_else(|| std::io::Error::other("the agent has no pid"))?;
        let (sender, receiver) = mpsc::unbounded_channel();
        let outbox = Outbox {
            lines: sender,
            waiting: Arc::new(AtomicUsize::new(0)),
            max: launch.max_waiting,
        };
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let (ended_sender, ended) = watch::channel(false);
        tokio::spawn(write_lines(stdin, receiver, outbox.waiting.clone()));
        tokio::spawn(log_stderr(launch.capsule.to_string(), stderr));
        tokio::spawn(supervise(
            reports,
            generation,
            pgid,
            child,
            stdout,
            outbox.clone(),
            ended_sender,
        ));
        Ok(Process {
            generation,
            pgid,
            outbox,
            ended,
        })
    }

    /// What [`Stopping::stop`] needs.
    pub fn stopping(&self) -> Stopping {
        Stopping {
            pgid: self.pgid,
            outbox: self.outbox.clone(),
            ended: self.ended.clone(),
        }
    }

    /// SIGKILL for its group, unless it has ended.
    pub fn kill(&self) {
        if !*self.ended.borrow() {
            process::kill_group(self.pgid);
        }
    }
}

impl Stopping {
    /// `stop`, then `drain` for the process to end, then SIGTERM for its
    /// group, [`TERM_GRACE`], then SIGKILL; resolves once it has ended.
    pub async fn stop(mut self, drain: Duration) {
        let _ = self.outbox.send(HostLine::Stop.to_bytes());
        for (wait, signal) in [(drain, libc::SIGTERM), (TERM_GRACE, libc::SIGKILL)] {
            let ended = self.ended.wait_for(|ended| *ended);
            if tokio::time::timeout(wait, ended).await.is_ok() {
                return;
            }
            // The group's leader is not reaped until `ended` is set.
            if !*self.ended.borrow() {
                process::signal_group(self.pgid, signal);
            }
        }
        let _ = self.ended.wait_for(|ended| *ended).await;
    }
}

/// Writes the outbox's lines to stdin as they come, several a write when
/// they have piled up, until the process stops reading.
async fn write_lines(
    mut stdin: ChildStdin,
    mut lines: mpsc::UnboundedReceiver<Vec<u8>>,
    waiting: Arc<AtomicUsize>,
) {
    let mut batch = Vec::new();
    while let Some(line) = lines.recv().await {
        batch.clear();
        batch.extend_from_slice(&line);
        while batch.len() < 64 << 10 {
            match lines.try_recv() {
                Ok(line) => batch.extend_from_slice(&line),
                Err(_) => break,
            }
        }
        let wrote = async {
            stdin.write_all(&batch).await?;
            stdin.flush().await
        }
        .await;
        waiting.fetch_sub(batch.len(), Ordering::SeqCst);
        if wrote.is_err() {
            return;
        }
    }
}

/// Logs each stderr line under the capsule's name.
async fn log_stderr(capsule: String, stderr: impl AsyncRead + Unpin) {
    let mut stderr = BufReader::new(stderr);
    let mut line = Vec::new();
    while let Ok(read) = lines::read_line(&mut stderr, &mut line, MAX_LOGGED_LINE).await {
        match read {
            Read::End => return,
            Read::TooLong => {
                tracing::info!(capsule = %capsule, "agent: (a stderr line over {MAX_LOGGED_LINE} bytes)")
            }
            Read::Line => {
                let text = String::from_utf8_lossy(&line);
                tracing::info!(capsule = %capsule, "agent: {}", text.trim_end_matches('\r'));
            }
        }
    }
}

/// Reads the process's lines until its stdout closes or it exits, then
/// tells the session it ended, and why.
async fn supervise(
    reports: Arc<dyn Reports>,
    generation: u64,
    pgid: i32,
    mut child: Child,
    stdout: impl AsyncRead + Unpin,
    outbox: Outbox,
    ended: watch::Sender<bool>,
) {
    let started = Instant::now();
    let mut stdout = BufReader::with_capacity(64 << 10, stdout);
    let reading = read_all(&*reports, generation, &outbox, &mut stdout);
    tokio::pin!(reading);
    let mut read = false;
    let status = tokio::select! {
        _ = &mut reading => {
            read = true;
            None
        }
        status = child.wait() => Some(status),
    };
    let status = match status {
        Some(status) => Some(status),
        // Its stdout closed: it has exited, or it can report nothing more.
        None => tokio::time::timeout(EXIT_AFTER_CLOSE, child.wait())
            .await
            .ok(),
    };
    let why = match status {
        None => {
            process::kill_group(pgid);
            match child.wait().await {
                Ok(status) => format!(
                    "the agent closed its output and was ended ({})",
                    process::ended(status)
                ),
                Err(e) => format!("the agent closed its output: {e}"),
            }
        }
        // It exited: what it wrote before is still read, while something
        // of its group holds stdout open a moment at most.
        Some(status) => {
            if !read
                && tokio::time::timeout(TERM_GRACE, &mut reading)
                    .await
                    .is_err()
            {
                // A member of the group holds stdout: the group is alive.
                process::kill_group(pgid);
                let _ = tokio::time::timeout(TERM_GRACE, &mut reading).await;
            }
            match status {
                Ok(status) => format!("the agent ended ({})", process::ended(status)),
                Err(e) => format!("the agent ended: {e}"),
            }
        }
    };
    ended.send_replace(true);
    reports.ended(generation, started.elapsed(), why);
}

/// Acts on every line until the end of stdout or an error reading it.
async fn read_all(
    reports: &dyn Reports,
    generation: u64,
    outbox: &Outbox,
    stdout: &mut BufReader<impl AsyncRead + Unpin>,
) {
    let mut line = Vec::new();
    loop {
        match lines::read_line(stdout, &mut line, MAX_LINE_BYTES).await {
            Ok(Read::Line) => reports.line(generation, outbox, &line),
            Ok(Read::TooLong) => reports.line_too_long(),
            Ok(Read::End) | Err(_) => return,
        }
    }
}
