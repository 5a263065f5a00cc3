//! `--agent script`: runs the text a task received as a script, one command
//! a line, so a test can make a task do anything a real agent does.
//!
//! | Line | Effect |
//! | --- | --- |
//! | `reply TEXT` | completes the task with response TEXT |
//! | `fail TEXT` | ends the task `failed` with status message TEXT |
//! | `ask TEXT` | pauses in `input-required` with prompt TEXT; the reply's text is then run as the script |
//! | `sleep MS` | stays `working` MS milliseconds |
//! | `progress TEXT` | a `working` status whose message is TEXT, and a `text` frame `{"text": TEXT}` |
//! | `detach CMD` | records CMD as a detached command, running nothing: a residue item (`binary` its first word) and `runningCommands` until the session ends or the task's cancel ends it |
//! | `await DLG_ID` | waits, `working`, for a completion of delegation DLG_ID |
//! | `delegate NAME VERSION` | records a delegation to capsule NAME at VERSION (a made-up child: no sub-capsule runs), open until the task ends: a cancel lists it as residue |
//! | `no-answer MEMBER STATUS` | records that member MEMBER gave the task no answer, with `member_call` status STATUS: the task's terminal `noAnswerBelow` |
//! | `end-without-answer TEXT` | ends the task `failed` with `noAnswer: true`, status message TEXT |
//! | `images` | completes with `images: N (TYPE, …)`: how many images the task received, and their media types in part order |
//!
//! A text whose first line is none of these completes with the whole text as
//! its response, so a test reads exactly what the door composed. After the
//! first line, other lines (blank ones, a referenced-tasks block) are
//! skipped. A script that runs out of lines completes with `done`. A
//! malformed command (`sleep soon`) fails the task saying why.
//!
//! A script is a caller's text, so nothing in it reaches a process: `detach`
//! only records. An operator whose agent runs commands says so with
//! `--agent-cmd` or the library's own `Agent`.

use std::collections::HashMap;
use std::time::Duration;

use crate::session::tasks::agent::{Agent, AgentFuture, Outcome, TaskInput};
use crate::session::tasks::{Child, Delegation, Image, RunningTask};

/// The script agent. Stateless: each task's text is its own script.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScriptAgent;

/// The script agent whose `detach` runs its command
/// ([`RunningTask::detach`]), for the tests of what a detached command does.
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RunningScriptAgent;

/// What `detach` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Detaching {
    Record,
    #[cfg_attr(not(test), allow(dead_code))]
    Run,
}

/// One line of a script.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Command<'a> {
    Reply(&'a str),
    Fail(&'a str),
    Ask(&'a str),
    Sleep(u64),
    Progress(&'a str),
    Detach(&'a str),
    Await(&'a str),
    Delegate(&'a str, &'a str),
    NoAnswer(&'a str, &'a str),
    EndWithoutAnswer(&'a str),
    Images,
    /// A command word with an argument it cannot take: why.
    Malformed(String),
}

impl<'a> Command<'a> {
    /// The command a line holds, or `None` when its first word is no
    /// command. The argument is everything after the first space.
    fn parse(line: &'a str) -> Option<Command<'a>> {
        let (word, arg) = line.split_once(' ').unwrap_or((line, ""));
        Some(match word {
            "reply" => Command::Reply(arg),
            "fail" => Command::Fail(arg),
            "ask" => Command::Ask(arg),
            "progress" => Command::Progress(arg),
            "sleep" => match arg.trim().parse() {
                Ok(ms) => Command::Sleep(ms),
                Err(_) => {
                    Command::Malformed(format!("script: sleep takes milliseconds, not {arg:?}"))
                }
            },
            "detach" if arg.trim().is_empty() => {
                Command::Malformed("script: detach needs a command".into())
            }
            "detach" => Command::Detach(arg),
            "await" if arg.trim().is_empty() => {
                Command::Malformed("script: await needs a delegation id".into())
            }
            "await" => Command::Await(arg.trim()),
            "delegate" => match two_words(arg) {
                Some((name, version)) => Command::Delegate(name, version),
                None => Command::Malformed("script: delegate takes NAME VERSION".into()),
            },
            "no-answer" => match two_words(arg) {
                Some((member, status)) => Command::NoAnswer(member, status),
                None => Command::Malformed("script: no-answer takes MEMBER STATUS".into()),
            },
            "end-without-answer" => Command::EndWithoutAnswer(arg),
            "images" => Command::Images,
            _ => return None,
        })
    }
}

/// `arg`'s two words, when it has exactly two.
fn two_words(arg: &str) -> Option<(&str, &str)> {
    let mut words = arg.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some(first), Some(second), None) => Some((first, second)),
        _ => None,
    }
}

/// What `images` completes with.
fn images_received(images: &[Image]) -> String {
    let types: Vec<&str> = images.iter().map(|i| i.media_type.as_str()).collect();
    format!("images: {} ({})", images.len(), types.join(", "))
}

fn start(input: TaskInput, task: RunningTask, detaching: Detaching) -> AgentFuture {
    // Delegations are awaited from the moment the script starts, so a
    // completion finds its task as soon as the task shows working.
    let delegations = expect_delegations(&input.text, &task, HashMap::new());
    let images = images_received(&input.images);
    Box::pin(run(input.text, images, task, delegations, detaching))
}

impl Agent for ScriptAgent {
    fn run(&self, input: TaskInput, task: RunningTask) -> AgentFuture {
        start(input, task, Detaching::Record)
    }

    fn ends_at_once(&self, input: &TaskInput) -> Option<Outcome> {
        ends_at_once(input)
    }

    /// A reply is run as a script: the delegations it awaits are awaited
    /// from the moment it is delivered. (The handles are taken again when
    /// the script runs.)
    fn replied(&self, task: &RunningTask, text: &str) {
        expect_delegations(text, task, HashMap::new());
    }
}

#[cfg(test)]
impl Agent for RunningScriptAgent {
    fn run(&self, input: TaskInput, task: RunningTask) -> AgentFuture {
        start(input, task, Detaching::Run)
    }

    fn ends_at_once(&self, input: &TaskInput) -> Option<Outcome> {
        ends_at_once(input)
    }

    fn replied(&self, task: &RunningTask, text: &str) {
        expect_delegations(text, task, HashMap::new());
    }
}

/// A script whose first command replies or fails (or that is no script)
/// ends at once: what [`run`] would answer without waiting.
fn ends_at_once(input: &TaskInput) -> Option<Outcome> {
    let script = &input.text;
    if Command::parse(script.lines().next().unwrap_or("")).is_none() {
        return Some(Outcome::Completed(script.clone()));
    }
    for line in script.lines() {
        match Command::parse(line) {
            None => {}
            Some(Command::Reply(text)) => return Some(Outcome::Completed(text.to_string())),
            Some(Command::Fail(text)) => return Some(Outcome::Failed(text.to_string())),
            Some(Command::Malformed(why)) => return Some(Outcome::Failed(why)),
            Some(Command::EndWithoutAnswer(text)) => {
                return Some(Outcome::NoAnswer(text.to_string()));
            }
            Some(Command::Images) => {
                return Some(Outcome::Completed(images_received(&input.images)));
            }
            Some(_) => return None,
        }
    }
    Some(Outcome::Completed("done".to_string()))
}

/// A child for `delegate`: a fresh session id, and a workdir under the
/// temporary directory that nothing creates.
fn made_up_child(name: &str, version: &str) -> Child {
    let session_id = crate::session::tasks::ids::session_id();
    let hex = session_id.trim_start_matches("ses_");
    Child {
        capsule: name.to_string(),
        version: version.to_string(),
        workdir: std::env::temp_dir()
            .join("murmur-children")
            .join(format!("{name}-{}", &hex[hex.len() - 16..])),
        session_id,
    }
}

/// Registers every delegation `script` awaits that is not registered yet.
fn expect_delegations(
    script: &str,
    task: &RunningTask,
    mut delegations: HashMap<String, Delegation>,
) -> HashMap<String, Delegation> {
    for line in script.lines() {
        if let Some(Command::Await(id)) = Command::parse(line)
            && !delegations.contains_key(id)
        {
            delegations.insert(id.to_string(), task.expect_delegation(id));
        }
    }
    delegations
}

async fn run(
    mut script: String,
    images: String,
    task: RunningTask,
    mut delegations: HashMap<String, Delegation>,
    detaching: Detaching,
) -> Outcome {
    'script: loop {
        let first = script.lines().next().unwrap_or("");
        if Command::parse(first).is_none() {
            return Outcome::Completed(script);
        }
        for line in script.lines() {
            match Command::parse(line) {
                None => {}
                Some(Command::Reply(text)) => return Outcome::Completed(text.to_string()),
                Some(Command::Fail(text)) => return Outcome::Failed(text.to_string()),
                Some(Command::Malformed(why)) => return Outcome::Failed(why),
                Some(Command::Ask(prompt)) => {
                    let reply = task.ask(prompt).await;
                    delegations = expect_delegations(&reply, &task, delegations);
                    script = reply;
                    continue 'script;
                }
                Some(Command::Sleep(ms)) => tokio::time::sleep(Duration::from_millis(ms)).await,
                Some(Command::Progress(text)) => {
                    task.progress(text);
                    task.text(text);
                }
                Some(Command::Detach(command)) => {
                    let detached = match detaching {
                        Detaching::Record => task.record_detached(command),
                        Detaching::Run => task.detach(command),
                    };
                    if let Err(e) = detached {
                        return Outcome::Failed(format!("script: detach {command}: {e}"));
                    }
                }
                Some(Command::Await(id)) => {
                    let delegation = delegations
                        .remove(id)
                        .unwrap_or_else(|| task.expect_delegation(id));
                    delegation.completion().await;
                }
                Some(Command::Delegate(name, version)) => {
                    let child = made_up_child(name, version);
                    if let Err(e) = task.delegate(child) {
                        return Outcome::Failed(format!("script: delegate {name}: {e}"));
                    }
                }
                Some(Command::NoAnswer(member, status)) => task.no_answer_from(member, status, &[]),
                Some(Command::EndWithoutAnswer(text)) => {
                    return Outcome::NoAnswer(text.to_string());
                }
                Some(Command::Images) => return Outcome::Completed(images),
            }
        }
        return Outcome::Completed("done".to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_by_their_first_word() {
        assert_eq!(Command::parse("reply four"), Some(Command::Reply("four")));
        assert_eq!(Command::parse("reply"), Some(Command::Reply("")));
        assert_eq!(
            Command::parse("fail it broke "),
            Some(Command::Fail("it broke "))
        );
        assert_eq!(Command::parse("ask Which?"), Some(Command::Ask("Which?")));
        assert_eq!(Command::parse("sleep 25"), Some(Command::Sleep(25)));
        assert_eq!(
            Command::parse("progress step 2"),
            Some(Command::Progress("step 2"))
        );
        assert_eq!(
            Command::parse("detach sleep 30"),
            Some(Command::Detach("sleep 30"))
        );
        assert_eq!(Command::parse("await dlg_1"), Some(Command::Await("dlg_1")));
        assert!(matches!(
            Command::parse("sleep soon"),
            Some(Command::Malformed(_))
        ));
        assert!(matches!(
            Command::parse("await "),
            Some(Command::Malformed(_))
        ));
        assert!(matches!(
            Command::parse("detach"),
            Some(Command::Malformed(_))
        ));
        for other in [
            "",
            "replying",
            "Reply x",
            " reply x",
            "summarise",
            "```data",
        ] {
            assert_eq!(Command::parse(other), None, "{other:?}");
        }
    }
}

#[cfg(test)]
mod runs {
    use std::time::Duration;

    use crate::bindings::session::ResidueItem;
    use crate::session::tasks::testing::{hub_with, new_task, run, settle, until};
    use crate::session::tasks::{TaskAcceptance, TaskState};

    use super::{RunningScriptAgent, ScriptAgent};

    fn hub() -> std::sync::Arc<crate::session::tasks::Hub> {
        hub_with(ScriptAgent, TaskAcceptance::Queue)
    }

    #[tokio::test]
    async fn reply_completes_with_its_text() {
        let task = run(&hub(), "reply four").await;
        assert_eq!(task.status.state, TaskState::Completed);
        assert_eq!(task.response.as_deref(), Some("four"));
        assert_eq!(
            task.status.message.as_deref(),
            Some(crate::session::tasks::COMPLETED)
        );
    }

    #[tokio::test]
    async fn fail_ends_failed_with_its_message() {
        let task = run(&hub(), "fail the driver failed\nreply never").await;
        assert_eq!(task.status.state, TaskState::Failed);
        assert_eq!(task.status.message.as_deref(), Some("the driver failed"));
        assert_eq!(task.response, None);
    }

    #[tokio::test]
    async fn a_text_that_is_no_script_is_the_response() {
        let text = "summarise\n````data media-type=application/json\n{}\n````\nreply x";
        let task = run(&hub(), text).await;
        assert_eq!(task.status.state, TaskState::Completed);
        assert_eq!(task.response.as_deref(), Some(text));
        let task = run(&hub(), "").await;
        assert_eq!(task.response.as_deref(), Some(""));
    }

    #[tokio::test]
    async fn a_script_without_an_ending_is_done() {
        let task = run(&hub(), "sleep 1\n\nReferenced tasks:\n- tsk_a: working").await;
        assert_eq!(task.status.state, TaskState::Completed);
        assert_eq!(task.response.as_deref(), Some("done"));
    }

    #[tokio::test]
    async fn a_malformed_command_fails_saying_why() {
        let task = run(&hub(), "sleep soon").await;
        assert_eq!(task.status.state, TaskState::Failed);
        assert_eq!(
            task.status.message.as_deref(),
            Some(r#"script: sleep takes milliseconds, not "soon""#)
        );
    }

    #[tokio::test]
    async fn ask_pauses_then_runs_the_reply_as_a_script() {
        let hub = hub();
        let task = hub
            .start(new_task(None, "ask Which branch?\nreply ignored"))
            .unwrap();
        let asked = settle(&hub, &task.id).await;
        assert_eq!(asked.status.state, TaskState::InputRequired);
        assert_eq!(asked.prompt.as_deref(), Some("Which branch?"));
        assert_eq!(asked.response, None);

        // The reply is a script: another question.
        hub.reply(&None, &task.id, None, "ask And then?".into())
            .unwrap();
        let asked = until(&hub, &task.id, TaskState::InputRequired).await;
        assert_eq!(asked.prompt.as_deref(), Some("And then?"));

        // A reply that is no script is the response, whole.
        hub.reply(&None, &task.id, None, "main, please\nthanks".into())
            .unwrap();
        let done = until(&hub, &task.id, TaskState::Completed).await;
        assert_eq!(done.response.as_deref(), Some("main, please\nthanks"));
        assert_eq!(done.prompt, None);
    }

    #[tokio::test]
    async fn sleep_stays_working() {
        let hub = hub();
        let task = hub.start(new_task(None, "sleep 300\nreply woke")).unwrap();
        until(&hub, &task.id, TaskState::Working).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            hub.get(&None, &task.id).unwrap().status.state,
            TaskState::Working
        );
        let done = settle(&hub, &task.id).await;
        assert_eq!(done.response.as_deref(), Some("woke"));
        assert!(done.status.timestamp_ms - task.status.timestamp_ms >= 300);
    }

    #[tokio::test]
    async fn progress_writes_a_working_status_message() {
        let hub = hub();
        let task = hub
            .start(new_task(None, "progress step 1 of 2\nsleep 10000"))
            .unwrap();
        let working = until(&hub, &task.id, TaskState::Working).await;
        let mut read = working;
        for _ in 0..200 {
            if read.status.message.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            read = hub.get(&None, &task.id).unwrap();
        }
        assert_eq!(read.status.state, TaskState::Working);
        assert_eq!(read.status.message.as_deref(), Some("step 1 of 2"));
        hub.cancel(&None, &task.id).unwrap();
    }

    /// Issue 47: a caller's `detach` runs nothing. It is recorded: a residue
    /// item naming its first word as written ("Residue items"), the task's
    /// `runningCommands` naming the binary's path ("Task metadata"), until
    /// a cancel of the task ends it.
    #[tokio::test]
    async fn detach_records_a_command_and_runs_nothing() {
        let hub = hub();
        let marker = std::env::temp_dir().join(format!("murmur-detach-{}", std::process::id()));
        let _ = std::fs::remove_file(&marker);
        let script = format!(
            "detach touch {0} && echo late\ndetach sh -c 'touch {0}'\nreply ok",
            marker.display()
        );
        let task = run(&hub, &script).await;
        assert_eq!(task.response.as_deref(), Some("ok"));
        let residue = hub.residue();
        let [
            ResidueItem::DetachedShell(shell),
            ResidueItem::DetachedShell(second),
        ] = residue.as_slice()
        else {
            panic!("{residue:?}");
        };
        assert!(shell.work_id.starts_with("wrk_"), "{shell:?}");
        assert_eq!(shell.binary, "touch");
        assert_eq!(second.binary, "sh");
        assert_eq!(
            shell.command,
            format!("touch {} && echo late", marker.display())
        );
        assert!(shell.started_at_ms as i64 <= task.status.timestamp_ms);
        let commands = &task.metadata.running_commands;
        assert_eq!(commands.len(), 2);
        assert_eq!(
            commands[0].binary,
            crate::session::tasks::detached::binary_path("touch")
        );
        assert!(commands[0].binary.starts_with('/'), "{commands:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!marker.exists(), "a recorded command ran");

        // A cancel of the task that recorded it lists it, then ends it.
        let waiting = hub
            .start(new_task(None, "detach sleep 30\nsleep 10000"))
            .unwrap();
        for _ in 0..500 {
            if hub.residue().len() == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let canceled = hub.cancel(&None, &waiting.id).unwrap();
        assert_eq!(canceled.residue.len(), 3, "{:?}", canceled.residue);
        let ResidueItem::DetachedShell(sleep) = &canceled.residue[2] else {
            panic!("{:?}", canceled.residue);
        };
        assert_eq!(
            (sleep.binary.as_str(), sleep.command.as_str()),
            ("sleep", "sleep 30")
        );
        assert_eq!(hub.residue(), residue, "the completed task's stay");
        hub.close();
        assert_eq!(hub.residue(), [], "the session's end ends them");
    }

    #[tokio::test]
    async fn await_waits_for_the_completion() {
        let hub = hub();
        let task = hub
            .start(new_task(None, "await dlg_7\nreply after"))
            .unwrap();
        until(&hub, &task.id, TaskState::Working).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            hub.get(&None, &task.id).unwrap().status.state,
            TaskState::Working
        );
        hub.deliver_completion("dlg_7", "{}".into()).unwrap();
        let done = settle(&hub, &task.id).await;
        assert_eq!(done.response.as_deref(), Some("after"));
    }

    #[tokio::test]
    async fn a_reply_script_can_await_too() {
        let hub = hub();
        let task = hub.start(new_task(None, "ask go?")).unwrap();
        until(&hub, &task.id, TaskState::InputRequired).await;
        assert!(hub.awaits_delegation("dlg_8").is_err());
        hub.reply(&None, &task.id, None, "await dlg_8\nfail it came".into())
            .unwrap();
        assert_eq!(hub.awaits_delegation("dlg_8"), Ok(()));
        hub.deliver_completion("dlg_8", "{}".into()).unwrap();
        let done = settle(&hub, &task.id).await;
        assert_eq!(done.status.message.as_deref(), Some("it came"));
    }

    /// "Residue items": a cancel lists the delegations the task has open,
    /// with all five keys, after what the session still runs.
    #[tokio::test]
    async fn a_cancel_ends_the_delegations_the_task_has_open() {
        let hub = hub();
        let task = hub
            .start(new_task(None, "delegate my-worker 0.1.0\nsleep 10000"))
            .unwrap();
        until(&hub, &task.id, TaskState::Working).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let canceled = hub.cancel(&None, &task.id).unwrap();
        let [ResidueItem::Delegation(d)] = canceled.residue.as_slice() else {
            panic!("{:?}", canceled.residue);
        };
        assert!(d.delegation_id.starts_with("dlg_"), "{d:?}");
        assert_eq!(
            (d.capsule.as_str(), d.version.as_str()),
            ("my-worker", "0.1.0")
        );
        assert!(d.child_session_id.starts_with("ses_"), "{d:?}");
        assert!(d.child_workdir.starts_with('/'), "{d:?}");
        // The delegation ended with its task.
        assert!(hub.stop().unwrap().residue.is_empty());
    }

    /// "Task metadata": end-without-answer fails the task with `noAnswer`,
    /// and each member that gave none is listed once.
    #[tokio::test]
    async fn end_without_answer_says_which_answers_are_missing() {
        let hub = hub();
        let task = run(
            &hub,
            "no-answer q timed_out\nno-answer q failed\nno-answer r completed\n\
             no-answer s canceled\nend-without-answer q gave no answer",
        )
        .await;
        assert_eq!(task.status.state, TaskState::Failed);
        assert_eq!(task.status.message.as_deref(), Some("q gave no answer"));
        assert!(task.metadata.no_answer);
        let below: Vec<(&str, &str)> = task
            .metadata
            .no_answer_below
            .iter()
            .map(|m| (m.member.as_str(), m.status.as_str()))
            .collect();
        assert_eq!(below, [("q", "timed_out"), ("s", "canceled")]);
        // At once, without running: the same.
        let task = run(&hub, "end-without-answer none came").await;
        assert!(task.metadata.no_answer);
        // A completed task can lack an answer below, but has no noAnswer.
        let task = run(&hub, "no-answer q timed_out\nreply partial").await;
        assert_eq!(task.status.state, TaskState::Completed);
        assert!(!task.metadata.no_answer);
        assert_eq!(task.metadata.no_answer_below.len(), 1);
    }

    /// "Task metadata": noAnswerBelow holds 8 members at most.
    #[tokio::test]
    async fn no_answer_below_holds_eight_members() {
        let script: String = (0..12)
            .map(|i| format!("no-answer m{i} timed_out\n"))
            .chain(["sleep 1".to_string()])
            .collect();
        let task = run(&hub(), &script).await;
        let members: Vec<&str> = task
            .metadata
            .no_answer_below
            .iter()
            .map(|m| m.member.as_str())
            .collect();
        assert_eq!(members, ["m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"]);
    }

    /// "A task the runtime starts itself": a detached command's result is
    /// a task of the session's, from the moment the command ends, even on
    /// a `single` capsule whose task is still live (it waits its turn).
    #[tokio::test]
    async fn a_detached_commands_result_is_a_task() {
        let hub =
            crate::session::tasks::testing::hub_with(RunningScriptAgent, TaskAcceptance::Single);
        let task = hub
            .start(new_task(
                None,
                "detach sleep 0.2; echo hi; echo oops >&2; exit 3\nsleep 500\nreply ok",
            ))
            .unwrap();
        let mut item = None;
        for _ in 0..1000 {
            if let [ResidueItem::DetachedShell(found)] = hub.residue().as_slice() {
                item = Some(found.clone());
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let item = item.expect("the command runs");
        let listed = |hub: &crate::session::tasks::Hub| {
            hub.list(
                &None,
                &crate::session::tasks::ListQuery {
                    context_id: None,
                    state: None,
                    status_after_ms: None,
                    after: None,
                    limit: 10,
                },
            )
            .unwrap()
            .tasks
        };
        let mut result = None;
        for _ in 0..1000 {
            result = listed(&hub).into_iter().find(|t| t.id != task.id);
            if result.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let result = result.expect("the result is a task");
        assert_ne!(result.status.state, TaskState::Rejected);
        assert_eq!(settle(&hub, &task.id).await.response.as_deref(), Some("ok"));
        let result = settle(&hub, &result.id).await;
        assert_eq!(
            result.response.unwrap(),
            format!(
                "detached command {} ended: exit status 3\n$ sleep 0.2; echo hi; echo oops >&2; exit 3\n\
                 stdout:\nhi\nstderr:\noops\n",
                item.work_id
            )
        );
        assert!(hub.residue().is_empty());
    }

    /// Issue 34: the script agent says how many images it received, and
    /// their types.
    #[tokio::test]
    async fn images_reports_what_arrived() {
        let hub = hub();
        let mut new = new_task(None, "images");
        new.images = vec![
            crate::session::tasks::Image {
                media_type: "image/png".into(),
                bytes: vec![1],
            },
            crate::session::tasks::Image {
                media_type: "image/jpeg".into(),
                bytes: vec![2],
            },
        ];
        let task = hub.start(new).unwrap();
        let done = settle(&hub, &task.id).await;
        assert_eq!(
            done.response.as_deref(),
            Some("images: 2 (image/png, image/jpeg)")
        );
        assert_eq!(hub.images(&task.id).unwrap().len(), 2);
        let task = run(&hub, "sleep 1\nimages").await;
        assert_eq!(task.response.as_deref(), Some("images: 0 ()"));
    }
}
