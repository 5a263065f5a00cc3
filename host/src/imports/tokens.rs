//! `murmur:door/tokens`: whose token a request presented, and its scopes.

use super::ctx::DoorCtxView;
use crate::bindings::tokens::{Grant, Host, Redeemed, Scopes};
use crate::manifest::Scope;

impl Host for DoorCtxView<'_> {
    fn verify(&mut self, token: String) -> Option<Grant> {
        let tokens = &self.ctx.session.tokens;
        self.ctx
            .reads
            .tokens_since
            .get_or_insert_with(|| tokens.version());
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

    fn redeem_handle(&mut self, handle: String, audience: String) -> Option<Redeemed> {
        self.ctx.reads.other = true;
        let session = &self.ctx.session;
        let redeemed = session
            .handles
            .redeem(&handle, &audience, crate::session::tasks::now_ms());
        match redeemed {
            Ok(redeemed) => {
                tracing::info!(handle_id = %redeemed.id, %audience, "peer handle redeemed");
                Some(Redeemed {
                    handle_id: redeemed.id,
                    path: redeemed.path,
                })
            }
            Err(refused) => {
                tracing::info!(%audience, why = refused.as_str(), "peer handle refused");
                None
            }
        }
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
