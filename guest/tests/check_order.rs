//! The check order natively ("What the door answers"): what each step asks of
//! the imports and when it reads the body, which end-to-end tests cannot see.

use crate::common;

use std::cell::Cell;

use common::{FakeHost as Fake, post};
use murmur_door_guest::{Imports, Request, Response};
use serde_json::{Value, json};

/// A request the door answers whole.
fn handle<I: Imports>(imports: &I, request: &Request, body: impl FnOnce() -> Vec<u8>) -> Response {
    murmur_door_guest::handle(imports, request, body)
        .whole()
        .expect("a whole answer")
}

fn body_of(response: &murmur_door_guest::Response) -> Value {
    serde_json::from_slice(&response.body).unwrap()
}

// Step 2: "before the path, the body or the method is read".
#[test]
fn a_refused_token_never_reads_the_body() {
    let fake = Fake::new(true);
    let read = Cell::new(false);
    let response = handle(&fake, &post(&[("authorization", "Bearer nope")]), || {
        read.set(true);
        b"{}".to_vec()
    });
    assert_eq!(response.status, 401);
    assert!(!read.get());
    assert_eq!(*fake.verified.borrow(), ["nope"]);
}

// "Security": a public door ignores Authorization and verifies nothing.
#[test]
fn a_public_door_verifies_nothing() {
    let fake = Fake::new(false);
    let response = handle(&fake, &post(&[("authorization", "Bearer op")]), || {
        br#"{"jsonrpc":"2.0","id":1,"method":"murmur.StopSession"}"#.to_vec()
    });
    assert_eq!(response.status, 200);
    assert!(fake.verified.borrow().is_empty());
    assert_eq!(fake.stops.get(), 1);
}

// "Tenants": refused before anything starts, stops or is cancelled; and
// step 12 and the version likewise.
#[test]
fn a_refused_stop_stops_nothing() {
    let fake = Fake::new(false);
    for params in [r#"{"tenant":"acme"}"#, "[]", "null"] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"murmur.StopSession","params":{params}}}"#
        );
        let response = handle(&fake, &post(&[]), || body.into_bytes());
        assert_eq!(body_of(&response)["error"]["code"], -32602);
        assert_eq!(response.header("A2A-Extensions"), None);
    }
    let unversioned = Request::new("POST", "/", [("content-type", "application/json")]);
    handle(&fake, &unversioned, || {
        br#"{"jsonrpc":"2.0","id":1,"method":"murmur.StopSession"}"#.to_vec()
    });
    assert_eq!(fake.stops.get(), 0);
}

// Step 11 before the delegation check: a credential without SendMessage is
// refused before the session is asked about the delegation.
#[test]
fn completion_checks_in_order() {
    let fake = Fake::new(true);
    fake.ending.set(true);
    let completion = [
        ("authorization", "Bearer watcher"),
        ("x-murmur-task-origin", "completion"),
        (
            "x-murmur-completion-session",
            "ses_019f01a940ce7761854e768ecbe3d399",
        ),
        ("x-murmur-delegation-id", "dlg_1"),
    ];
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{}}"#;
    let response = handle(&fake, &post(&completion), || body.to_vec());
    assert_eq!(response.status, 403);
    assert!(fake.awaited.borrow().is_empty());

    let mut as_operator = completion;
    as_operator[0] = ("authorization", "Bearer op");
    let response = handle(&fake, &post(&as_operator), || body.to_vec());
    assert_eq!(*fake.awaited.borrow(), ["dlg_1"]);
    assert_eq!(
        body_of(&response)["error"],
        json!({"code": -31002, "message": "delegation dlg_1 belongs to a session that is ending", "data": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "COMPLETION_NOT_AWAITED",
            "domain": "murmur.nexus", "metadata": {"delegationId": "dlg_1"}}]})
    );
}

// "Door extension": a served murmur.StopSession names the door URI; the
// extended card needs no scope and names nothing.
#[test]
fn served_answers_name_the_extensions_they_used() {
    let fake = Fake::new(true);
    let stop = handle(&fake, &post(&[("authorization", "Bearer op")]), || {
        br#"{"jsonrpc":"2.0","id":1,"method":"murmur.StopSession"}"#.to_vec()
    });
    assert_eq!(
        stop.header("A2A-Extensions"),
        Some("https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1")
    );
    let card = handle(&fake, &post(&[("authorization", "Bearer watcher")]), || {
        br#"{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard"}"#.to_vec()
    });
    assert_eq!(card.header("A2A-Extensions"), None);
    assert_eq!(
        body_of(&card)["result"]["capabilities"]["extensions"][1]["params"]["sessionId"],
        json!(fake.identity.session_id)
    );
}

// Every JSON response says how long it is, so no answer is chunked.
#[test]
fn json_answers_carry_their_length() {
    let fake = Fake::new(false);
    let response = handle(&fake, &post(&[]), || b"{".to_vec());
    assert_eq!(
        response.header("content-length"),
        Some(response.body.len().to_string().as_str())
    );
}

// "Errors": -32603 is for a request the door accepted and could not complete.
// A store that fails is answered so, never as an empty page or an empty
// stop report.
#[test]
fn a_failing_store_is_answered_32603() {
    let fake = Fake::new(false);
    *fake.failing.borrow_mut() = Some("disk I/O error".into());
    let list = handle(&fake, &post(&[]), || {
        br#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#.to_vec()
    });
    assert_eq!(
        body_of(&list),
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603,
            "message": "Internal error: the session could not take this request: disk I/O error"}})
    );
    let stop = handle(&fake, &post(&[]), || {
        br#"{"jsonrpc":"2.0","id":2,"method":"murmur.StopSession","params":{}}"#.to_vec()
    });
    assert_eq!(
        body_of(&stop),
        json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32603,
            "message": "Internal error: the session could not record the stop: disk I/O error"}})
    );
}

// The capsule's names (`session.identify`) are asked for only by what shows
// them: the card, the extended card, murmur.StopSession, a completion's
// address and a token refusal's realm. A task method or a JSON-RPC error
// asks the host for the capsule's rules alone.
#[test]
fn only_what_names_the_capsule_asks_for_its_identity() {
    let fake = Fake::new(true);
    let id = fake.hold(
        Some(murmur_door_guest::imports::model::Credential::Operator),
        murmur_door_guest::imports::model::TaskState::Completed,
        None,
        Some("done"),
    );
    let asked = |request: &Request, body: &str| {
        let before = fake.identities.get();
        handle(&fake, request, || body.as_bytes().to_vec());
        fake.identities.get() - before
    };
    let op = post(&[("authorization", "Bearer op")]);
    let get = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{{"id":"{id}"}}}}"#);
    assert_eq!(asked(&op, &get), 0);
    assert_eq!(asked(&op, r#"{"jsonrpc":"2.0","id":1,"method":"Nope"}"#), 0);
    assert_eq!(asked(&post(&[]), &get), 1, "a 401 names the realm");
    let extended = r#"{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard"}"#;
    assert_eq!(asked(&op, extended), 1);
    let card = common::request("GET", "/.well-known/agent-card.json", &[]);
    assert_eq!(asked(&card, ""), 1);
}
