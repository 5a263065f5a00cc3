//! The ids the session mints: a prefix, `_`, and 32 lowercase hex digits, the
//! bits of a UUIDv7. Ids minted by one process sort in the order they were
//! minted, and ids of later processes sort after them (the first 48 bits are
//! the Unix time in milliseconds).

/// `tsk_…`: a task.
pub fn task_id() -> String {
    minted("tsk")
}

/// `ctx_…`: the context of a task whose message named none.
pub fn context_id() -> String {
    minted("ctx")
}

/// `msg_…`: a message the session writes.
pub fn message_id() -> String {
    minted("msg")
}

/// `wrk_…`: a shell command moved to the background.
pub fn work_id() -> String {
    minted("wrk")
}

/// `dlg_…`: a delegation to a sub-capsule.
pub fn delegation_id() -> String {
    minted("dlg")
}

/// `ses_…`: a session.
pub fn session_id() -> String {
    minted("ses")
}

fn minted(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefixed_time_ordered_hex() {
        for (mint, prefix) in [
            (task_id as fn() -> String, "tsk_"),
            (context_id, "ctx_"),
            (message_id, "msg_"),
            (work_id, "wrk_"),
            (delegation_id, "dlg_"),
            (session_id, "ses_"),
        ] {
            let ids: Vec<String> = (0..50).map(|_| mint()).collect();
            for id in &ids {
                let hex = id.strip_prefix(prefix).unwrap();
                assert_eq!(hex.len(), 32, "{id}");
                assert!(hex.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
            }
            let mut sorted = ids.clone();
            sorted.sort();
            assert_eq!(ids, sorted, "minted in order");
            sorted.dedup();
            assert_eq!(sorted.len(), ids.len(), "distinct");
        }
    }
}
