//! ListTasks ("ListTasks", "Task states", "Status timestamps"): every param in
//! its refusal order with its exact message, the ListTasksResponse, the change
//! order, the filters, paging with opaque position tokens, statusTimestampAfter
//! in any offset, and includeArtifacts. Driven by the script agent on a public
//! door, where every caller sees every task ("Who sees a task").

use crate::common;

use common::{Door, id, ids};
use serde_json::{Value, json};

const SINGLE: &str = "name: lister\nversion: 0.1.0\nlifecycle: {task_acceptance: single}\n";

fn list(door: &Door, params: Value) -> Value {
    door.result(None, "ListTasks", params)
}

/// A task as ListTasks shows it without includeArtifacts: GetTask's answer
/// without `artifacts`.
fn without_artifacts(task: &Value) -> Value {
    let mut task = task.clone();
    task.as_object_mut().unwrap().remove("artifacts");
    task
}

/// A task as ListTasks shows it with includeArtifacts: GetTask's answer with
/// `artifacts` always, `[]` when it has none.
fn with_artifacts(task: &Value) -> Value {
    let mut task = task.clone();
    if task.get("artifacts").is_none() {
        task["artifacts"] = json!([]);
    }
    task
}

/// A task held until it settles, answered COMPLETED.
fn completed(door: &Door, text: &str, extra: Value) -> String {
    let task = door.send_task(None, text, extra);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    id(&task)
}

/// `sleep 60000`, answered at once and then seen WORKING: the live task of a
/// `single` door until it is canceled.
fn working(door: &Door, extra: Value) -> String {
    let mut extra = extra;
    extra["configuration"] = json!({"returnImmediately": true});
    let task = door.send_task(None, "sleep 60000", extra);
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED", "{task}");
    door.wait_state(None, &id(&task), "TASK_STATE_WORKING");
    id(&task)
}

/// A new task while another is live: answered TASK_STATE_REJECTED at once.
fn rejected(door: &Door, extra: Value) -> String {
    let task = door.send_task(None, "reply never", extra);
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED", "{task}");
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"],
        "task rejected: capsule is busy"
    );
    id(&task)
}

// "ListTasks": each task is exactly what GetTask answers for it, without
// artifacts unless includeArtifacts is true; then artifacts is the task's
// artifacts, or []. The most recently changed first.
#[test]
fn each_task_as_get_task_answers_it_most_recently_changed_first() {
    let door = Door::start(SINGLE);
    let answered = completed(&door, "reply four", json!({}));
    let failed = door.send_task(None, "fail the driver failed", json!({}));
    assert_eq!(failed["status"]["state"], "TASK_STATE_FAILED");
    let waiting = door.send_task(None, "ask Which branch?", json!({}));
    assert_eq!(waiting["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let order = [id(&waiting), id(&failed), answered.clone()];
    let tasks: Vec<Value> = order.iter().map(|t| door.get_task(None, t)).collect();
    // What GetTask answers: the response, no artifact, the prompt.
    assert_eq!(
        tasks[2]["artifacts"],
        json!([{"artifactId": "response", "name": "response",
                "parts": [{"text": "four", "mediaType": "text/plain"}]}])
    );
    assert_eq!(tasks[1].get("artifacts"), None);
    assert_eq!(
        tasks[0]["artifacts"],
        json!([{"artifactId": "prompt", "name": "prompt",
                "parts": [{"text": "Which branch?", "mediaType": "text/plain"}]}])
    );

    let plain: Vec<Value> = tasks.iter().map(without_artifacts).collect();
    let full: Vec<Value> = tasks.iter().map(with_artifacts).collect();
    for params in [json!({}), json!({"includeArtifacts": false})] {
        assert_eq!(
            list(&door, params),
            json!({"tasks": plain, "nextPageToken": "", "pageSize": 50, "totalSize": 3})
        );
    }
    assert_eq!(
        list(&door, json!({"includeArtifacts": true})),
        json!({"tasks": full, "nextPageToken": "", "pageSize": 50, "totalSize": 3})
    );

    // The reply moves the waiting task on; it stays first, now completed.
    let reply = door.send_task(None, "reply main", json!({"message": {"taskId": order[0]}}));
    assert_eq!(reply["status"]["state"], "TASK_STATE_COMPLETED");
    let page = list(&door, json!({"includeArtifacts": true}));
    assert_eq!(ids(&page), order);
    assert_eq!(
        page["tasks"][0],
        with_artifacts(&door.get_task(None, &order[0]))
    );
    assert_eq!(page["tasks"][0]["artifacts"][0]["parts"][0]["text"], "main");
}

// "ListTasks": a task moves to the front of the order each time its state
// changes or its ending is recorded.
#[test]
fn a_task_that_changes_moves_to_the_front() {
    let door = Door::start(SINGLE);
    let first = completed(&door, "reply one", json!({}));
    let live = working(&door, json!({}));
    let refused = rejected(&door, json!({}));
    assert_eq!(ids(&list(&door, json!({}))), [&refused, &live, &first]);
    let canceled = door.result(None, "CancelTask", json!({"id": live}));
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED");
    let page = list(&door, json!({}));
    assert_eq!(ids(&page), [&live, &refused, &first]);
    assert_eq!(
        page["tasks"][0],
        without_artifacts(&door.get_task(None, &live))
    );
    // The door has room again: a new task goes to the front.
    let last = completed(&door, "reply two", json!({}));
    assert_eq!(
        ids(&list(&door, json!({}))),
        [&last, &live, &refused, &first]
    );
}

// "ListTasks": contextId and status filter; "" and TASK_STATE_UNSPECIFIED
// filter nothing; TASK_STATE_AUTH_REQUIRED matches no task; totalSize counts
// the matching tasks across every page.
#[test]
fn filters_by_context_and_state() {
    let door = Door::start(SINGLE);
    let a = |extra: &str| json!({"message": {"contextId": format!("ctx-a{extra}")}});
    let b = json!({"message": {"contextId": "ctx-b"}});
    let t1 = completed(&door, "reply one", a(""));
    let t2 = door.send_task(None, "fail two", b.clone());
    assert_eq!(t2["status"]["state"], "TASK_STATE_FAILED");
    let t2 = id(&t2);
    let t3 = completed(&door, "reply three", a(""));
    let t4 = working(&door, b.clone());
    let t5 = rejected(&door, a(""));
    assert_eq!(door.get_task(None, &t1)["contextId"], "ctx-a");
    assert_eq!(door.get_task(None, &t4)["contextId"], "ctx-b");

    let all = [&t5, &t4, &t3, &t2, &t1];
    for (params, expected) in [
        (json!({}), all.to_vec()),
        (json!({"contextId": ""}), all.to_vec()),
        (json!({"status": "TASK_STATE_UNSPECIFIED"}), all.to_vec()),
        (json!({"contextId": "ctx-a"}), vec![&t5, &t3, &t1]),
        (json!({"contextId": "ctx-b"}), vec![&t4, &t2]),
        (json!({"contextId": "ctx-c"}), vec![]),
        // A contextId is matched exactly.
        (json!({"contextId": "ctx-"}), vec![]),
        (json!({"contextId": "CTX-A"}), vec![]),
        (json!({"status": "TASK_STATE_COMPLETED"}), vec![&t3, &t1]),
        (json!({"status": "TASK_STATE_FAILED"}), vec![&t2]),
        (json!({"status": "TASK_STATE_WORKING"}), vec![&t4]),
        (json!({"status": "TASK_STATE_REJECTED"}), vec![&t5]),
        (json!({"status": "TASK_STATE_SUBMITTED"}), vec![]),
        (json!({"status": "TASK_STATE_INPUT_REQUIRED"}), vec![]),
        (json!({"status": "TASK_STATE_CANCELED"}), vec![]),
        (json!({"status": "TASK_STATE_AUTH_REQUIRED"}), vec![]),
        (
            json!({"status": "TASK_STATE_AUTH_REQUIRED", "contextId": "ctx-a"}),
            vec![],
        ),
        (
            json!({"contextId": "ctx-a", "status": "TASK_STATE_COMPLETED"}),
            vec![&t3, &t1],
        ),
        (
            json!({"contextId": "ctx-b", "status": "TASK_STATE_COMPLETED"}),
            vec![],
        ),
    ] {
        let page = list(&door, params.clone());
        assert_eq!(ids(&page), expected, "{params}");
        assert_eq!(page["totalSize"], expected.len(), "{params}");
        assert_eq!(page["nextPageToken"], "", "{params}");
        assert_eq!(page["pageSize"], 50, "{params}");
    }
    // totalSize counts across every page, not the page.
    let page = list(&door, json!({"contextId": "ctx-a", "pageSize": 1}));
    assert_eq!(ids(&page), [&t5]);
    assert_eq!(page["totalSize"], 3);
    assert_eq!(page["pageSize"], 1);
    let page = list(
        &door,
        json!({"status": "TASK_STATE_AUTH_REQUIRED", "pageSize": 1}),
    );
    assert_eq!(
        page,
        json!({"tasks": [], "nextPageToken": "", "pageSize": 1, "totalSize": 0})
    );
}

// "ListTasks": pageSize from 1, 50 when absent, 100 above 100; the answer
// names the size used; nextPageToken is "" on the last page; a walk returns
// every matching task once while none changes; the filters apply afresh to
// every page.
#[test]
fn pages_walk_every_task_once() {
    let door = Door::start(SINGLE);
    let mut made = Vec::new();
    for n in 1..=7 {
        let context = if n % 2 == 1 { "ctx-odd" } else { "ctx-even" };
        made.push(completed(
            &door,
            &format!("reply {n}"),
            json!({"message": {"contextId": context}}),
        ));
    }
    made.reverse(); // most recently changed first: 7, 6, …, 1
    for size in 1..=8u64 {
        let mut walked: Vec<String> = Vec::new();
        let mut token = String::new();
        let mut pages = 0;
        loop {
            let page = list(&door, json!({"pageSize": size, "pageToken": token}));
            pages += 1;
            assert_eq!(page["pageSize"], size);
            assert_eq!(page["totalSize"], 7);
            let got = ids(&page);
            assert!(!got.is_empty() && got.len() as u64 <= size, "{page}");
            walked.extend(got.iter().map(|s| s.to_string()));
            token = page["nextPageToken"].as_str().unwrap().to_string();
            if token.is_empty() {
                break;
            }
            assert!(pages < 10, "the walk does not end");
        }
        assert_eq!(walked, made, "pageSize {size}");
        assert_eq!(pages, 7u64.div_ceil(size), "pageSize {size}");
    }
    // A page that exactly holds the rest is the last one.
    let page = list(&door, json!({"pageSize": 7}));
    assert_eq!(page["nextPageToken"], "");
    let page = list(&door, json!({"pageSize": 6}));
    assert_ne!(page["nextPageToken"], "");
    // The caps.
    assert_eq!(list(&door, json!({}))["pageSize"], 50);
    assert_eq!(list(&door, json!({"pageSize": 100}))["pageSize"], 100);
    assert_eq!(list(&door, json!({"pageSize": 101}))["pageSize"], 100);
    assert_eq!(list(&door, json!({"pageSize": 1000}))["pageSize"], 100);
    assert_eq!(list(&door, json!({"pageSize": 1000}))["totalSize"], 7);
    // An integer beyond u64, and a whole number written with a fraction.
    let beyond: Value = serde_json::from_str(r#"{"pageSize": 100000000000000000000}"#).unwrap();
    assert_eq!(list(&door, beyond)["pageSize"], 100);
    let whole: Value = serde_json::from_str(r#"{"pageSize": 3.0}"#).unwrap();
    assert_eq!(list(&door, whole)["pageSize"], 3);

    // The same walk filtered: every odd task once.
    let odd: Vec<&String> = made.iter().step_by(2).collect();
    let first = list(&door, json!({"contextId": "ctx-odd", "pageSize": 3}));
    assert_eq!(ids(&first), odd[..3]);
    assert_eq!(first["totalSize"], 4);
    let token = first["nextPageToken"].as_str().unwrap();
    let second = list(
        &door,
        json!({"contextId": "ctx-odd", "pageSize": 3, "pageToken": token}),
    );
    assert_eq!(ids(&second), odd[3..]);
    assert_eq!(second["nextPageToken"], "");
    assert_eq!(second["totalSize"], 4);

    // A token names a position and nothing else: taken from an unfiltered
    // page (after task 5), it continues any filter from there.
    let unfiltered = list(&door, json!({"pageSize": 3}));
    assert_eq!(ids(&unfiltered), made[..3]);
    let token = unfiltered["nextPageToken"].as_str().unwrap();
    for (params, expected) in [
        (json!({"contextId": "ctx-odd"}), vec![&made[4], &made[6]]),
        (json!({"contextId": "ctx-even"}), vec![&made[3], &made[5]]),
        (json!({"status": "TASK_STATE_FAILED"}), vec![]),
        (json!({}), made[3..].iter().collect()),
    ] {
        let mut params = params;
        params["pageToken"] = json!(token);
        let page = list(&door, params.clone());
        assert_eq!(ids(&page), expected, "{params}");
        assert_eq!(page["nextPageToken"], "", "{params}");
    }
}

// "ListTasks": a task that changes during a walk moves ahead of the cursor,
// and a fresh listing shows it first.
#[test]
fn a_task_changing_during_a_walk_moves_ahead_of_the_cursor() {
    let door = Door::start(SINGLE);
    let live = working(&door, json!({}));
    let refused: Vec<String> = (0..4).map(|_| rejected(&door, json!({}))).collect();
    // Most recently changed first: the four refusals, then the live task.
    let first = list(&door, json!({"pageSize": 2}));
    assert_eq!(ids(&first), [&refused[3], &refused[2]]);
    assert_eq!(first["totalSize"], 5);
    let token = first["nextPageToken"].as_str().unwrap().to_string();
    assert_ne!(token, "");
    door.result(None, "CancelTask", json!({"id": live}));
    let second = list(&door, json!({"pageSize": 2, "pageToken": token}));
    assert_eq!(ids(&second), [&refused[1], &refused[0]]);
    assert_eq!(second["nextPageToken"], "");
    assert_eq!(second["totalSize"], 5);
    let fresh = list(&door, json!({"pageSize": 2}));
    assert_eq!(ids(&fresh), [&live, &refused[3]]);
    assert_eq!(fresh["tasks"][0]["status"]["state"], "TASK_STATE_CANCELED");
}

// "Status timestamps": RFC 3339 UTC with milliseconds and a Z, the task's last
// change. "ListTasks": statusTimestampAfter keeps the tasks whose
// status.timestamp is at or after it, in any offset; a cutoff copied from a
// task's status.timestamp includes that task; null is every task.
#[test]
fn status_timestamp_after_is_inclusive_in_any_offset() {
    let door = Door::start(SINGLE);
    let before = now_ms();
    let mut made = Vec::new();
    for n in 0..4 {
        made.push(completed(&door, &format!("reply {n}"), json!({})));
        // Distinct milliseconds, so each cutoff falls between two tasks.
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let after = now_ms();
    made.reverse();
    let tasks: Vec<Value> = made.iter().map(|t| door.get_task(None, t)).collect();
    let stamps: Vec<i64> = tasks
        .iter()
        .map(|t| {
            let text = t["status"]["timestamp"].as_str().unwrap();
            let ms = parse_ms(text).unwrap_or_else(|| panic!("not RFC 3339 UTC ms Z: {text}"));
            assert!(
                before <= ms && ms <= after,
                "{text} is not the task's last change"
            );
            ms
        })
        .collect();
    assert!(stamps.windows(2).all(|w| w[0] >= w[1]), "{stamps:?}");

    let matching = |cutoff_ms: i64| -> Vec<&String> {
        made.iter()
            .zip(&stamps)
            .filter(|(_, ms)| **ms >= cutoff_ms)
            .map(|(id, _)| id)
            .collect()
    };
    let check = |cutoff: Value, expected: Vec<&String>| {
        let page = list(&door, json!({"statusTimestampAfter": cutoff}));
        assert_eq!(ids(&page), expected, "{cutoff}");
        assert_eq!(page["totalSize"], expected.len(), "{cutoff}");
    };
    for (i, task) in tasks.iter().enumerate() {
        let ms = stamps[i];
        // Copied from the task: includes it.
        let copied = task["status"]["timestamp"].clone();
        assert!(matching(ms).contains(&&made[i]));
        check(copied, matching(ms));
        // The same instant in other offsets, and with more digits.
        check(json!(format_at(ms, 120, 3)), matching(ms));
        check(json!(format_at(ms, -270, 3)), matching(ms));
        check(
            json!(format_at(ms, 0, 3).replace('Z', "+00:00")),
            matching(ms),
        );
        check(json!(format_at(ms, 0, 6)), matching(ms));
        check(json!(format_at(ms, 60, 9)), matching(ms));
        // Half a millisecond earlier still includes it; half later does not;
        // one millisecond later does not.
        check(json!(half_ms(ms - 1, 5)), matching(ms));
        check(json!(half_ms(ms, 5)), matching(ms + 1));
        check(json!(format_at(ms + 1, 0, 3)), matching(ms + 1));
        check(json!(format_at(ms + 1, -60, 3)), matching(ms + 1));
    }
    check(Value::Null, made.iter().collect());
    check(json!("1970-01-01T00:00:00Z"), made.iter().collect());
    check(json!(format_at(before, 0, 0)), made.iter().collect());
    check(json!("2999-01-01T00:00:00Z"), vec![]);
    // Combined with the other filters, and totalSize across pages.
    let page = list(
        &door,
        json!({"statusTimestampAfter": tasks[2]["status"]["timestamp"], "pageSize": 1,
               "status": "TASK_STATE_COMPLETED"}),
    );
    assert_eq!(ids(&page), [&made[0]]);
    assert_eq!(page["totalSize"], matching(stamps[2]).len());
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Milliseconds since the epoch of a status timestamp, which must be exactly
/// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn parse_ms(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let shape = "dddd-dd-ddTdd:dd:dd.dddZ";
    if b.len() != shape.len()
        || !shape.bytes().zip(b).all(|(s, c)| {
            if s == b'd' {
                c.is_ascii_digit()
            } else {
                s == *c
            }
        })
    {
        return None;
    }
    let n = |from: usize, to: usize| text[from..to].parse::<i64>().unwrap();
    let (month, day, hour, minute, second) = (n(5, 7), n(8, 10), n(11, 13), n(14, 16), n(17, 19));
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let days = days_from_civil(n(0, 4), month, day);
    Some((((days * 24 + hour) * 60 + minute) * 60 + second) * 1000 + n(20, 23))
}

/// The instant `ms` written as RFC 3339 in the offset `offset_minutes`, with
/// `digits` fractional digits (0, 3, 6 or 9; the extra ones zero).
fn format_at(ms: i64, offset_minutes: i64, digits: usize) -> String {
    let local = ms + offset_minutes * 60_000;
    let (days, rest) = (local.div_euclid(86_400_000), local.rem_euclid(86_400_000));
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, milli) = (
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000,
    );
    let fraction = match digits {
        0 => String::new(),
        _ => format!(".{:0<digits$}", format!("{milli:03}")),
    };
    let offset = if offset_minutes == 0 {
        "Z".to_string()
    } else {
        let sign = if offset_minutes < 0 { '-' } else { '+' };
        let abs = offset_minutes.abs();
        format!("{sign}{:02}:{:02}", abs / 60, abs % 60)
    };
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}{fraction}{offset}")
}

/// Half a millisecond after `ms`: `….mmm5Z` (the digit given).
fn half_ms(ms: i64, digit: u8) -> String {
    format_at(ms, 0, 3).replace('Z', &format!("{digit}Z"))
}

#[test]
fn the_timestamp_helpers_agree() {
    let at = 1_760_346_000_123;
    assert_eq!(format_at(at, 0, 3), "2025-10-13T09:00:00.123Z");
    assert_eq!(format_at(at, 120, 3), "2025-10-13T11:00:00.123+02:00");
    assert_eq!(format_at(at, -270, 6), "2025-10-13T04:30:00.123000-04:30");
    assert_eq!(format_at(at, 0, 0), "2025-10-13T09:00:00Z");
    assert_eq!(half_ms(at, 5), "2025-10-13T09:00:00.1235Z");
    assert_eq!(parse_ms("2025-10-13T09:00:00.123Z"), Some(at));
    assert_eq!(parse_ms("2025-10-13T09:00:00.123+00:00"), None);
    assert_eq!(parse_ms("2025-10-13T09:00:00Z"), None);
    assert_eq!(parse_ms("1970-01-01T00:00:00.000Z"), Some(0));
}
