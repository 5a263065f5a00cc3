//! What the door asks the host: the `session` and `tokens` imports as a trait,
//! so the same rules run in the component and natively under test.

use crate::model::{Capsule, CompletionRefusal, Grant, StopReport};

pub trait Imports {
    /// `session.capsule`: the facts the card and the rules derive from.
    fn capsule(&self) -> Capsule;
    /// `tokens.verify`: what a presented token grants, if this session minted it.
    fn verify(&self, token: &str) -> Option<Grant>;
    /// `session.stop`: murmur.StopSession.
    fn stop(&self) -> StopReport;
    /// `session.awaits-delegation`: whether a task waits for this delegation.
    fn awaits_delegation(&self, delegation_id: &str) -> Result<(), CompletionRefusal>;
}
