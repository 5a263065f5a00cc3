//! The store over SQLite in memory and on disk: writes, reads filtered by
//! who asks, listing, opening, archiving and resuming.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use super::open::connect;
use super::schema::SCHEMA_VERSION;
use super::*;
use crate::bindings::session::{Delegation, DetachedShell, ResidueItem};
use crate::bindings::task_store::{
    Cursor, Image, ListQuery, MemberStatus, Origin, Page, RunningCommand, Task, TaskState,
};
use crate::bindings::tokens::Credential;
use crate::session::tasks::ids;
use crate::session::tasks::testing::TempDir;

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
        images: Vec::new(),
        created_ms: 0,
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
    canceled.metadata.running_commands = vec![RunningCommand {
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
    assert_eq!(read.metadata, canceled.metadata);
}

/// "Task metadata": `noAnswer` and `noAnswerBelow` are kept with the
/// ending, and read back as written.
#[test]
fn answers_lacking_are_kept_with_the_ending() {
    let store = Store::in_memory(1).unwrap();
    let a = store
        .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 2, 0)
        .unwrap()
        .0;
    assert!(!a.metadata.no_answer && a.metadata.no_answer_below.is_empty());
    let mut failed = Transition::to(TaskState::Failed);
    failed.message = Some("q gave no answer".into());
    failed.metadata.no_answer = true;
    failed.metadata.no_answer_below = vec![
        MemberStatus {
            member: "q".into(),
            status: "timed_out".into(),
        },
        MemberStatus {
            member: "r".into(),
            status: "failed".into(),
        },
    ];
    let written = store.transition(&a.id, &failed, 3, 0).unwrap().unwrap().0;
    let read = store.get(&a.id, &Sees::Every).unwrap().unwrap();
    assert_eq!(read, written);
    assert_eq!(read.metadata, failed.metadata);
}

/// "Image parts": the images a task started with are kept, in part order,
/// for the runtime; a rejected task keeps none.
#[test]
fn a_tasks_images_are_kept_in_order() {
    let store = Store::in_memory(1).unwrap();
    let images = vec![
        Image {
            media_type: "image/png".into(),
            bytes: vec![0x89, b'P', b'N', b'G'],
        },
        Image {
            media_type: "image/gif".into(),
            bytes: b"GIF89a".to_vec(),
        },
    ];
    let mut new = record(Owner::Public, "ctx_a", TaskState::Submitted);
    new.images = images.clone();
    store.insert(&new, 2, 0).unwrap();
    assert_eq!(store.images(&new.id).unwrap(), images);
    let mut rejected = record(Owner::Public, "ctx_a", TaskState::Rejected);
    rejected.images = images;
    store.insert(&rejected, 3, 0).unwrap();
    assert!(store.images(&rejected.id).unwrap().is_empty());
    assert!(store.images("tsk_none").unwrap().is_empty());
}

/// Issue 34: a resumed launch finds the detached commands its last run
/// left running, once; the ones that ended are not among them.
#[test]
fn a_resumed_store_gives_the_detached_commands_it_lost_once() {
    let dir = TempDir::new("store-detached");
    let opened = Store::open(dir.path(), false, 1).unwrap();
    let shell = |id: &str, at: u64| DetachedShell {
        work_id: id.into(),
        binary: "/usr/bin/sleep".into(),
        command: format!("sleep {at}"),
        started_at_ms: at,
    };
    opened
        .store
        .detached_started("tsk_a", &shell("wrk_b", 20))
        .unwrap();
    opened
        .store
        .detached_started("tsk_a", &shell("wrk_a", 10))
        .unwrap();
    opened
        .store
        .detached_started("tsk_a", &shell("wrk_c", 30))
        .unwrap();
    opened.store.detached_ended("wrk_c").unwrap();
    assert!(opened.lost_commands.is_empty());
    drop(opened);
    let resumed = Store::open(dir.path(), true, 2).unwrap();
    assert_eq!(
        resumed.lost_commands,
        [shell("wrk_a", 10), shell("wrk_b", 20)]
    );
    drop(resumed);
    let again = Store::open(dir.path(), true, 3).unwrap();
    assert!(again.lost_commands.is_empty());
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

/// The plan SQLite makes for `sql`, its steps joined.
fn plan_of(store: &Store, sql: &str) -> String {
    let inner = store.lock();
    let mut statement = inner
        .conn
        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .unwrap();
    let nulls = vec![rusqlite::types::Null; statement.parameter_count()];
    let plan: Vec<String> = statement
        .query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    plan.join("; ")
}

#[test]
fn the_queries_use_indexes() {
    let store = Store::in_memory(1).unwrap();
    for sql in [
        "SELECT id FROM tasks ORDER BY change DESC LIMIT 5",
        "SELECT id FROM tasks WHERE change < 9 ORDER BY change DESC LIMIT 5",
        "SELECT COUNT(*) FROM tasks WHERE status_ms >= 5",
        // The ends of the status order, for a cutoff's nearer side.
        "SELECT (SELECT MIN(status_ms) FROM tasks), (SELECT MAX(status_ms) FROM tasks)",
        // The live tasks (a few) are found by index, then sorted.
        "SELECT id FROM tasks WHERE state IN ('submitted', 'working', 'input-required')",
    ] {
        let plan = plan_of(&store, sql);
        assert!(
            !plan.contains("SCAN tasks") || plan.contains("USING"),
            "{sql}: {plan}"
        );
        assert!(!plan.contains("TEMP B-TREE"), "{sql}: {plan}");
    }
}

/// Every combination of ListTasks filters, by every kind of caller: the
/// page is read from an index that holds all of its equality filters in
/// change order, its total from the key of a counts table, and a status
/// cutoff is probed from the status index alone.
#[test]
fn every_filter_combination_reads_an_index_in_change_order() {
    use super::queries::{Equalities, Since};
    let store = Store::in_memory(1).unwrap();
    for sees in [Sees::Every, Sees::Own(Owner::Declared("a".into()))] {
        for context in [None, Some("c".to_string())] {
            for state in [None, Some(TaskState::Working)] {
                let mut q = query(5);
                q.context_id = context.clone();
                q.state = state;
                let filters = Equalities::of(&sees, &q);
                let columns: Vec<&str> = filters
                    .conditions
                    .iter()
                    .flat_map(|c| c.split(" AND "))
                    .map(|c| c.split(" = ").next().unwrap())
                    .collect();
                let eq = filters.conditions.join(" AND ");
                for more in [
                    &[][..],
                    &["change < ?"],
                    &["+status_ms >= ?", "change >= ?"],
                    &["+status_ms >= ?", "change >= ?", "change < ?"],
                    &["+status_ms >= ?", "change < ?"],
                ] {
                    let sql = filters.page("id", more);
                    let plan = plan_of(&store, &sql);
                    assert!(plan.contains("USING INDEX"), "{sql}: {plan}");
                    assert!(!plan.contains("TEMP B-TREE"), "{sql}: {plan}");
                    assert!(!plan.contains("tasks_by_status"), "{sql}: {plan}");
                    for column in &columns {
                        assert!(plan.contains(&format!("{column}=?")), "{sql}: {plan}");
                    }
                    // The change bounds are the index's range, not filters.
                    for bound in more.iter().filter(|c| c.starts_with("change")) {
                        let bound = bound.replace(" >= ?", ">?").replace(" < ?", "<?");
                        assert!(plan.contains(&bound), "{sql}: {plan}");
                    }
                }
                let table = if context.is_some() {
                    "context_counts"
                } else {
                    "owner_counts"
                };
                let clause = if eq.is_empty() {
                    String::new()
                } else {
                    format!(" WHERE {eq}")
                };
                let sql = format!("SELECT COALESCE(SUM(tasks), 0) FROM {table}{clause}");
                let plan = plan_of(&store, &sql);
                if context.is_some() || sees != Sees::Every {
                    assert!(plan.contains("SEARCH"), "{sql}: {plan}");
                }
                for side in [">=", "<"] {
                    for sql in [
                        Since::side_sql(&filters, side),
                        Since::count_sql(&filters, side),
                    ] {
                        let plan = plan_of(&store, &sql);
                        let range = format!("(status_ms{}?", &side[..1]);
                        assert!(
                            plan.contains(&format!("COVERING INDEX tasks_by_status {range}")),
                            "{sql}: {plan}"
                        );
                        assert!(!plan.contains("TEMP B-TREE"), "{sql}: {plan}");
                    }
                }
            }
        }
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

/// A new session's file has pages of PAGE_SIZE bytes, whatever SQLite's
/// default; it is in WAL mode. The store's connection keeps its plans
/// (QPSG), new or resumed.
#[test]
fn a_session_file_has_small_pages_and_its_plans_are_kept() {
    use rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG;
    let dir = TempDir::new("store-pages");
    let opened = Store::open(dir.path(), false, 1).unwrap();
    assert!(
        opened
            .store
            .lock()
            .conn
            .db_config(SQLITE_DBCONFIG_ENABLE_QPSG)
            .unwrap()
    );
    drop(opened);
    let resumed = Store::open(dir.path(), true, 2).unwrap();
    assert!(
        resumed
            .store
            .lock()
            .conn
            .db_config(SQLITE_DBCONFIG_ENABLE_QPSG)
            .unwrap()
    );
    drop(resumed);
    let conn = connect(&dir.path().join(super::open::SESSION_DB)).unwrap();
    let pragma = |name: &str| -> String {
        conn.query_row(&format!("PRAGMA {name}"), [], |r| {
            r.get::<_, rusqlite::types::Value>(0)
        })
        .map(|v| format!("{v:?}"))
        .unwrap()
    };
    assert_eq!(pragma("page_size"), "Integer(2048)");
    assert_eq!(super::open::PAGE_SIZE, 2048);
    assert_eq!(pragma("journal_mode"), "Text(\"wal\")");
}

// The writer's commits do not checkpoint: the store's thread copies the
// log into the file, on a connection of its own, while the session runs
// (`checkpoint`), and the log is started over once a copy leaves
// RESTART_PAGES in it, or at the latest once it holds LONGEST_PAGES, however
// far behind the thread is. Without the restart, 5,000 tasks leave a log of about 50,000
// pages; SQLite's own checkpoints would keep it at 1,000 but on the
// request path.
#[test]
fn the_log_is_copied_off_the_writer_and_stays_bounded() {
    let dir = TempDir::new("store-checkpoints");
    let store = Store::open(dir.path(), false, 1).unwrap().store;
    let path = dir.path().join(super::open::SESSION_DB);
    let log = dir.path().join("session.db-wal");
    let frame = (super::open::PAGE_SIZE + 24) as u64;
    let mut largest = 0;
    for _ in 0..5000 {
        store
            .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 2, 0)
            .unwrap();
        largest = largest.max(std::fs::metadata(&log).unwrap().len());
    }
    // The writer starts a log of LONGEST_PAGES over, at the latest: one
    // commit (a few pages) past it, and the log's header.
    let bound = (super::checkpoint::LONGEST_PAGES as u64 + 16) * frame + 32;
    assert!(
        largest <= bound,
        "the log grew to {largest} bytes, over {bound}"
    );
    // Another connection of the process reads every committed task while
    // the session runs.
    let count = || {
        super::file::open_file(&path)
            .unwrap()
            .query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get::<_, i64>(0))
    };
    assert_eq!(count().unwrap(), 5000);
    // Closed, the last connection folds the log into the file.
    drop(store);
    assert!(!log.exists());
    assert_eq!(count().unwrap(), 5000);
}

// The checkpoint thread syncs the file through SQLite's own handle on it
// (`checkpoint::sync_file`): found and synced for a file, and nothing to
// sync for a connection with no file.
#[test]
fn the_thread_syncs_the_file_through_sqlite() {
    let dir = TempDir::new("store-sync");
    let store = Store::open(dir.path(), false, 1).unwrap().store;
    store
        .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 2, 0)
        .unwrap();
    let conn = super::file::open_file(&dir.path().join(super::open::SESSION_DB)).unwrap();
    assert!(super::checkpoint::sync_file(&conn));
    let memory = rusqlite::Connection::open_in_memory().unwrap();
    assert!(!super::checkpoint::sync_file(&memory));
}

// A reader (`readers`) keeps the log from being started over while it
// reads, but never holds up a commit: the writer's restart gives up at
// once and a later commit tries again. Waiting for the reader SQLite's
// default way would cost each commit past RESTART_PAGES five seconds.
#[test]
fn a_reader_never_holds_up_the_writer() {
    let dir = TempDir::new("store-reader");
    let store = Store::open(dir.path(), false, 1).unwrap().store;
    let readers = store.readers.as_ref().unwrap();
    let reader = readers.take().unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let before: i64 = reader
        .query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get(0))
        .unwrap();
    let started = std::time::Instant::now();
    for _ in 0..4000 {
        store
            .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 2, 0)
            .unwrap();
    }
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(60), "{took:?}");
    // The reader still sees the file as it began reading it.
    let seen: i64 = reader
        .query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get(0))
        .unwrap();
    assert_eq!((before, seen), (0, 0));
    reader.execute_batch("COMMIT").unwrap();
    let now: i64 = reader
        .query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get(0))
        .unwrap();
    assert_eq!(now, 4000);
}

// Reads run on connections of their own (`readers`): a read is answered
// while a write holds the writer's connection, and sees what was committed
// before it, not the write under way.
#[test]
fn a_read_does_not_wait_for_a_write_under_way() {
    let dir = TempDir::new("store-readers");
    let store = std::sync::Arc::new(Store::open(dir.path(), false, 1).unwrap().store);
    let (committed, _) = store
        .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 2, 0)
        .unwrap();
    let writing = store
        .batch(|batch| {
            let (writing, _) = batch
                .insert_ended(
                    &record(Owner::Public, "ctx_a", TaskState::Submitted),
                    None,
                    3,
                    0,
                )
                .unwrap();
            let (answer, answered) = std::sync::mpsc::channel();
            let (reading, ids) = (store.clone(), [committed.id.clone(), writing.id.clone()]);
            std::thread::spawn(move || {
                let read = (
                    reading.get(&ids[0], &Sees::Every).unwrap(),
                    reading.get(&ids[1], &Sees::Every).unwrap(),
                    reading.list(&Sees::Every, &query(10)).unwrap().total,
                );
                let _ = answer.send(read);
            });
            // On the writer's connection, the read would wait for this
            // batch to end.
            let read = answered
                .recv_timeout(std::time::Duration::from_secs(10))
                .expect("the read waited for the write");
            assert_eq!(read, (Some(committed.clone()), None, 1));
            writing
        })
        .unwrap();
    assert_eq!(store.get(&writing.id, &Sees::Every).unwrap(), Some(writing));
    assert_eq!(store.list(&Sees::Every, &query(10)).unwrap().total, 2);
}

// A store opens at most READERS readers. A read that finds them all busy
// waits for one to go back, and a write does not wait for it.
#[test]
fn a_store_keeps_a_bounded_number_of_readers() {
    let dir = TempDir::new("store-reader-bound");
    let store = std::sync::Arc::new(Store::open(dir.path(), false, 1).unwrap().store);
    let (task, _) = store
        .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 2, 0)
        .unwrap();
    let readers = store.readers.as_ref().unwrap();
    assert_eq!(readers.open(), 0, "a store never read holds no reader");
    let busy: Vec<_> = (0..readers::READERS)
        .map(|_| readers.take().unwrap())
        .collect();
    assert_eq!(readers.open(), readers::READERS);
    let (answer, answered) = std::sync::mpsc::channel();
    let (reading, id) = (store.clone(), task.id.clone());
    std::thread::spawn(move || {
        let _ = answer.send(reading.get(&id, &Sees::Every).unwrap());
    });
    let waited = answered.recv_timeout(std::time::Duration::from_millis(300));
    assert!(waited.is_err(), "a read took a connection past the bound");
    store
        .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 3, 0)
        .unwrap();
    drop(busy);
    let read = answered
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the read waited on after a reader went back");
    assert_eq!(read, Some(task.clone()));
    // Idle again, and used again rather than opened anew.
    for _ in 0..10 {
        assert_eq!(
            store.get(&task.id, &Sees::Every).unwrap(),
            Some(task.clone())
        );
    }
    assert_eq!(readers.open(), readers::READERS);
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

// Writes in one batch are one commit; a write that fails in it is undone
// alone, numbering nothing, and the writes after it go on from the counters
// the failed one found. The batch's first write is undone the same way as a
// later one.
#[test]
fn a_batch_commits_its_writes_together_and_undoes_a_failed_one_alone() {
    let store = Store::in_memory(1).unwrap();
    let x = record(Owner::Public, "ctx_x", TaskState::Submitted);
    store.insert(&x, 9, 1).unwrap();
    let same_id = |r: &NewRecord| NewRecord {
        id: r.id.clone(),
        ..record(Owner::Public, "ctx_b", TaskState::Submitted)
    };
    let a = record(Owner::Public, "ctx_a", TaskState::Submitted);
    let b = record(Owner::Public, "ctx_a", TaskState::Submitted);
    let before = store.commits();
    let written = store
        .batch(|batch| {
            [&same_id(&x), &a, &same_id(&a), &b]
                .map(|r| batch.insert_ended(r, None, 10, 2))
                .map(|w| w.map(|(task, ids)| (task.change, ids)))
        })
        .unwrap();
    assert_eq!(store.commits(), before + 1);
    assert!(written[0].is_err(), "the first write: an id already there");
    assert_eq!(written[1].as_ref().unwrap(), &(2, 2..4));
    assert!(written[2].is_err(), "a later write: an id the batch wrote");
    assert_eq!(written[3].as_ref().unwrap(), &(3, 4..6));
    assert_eq!(store.last_event(), 5);
    let page = store.list(&Sees::Every, &query(10)).unwrap();
    assert_eq!(ids_of(&page), [b.id.as_str(), a.id.as_str(), x.id.as_str()]);
    assert_eq!(page.total, 3);
    assert_eq!(
        store.get(&x.id, &Sees::Every).unwrap().unwrap().context_id,
        "ctx_x"
    );
    let persisted: i64 = store
        .lock()
        .conn
        .query_row("SELECT last_event FROM session", [], |r| r.get(0))
        .unwrap();
    assert_eq!(persisted, 5);
    // The next write goes on from there.
    let c = store
        .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 11, 1)
        .unwrap();
    assert_eq!((c.0.change, c.1), (4, 6..7));
    assert_eq!(store.commits(), before + 2);
}

/// Inserts `records` in one batch (one event each) and checks the store
/// against the answers: every write answered written is there as answered,
/// every other is not, and the events numbered are the written ones'.
/// Answers how many were written.
fn batch_as_answered(store: &Store, records: &[NewRecord], case: &str) -> u64 {
    let written = store.batch(|batch| {
        records
            .iter()
            .map(|r| batch.insert_ended(r, None, 10, 1).map(|(task, _)| task))
            .collect::<Vec<_>>()
    });
    let answered: Vec<Option<Task>> = match written {
        Ok(written) => written.into_iter().map(Result::ok).collect(),
        Err(_) => vec![None; records.len()],
    };
    for (record, answer) in records.iter().zip(&answered) {
        let stored = store.get(&record.id, &Sees::Every).unwrap();
        assert_eq!(stored, *answer, "{case}");
    }
    let kept = answered.iter().flatten().count() as u64;
    assert_eq!(store.last_event(), kept, "{case}");
    let total = store.list(&Sees::Every, &query(1)).unwrap().total;
    assert_eq!(u64::from(total), kept, "{case}");
    kept
}

// A batch that runs out of room (SQLite may then undo the one statement or
// the whole transaction) answers each write as it stands once the batch is
// done.
#[test]
fn a_batch_out_of_room_answers_each_write_as_it_stands() {
    for room in [2, 4, 8, 16, 32, 64] {
        let store = Store::in_memory(1).unwrap();
        let pages: i64 = store
            .lock()
            .conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap();
        store
            .lock()
            .conn
            .pragma_update(None, "max_page_count", pages + room)
            .unwrap();
        let records: Vec<NewRecord> = (0..200)
            .map(|_| NewRecord {
                trust: Some("t".repeat(1500)),
                ..record(Owner::Public, "ctx_a", TaskState::Submitted)
            })
            .collect();
        let kept = batch_as_answered(&store, &records, &format!("room {room}"));
        assert!(kept < 200, "room {room}: never full");
    }
}

// When SQLite undoes the whole transaction under a write (here a trigger
// raising ROLLBACK, as a full disk or an I/O error may), the writes of the
// batch before it are gone and the ones after it are not made: nothing is
// answered written that is not there. A batch whose first write is undone
// that way goes on with the rest.
#[test]
fn a_batch_whose_transaction_is_undone_answers_nothing_it_lost() {
    for boom_at in [0, 1, 2] {
        let store = Store::in_memory(1).unwrap();
        store
            .lock()
            .conn
            .execute_batch(
                "CREATE TEMP TRIGGER boom BEFORE INSERT ON tasks WHEN NEW.context_id = 'ctx_boom'
                 BEGIN SELECT RAISE(ROLLBACK, 'boom'); END;",
            )
            .unwrap();
        let records: Vec<NewRecord> = (0..4)
            .map(|i| {
                let context = if i == boom_at { "ctx_boom" } else { "ctx_a" };
                record(Owner::Public, context, TaskState::Submitted)
            })
            .collect();
        let kept = batch_as_answered(&store, &records, &format!("boom at {boom_at}"));
        assert_eq!(kept, if boom_at == 0 { 3 } else { 0 }, "boom at {boom_at}");
        // The store writes on.
        let next = record(Owner::Public, "ctx_a", TaskState::Submitted);
        let (task, ids) = store.insert(&next, 11, 1).unwrap();
        assert_eq!((task.change, ids), (kept + 1, kept + 1..kept + 2));
    }
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
    as_version_2(&conn);
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
    // The same tables, indexes and triggers as a session begun today (the
    // session table's text aside: the column added to it reads as added).
    let without_session = |store: &Store| {
        let mut schema = schema_of(store);
        schema.retain(|(_, name, _)| name != "session");
        schema
    };
    assert_eq!(
        without_session(&store),
        without_session(&Store::in_memory(1).unwrap())
    );
    assert_counts_exact(&store);
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

/// Turns a file of this version into one as version 2 wrote it: no counts,
/// no indexes of more than one filter, the narrow status index.
fn as_version_2(conn: &rusqlite::Connection) {
    as_version_3(conn);
    conn.execute_batch(
        "DROP TRIGGER tasks_count_insert;
         DROP TRIGGER tasks_count_delete;
         DROP TRIGGER tasks_count_update;
         DROP TABLE owner_counts;
         DROP TABLE context_counts;
         DROP INDEX tasks_by_context_state;
         DROP INDEX tasks_by_owner_context;
         DROP INDEX tasks_by_owner_state;
         DROP INDEX tasks_by_owner_context_state;
         DROP INDEX tasks_by_owner;
         DROP INDEX tasks_by_status;
         CREATE INDEX tasks_by_owner   ON tasks (owner_kind, owner_name, change);
         CREATE INDEX tasks_by_status  ON tasks (status_ms);
         PRAGMA user_version = 2;",
    )
    .unwrap();
    let names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        names,
        [
            "session",
            "tasks",
            "tasks_by_context",
            "tasks_by_owner",
            "tasks_by_state",
            "tasks_by_status"
        ]
    );
}

/// Turns a file of this version into one as version 3 wrote it: no images,
/// no answers lacking, no detached commands.
fn as_version_3(conn: &rusqlite::Connection) {
    conn.execute_batch(
        "ALTER TABLE tasks DROP COLUMN no_answer;
         ALTER TABLE tasks DROP COLUMN no_answer_below;
         DROP TABLE images;
         DROP TABLE detached;
         PRAGMA user_version = 3;",
    )
    .unwrap();
}

/// Every table, index and trigger of a store's file, with its SQL.
fn schema_of(store: &Store) -> Vec<(String, String, Option<String>)> {
    store
        .lock()
        .conn
        .prepare("SELECT type, name, sql FROM sqlite_schema ORDER BY type, name")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The kept counts are exactly what counting the rows says.
fn assert_counts_exact(store: &Store) {
    let inner = store.lock();
    let rows = |sql: &str| -> Vec<(String, String, String, String, i64)> {
        inner
            .conn
            .prepare(sql)
            .unwrap()
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(
        rows(
            "SELECT '', owner_kind, owner_name, state, tasks FROM owner_counts ORDER BY 1, 2, 3, 4"
        ),
        rows(
            "SELECT '', owner_kind, owner_name, state, COUNT(*) FROM tasks
             GROUP BY owner_kind, owner_name, state ORDER BY 1, 2, 3, 4"
        )
    );
    assert_eq!(
        rows(
            "SELECT context_id, owner_kind, owner_name, state, tasks FROM context_counts
             ORDER BY 1, 2, 3, 4"
        ),
        rows(
            "SELECT context_id, owner_kind, owner_name, state, COUNT(*) FROM tasks
             GROUP BY context_id, owner_kind, owner_name, state ORDER BY 1, 2, 3, 4"
        )
    );
}

/// What `list` answers, read the plain way: a count and a scan of every
/// matching row.
fn listed_plainly(store: &Store, sees: &Sees, q: &ListQuery) -> Page {
    let mut conditions = Vec::new();
    let mut values: Vec<rusqlite::types::Value> = Vec::new();
    if let Some(context) = &q.context_id {
        conditions.push("context_id = ?");
        values.push(context.clone().into());
    }
    if let Some(state) = q.state {
        conditions.push("state = ?");
        values.push(state_word(state).to_string().into());
    }
    if let Some(after) = q.status_after_ms {
        conditions.push("status_ms >= ?");
        values.push(after.into());
    }
    if let Some((condition, owner)) = sees.condition() {
        conditions.push(condition);
        values.push(owner);
    }
    let filters = if conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conditions.join(" AND "))
    };
    let inner = store.lock();
    let all: Vec<(String, i64)> = inner
        .conn
        .prepare(&format!(
            "SELECT id, change FROM tasks{filters} ORDER BY change DESC"
        ))
        .unwrap()
        .query_map(rusqlite::params_from_iter(values), |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    drop(inner);
    let after: Vec<&(String, i64)> = all
        .iter()
        .filter(|(_, change)| q.after.as_ref().is_none_or(|c| (*change as u64) < c.change))
        .collect();
    let shown: Vec<&(String, i64)> = after.iter().take(q.limit as usize).copied().collect();
    let next = match shown.last() {
        Some((id, change)) if after.len() > shown.len() => Some(Cursor {
            change: *change as u64,
            task_id: id.clone(),
        }),
        _ => None,
    };
    let tasks = shown
        .iter()
        .map(|(id, _)| store.get(id, &Sees::Every).unwrap().unwrap())
        .collect();
    Page {
        tasks,
        next,
        total: all.len() as u32,
    }
}

/// A small deterministic generator (xorshift64*), so a failure repeats.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    fn pick<'a, T>(&mut self, of: &'a [T]) -> &'a T {
        &of[self.below(of.len() as u64) as usize]
    }
}

const STATES: [TaskState; 7] = [
    TaskState::Submitted,
    TaskState::Working,
    TaskState::InputRequired,
    TaskState::Completed,
    TaskState::Failed,
    TaskState::Rejected,
    TaskState::Canceled,
];

fn owners() -> Vec<Owner> {
    vec![
        Owner::Public,
        Owner::Operator,
        Owner::Declared("alice".into()),
        Owner::Declared("bob".into()),
        Owner::Member("alice".into()),
    ]
}

/// A random listing, by any caller, with any filters, from any position.
fn random_query(
    dice: &mut Dice,
    contexts: &[String],
    clock: (i64, i64),
    last_change: u64,
) -> (Sees, ListQuery) {
    let mut sees_of: Vec<Sees> = owners().into_iter().map(Sees::Own).collect();
    sees_of.push(Sees::Own(Owner::Declared("nobody".into())));
    for _ in 0..4 {
        sees_of.push(Sees::Every);
    }
    let sees = dice.pick(&sees_of).clone();
    let context_id = match dice.below(4) {
        0 | 1 => None,
        2 => Some("ctx_a".to_string()),
        _ => Some(dice.pick(contexts).clone()),
    };
    let state = match dice.below(3) {
        0 => None,
        _ => Some(*dice.pick(&STATES)),
    };
    let status_after_ms = match dice.below(3) {
        0 => None,
        _ => Some(clock.0 - 5 + dice.below((clock.1 - clock.0 + 10) as u64) as i64),
    };
    let after = match dice.below(3) {
        0 => Some(Cursor {
            change: dice.below(last_change + 3),
            task_id: String::new(),
        }),
        _ => None,
    };
    let limit = *dice.pick(&[1, 3, 50]);
    (
        sees,
        ListQuery {
            context_id,
            state,
            status_after_ms,
            after,
            limit,
        },
    )
}

#[test]
fn counts_and_listings_stay_exact_through_every_write() {
    let dir = TempDir::new("store-counts");
    let mut store = Store::open(dir.path(), false, 1).unwrap().store;
    let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
    let mut ids: Vec<String> = Vec::new();
    let mut contexts = vec!["ctx_a".to_string(), "ctx_b".to_string()];
    // The clock mostly moves on, and sometimes steps back: the listing must
    // not lean on timestamps following the change order.
    let mut clock = 1_000i64;
    let (mut earliest, mut latest) = (clock, clock);
    for step in 0..6000 {
        clock += match dice.below(20) {
            0 => -(dice.below(60) as i64),
            _ => dice.below(3) as i64,
        };
        earliest = earliest.min(clock);
        latest = latest.max(clock);
        match dice.below(100) {
            // A task, most in ctx_a, some in a context of their own.
            0..=34 => {
                let context = match dice.below(5) {
                    0 => {
                        contexts.push(format!("ctx_{step}"));
                        contexts.last().unwrap().clone()
                    }
                    1 => "ctx_b".to_string(),
                    _ => "ctx_a".to_string(),
                };
                let state = if dice.below(10) == 0 {
                    TaskState::Rejected
                } else {
                    TaskState::Submitted
                };
                let owner = dice.pick(&owners()).clone();
                // Some are written already ended, in their one change.
                let ended = Transition::to(*dice.pick(&STATES));
                let ended = (dice.below(4) == 0).then_some(&ended);
                let record = record(owner, &context, state);
                let task = store
                    .batch(|batch| batch.insert_ended(&record, ended, clock, 1))
                    .unwrap()
                    .unwrap()
                    .0;
                ids.push(task.id);
            }
            // Any task to any state, its own included.
            35..=89 if !ids.is_empty() => {
                let id = dice.pick(&ids).clone();
                let to = Transition::to(*dice.pick(&STATES));
                assert!(store.transition(&id, &to, clock, 1).unwrap().is_some());
            }
            90..=93 if !ids.is_empty() => {
                let id = dice.pick(&ids).clone();
                store.note(&id, "step", 1).unwrap();
            }
            94 => {
                let to = Transition::to(TaskState::Completed);
                assert!(
                    store
                        .transition("tsk_nope", &to, clock, 1)
                        .unwrap()
                        .is_none()
                );
            }
            // Writes no path makes today: the counts follow them all the same.
            95 if !ids.is_empty() => {
                let id = dice.pick(&ids).clone();
                store
                    .lock()
                    .conn
                    .execute("DELETE FROM tasks WHERE id = ?", [&id])
                    .unwrap();
                ids.retain(|i| *i != id);
            }
            96 if !ids.is_empty() => {
                let id = dice.pick(&ids).clone();
                store
                    .lock()
                    .conn
                    .execute(
                        "UPDATE tasks SET context_id = 'ctx_b', owner_kind = 'declared',
                             owner_name = 'bob' WHERE id = ?",
                        [&id],
                    )
                    .unwrap();
            }
            // --resume: the live tasks fail.
            97 => {
                drop(store);
                let opened = Store::open(dir.path(), true, clock).unwrap();
                store = opened.store;
            }
            _ => {}
        }
        if step % 250 == 0 || step == 5999 {
            assert_counts_exact(&store);
            let last_change = store
                .list(&Sees::Every, &query(1))
                .unwrap()
                .tasks
                .first()
                .map_or(0, |t| t.change);
            for _ in 0..40 {
                let (sees, q) = random_query(&mut dice, &contexts, (earliest, latest), last_change);
                assert_eq!(
                    store.list(&sees, &q).unwrap(),
                    listed_plainly(&store, &sees, &q),
                    "step {step}: {sees:?} {q:?}"
                );
            }
        }
    }
    assert!(ids.len() > 1500, "{}", ids.len());
}

#[test]
fn a_cutoff_is_counted_on_its_smaller_side() {
    use super::queries::{Equalities, FIRST_PROBE, Since};
    let store = Store::in_memory(1).unwrap();
    let tasks = 6 * FIRST_PROBE;
    for i in 0..tasks {
        let owner = if i % 3 == 0 {
            Owner::Declared("alice".into())
        } else {
            Owner::Public
        };
        store
            .insert(&record(owner, "ctx_a", TaskState::Submitted), 1000 + i, 0)
            .unwrap();
    }
    let probe = |sees: &Sees, cutoff: i64| {
        let filters = Equalities::of(sees, &query(50));
        Since::probe(&store.lock().conn, &filters, cutoff).unwrap()
    };
    let alice = Sees::Own(Owner::Declared("alice".into()));
    let since = |matching, oldest| Since { matching, oldest };
    // Ten changed at or after the cutoff: read there, and the oldest match
    // is the task stamped 1000 + tasks - 10.
    assert_eq!(
        probe(&Sees::Every, 1000 + tasks - 10),
        since(10, Some(tasks - 9))
    );
    assert_eq!(probe(&alice, 1000 + tasks - 10), since(3, Some(tasks - 8)));
    // Five before it: counted there, and taken from the kept total.
    assert_eq!(probe(&Sees::Every, 1005), since(tasks - 5, None));
    assert_eq!(probe(&alice, 1005), since(tasks / 3 - 2, None));
    // More than a probe's worth on both sides: the side the cutoff is
    // nearer the end of in time is counted whole, either way exact.
    for cutoff in [1000 + tasks - 300, 1000 + 300] {
        let after = 1000 + tasks - cutoff;
        assert_eq!(probe(&Sees::Every, cutoff), since(after, None));
        assert_eq!(probe(&alice, cutoff), since(after / 3, None));
    }
    // Nothing at or after: no match, and the listing reads no page.
    assert_eq!(probe(&Sees::Every, 1000 + tasks), since(0, None));
    let mut q = query(50);
    q.status_after_ms = Some(1000 + tasks);
    assert_eq!(store.list(&Sees::Every, &q).unwrap().total, 0);
}

#[test]
fn a_version_2_session_is_brought_up_to_date() {
    let dir = TempDir::new("store-v2");
    let store = Store::open(dir.path(), false, 1).unwrap().store;
    let mut dice = Dice(7);
    let mut live = 0;
    for i in 0..300 {
        let owner = dice.pick(&owners()).clone();
        let context = *dice.pick(&["ctx_a", "ctx_a", "ctx_b", "ctx_c"]);
        let task = store
            .insert(&record(owner, context, TaskState::Submitted), 10 + i, 0)
            .unwrap()
            .0;
        let state = *dice.pick(&STATES);
        store
            .transition(&task.id, &Transition::to(state), 10 + i, 0)
            .unwrap();
        live += u32::from(crate::session::tasks::is_live(state));
    }
    let before: Vec<Page> = (0..3)
        .map(|i| {
            let mut q = query(50);
            q.context_id = Some("ctx_b".into());
            q.state = [None, Some(TaskState::Completed), Some(TaskState::Working)][i];
            store.list(&Sees::Every, &q).unwrap()
        })
        .collect();
    drop(store);
    let conn = connect(&dir.path().join(SESSION_DB)).unwrap();
    as_version_2(&conn);
    drop(conn);

    let resumed = Store::open(dir.path(), true, 1000).unwrap();
    let store = resumed.store;
    assert_eq!(resumed.failed_by_resume.len() as u32, live);
    let version: i64 = store
        .lock()
        .conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    // The same tables, indexes and triggers as a session begun today, and
    // counts that agree with the rows, the tasks --resume failed included.
    assert_eq!(schema_of(&store), schema_of(&Store::in_memory(1).unwrap()));
    assert_counts_exact(&store);
    let mut q = query(50);
    q.context_id = Some("ctx_b".into());
    let page = store.list(&Sees::Every, &q).unwrap();
    assert_eq!(page.total, before[0].total);
    q.state = Some(TaskState::Completed);
    assert_eq!(store.list(&Sees::Every, &q).unwrap(), before[1]);
    q.state = Some(TaskState::Working);
    assert_eq!(store.list(&Sees::Every, &q).unwrap().total, 0);
    q.state = Some(TaskState::Failed);
    assert_eq!(
        store.list(&Sees::Every, &q).unwrap(),
        listed_plainly(&store, &Sees::Every, &q)
    );
    // Later writes keep them.
    let next = store
        .insert(
            &record(Owner::Public, "ctx_b", TaskState::Submitted),
            1001,
            0,
        )
        .unwrap()
        .0;
    store
        .transition(&next.id, &Transition::to(TaskState::Completed), 1002, 0)
        .unwrap();
    assert_counts_exact(&store);
}

#[test]
fn count_by_state_reads_the_kept_counts() {
    let store = Store::in_memory(1).unwrap();
    for (i, state) in [
        TaskState::Submitted,
        TaskState::Rejected,
        TaskState::Submitted,
    ]
    .into_iter()
    .enumerate()
    {
        let owner = if i == 0 {
            Owner::Public
        } else {
            Owner::Declared("a".into())
        };
        store.insert(&record(owner, "c", state), 1, 0).unwrap();
    }
    assert_eq!(
        store.count_by_state().unwrap(),
        [("rejected".to_string(), 1), ("submitted".to_string(), 2)]
    );
}
