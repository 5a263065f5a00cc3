//! The stdio agent through the hub, with small Python agents: every line
//! kind's effect, and each fault of docs/agents.md's "Faults".

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::session::tasks::events::tests::read_until;
use crate::session::tasks::testing::{TempDir, new_task, settle, until};
use crate::session::tasks::{Hub, TaskAcceptance, TaskState, now_ms, store::Store};

/// The start of every test agent: `out(obj)` writes one line, and `lines()`
/// yields each line read, parsed.
const PRELUDE: &str = r#"
import json, os, sys, time
def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
def lines():
    for line in sys.stdin:
        yield json.loads(line)
"#;

/// A hub whose tasks run `body` (after [`PRELUDE`]) under python3, one
/// process a session, in `dir`.
fn hub(dir: &TempDir, body: &str, stdio: impl FnOnce(StdioAgent) -> StdioAgent) -> Arc<Hub> {
    let script = dir.path().join("agent.py");
    std::fs::write(&script, format!("{PRELUDE}\n{body}")).unwrap();
    let agent = stdio(StdioAgent::new(format!(
        "exec python3 {}",
        script.display()
    )));
    Hub::new(
        Store::in_memory(now_ms()).unwrap(),
        Arc::new(agent.open("test", dir.path(), false)),
        TaskAcceptance::Queue,
        64,
    )
}

/// Replies to each task with its text; `pid` replies with the process id.
const ECHO: &str = r#"
for m in lines():
    if m["type"] == "task":
        text = str(os.getpid()) if m["text"] == "pid" else m["text"]
        out({"task": m["task"], "reply": text})
    elif m["type"] == "stop":
        sys.exit(0)
"#;

async fn run(hub: &Arc<Hub>, text: &str) -> crate::session::tasks::Task {
    let task = hub.start(new_task(None, text)).unwrap();
    settle(hub, &task.id).await
}

#[tokio::test]
async fn one_process_serves_every_task_of_the_session() {
    let dir = TempDir::new("stdio-echo");
    let hub = hub(&dir, ECHO, |a| a);
    let first = run(&hub, "pid").await;
    let second = run(&hub, "pid").await;
    assert_eq!(first.status.state, TaskState::Completed);
    assert_eq!(first.response, second.response);
    let done = run(&hub, "four").await;
    assert_eq!(done.response.as_deref(), Some("four"));
    assert_eq!(hub.agent().faults(), AgentFaults::default());
}

/// Frames, progress, a question and its reply, noAnswerFrom and noAnswer:
/// each reaches the task's events as a library agent's call does.
#[tokio::test]
async fn the_agent_s_lines_are_the_task_s_events() {
    let dir = TempDir::new("stdio-lines");
    let hub = hub(
        &dir,
        r#"
for m in lines():
    if m["type"] == "task" and m["text"] == "ask":
        t = m["task"]
        out({"task": t, "frame": "thinking", "body": {"text": "hm"}})
        out({"task": t, "progress": "step 1"})
        out({"task": t, "ask": "Which?"})
    elif m["type"] == "input":
        out({"task": m["task"], "reply": "got " + m["text"] + " " + str(len(m["images"]))})
    elif m["type"] == "task":
        t = m["task"]
        out({"task": t, "noAnswerFrom": {"member": "a", "status": "failed",
             "below": [{"member": "b", "status": "timeout"}]}})
        out({"task": t, "noAnswer": "nobody"})
"#,
        |a| a,
    );
    let task = hub.start(new_task(None, "ask")).unwrap();
    let mut reader = hub.task_events(&None, &task.id, Some(0)).unwrap();
    let asked = read_until(&mut reader, "input-required: Which? (msg_)").await;
    assert_eq!(
        asked,
        [
            "1 task submitted",
            "2 task working",
            r#"3 task frame thinking {"text":"hm"}"#,
            "4 task working: step 1 (msg_)",
            "5 task prompt: Which?",
            "6 task input-required: Which? (msg_)",
        ]
    );
    hub.reply(&None, &task.id, None, "main".into()).unwrap();
    assert_eq!(
        read_until(&mut reader, "completed: task completed").await,
        [
            "7 task working",
            "8 task response: got main 0",
            "9 task completed: task completed",
        ]
    );
    let failed = run(&hub, "other").await;
    assert_eq!(failed.status.state, TaskState::Failed);
    assert_eq!(failed.status.message.as_deref(), Some("nobody"));
    assert!(failed.metadata.no_answer);
    let below: Vec<(&str, &str)> = failed
        .metadata
        .no_answer_below
        .iter()
        .map(|m| (m.member.as_str(), m.status.as_str()))
        .collect();
    assert_eq!(below, [("a", "failed"), ("b", "timeout")]);
}

/// A task's images reach the agent as files, named on its task line in part
/// order, and are gone once the task ends.
#[tokio::test]
async fn a_task_s_images_are_files_while_it_runs() {
    let dir = TempDir::new("stdio-images");
    let hub = hub(
        &dir,
        r#"
for m in lines():
    if m["type"] == "task":
        seen = [i["mediaType"] + " " + open(i["path"]).read() for i in m["images"]]
        out({"task": m["task"], "reply": "; ".join(seen) + " | " + m["images"][0]["path"]})
"#,
        |a| a,
    );
    let mut new = new_task(None, "look");
    new.images = ["image/png", "image/webp"]
        .iter()
        .enumerate()
        .map(|(i, media_type)| Image {
            media_type: media_type.to_string(),
            bytes: format!("bytes {i}").into_bytes(),
        })
        .collect();
    let task = hub.start(new).unwrap();
    let done = settle(&hub, &task.id).await;
    let response = done.response.unwrap();
    let (seen, path) = response.split_once(" | ").unwrap();
    assert_eq!(seen, "image/png bytes 0; image/webp bytes 1");
    assert!(
        path.ends_with(&format!("murmur-images-{}/1.png", task.id)),
        "{path}"
    );
    assert!(!std::path::Path::new(path).exists(), "{path} is left");
}

/// A detach's and a delegate's results, an await's completion, and a
/// cancel's line with the residue it lists.
#[tokio::test]
async fn requests_are_answered_and_a_cancel_reaches_the_agent() {
    let dir = TempDir::new("stdio-requests");
    let hub = hub(
        &dir,
        r#"
cancelled = []
results = []
for m in lines():
    if m["type"] == "task" and m["text"] == "cancelled":
        out({"task": m["task"], "reply": ",".join(cancelled)})
    elif m["type"] == "task":
        t = m["task"]
        out({"task": t, "detach": "sleep 30", "id": 1})
        out({"task": t, "delegate": {"capsule": "child", "version": "1.0.0",
             "sessionId": "ses_1", "workdir": "relative"}, "id": "bad"})
        out({"task": t, "delegate": {"capsule": "child", "version": "1.0.0",
             "sessionId": "ses_1", "workdir": "/tmp/child"}, "id": 2})
    elif m["type"] == "result" and m["id"] == 2:
        out({"task": t, "await": m["delegationId"]})
        out({"task": t, "progress": "results " + json.dumps(results) + " " + m["delegationId"]})
    elif m["type"] == "result":
        results.append(m)
    elif m["type"] == "cancel":
        cancelled.append(m["task"])
"#,
        |a| a,
    );
    let task = hub.start(new_task(None, "work")).unwrap();
    let mut reader = hub.task_events(&None, &task.id, Some(0)).unwrap();
    let progress = read_until(&mut reader, "(msg_)").await;
    let last = progress.last().unwrap();
    let dlg = last
        .split_whitespace()
        .find(|w| w.starts_with("dlg_"))
        .unwrap()
        .to_string();
    let work_id = last.split('"').find(|w| w.starts_with("wrk_")).unwrap();
    assert_eq!(
        last,
        &format!(
            "3 task working: results [{{\"type\": \"result\", \"id\": 1, \"workId\": \"{work_id}\"}}, \
             {{\"type\": \"result\", \"id\": \"bad\", \"error\": \"a child's workdir is an absolute path\"}}] {dlg} (msg_)"
        )
    );
    // The task awaits the delegation.
    assert_eq!(hub.awaits_delegation(&dlg), Ok(()));
    let canceled = hub.cancel(&None, &task.id).unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    let residue = hub.residue();
    assert_eq!(residue.len(), 1, "{residue:?}");
    let seen = run(&hub, "cancelled").await;
    assert_eq!(seen.response.as_deref(), Some(task.id.as_str()));
}

/// A completion reaches the task that awaits it as a `completion` line.
#[tokio::test]
async fn a_completion_reaches_the_awaiting_task() {
    let dir = TempDir::new("stdio-completion");
    let hub = hub(
        &dir,
        r#"
for m in lines():
    if m["type"] == "task":
        out({"task": m["task"], "await": "dlg_7"})
        out({"task": m["task"], "progress": "awaiting"})
    elif m["type"] == "completion":
        out({"task": m["task"], "delegationEnded": m["delegation"]})
        out({"task": m["task"], "reply": m["delegation"] + " " + m["text"]})
"#,
        |a| a,
    );
    let task = hub.start(new_task(None, "x")).unwrap();
    let mut reader = hub.task_events(&None, &task.id, Some(0)).unwrap();
    read_until(&mut reader, "working: awaiting (msg_)").await;
    hub.deliver_completion("dlg_7", r#"{"parts":[]}"#.into())
        .unwrap();
    let done = settle(&hub, &task.id).await;
    assert_eq!(done.response.as_deref(), Some(r#"dlg_7 {"parts":[]}"#));
}

/// docs/agents.md "Faults": what is no line of the protocol is ignored and
/// counted, a long line dropped and counted, and the task goes on.
#[tokio::test]
async fn lines_that_are_no_protocol_are_ignored_and_counted() {
    let dir = TempDir::new("stdio-garbage");
    let hub = hub(
        &dir,
        r#"
for m in lines():
    if m["type"] == "task":
        t = m["task"]
        sys.stdout.write("not json\n[1,2]\n")
        out({"task": "tsk_nobody", "reply": "x"})
        out({"task": t})
        out({"task": t, "frame": "quota", "body": {"used": 1}})
        sys.stdout.write("x" * (1 << 20) + "\n")
        out({"task": t, "reply": "still here"})
"#,
        |a| a,
    );
    let done = run(&hub, "go").await;
    assert_eq!(done.response.as_deref(), Some("still here"));
    assert_eq!(
        hub.agent().faults(),
        AgentFaults {
            ignored_lines: 5,
            dropped_lines: 1,
            restarts: 0
        }
    );
}

/// docs/agents.md "Faults": the tasks a process held fail when it ends,
/// and the next task starts another.
#[tokio::test]
async fn a_process_that_ends_fails_its_tasks_and_the_next_task_restarts_it() {
    let dir = TempDir::new("stdio-crash");
    let hub = hub(
        &dir,
        r#"
for m in lines():
    if m["type"] == "task" and m["text"] == "crash":
        os._exit(3)
    elif m["type"] == "task" and m["text"] == "close":
        os.close(1)
        time.sleep(30)
    elif m["type"] == "task":
        out({"task": m["task"], "reply": str(os.getpid())})
"#,
        |a| a,
    );
    let before = run(&hub, "pid").await.response.unwrap();
    let crashed = run(&hub, "crash").await;
    assert_eq!(crashed.status.state, TaskState::Failed);
    assert_eq!(
        crashed.status.message.as_deref(),
        Some("the agent ended (exit status 3)")
    );
    let after = run(&hub, "pid").await;
    assert_eq!(after.status.state, TaskState::Completed);
    assert_ne!(after.response.as_deref(), Some(before.as_str()));
    let closed = run(&hub, "close").await;
    assert_eq!(
        closed.status.message.as_deref(),
        Some("the agent closed its output and was ended (killed by signal 9)")
    );
    assert_eq!(run(&hub, "pid").await.status.state, TaskState::Completed);
    assert_eq!(hub.agent().faults().restarts, 2);
}

#[test]
fn restarts_wait_longer_while_processes_end_young() {
    let ms = |n| restart_delay(n).as_millis();
    assert_eq!(
        [ms(0), ms(1), ms(2), ms(3), ms(5)],
        [0, 200, 400, 800, 3200]
    );
    assert_eq!(ms(6), 5000);
    assert_eq!(ms(60), 5000);
}

/// docs/agents.md "Faults": an agent that reads nothing makes the host
/// hold its bound of lines, then tasks fail.
#[tokio::test]
async fn an_agent_that_reads_nothing_costs_a_bound() {
    let dir = TempDir::new("stdio-deaf");
    let hub = hub(&dir, "time.sleep(60)", |a| a.with_max_waiting(350 << 10));
    // The outbox takes 350 KiB (the line being written counts until it is
    // whole in the pipe): three 100 KiB tasks (each
    // cancelled in turn, its cancel line queued too) wait, then one fails
    // at once.
    let text = "x".repeat(100 << 10);
    let mut waited = 0;
    let failed = loop {
        let task = hub.start(new_task(None, &text)).unwrap();
        let settled = tokio::time::timeout(Duration::from_millis(300), settle(&hub, &task.id));
        match settled.await {
            Ok(task) => break task,
            Err(_) => {
                waited += 1;
                hub.cancel(&None, &task.id).unwrap();
            }
        }
        assert!(waited < 10, "nothing failed");
    };
    assert_eq!(waited, 3);
    assert_eq!(failed.status.state, TaskState::Failed);
    let message = failed.status.message.unwrap();
    assert!(
        message.starts_with("the agent is not reading its input: "),
        "{message}"
    );
}

/// A task whose line would pass the line limit fails saying so.
#[tokio::test]
async fn a_task_over_the_line_limit_fails() {
    let dir = TempDir::new("stdio-long");
    let hub = hub(&dir, ECHO, |a| a);
    let task = run(&hub, &"x".repeat(lines::MAX_LINE_BYTES)).await;
    assert_eq!(task.status.state, TaskState::Failed);
    let message = task.status.message.unwrap();
    assert!(message.ends_with(&format!("over the {} a line holds", lines::MAX_LINE_BYTES)));
    assert_eq!(run(&hub, "fits").await.response.as_deref(), Some("fits"));
}

/// Closing: `stop`, then the drain, then SIGTERM, then SIGKILL.
#[tokio::test]
async fn closing_stops_the_process_then_signals_its_group() {
    let dir = TempDir::new("stdio-close");
    let hub = hub(&dir, ECHO, |a| a);
    run(&hub, "up").await;
    let started = std::time::Instant::now();
    hub.agent().close(Duration::from_secs(5)).await;
    assert!(started.elapsed() < Duration::from_secs(1), "stop was heard");

    let stubborn = r#"
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for m in lines():
    if m["type"] == "task":
        out({"task": m["task"], "reply": "up"})
time.sleep(60)
"#;
    let hub = crate::session::agents::stdio::tests::hub(&dir, stubborn, |a| a);
    run(&hub, "up").await;
    let started = std::time::Instant::now();
    hub.agent().close(Duration::from_millis(200)).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1200) && took < Duration::from_secs(3),
        "drain, then TERM_GRACE, then SIGKILL: {took:?}"
    );
    // A closed session starts no process.
    let task = run(&hub, "late").await;
    assert_eq!(
        task.status.message.as_deref(),
        Some("the session is closing")
    );
}

/// A task cancelled while the agent runs it: the agent hears `cancel`, and
/// its late lines for it are ignored.
#[tokio::test]
async fn a_cancelled_task_s_late_lines_are_ignored() {
    let dir = TempDir::new("stdio-cancel");
    let hub = hub(
        &dir,
        r#"
for m in lines():
    if m["type"] == "task" and m["text"] == "wait":
        waiting = m["task"]
        out({"task": waiting, "progress": "waiting"})
    elif m["type"] == "cancel":
        out({"task": m["task"], "reply": "too late"})
    elif m["type"] == "task":
        out({"task": m["task"], "reply": "ok"})
"#,
        |a| a,
    );
    let task = hub.start(new_task(None, "wait")).unwrap();
    let mut reader = hub.task_events(&None, &task.id, Some(0)).unwrap();
    read_until(&mut reader, "working: waiting (msg_)").await;
    hub.cancel(&None, &task.id).unwrap();
    assert_eq!(run(&hub, "next").await.response.as_deref(), Some("ok"));
    assert_eq!(hub.agent().faults().ignored_lines, 1);
    assert_eq!(
        hub.get(&None, &task.id).unwrap().status.state,
        TaskState::Canceled
    );
    until(&hub, &task.id, TaskState::Canceled).await;
}
