//! The store over SQLite in memory and on disk: writes, reads filtered by
//! who asks, listing, opening, archiving and resuming.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use super::open::connect;
use super::schema::SCHEMA_VERSION;
use super::*;
use crate::bindings::session::{Delegation, DetachedShell};
use crate::bindings::task_store::{Cursor, ListQuery, Page};
use crate::bindings::tokens::Credential;
use crate::tasks::ids;
use crate::tasks::testing::TempDir;

fn record(owner: Owner, context: &str, state: TaskState) -> NewRecord {
    NewRecord {
        id: ids::task_id(),
        context_id: context.to_string(),
        owner,
        origin: Origin::Client,
        trust: None,
        state,
        status_message: None,
        reference_task_ids: Vec::new(),
        forget_session: false,
    }
}

fn query(limit: u32) -> ListQuery {
    ListQuery {
        context_id: None,
        state: None,
        status_after_ms: None,
        after: None,
        limit,
    }
}

fn ids_of(page: &Page) -> Vec<&str> {
    page.tasks.iter().map(|t| t.id.as_str()).collect()
}

#[test]
fn insert_then_get_and_change_order() {
    let store = Store::in_memory(1).unwrap();
    let a = store
        .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 10, 0)
        .unwrap()
        .0;
    let b = store
        .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 11, 0)
        .unwrap()
        .0;
    assert_eq!((a.change, b.change), (1, 2));
    assert_eq!(store.get(&a.id, &Sees::Every).unwrap(), Some(a.clone()));
    let mut done = Transition::to(TaskState::Completed);
    done.response = Some("four".into());
    let ended = store.transition(&a.id, &done, 20, 0).unwrap().unwrap().0;
    assert_eq!(ended.change, 3);
    assert_eq!(ended.status.timestamp_ms, 20);
    assert_eq!(store.get(&a.id, &Sees::Every).unwrap(), Some(ended));
    // a changed last, so it is listed first.
    let page = store.list(&Sees::Every, &query(10)).unwrap();
    assert_eq!(ids_of(&page), [a.id.as_str(), b.id.as_str()]);
    assert!(
        store
            .transition("tsk_nope", &done, 21, 0)
            .unwrap()
            .is_none()
    );
    assert_eq!(store.get("tsk_nope", &Sees::Every).unwrap(), None);
}

#[test]
fn a_progress_note_is_not_a_change() {
    let store = Store::in_memory(1).unwrap();
    let a = store
        .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 10, 0)
        .unwrap()
        .0;
    let working = store
        .transition(&a.id, &Transition::to(TaskState::Working), 12, 0)
        .unwrap()
        .unwrap()
        .0;
    store.note(&a.id, "step 2", 0).unwrap();
    let read = store.get(&a.id, &Sees::Every).unwrap().unwrap();
    assert_eq!(read.status.message.as_deref(), Some("step 2"));
    assert_eq!(read.change, working.change);
    assert_eq!(read.status.timestamp_ms, 12);
}

#[test]
fn artifacts_and_metadata_round_trip() {
    let store = Store::in_memory(1).unwrap();
    let a = store
        .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 10, 0)
        .unwrap()
        .0;
    let mut canceled = Transition::to(TaskState::Canceled);
    canceled.residue = vec![
        ResidueItem::DetachedShell(DetachedShell {
            work_id: "wrk_1".into(),
            binary: "sleep".into(),
            command: "sleep 30".into(),
            started_at_ms: 5,
        }),
        ResidueItem::Delegation(Delegation {
            delegation_id: "dlg_1".into(),
            capsule: "worker".into(),
            version: "0.1.0".into(),
            child_session_id: "ses_1".into(),
            child_workdir: "/w".into(),
        }),
    ];
    canceled.running_commands = vec![RunningCommand {
        work_id: "wrk_1".into(),
        binary: "sleep".into(),
        command: "sleep 30".into(),
        running_ms: 7,
    }];
    let written = store
        .transition(&a.id, &canceled, 12, 0)
        .unwrap()
        .unwrap()
        .0;
    let read = store.get(&a.id, &Sees::Every).unwrap().unwrap();
    assert_eq!(read, written);
    assert_eq!(read.residue, canceled.residue);
    assert_eq!(read.metadata.running_commands, canceled.running_commands);
}

#[test]
fn visibility_follows_the_owner() {
    let store = Store::in_memory(1).unwrap();
    let alice = Owner::Declared("alice".into());
    let bob = Owner::Declared("bob".into());
    let member = Owner::Member("alice".into());
    let mut by = Vec::new();
    for owner in [
        Owner::Public,
        Owner::Operator,
        alice.clone(),
        bob.clone(),
        member.clone(),
    ] {
        by.push(
            store
                .insert(&record(owner, "ctx_a", TaskState::Submitted), 10, 0)
                .unwrap()
                .0
                .id,
        );
    }
    let alices = Sees::of(&Some(Credential::Declared("alice".into())));
    assert_eq!(alices, Sees::Own(alice));
    assert_eq!(Sees::of(&None), Sees::Every);
    assert_eq!(Sees::of(&Some(Credential::Operator)), Sees::Every);
    // A declared credential and a member of the same name are different.
    let page = store.list(&alices, &query(50)).unwrap();
    assert_eq!(ids_of(&page), [by[2].as_str()]);
    assert_eq!(page.total, 1);
    let members = Sees::of(&Some(Credential::Member("alice".into())));
    assert_eq!(
        ids_of(&store.list(&members, &query(50)).unwrap()),
        [by[4].as_str()]
    );
    assert_eq!(store.list(&Sees::Every, &query(50)).unwrap().total, 5);
    // Another owner's task is exactly not there.
    assert_eq!(store.get(&by[3], &alices).unwrap(), None);
    assert_eq!(store.get(&by[0], &alices).unwrap(), None);
    assert!(store.get(&by[2], &alices).unwrap().is_some());
    assert!(store.get(&by[3], &Sees::Every).unwrap().is_some());
}

#[test]
fn list_pages_filters_and_totals() {
    let store = Store::in_memory(1).unwrap();
    // Seven tasks, ctx_a and ctx_b alternating, at 100, 101, … ms.
    let mut all = Vec::new();
    for i in 0..7 {
        let context = if i % 2 == 0 { "ctx_a" } else { "ctx_b" };
        all.push(
            store
                .insert(
                    &record(Owner::Public, context, TaskState::Submitted),
                    100 + i,
                    0,
                )
                .unwrap()
                .0,
        );
    }
    // The second task completes last: it moves to the front.
    store
        .transition(&all[1].id, &Transition::to(TaskState::Completed), 200, 0)
        .unwrap();
    let expected: Vec<&str> = [1, 6, 5, 4, 3, 2, 0]
        .iter()
        .map(|&i| all[i].id.as_str())
        .collect();

    // Walk in pages of 3: every task once, in order; total on each page.
    let mut walked = Vec::new();
    let mut q = query(3);
    let mut pages = 0;
    loop {
        let page = store.list(&Sees::Every, &q).unwrap();
        assert_eq!(page.total, 7);
        pages += 1;
        walked.extend(page.tasks.iter().map(|t| t.id.clone()));
        match page.next {
            Some(cursor) => {
                assert_eq!(&cursor.task_id, walked.last().unwrap());
                q.after = Some(cursor);
            }
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(walked, expected);

    // An exact fit has no next page.
    let page = store.list(&Sees::Every, &query(7)).unwrap();
    assert_eq!(page.tasks.len(), 7);
    assert_eq!(page.next, None);

    // Context filter.
    let mut q = query(50);
    q.context_id = Some("ctx_b".into());
    let page = store.list(&Sees::Every, &q).unwrap();
    assert_eq!(
        ids_of(&page),
        [all[1].id.as_str(), all[5].id.as_str(), all[3].id.as_str()]
    );
    assert_eq!(page.total, 3);

    // State filter.
    let mut q = query(50);
    q.state = Some(TaskState::Completed);
    let page = store.list(&Sees::Every, &q).unwrap();
    assert_eq!(ids_of(&page), [all[1].id.as_str()]);
    q.state = Some(TaskState::Canceled);
    assert_eq!(store.list(&Sees::Every, &q).unwrap().total, 0);

    // Status timestamp, inclusive.
    let mut q = query(2);
    q.status_after_ms = Some(104);
    let page = store.list(&Sees::Every, &q).unwrap();
    assert_eq!(page.total, 4, "104, 105, 106 and the one changed at 200");
    assert_eq!(ids_of(&page), [all[1].id.as_str(), all[6].id.as_str()]);
    // The total ignores the cursor; the page after it keeps the filters.
    q.after = page.next.clone();
    let page = store.list(&Sees::Every, &q).unwrap();
    assert_eq!(page.total, 4);
    assert_eq!(ids_of(&page), [all[5].id.as_str(), all[4].id.as_str()]);
    assert_eq!(page.next, None);

    // Filters combine.
    let mut q = query(50);
    q.context_id = Some("ctx_a".into());
    q.status_after_ms = Some(102);
    let page = store.list(&Sees::Every, &q).unwrap();
    assert_eq!(
        ids_of(&page),
        [all[6].id.as_str(), all[4].id.as_str(), all[2].id.as_str()]
    );

    // A cursor names a position only: below change 1 there is nothing.
    let mut q = query(50);
    q.after = Some(Cursor {
        change: 1,
        task_id: "tsk_whatever".into(),
    });
    let page = store.list(&Sees::Every, &q).unwrap();
    assert!(page.tasks.is_empty());
    assert_eq!(page.total, 7);
}

#[test]
fn list_paging_respects_visibility() {
    let store = Store::in_memory(1).unwrap();
    let alice = Owner::Declared("alice".into());
    let mut alices = Vec::new();
    for i in 0..6 {
        let owner = if i % 2 == 0 {
            alice.clone()
        } else {
            Owner::Operator
        };
        let task = store
            .insert(&record(owner, "ctx_a", TaskState::Submitted), i, 0)
            .unwrap()
            .0;
        if i % 2 == 0 {
            alices.push(task.id);
        }
    }
    alices.reverse();
    let sees = Sees::Own(alice);
    let first = store.list(&sees, &query(2)).unwrap();
    assert_eq!(first.total, 3);
    assert_eq!(ids_of(&first), [alices[0].as_str(), alices[1].as_str()]);
    let mut q = query(2);
    q.after = first.next;
    let second = store.list(&sees, &q).unwrap();
    assert_eq!(ids_of(&second), [alices[2].as_str()]);
    assert_eq!(second.next, None);
}

#[test]
fn the_queries_use_indexes() {
    let store = Store::in_memory(1).unwrap();
    let inner = store.lock();
    for sql in [
        "SELECT id FROM tasks ORDER BY change DESC LIMIT 5",
        "SELECT id FROM tasks WHERE change < 9 ORDER BY change DESC LIMIT 5",
        "SELECT id FROM tasks WHERE context_id = 'c' ORDER BY change DESC LIMIT 5",
        "SELECT id FROM tasks WHERE state = 'working' AND change < 9 ORDER BY change DESC LIMIT 5",
        "SELECT id FROM tasks WHERE owner_kind = 'declared' AND owner_name = 'a' ORDER BY change DESC LIMIT 5",
        "SELECT COUNT(*) FROM tasks WHERE status_ms >= 5",
        // The live tasks (a few) are found by index, then sorted.
        "SELECT id FROM tasks WHERE state IN ('submitted', 'working', 'input-required')",
    ] {
        let plan: Vec<String> = inner
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let plan = plan.join("; ");
        assert!(
            !plan.contains("SCAN tasks") || plan.contains("USING"),
            "{sql}: {plan}"
        );
        assert!(!plan.contains("TEMP B-TREE"), "{sql}: {plan}");
    }
}

#[test]
fn a_fresh_launch_archives_the_previous_session() {
    let dir = TempDir::new("store-archive");
    let first = Store::open(dir.path(), false, 1).unwrap();
    assert!(first.archived.is_none());
    let first_id = first.store.session_id().to_string();
    let task = first
        .store
        .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 5, 0)
        .unwrap()
        .0;
    drop(first);

    let mode = fs::metadata(dir.path().join(SESSION_DB))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let second = Store::open(dir.path(), false, 2).unwrap();
    assert_ne!(second.store.session_id(), first_id);
    let archived = second.archived.clone().unwrap();
    assert_eq!(
        archived,
        dir.path().join(ARCHIVE_DIR).join(format!("{first_id}.db"))
    );
    // The new session starts empty; the old one is whole in its archive.
    assert_eq!(
        second.store.list(&Sees::Every, &query(50)).unwrap().total,
        0
    );
    drop(second);
    let old = Store::from_connection(connect(&archived).unwrap()).unwrap();
    assert_eq!(old.session_id(), first_id);
    assert_eq!(old.get(&task.id, &Sees::Every).unwrap(), Some(task));
}

#[test]
fn resume_keeps_the_session_and_fails_live_tasks() {
    let dir = TempDir::new("store-resume");
    let opened = Store::open(dir.path(), false, 1).unwrap();
    let store = opened.store;
    let session = store.session_id().to_string();
    let submitted = store
        .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 5, 0)
        .unwrap()
        .0;
    let mut done = store
        .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 6, 0)
        .unwrap()
        .0;
    let mut finished = Transition::to(TaskState::Completed);
    finished.response = Some("ok".into());
    done = store
        .transition(&done.id, &finished, 7, 0)
        .unwrap()
        .unwrap()
        .0;
    let asking = store
        .insert(&record(Owner::Public, "ctx_b", TaskState::Submitted), 8, 0)
        .unwrap()
        .0;
    let mut ask = Transition::to(TaskState::InputRequired);
    ask.prompt = Some("which?".into());
    store.transition(&asking.id, &ask, 9, 0).unwrap();
    let working = store
        .insert(&record(Owner::Public, "ctx_b", TaskState::Submitted), 10, 0)
        .unwrap()
        .0;
    store
        .transition(&working.id, &Transition::to(TaskState::Working), 11, 0)
        .unwrap();
    let last_change = store.list(&Sees::Every, &query(1)).unwrap().tasks[0].change;
    drop(store);

    let resumed = Store::open(dir.path(), true, 1000).unwrap();
    assert!(resumed.archived.is_none());
    assert_eq!(resumed.store.session_id(), session);
    assert_eq!(
        resumed.failed_by_resume,
        [submitted.id.clone(), asking.id.clone(), working.id.clone()]
    );
    let store = resumed.store;
    for (i, id) in resumed.failed_by_resume.iter().enumerate() {
        let task = store.get(id, &Sees::Every).unwrap().unwrap();
        assert_eq!(task.status.state, TaskState::Failed);
        assert_eq!(task.status.message.as_deref(), Some(RESTARTED));
        assert_eq!(task.status.timestamp_ms, 1000);
        assert_eq!(task.prompt, None);
        assert_eq!(task.change, last_change + 1 + i as u64);
    }
    // An ended task is as it was.
    assert_eq!(store.get(&done.id, &Sees::Every).unwrap(), Some(done));
    // New changes continue the order.
    let next = store
        .insert(
            &record(Owner::Public, "ctx_c", TaskState::Submitted),
            1001,
            0,
        )
        .unwrap()
        .0;
    assert_eq!(next.change, last_change + 4);
    assert!(store.live_ids().unwrap() == [next.id]);
    // Each failure is an event, numbered with it, waiting for the hub.
    let restarted = store.take_restarted();
    assert_eq!(
        restarted,
        [
            (1, &submitted.id, "ctx_a"),
            (2, &asking.id, "ctx_b"),
            (3, &working.id, "ctx_b")
        ]
        .map(|(event_id, id, context)| Restarted {
            event_id,
            task_id: id.clone(),
            context_id: context.to_string(),
            timestamp_ms: 1000,
        })
    );
    assert_eq!(store.last_event(), 3);
    assert!(store.take_restarted().is_empty());
}

#[test]
fn writes_number_their_events_in_the_same_transaction() {
    let store = Store::in_memory(1).unwrap();
    let (a, ids) = store
        .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 10, 1)
        .unwrap();
    assert_eq!(ids, 1..2);
    let working = Transition::to(TaskState::Working);
    let (_, ids) = store.transition(&a.id, &working, 11, 1).unwrap().unwrap();
    assert_eq!(ids, 2..3);
    assert_eq!(store.note(&a.id, "step", 1).unwrap(), 3..4);
    let mut done = Transition::to(TaskState::Completed);
    done.response = Some("ok".into());
    let (_, ids) = store.transition(&a.id, &done, 12, 2).unwrap().unwrap();
    assert_eq!(ids, 4..6);
    // No such task: nothing written, nothing numbered.
    assert!(
        store
            .transition("tsk_nope", &done, 13, 2)
            .unwrap()
            .is_none()
    );
    assert_eq!(store.last_event(), 5);
    assert_eq!(store.number(2).unwrap(), 6..8);
    let persisted: i64 = store
        .lock()
        .conn
        .query_row("SELECT last_event FROM session", [], |r| r.get(0))
        .unwrap();
    assert_eq!(persisted, 7);
}

#[test]
fn a_version_1_session_resumes_with_no_event_numbered() {
    let dir = TempDir::new("store-v1");
    let opened = Store::open(dir.path(), false, 1).unwrap();
    let task = opened
        .store
        .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 5, 0)
        .unwrap()
        .0;
    drop(opened);
    // The file as version 1 wrote it.
    let conn = connect(&dir.path().join(SESSION_DB)).unwrap();
    conn.execute_batch("ALTER TABLE session DROP COLUMN last_event; PRAGMA user_version = 1;")
        .unwrap();
    drop(conn);

    let resumed = Store::open(dir.path(), true, 9).unwrap();
    assert_eq!(resumed.failed_by_resume, std::slice::from_ref(&task.id));
    let store = resumed.store;
    assert_eq!(store.take_restarted()[0].event_id, 1);
    assert_eq!(store.last_event(), 1);
    let version: i64 = store
        .lock()
        .conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
}

#[test]
fn resume_without_a_session_is_refused() {
    let dir = TempDir::new("store-noresume");
    let error = Store::open(dir.path(), true, 1).err().unwrap();
    let message = format!("{error:#}");
    assert!(message.contains("no session to resume"), "{message}");
    assert!(message.contains("session.db"), "{message}");
    assert!(!dir.path().join(SESSION_DB).exists());
}
