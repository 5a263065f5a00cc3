//! The hub over a real store and the script agent: capacity, replies,
//! cancellation, murmur.StopSession, completions, settle pollables and
//! detached commands.

use std::sync::Arc;
use std::time::Duration;

use super::detached::cut;
use super::testing::*;
use super::*;
use crate::session::agents::ScriptAgent;

fn hub(acceptance: TaskAcceptance) -> Arc<Hub> {
    hub_with(ScriptAgent, acceptance)
}

fn declared(name: &str) -> Caller {
    Some(Credential::Declared(name.to_string()))
}

fn state(hub: &Hub, id: &str) -> TaskState {
    hub.get(&None, id).unwrap().status.state
}

// A task its agent ends as it starts is answered settled by `start` too,
// exactly as GetTask then reports it; any other is not.
#[tokio::test]
async fn a_task_ended_as_it_starts_is_answered_settled() {
    let hub = hub(TaskAcceptance::Queue);
    let (first, settled) = hub
        .start_settled(new_task(declared("a"), "reply hi"))
        .unwrap();
    assert_eq!(first.status.state, TaskState::Submitted);
    assert_eq!(first.response, None);
    let settled = settled.expect("the script agent ends `reply hi` at once");
    assert_eq!(settled.status.state, TaskState::Completed);
    assert_eq!(hub.get(&declared("a"), &first.id).unwrap(), settled);

    let (running, settled) = hub.start_settled(new_task(None, "sleep 10000")).unwrap();
    assert_eq!(settled, None);
    // A task queued behind the running one is not settled as it starts
    // either.
    let (queued, settled) = hub.start_settled(new_task(None, "reply b")).unwrap();
    assert_eq!(settled, None);
    assert_eq!(state(&hub, &queued.id), TaskState::Submitted);
    hub.cancel(&None, &running.id).unwrap();
    // Refused while closing: rejected, and not settled as it starts.
    hub.close();
    let (rejected, settled) = hub.start_settled(new_task(None, "reply c")).unwrap();
    assert_eq!(rejected.status.state, TaskState::Rejected);
    assert_eq!(settled, None);
}

// A task that runs is answered, once it ends, as its ending wrote it: the
// pollable a held SendMessage waits on holds it, exactly as GetTask then
// reports it; a pause holds none.
#[tokio::test]
async fn a_settled_task_is_answered_as_its_ending_wrote_it() {
    let hub = hub(TaskAcceptance::Queue);
    let (task, _) = hub
        .start_settled(new_task(declared("a"), "progress step\nreply done"))
        .unwrap();
    let mut settled = hub.settled_started(&task.id);
    assert_eq!(settled.ended(), None);
    tokio::time::timeout(Duration::from_secs(5), settled.wait())
        .await
        .unwrap();
    let ended = settled.ended().expect("the task has ended");
    assert_eq!(ended.status.state, TaskState::Completed);
    assert_eq!(ended.response.as_deref(), Some("done"));
    assert_eq!(hub.get(&declared("a"), &task.id).unwrap(), ended);

    let (asking, _) = hub.start_settled(new_task(None, "ask why?")).unwrap();
    let mut paused = hub.settled_started(&asking.id);
    tokio::time::timeout(Duration::from_secs(5), paused.wait())
        .await
        .unwrap();
    assert_eq!(state(&hub, &asking.id), TaskState::InputRequired);
    assert_eq!(paused.ended(), None);
}

// Each start of a batch is decided as if the ones before it were live
// already: in `queue`, one that runs makes the rest wait; in `single`, one
// live task rejects the rest.
#[tokio::test]
async fn a_batch_decides_each_start_after_the_ones_before_it() {
    let hub = hub(TaskAcceptance::Queue);
    let before = hub.store.commits();
    let started = hub.start_all(vec![
        new_task(None, "reply a"),
        new_task(None, "sleep 10000"),
        new_task(None, "reply b"),
    ]);
    assert_eq!(hub.store.commits(), before + 1);
    let [a, sleep, b] = <[_; 3]>::try_from(started).unwrap().map(Result::unwrap);
    assert_eq!(a.1.unwrap().response.as_deref(), Some("a"));
    assert_eq!((sleep.1, b.1), (None, None));
    until(&hub, &sleep.0.id, TaskState::Working).await;
    assert_eq!(state(&hub, &b.0.id), TaskState::Submitted);
    hub.cancel(&None, &sleep.0.id).unwrap();
    until(&hub, &b.0.id, TaskState::Completed).await;

    let hub = hub_with(ScriptAgent, TaskAcceptance::Single);
    let started = hub.start_all(vec![
        new_task(None, "sleep 10000"),
        new_task(None, "reply c"),
    ]);
    let [live, second] = <[_; 2]>::try_from(started).unwrap().map(Result::unwrap);
    assert_eq!(live.0.status.state, TaskState::Submitted);
    assert_eq!(second.0.status.state, TaskState::Rejected);
    assert_eq!(second.0.status.message.as_deref(), Some(BUSY));
    hub.cancel(&None, &live.0.id).unwrap();
}

/// `count` tasks of their own, each starting "reply i" (i counted from 0)
/// through the batches.
fn spawn_starts(
    hub: &Arc<Hub>,
    count: usize,
) -> Vec<tokio::task::JoinHandle<super::capacity::Started>> {
    (0..count)
        .map(|i| {
            let hub = hub.clone();
            tokio::spawn(async move {
                hub.start_batched(new_task(None, &format!("reply {i}")))
                    .await
            })
        })
        .collect()
}

// Starts made while one leads a batch are written with it: one commit, and
// each caller answered its own task.
#[tokio::test]
async fn starts_made_meanwhile_are_written_in_one_batch() {
    let hub = hub(TaskAcceptance::Queue);
    let before = hub.store.commits();
    let starts = spawn_starts(&hub, 8);
    for (i, start) in starts.into_iter().enumerate() {
        let (first, settled) = start.await.unwrap().unwrap();
        let settled = settled.expect("each ended at once");
        assert_eq!(settled.id, first.id);
        assert_eq!(settled.response, Some(i.to_string()));
    }
    assert_eq!(hub.store.commits(), before + 1);
}

// Once a batch wrote one start alone, the next starts are written at once,
// without waiting for others (a lone client pays no yield), but for one in
// PROBE_EVERY, which waits to find out whether others have come.
#[tokio::test]
async fn after_a_lone_start_the_next_are_written_at_once_but_now_and_then() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    let hub = hub(TaskAcceptance::Queue);
    hub.start_batched(new_task(None, "reply a")).await.unwrap();
    for i in 1..super::capacity::PROBE_EVERY {
        let mut next = Box::pin(hub.start_batched(new_task(None, &format!("reply {i}"))));
        let polled = next.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        let Poll::Ready(Ok((_, Some(settled)))) = polled else {
            panic!("start {i} not written at once: {polled:?}");
        };
        assert_eq!(settled.response, Some(i.to_string()));
    }
    let mut probe = Box::pin(hub.start_batched(new_task(None, "reply b")));
    let polled = probe.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    assert!(polled.is_pending(), "this one waits for others");
}

// More starts at once than a batch holds are written in as many batches
// as they need, in order.
#[tokio::test]
async fn a_batch_holds_max_batch_starts_at_most() {
    let hub = hub(TaskAcceptance::Queue);
    let before = hub.store.commits();
    let count = super::capacity::MAX_BATCH + 6;
    let starts = spawn_starts(&hub, count);
    let mut changes = Vec::new();
    for start in starts {
        let (_, settled) = start.await.unwrap().unwrap();
        changes.push(settled.expect("each ended at once").change);
    }
    assert_eq!(hub.store.commits(), before + 2);
    assert!(changes.windows(2).all(|w| w[0] < w[1]), "{changes:?}");
}

// A request that goes before writing the batch it leads (its future
// dropped) still writes it: the starts that joined are answered.
#[tokio::test]
async fn a_batch_whose_lead_is_dropped_is_still_written() {
    use std::future::Future;
    use std::task::{Context, Waker};

    let hub = hub(TaskAcceptance::Queue);
    let mut lead = Box::pin(hub.start_batched(new_task(None, "reply a")));
    let pending = lead.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    assert!(pending.is_pending(), "the lead lets others join first");
    let joined = tokio::spawn({
        let hub = hub.clone();
        async move { hub.start_batched(new_task(None, "reply b")).await }
    });
    tokio::task::yield_now().await;
    drop(lead);
    let joined = tokio::time::timeout(Duration::from_secs(10), joined);
    let (_, settled) = joined.await.expect("answered").unwrap().unwrap();
    assert_eq!(settled.unwrap().response.as_deref(), Some("b"));
    let all = ListQuery {
        context_id: None,
        state: None,
        status_after_ms: None,
        after: None,
        limit: 10,
    };
    assert_eq!(hub.list(&None, &all).unwrap().total, 2);
}

#[tokio::test]
async fn single_rejects_a_second_live_task_and_stores_it() {
    let hub = hub(TaskAcceptance::Single);
    let first = hub.start(new_task(None, "sleep 10000")).unwrap();
    assert_eq!(first.status.state, TaskState::Submitted);
    assert!(first.id.starts_with("tsk_") && first.context_id.starts_with("ctx_"));
    until(&hub, &first.id, TaskState::Working).await;

    let second = hub.start(new_task(None, "reply b")).unwrap();
    assert_eq!(second.status.state, TaskState::Rejected);
    assert_eq!(second.status.message.as_deref(), Some(BUSY));
    // A rejected task answers GetTask like any other.
    assert_eq!(hub.get(&None, &second.id).unwrap(), second);

    hub.cancel(&None, &first.id).unwrap();
    let third = hub.start(new_task(None, "reply c")).unwrap();
    assert_eq!(third.status.state, TaskState::Submitted);
    let third = settle(&hub, &third.id).await;
    assert_eq!(third.status.state, TaskState::Completed);
    assert_eq!(third.response.as_deref(), Some("c"));
}

#[tokio::test]
async fn queue_runs_tasks_in_order_one_at_a_time() {
    let hub = hub(TaskAcceptance::Queue);
    let a = hub.start(new_task(None, "ask which?")).unwrap();
    let b = hub.start(new_task(None, "reply b")).unwrap();
    let c = hub.start(new_task(None, "reply c")).unwrap();
    for task in [&a, &b, &c] {
        assert_eq!(task.status.state, TaskState::Submitted);
    }
    let asked = until(&hub, &a.id, TaskState::InputRequired).await;
    assert_eq!(asked.prompt.as_deref(), Some("which?"));
    // A task waiting for input still occupies the capsule.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(state(&hub, &b.id), TaskState::Submitted);
    assert_eq!(state(&hub, &c.id), TaskState::Submitted);

    hub.reply(&None, &a.id, None, "reply a".into()).unwrap();
    let c_done = settle(&hub, &c.id).await;
    assert_eq!(c_done.response.as_deref(), Some("c"));
    let a_done = hub.get(&None, &a.id).unwrap();
    let b_done = hub.get(&None, &b.id).unwrap();
    assert_eq!(a_done.response.as_deref(), Some("a"));
    assert_eq!(b_done.response.as_deref(), Some("b"));
    // They ended in order.
    assert!(a_done.change < b_done.change && b_done.change < c_done.change);
}

#[tokio::test]
async fn queue_skips_a_cancelled_waiting_task() {
    let hub = hub(TaskAcceptance::Queue);
    let a = hub.start(new_task(None, "sleep 100\nreply a")).unwrap();
    let b = hub.start(new_task(None, "reply b")).unwrap();
    let c = hub.start(new_task(None, "reply c")).unwrap();
    let canceled = hub.cancel(&None, &b.id).unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    assert_eq!(settle(&hub, &c.id).await.response.as_deref(), Some("c"));
    assert_eq!(state(&hub, &a.id), TaskState::Completed);
    assert_eq!(state(&hub, &b.id), TaskState::Canceled);
}

#[tokio::test]
async fn a_closing_session_rejects_new_tasks() {
    let hub = hub(TaskAcceptance::Queue);
    hub.close();
    let task = hub.start(new_task(None, "reply x")).unwrap();
    assert_eq!(task.status.state, TaskState::Rejected);
    assert_eq!(task.status.message.as_deref(), Some(CLOSING));
    assert_eq!(hub.get(&None, &task.id).unwrap(), task);
}

#[tokio::test]
async fn the_message_context_is_kept() {
    let hub = hub(TaskAcceptance::Single);
    let mut new = new_task(None, "reply x");
    new.context_id = Some("my-context".into());
    let task = hub.start(new).unwrap();
    assert_eq!(task.context_id, "my-context");
}

#[tokio::test]
async fn reply_routing() {
    let hub = hub(TaskAcceptance::Queue);
    let asking = hub
        .start(new_task(declared("alice"), "ask which?"))
        .unwrap();
    let paused = until(&hub, &asking.id, TaskState::InputRequired).await;
    let sleeping = hub.start(new_task(None, "sleep 10000")).unwrap();
    let alice = declared("alice");

    // Never held, or not seen by the caller: not found.
    assert_eq!(
        hub.reply(&alice, "tsk_0000", None, "x".into()),
        Err(TaskError::NotFound)
    );
    assert_eq!(
        hub.reply(&declared("bob"), &asking.id, None, "x".into()),
        Err(TaskError::NotFound)
    );
    assert_eq!(
        hub.reply(
            &Some(Credential::Member("alice".into())),
            &asking.id,
            None,
            "x".into()
        ),
        Err(TaskError::NotFound)
    );
    // A live task not waiting: its state.
    assert_eq!(
        hub.reply(&None, &sleeping.id, None, "x".into()),
        Err(TaskError::WrongState(TaskState::Submitted))
    );
    // Another context.
    assert_eq!(
        hub.reply(&alice, &asking.id, Some("ctx_other"), "x".into()),
        Err(TaskError::OtherContext)
    );
    // The task's own context, or none, is delivered; the task is working.
    let working = hub
        .reply(
            &alice,
            &asking.id,
            Some(&paused.context_id),
            "sleep 50\nreply done".into(),
        )
        .unwrap();
    assert_eq!(working.status.state, TaskState::Working);
    assert_eq!(working.prompt, None);
    assert!(working.change > paused.change);
    assert_eq!(
        hub.reply(&alice, &asking.id, None, "x".into()),
        Err(TaskError::WrongState(TaskState::Working))
    );
    let done = settle(&hub, &asking.id).await;
    assert_eq!(done.response.as_deref(), Some("done"));
    assert_eq!(
        hub.reply(&alice, &asking.id, None, "x".into()),
        Err(TaskError::WrongState(TaskState::Completed))
    );
    // Now the queued task runs, and is working, not waiting.
    until(&hub, &sleeping.id, TaskState::Working).await;
    assert_eq!(
        hub.reply(&None, &sleeping.id, None, "x".into()),
        Err(TaskError::WrongState(TaskState::Working))
    );
}

#[tokio::test]
async fn cancel_live_and_ended() {
    let hub = hub(TaskAcceptance::Single);
    let alice = declared("alice");
    let task = hub.start(new_task(alice.clone(), "sleep 10000")).unwrap();
    until(&hub, &task.id, TaskState::Working).await;
    assert_eq!(
        hub.cancel(&declared("bob"), &task.id),
        Err(TaskError::NotFound)
    );
    assert_eq!(hub.cancel(&None, "tsk_nope"), Err(TaskError::NotFound));
    let canceled = hub.cancel(&alice, &task.id).unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    assert!(canceled.residue.is_empty(), "nothing runs");
    assert_eq!(hub.get(&alice, &task.id).unwrap(), canceled);
    assert_eq!(
        hub.cancel(&alice, &task.id),
        Err(TaskError::WrongState(TaskState::Canceled))
    );

    let done = hub.start(new_task(None, "reply x")).unwrap();
    settle(&hub, &done.id).await;
    assert_eq!(
        hub.cancel(&Some(Credential::Operator), &done.id),
        Err(TaskError::WrongState(TaskState::Completed))
    );
    let failed = hub.start(new_task(None, "fail no")).unwrap();
    settle(&hub, &failed.id).await;
    assert_eq!(
        hub.cancel(&None, &failed.id),
        Err(TaskError::WrongState(TaskState::Failed))
    );
}

#[tokio::test]
async fn a_cancel_drops_the_agent() {
    let hub = hub(TaskAcceptance::Single);
    // Were the agent not dropped, it would complete after its sleep.
    let task = hub.start(new_task(None, "sleep 100\nreply late")).unwrap();
    until(&hub, &task.id, TaskState::Working).await;
    hub.cancel(&None, &task.id).unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let task = hub.get(&None, &task.id).unwrap();
    assert_eq!(task.status.state, TaskState::Canceled);
    assert_eq!(task.response, None);
}

#[tokio::test]
async fn stop_cancels_every_live_task_sorted() {
    let hub = hub(TaskAcceptance::Queue);
    let done = hub.start(new_task(None, "reply done")).unwrap();
    settle(&hub, &done.id).await;
    let mut ids: Vec<String> = Vec::new();
    for text in ["sleep 10000", "ask what?", "reply x", "reply y"] {
        ids.push(hub.start(new_task(declared("someone"), text)).unwrap().id);
    }
    until(&hub, &ids[0], TaskState::Working).await;
    let report = hub.stop().unwrap();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(report.canceled, expected);
    assert!(report.residue.is_empty());
    for id in &report.canceled {
        assert_eq!(state(&hub, id), TaskState::Canceled);
    }
    assert_eq!(state(&hub, &done.id), TaskState::Completed);
    // Nothing is live any more; the session is not closed.
    assert_eq!(hub.stop().unwrap().canceled, Vec::<String>::new());
    assert!(!hub.closing());
    let after = hub.start(new_task(None, "reply z")).unwrap();
    assert_eq!(settle(&hub, &after.id).await.response.as_deref(), Some("z"));
}

#[tokio::test]
async fn settle_pollables() {
    let hub = hub(TaskAcceptance::Queue);
    let task = hub.start(new_task(None, "sleep 150\nask which?")).unwrap();
    let mut settled = hub.settled(&None, &task.id).unwrap();
    // Not ready while the task works.
    assert!(
        tokio::time::timeout(Duration::from_millis(50), settled.wait())
            .await
            .is_err()
    );
    // Ready once it pauses for input; and it stays ready.
    tokio::time::timeout(Duration::from_secs(5), settled.wait())
        .await
        .unwrap();
    assert_eq!(state(&hub, &task.id), TaskState::InputRequired);
    tokio::time::timeout(Duration::from_millis(10), settled.wait())
        .await
        .unwrap();
    // A task already waiting is settled at once.
    let mut again = hub.settled(&None, &task.id).unwrap();
    tokio::time::timeout(Duration::from_millis(10), again.wait())
        .await
        .unwrap();

    // A reply moves it on; a pollable made then waits for the next settle,
    // even one the task passes through before the pollable looks.
    hub.reply(&None, &task.id, None, "ask again?".into())
        .unwrap();
    let mut held = hub.settled(&None, &task.id).unwrap();
    until(&hub, &task.id, TaskState::InputRequired).await;
    hub.reply(&None, &task.id, None, "sleep 10000".into())
        .unwrap();
    tokio::time::timeout(Duration::from_millis(10), held.wait())
        .await
        .expect("it settled in between");

    // An ended task: ready at once. Not seen: not found.
    let mut working = hub.settled(&None, &task.id).unwrap();
    hub.cancel(&None, &task.id).unwrap();
    tokio::time::timeout(Duration::from_secs(1), working.wait())
        .await
        .unwrap();
    let mut ended = hub.settled(&None, &task.id).unwrap();
    tokio::time::timeout(Duration::from_millis(10), ended.wait())
        .await
        .unwrap();
    assert!(matches!(
        hub.settled(&declared("x"), &task.id),
        Err(TaskError::NotFound)
    ));
    assert!(matches!(
        hub.settled(&None, "tsk_nope"),
        Err(TaskError::NotFound)
    ));

    // The session closing wakes a held request on a working task.
    let long = hub.start(new_task(None, "sleep 10000")).unwrap();
    let mut held = hub.settled(&None, &long.id).unwrap();
    let waiting = tokio::spawn(async move { held.wait().await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiting.is_finished());
    hub.close();
    tokio::time::timeout(Duration::from_secs(1), waiting)
        .await
        .unwrap()
        .unwrap();
    // Closing records nothing: the task is as it was.
    assert!(is_live(state(&hub, &long.id)));
}

#[tokio::test]
async fn completions_reach_the_awaiting_task() {
    let hub = hub(TaskAcceptance::Single);
    assert_eq!(
        hub.awaits_delegation("dlg_1"),
        Err(CompletionRefusal::NotAwaited)
    );
    let mut new = new_task(None, "progress waiting\nawait dlg_1\nreply got it");
    new.context_id = Some("ctx_parent".into());
    let task = hub.start(new).unwrap();
    // Awaited from the moment the task is started.
    assert_eq!(hub.awaits_delegation("dlg_1"), Ok(()));
    assert_eq!(
        hub.awaits_delegation("dlg_2"),
        Err(CompletionRefusal::NotAwaited)
    );
    let working = until(&hub, &task.id, TaskState::Working).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(state(&hub, &task.id), TaskState::Working);
    let _ = working;
    assert_eq!(
        hub.deliver_completion("dlg_1", r#"{"role":"ROLE_AGENT"}"#.into()),
        Ok("ctx_parent".to_string())
    );
    // One completion per delegation.
    assert_eq!(
        hub.deliver_completion("dlg_1", "{}".into()),
        Err(CompletionRefusal::NotAwaited)
    );
    let done = settle(&hub, &task.id).await;
    assert_eq!(done.response.as_deref(), Some("got it"));
    // A task that ends no longer awaits.
    let task = hub.start(new_task(None, "await dlg_3")).unwrap();
    assert_eq!(hub.awaits_delegation("dlg_3"), Ok(()));
    hub.cancel(&None, &task.id).unwrap();
    assert_eq!(
        hub.awaits_delegation("dlg_3"),
        Err(CompletionRefusal::NotAwaited)
    );
    // A closing session takes none.
    hub.start(new_task(None, "await dlg_4")).unwrap();
    hub.close();
    assert_eq!(
        hub.awaits_delegation("dlg_4"),
        Err(CompletionRefusal::Ending)
    );
    assert_eq!(
        hub.deliver_completion("dlg_4", "{}".into()),
        Err(CompletionRefusal::Ending)
    );
}

/// Whether process `pid` still runs (a zombie does not).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

#[tokio::test]
async fn detached_commands_outlive_their_task_until_the_session_ends() {
    let hub = hub_with(
        crate::session::agents::script::RunningScriptAgent,
        TaskAcceptance::Single,
    );
    let long = "x".repeat(250);
    let script =
        format!("detach sleep 30\ndetach sleep 31 # {long}\ndetach true\nsleep 100\nreply ok");
    let task = hub.start(new_task(None, &script)).unwrap();
    let done = settle(&hub, &task.id).await;
    assert_eq!(done.status.state, TaskState::Completed);
    assert_eq!(done.response.as_deref(), Some("ok"));

    // `true` has exited; the two sleeps run on, oldest first.
    let commands = &done.metadata.running_commands;
    assert_eq!(commands.len(), 2, "{commands:?}");
    assert_eq!(commands[0].binary, super::detached::binary_path("sleep"));
    assert_eq!(commands[0].command, "sleep 30");
    assert!(commands[0].work_id.starts_with("wrk_"));
    assert!(commands[0].running_ms >= 100 && commands[0].running_ms < 5000);
    assert!(commands[0].work_id < commands[1].work_id);
    let cut: String = format!("sleep 31 # {long}").chars().take(200).collect();
    assert_eq!(commands[1].command, format!("{cut}…"));

    // The session still runs them: they are its residue.
    let residue = hub.residue();
    assert_eq!(residue.len(), 2);
    let ResidueItem::DetachedShell(first) = &residue[0] else {
        panic!("{residue:?}");
    };
    assert_eq!(first.work_id, commands[0].work_id);
    assert_eq!(first.command, "sleep 30");
    assert!(first.started_at_ms as i64 <= done.status.timestamp_ms);

    // A task cancelled while they run carries them as its residue, and
    // StopSession reports them.
    let next = hub.start(new_task(None, "sleep 10000")).unwrap();
    until(&hub, &next.id, TaskState::Working).await;
    let canceled = hub.cancel(&None, &next.id).unwrap();
    assert_eq!(canceled.residue, residue);
    assert!(
        canceled.metadata.running_commands.is_empty(),
        "it started none"
    );
    assert_eq!(hub.stop().unwrap().residue, residue);

    // The session's end kills them.
    let pgids: Vec<i32> = hub.lock().detached.pgids();
    assert!(running(pgids[0]) && running(pgids[1]));
    hub.close();
    for _ in 0..200 {
        if hub.residue().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(hub.residue().is_empty());
    assert!(!running(pgids[0]) && !running(pgids[1]));
}

#[test]
fn commands_are_cut_at_200_characters() {
    assert_eq!(cut("short"), "short");
    let exactly: String = "é".repeat(200);
    assert_eq!(cut(&exactly), exactly);
    let longer: String = "é".repeat(201);
    assert_eq!(cut(&longer), format!("{}…", "é".repeat(200)));
}

#[tokio::test]
async fn a_completion_that_arrives_early_waits_for_its_task() {
    let hub = hub(TaskAcceptance::Single);
    let task = hub
        .start(new_task(None, "sleep 150\nawait dlg_9\nreply got it"))
        .unwrap();
    assert_eq!(hub.awaits_delegation("dlg_9"), Ok(()));
    let context = hub.deliver_completion("dlg_9", "{}".into()).unwrap();
    assert_eq!(context, task.context_id);
    // Taken: a second one is not awaited.
    assert_eq!(
        hub.awaits_delegation("dlg_9"),
        Err(CompletionRefusal::NotAwaited)
    );
    let done = settle(&hub, &task.id).await;
    assert_eq!(done.response.as_deref(), Some("got it"));
}

/// A held SendMessage's task (see `unwritten`).
fn held(text: &str) -> NewTask {
    NewTask {
        held: true,
        ..new_task(None, text)
    }
}

/// Task `id` as the store holds it, read without writing what is held.
fn stored(hub: &Hub, id: &str) -> Option<Task> {
    hub.store.get(id, &Sees::of(&None)).unwrap()
}

// A held task waiting its turn is not written until something needs it: a
// read of the session's tasks writes it first, as it was submitted.
#[tokio::test]
async fn a_held_task_is_written_before_any_read_finds_the_store() {
    let hub = hub(TaskAcceptance::Queue);
    let (running, _) = hub.start_settled(held("sleep 10000")).unwrap();
    let (queued, settled) = hub.start_settled(held("reply b")).unwrap();
    assert_eq!(settled, None);
    assert_eq!(queued.status.state, TaskState::Submitted);
    assert_eq!(queued.change, 0, "outside the change order until written");
    assert_eq!(stored(&hub, &running.id), None);
    assert_eq!(stored(&hub, &queued.id), None);
    let commits = hub.store.commits();
    // GetTask writes both, in one commit, as they were submitted.
    let read = hub.get(&None, &queued.id).unwrap();
    assert_eq!(hub.store.commits(), commits + 1);
    assert_eq!(read.status.state, TaskState::Submitted);
    assert_eq!(read.status.timestamp_ms, queued.status.timestamp_ms);
    assert_eq!(
        stored(&hub, &running.id).unwrap().status.state,
        TaskState::Submitted
    );
    let page = hub
        .list(
            &None,
            &ListQuery {
                context_id: None,
                state: None,
                status_after_ms: None,
                after: None,
                limit: 10,
            },
        )
        .unwrap();
    assert_eq!(page.total, 2);
    assert_eq!(hub.store.commits(), commits + 1, "nothing more to write");
    hub.cancel(&None, &running.id).unwrap();
    let ended = settle(&hub, &queued.id).await;
    assert_eq!(ended.response.as_deref(), Some("b"));
}

// A held task that ends as it runs is written once, ended, with the events
// of its submission first.
#[tokio::test]
async fn a_held_task_that_ends_as_it_runs_is_written_once() {
    let hub = hub(TaskAcceptance::Queue);
    // A task waiting for input holds its turn; replied to, it ends.
    let asking = hub.start(new_task(None, "ask why?")).unwrap();
    until(&hub, &asking.id, TaskState::InputRequired).await;
    let mut log = hub.session_events(None);
    let (b, _) = hub.start_settled(held("reply b")).unwrap();
    let (c, _) = hub.start_settled(held("reply c")).unwrap();
    let mut settled = hub.settled_started(&c.id);
    let commits = hub.store.commits();
    // A read of another task writes nothing.
    hub.reply(&None, &asking.id, None, "reply a".into())
        .unwrap();
    assert_eq!(stored(&hub, &b.id), None);
    tokio::time::timeout(Duration::from_secs(10), settled.wait())
        .await
        .unwrap();
    // One batch for each held task (the other task's writes are not
    // batches).
    assert_eq!(hub.store.commits(), commits + 2);
    let ended = settled.ended().expect("held by the pollable");
    assert_eq!(ended.response.as_deref(), Some("c"));
    assert_eq!(stored(&hub, &c.id), Some(ended));
    let b = stored(&hub, &b.id).unwrap();
    assert_eq!(b.status.state, TaskState::Completed);
    assert_eq!(b.change + 1, stored(&hub, &c.id).unwrap().change);
    // The held task's events, its submission's first, then its run's.
    assert_eq!(states_of(&mut log, &b.id), COMPLETED_EVENTS);
}

// A held task is written as it was submitted once it has waited
// UNWRITTEN_AT_MOST, and when the session closes.
#[tokio::test]
async fn a_held_task_waits_unwritten_for_a_bounded_time() {
    let hub = hub(TaskAcceptance::Queue);
    let running = hub.start(new_task(None, "sleep 10000")).unwrap();
    let (old, _) = hub.start_settled(held("reply a")).unwrap();
    tokio::time::sleep(Duration::from_millis(
        super::unwritten::UNWRITTEN_AT_MOST as u64 + 10,
    ))
    .await;
    let (new, _) = hub.start_settled(held("reply b")).unwrap();
    let old = stored(&hub, &old.id).expect("written once it waited");
    assert_eq!(old.status.state, TaskState::Submitted);
    assert_eq!(stored(&hub, &new.id), None);
    hub.close();
    assert_eq!(
        stored(&hub, &new.id).unwrap().status.state,
        TaskState::Submitted
    );
    assert_eq!(
        stored(&hub, &running.id).unwrap().status.state,
        TaskState::Working
    );
}

/// Answers each task with its text as soon as it runs, but a task whose
/// text is `wait` once `open` is notified; counts the tasks it is handed.
#[derive(Default)]
struct Gate {
    open: Arc<tokio::sync::Notify>,
    handed: Arc<std::sync::atomic::AtomicUsize>,
}

impl Agent for Gate {
    fn run(&self, input: TaskInput, _task: RunningTask) -> agent::AgentFuture {
        self.handed
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let open = self.open.clone();
        Box::pin(async move {
            if input.text == "wait" {
                open.notified().await;
            }
            Outcome::Completed(input.text)
        })
    }
}

/// What [`states_of`] finds of a task that ran and completed: its
/// submission, its run, its response and its ending.
const COMPLETED_EVENTS: [Option<TaskState>; 4] = [
    Some(TaskState::Submitted),
    Some(TaskState::Working),
    None,
    Some(TaskState::Completed),
];

/// The states of task `id`'s status events in `log`, `None` for another
/// event.
fn states_of(log: &mut events::Reader, id: &str) -> Vec<Option<TaskState>> {
    let mut states = Vec::new();
    while let Some(delivery) = log.next_delivery() {
        if let events::Delivery::Event(event) = delivery
            && event.task_id == id
        {
            states.push(match event.body {
                EventBody::Status(update) => Some(update.status.state),
                _ => None,
            });
        }
    }
    states
}

// Held tasks their agent answers while another task waits are written
// together, each with its events, and the agent is handed the next task
// first: at once when no other task waits behind that one, else
// ENDED_AT_MOST later at most (stretched here: it does not pass while the
// tasks run).
#[tokio::test]
async fn held_tasks_answered_while_others_wait_are_written_together() {
    let gate = Gate::default();
    let open = gate.open.clone();
    let hub = hub_with(gate, TaskAcceptance::Queue);
    hub.lock().unwritten.ended_at_most = Duration::from_secs(3600);
    let first = hub.start(new_task(None, "wait")).unwrap();
    let mut log = hub.session_events(None);
    let held: Vec<Task> = ["a", "b", "c", "d"]
        .iter()
        .map(|text| hub.start_settled(held(text)).unwrap().0)
        .collect();
    // Runs once d is answered, until the test ends (written as it
    // started: its writes are no batches).
    hub.start(new_task(None, "wait")).unwrap();
    let mut settled = hub.settled_started(&held[3].id);
    let commits = hub.store.commits();
    open.notify_one();
    tokio::time::timeout(Duration::from_secs(10), settled.wait())
        .await
        .unwrap();
    // a, b, c and d in one batch (the first task's ending is no batch).
    assert_eq!(hub.store.commits(), commits + 1);
    let ended: Vec<Task> = held.iter().map(|t| stored(&hub, &t.id).unwrap()).collect();
    for (task, text) in ended.iter().zip(["a", "b", "c", "d"]) {
        assert_eq!(task.status.state, TaskState::Completed);
        assert_eq!(task.response.as_deref(), Some(text));
    }
    assert!(ended.windows(2).all(|w| w[0].change < w[1].change));
    assert!(stored(&hub, &first.id).unwrap().change < ended[0].change);
    assert_eq!(states_of(&mut log, &held[0].id), COMPLETED_EVENTS);
}

// A held task answered and not written yet is written, ended, before a
// read finds the store; until then, its request waits.
#[tokio::test]
async fn an_answered_held_task_is_written_before_a_read() {
    let gate = Gate::default();
    let (open, handed) = (gate.open.clone(), gate.handed.clone());
    let hub = hub_with(gate, TaskAcceptance::Queue);
    hub.lock().unwritten.ended_at_most = Duration::from_secs(3600);
    hub.start(new_task(None, "wait")).unwrap();
    let (a, _) = hub.start_settled(held("a")).unwrap();
    let (b, _) = hub.start_settled(held("wait")).unwrap();
    let (c, _) = hub.start_settled(held("c")).unwrap();
    let settled = hub.settled_started(&a.id);
    open.notify_one();
    // The first ends, a is answered, b runs.
    while handed.load(std::sync::atomic::Ordering::SeqCst) < 3 {
        tokio::task::yield_now().await;
    }
    assert_eq!(stored(&hub, &a.id), None);
    assert_eq!(settled.ended(), None);
    let commits = hub.store.commits();
    let read = hub.get(&None, &a.id).unwrap();
    assert_eq!(hub.store.commits(), commits + 1);
    assert_eq!(read.status.state, TaskState::Completed);
    assert_eq!(read.response.as_deref(), Some("a"));
    assert_eq!(settled.ended(), Some(read));
    // Written with it, as they were submitted: b runs, c waits.
    for task in [&b, &c] {
        let stored = stored(&hub, &task.id).unwrap();
        assert_eq!(stored.status.state, TaskState::Submitted);
    }
    open.notify_one();
    assert_eq!(settle(&hub, &c.id).await.response.as_deref(), Some("c"));
    assert_eq!(state(&hub, &b.id), TaskState::Completed);
}

// An answered held task waits unwritten ENDED_AT_MOST at most, with
// nothing else to write it.
#[tokio::test]
async fn an_answered_held_task_waits_unwritten_for_a_bounded_time() {
    let gate = Gate::default();
    let open = gate.open.clone();
    let hub = hub_with(gate, TaskAcceptance::Queue);
    hub.start(new_task(None, "wait")).unwrap();
    let (a, _) = hub.start_settled(held("a")).unwrap();
    hub.start_settled(held("wait")).unwrap();
    hub.start_settled(held("c")).unwrap();
    let mut settled = hub.settled_started(&a.id);
    open.notify_one();
    tokio::time::timeout(
        unwritten::ENDED_AT_MOST + Duration::from_millis(100),
        settled.wait(),
    )
    .await
    .unwrap();
    let ended = settled.ended().unwrap();
    assert_eq!(ended.response.as_deref(), Some("a"));
    assert_eq!(stored(&hub, &a.id), Some(ended));
}
