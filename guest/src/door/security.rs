//! Who may call the door ("Security", "Tokens"): the token at step 2, peer
//! consent at step 3 and the method's scope at step 11.

use crate::imports::Imports;
use crate::imports::model::{Capsule, Grant, Scope};
use crate::rpc::errors::{self, Refusal};
use crate::rpc::http::Request;

/// The runtime header naming where a request comes from.
pub const TASK_ORIGIN: &str = "x-murmur-task-origin";
/// The runtime header naming a peer task's trust class.
pub const TASK_TRUST: &str = "x-murmur-task-trust";

/// Step 2: on a door declaring `network.authentication`, the grant of the one
/// `Authorization: Bearer <token>` the request carries. A public door ignores
/// Authorization and answers every caller (`None`).
pub fn authenticate(
    request: &Request,
    capsule: &Capsule,
    imports: &impl Imports,
) -> Result<Option<Grant>, Refusal> {
    if !capsule.authenticated {
        return Ok(None);
    }
    let values = request.header_values("authorization");
    let value = match values.as_slice() {
        [] => return Err(Refusal::Unauthenticated),
        [one] => one,
        _ => return Err(Refusal::InvalidToken(errors::TOKEN_REPEATED)),
    };
    let token = bearer_token(value).ok_or(Refusal::InvalidToken(errors::TOKEN_NOT_BEARER))?;
    imports
        .verify(token)
        .map(Some)
        .ok_or(Refusal::InvalidToken(errors::TOKEN_NOT_MINTED))
}

/// `Bearer <token>`: the scheme in any case, then the token, matched exactly.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim_start_matches(' ');
    let is_token = !token.is_empty() && !token.contains(|c: char| c.is_ascii_whitespace());
    (scheme.eq_ignore_ascii_case("bearer") && is_token).then_some(token)
}

/// Step 3: a request stamped `x-murmur-task-origin: peer` is refused unless
/// the capsule accepts peer tasks.
pub fn peer_consent(request: &Request, capsule: &Capsule) -> Result<(), Refusal> {
    let from_peer = request
        .values(TASK_ORIGIN)
        .any(|v| v.eq_ignore_ascii_case("peer"));
    if from_peer && !capsule.peer_tasks {
        return Err(Refusal::PeerNotAccepted);
    }
    Ok(())
}

/// Steps 4 and 11: the grant must reach `scope`. A public door has no grant
/// and reaches everything.
pub fn require_scope(grant: Option<&Grant>, scope: Scope) -> Result<(), Refusal> {
    match grant {
        Some(grant) if !grant.reaches(scope) => Err(Refusal::InsufficientScope {
            credential: grant.credential.name(),
            scope: scope.name(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    // Reference, "What the door answers": the scheme matches in any case, the
    // token exactly.
    #[test]
    fn bearer_scheme_in_any_case() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bEARER abc"), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearer a b"), None);
        assert_eq!(bearer_token("Bearerabc"), None);
    }
}
