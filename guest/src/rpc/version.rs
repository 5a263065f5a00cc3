//! Step 8, the A2A-Version header ("A2A-Version"): the door speaks 1.0.

use crate::rpc::errors::RpcError;
use crate::rpc::http::Request;

pub const HEADER: &str = "A2A-Version";

/// Serves `1.0` and `1.0.<digits>` sent on exactly one header line; anything
/// else is -32009 naming what was sent.
pub fn check(request: &Request) -> Result<(), RpcError> {
    if request
        .header_once(HEADER)
        .is_some_and(|one| speaks_1_0(&one))
    {
        return Ok(());
    }
    Err(RpcError::version_not_supported(
        &request.header_values(HEADER).join(","),
    ))
}

fn speaks_1_0(value: &str) -> bool {
    match value.strip_prefix("1.0") {
        Some("") => true,
        Some(rest) => rest
            .strip_prefix('.')
            .is_some_and(|patch| !patch.is_empty() && patch.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(values: &[&str]) -> Request {
        Request::new("POST", "/", values.iter().map(|v| ("a2a-version", v)))
    }

    fn requested(values: &[&str]) -> Option<String> {
        check(&with(values))
            .err()
            .map(|e| e.info.unwrap().metadata[0].1.clone())
    }

    // Reference, "A2A-Version": 1.0 and 1.0.<digits> are served.
    #[test]
    fn serves_1_0_and_patches() {
        for v in ["1.0", "1.0.1", "1.0.42", " 1.0 ", "\t1.0.0"] {
            assert_eq!(requested(&[v]), None, "{v:?}");
        }
    }

    // Reference, "A2A-Version": absent, other values and several lines.
    #[test]
    fn refuses_everything_else() {
        assert_eq!(requested(&[]).as_deref(), Some(""));
        assert_eq!(requested(&[""]).as_deref(), Some(""));
        for v in [
            "0.3", "1", "1.1", "2.0", "1.0x", "1.0.", "1.0.1a", "1.00", "v1.0",
        ] {
            assert_eq!(requested(&[v]).as_deref(), Some(v), "{v:?}");
        }
        assert_eq!(requested(&["1.0", "1.0"]).as_deref(), Some("1.0,1.0"));
        assert_eq!(requested(&["1.0", "0.3"]).as_deref(), Some("1.0,0.3"));
    }
}
