//! `murmur:door/tokens`: whose token a request presented, and its scopes.

use super::DoorCtxView;
use crate::bindings::tokens::{Grant, Host, Scopes};
use crate::manifest::Scope;

impl Host for DoorCtxView<'_> {
    fn verify(&mut self, token: String) -> Option<Grant> {
        let grant = self.ctx.session.tokens.verify(&token)?;
        let scopes = grant
            .scopes
            .iter()
            .fold(Scopes::empty(), |all, scope| all | scope_flag(*scope));
        Some(Grant {
            credential: grant.credential,
            scopes,
        })
    }
}

fn scope_flag(scope: Scope) -> Scopes {
    match scope {
        Scope::SendMessage => Scopes::SEND_MESSAGE,
        Scope::SendStreamingMessage => Scopes::SEND_STREAMING_MESSAGE,
        Scope::WatchSession => Scopes::WATCH_SESSION,
        Scope::GetTask => Scopes::GET_TASK,
        Scope::ListTasks => Scopes::LIST_TASKS,
        Scope::CancelTask => Scopes::CANCEL_TASK,
        Scope::SubscribeToTask => Scopes::SUBSCRIBE_TO_TASK,
        Scope::StopSession => Scopes::STOP_SESSION,
        Scope::ResourcesFiles => Scopes::RESOURCES_FILES,
    }
}
