//! ListTasks ("ListTasks"): its params read in the reference's order, the
//! opaque page tokens, and the ListTasksResponse.

use base64::Engine;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use crate::imports::model::{Cursor, ListQuery, Page, TaskState};
use crate::methods::task::{Artifacts, Seq, TaskJson};
use crate::rpc::errors::{InvalidParams, RpcError};
use crate::timestamp;

pub const DEFAULT_PAGE_SIZE: u32 = 50;
pub const MAX_PAGE_SIZE: u32 = 100;

/// What a ListTasks request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing {
    pub query: ListQuery,
    /// TASK_STATE_AUTH_REQUIRED: the door never produces it, so no task
    /// matches.
    pub matches_nothing: bool,
    pub include_artifacts: bool,
}

fn invalid(which: InvalidParams<'_>) -> RpcError {
    RpcError::invalid_params(which)
}

/// Reads the params in order; the first one refused answers.
pub fn read(params: &Map<String, Value>) -> Result<Listing, RpcError> {
    let context_id = match params.get("contextId") {
        None => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(invalid(InvalidParams::ContextId)),
    };
    let (state, matches_nothing) = match params.get("status") {
        None => (None, false),
        Some(Value::String(name)) => match name.as_str() {
            "TASK_STATE_UNSPECIFIED" => (None, false),
            "TASK_STATE_AUTH_REQUIRED" => (None, true),
            other => (Some(state_named(other).ok_or_else(status_refused)?), false),
        },
        Some(_) => return Err(status_refused()),
    };
    let limit = match params.get("pageSize") {
        None => DEFAULT_PAGE_SIZE,
        // A number whose value is a whole number is an integer however it is
        // written (5, 5.0, 1e20); beyond the cap it reads as the cap.
        Some(size) => match size.as_f64() {
            Some(n) if n >= 1.0 && n.fract() == 0.0 => n.min(f64::from(MAX_PAGE_SIZE)) as u32,
            _ => return Err(invalid(InvalidParams::PageSize)),
        },
    };
    let after = match params.get("pageToken") {
        None => None,
        Some(Value::String(token)) if token.is_empty() => None,
        Some(Value::String(token)) => Some(decode_token(token).ok_or_else(token_refused)?),
        Some(_) => return Err(token_refused()),
    };
    let status_after_ms = match params.get("statusTimestampAfter") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => {
            Some(timestamp::parse_cutoff_ms(text).ok_or_else(timestamp_refused)?)
        }
        Some(_) => return Err(timestamp_refused()),
    };
    let include_artifacts = match params.get("includeArtifacts") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid(InvalidParams::IncludeArtifacts)),
    };
    Ok(Listing {
        query: ListQuery {
            context_id,
            state,
            status_after_ms,
            after,
            limit,
        },
        matches_nothing,
        include_artifacts,
    })
}

fn status_refused() -> RpcError {
    invalid(InvalidParams::Status)
}

fn token_refused() -> RpcError {
    invalid(InvalidParams::PageToken)
}

fn timestamp_refused() -> RpcError {
    invalid(InvalidParams::StatusTimestampAfter)
}

/// A TASK_STATE_* name the door produces.
pub fn state_named(name: &str) -> Option<TaskState> {
    TaskState::ALL.into_iter().find(|s| s.wire() == name)
}

/// A page token names a position in the change order and nothing else:
/// base64 of `<change>:<task id>`.
pub fn encode_token(cursor: &Cursor) -> String {
    base64::engine::general_purpose::STANDARD
        .encode(format!("{}:{}", cursor.change, cursor.task_id))
}

fn decode_token(token: &str) -> Option<Cursor> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(token)
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (change, task_id) = text.split_once(':')?;
    let change = change
        .parse()
        .ok()
        .filter(|_| change.bytes().all(|b| b.is_ascii_digit()))?;
    let hex = task_id.strip_prefix("tsk_")?;
    (hex.len() == 32
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
    .then(|| Cursor {
        change,
        task_id: task_id.to_string(),
    })
}

/// A page and the listing it answers.
pub struct Answer {
    pub page: Page,
    pub listing: Listing,
}

/// The ListTasksResponse: its four members always present.
impl Serialize for Answer {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Answer { page, listing } = self;
        let artifacts = if listing.include_artifacts {
            Artifacts::Always
        } else {
            Artifacts::Omitted
        };
        let tasks = page.tasks.iter().map(|task| TaskJson { task, artifacts });
        let mut response = serializer.serialize_map(Some(4))?;
        response.serialize_entry("tasks", &Seq(tasks))?;
        response.serialize_entry(
            "nextPageToken",
            &page.next.as_ref().map(encode_token).unwrap_or_default(),
        )?;
        response.serialize_entry("pageSize", &listing.query.limit)?;
        response.serialize_entry("totalSize", &page.total)?;
        response.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(params: Value) -> String {
        read(params.as_object().unwrap()).unwrap_err().message
    }

    // "ListTasks": defaults and the cap.
    #[test]
    fn defaults_and_cap() {
        let listing = read(&Map::new()).unwrap();
        assert_eq!(
            listing.query,
            ListQuery {
                context_id: None,
                state: None,
                status_after_ms: None,
                after: None,
                limit: 50
            }
        );
        assert!(!listing.include_artifacts);
        let big = read(
            json!({"pageSize": 1000, "historyLength": "x", "other": 1})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(big.query.limit, 100);
        let huge = read(json!({"pageSize": u64::MAX}).as_object().unwrap()).unwrap();
        assert_eq!(huge.query.limit, 100);
        let beyond: Value = serde_json::from_str(r#"{"pageSize": 100000000000000000000}"#).unwrap();
        assert_eq!(read(beyond.as_object().unwrap()).unwrap().query.limit, 100);
        let written_as_float: Value = serde_json::from_str(r#"{"pageSize": 5.0}"#).unwrap();
        assert_eq!(
            read(written_as_float.as_object().unwrap())
                .unwrap()
                .query
                .limit,
            5
        );
        let auth = read(
            json!({"status": "TASK_STATE_AUTH_REQUIRED"})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        assert!(auth.matches_nothing);
    }

    // "ListTasks": each refusal, first one refused answers.
    #[test]
    fn refusals_in_order() {
        assert_eq!(
            refused(json!({"contextId": 5, "status": "x"})),
            "Invalid params: contextId must be a string"
        );
        assert_eq!(
            refused(json!({"status": "UNRECOGNIZED", "pageSize": 0})),
            "Invalid params: status must be a TASK_STATE_* name"
        );
        assert_eq!(
            refused(json!({"status": 3})),
            "Invalid params: status must be a TASK_STATE_* name"
        );
        for size in [
            json!(0),
            json!(-1),
            json!(1.5),
            json!(0.5),
            json!("5"),
            json!(null),
            json!(true),
        ] {
            assert_eq!(
                refused(json!({"pageSize": size})),
                "Invalid params: pageSize must be an integer from 1"
            );
        }
        for token in [
            json!("nope"),
            json!(5),
            json!(encode_token(&Cursor {
                change: 1,
                task_id: "ctx_x".into()
            })),
        ] {
            assert_eq!(
                refused(json!({"pageToken": token})),
                "Invalid params: pageToken is not a page token this door answered"
            );
        }
        assert_eq!(
            refused(json!({"statusTimestampAfter": "yesterday"})),
            "statusTimestampAfter must be an RFC 3339 timestamp, such as 2026-10-13T09:00:00Z"
        );
        assert_eq!(
            refused(json!({"includeArtifacts": "yes"})),
            "Invalid params: includeArtifacts must be a boolean"
        );
    }

    #[test]
    fn page_tokens_round_trip() {
        let cursor = Cursor {
            change: 12,
            task_id: "tsk_01a1b2c3d4e5f60718293a4b5c6d7e8f".into(),
        };
        let token = encode_token(&cursor);
        assert!(token.starts_with("MTI6dHNrXzAxYT"));
        let listing = read(json!({"pageToken": token}).as_object().unwrap()).unwrap();
        assert_eq!(listing.query.after, Some(cursor));
    }
}
