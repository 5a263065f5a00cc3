//! `murmur:door/session`: the capsule's facts, whether the session closes,
//! murmur.StopSession and delegation completions.

use std::sync::atomic::Ordering;

use super::ctx::DoorCtxView;
use crate::bindings::session::{
    Capsule, CompletionReceipt, CompletionRefusal, Host, Identity, PlaneExports, StopReport,
};
use crate::manifest::planes::Exports;

impl Host for DoorCtxView<'_> {
    fn describe(&mut self) -> Capsule {
        self.ctx.session.capsule
    }

    fn identify(&mut self) -> Identity {
        self.ctx.session.identity.clone()
    }

    fn exports(&mut self) -> PlaneExports {
        let planes = &self.ctx.session.planes;
        let patterns =
            |exports: &Option<Exports>| exports.as_ref().map(|e| e.0.clone()).unwrap_or_default();
        PlaneExports {
            files: patterns(&planes.files),
            peer_files: patterns(&planes.peer_files),
            withheld: planes.withheld.clone(),
        }
    }

    fn closing(&mut self) -> bool {
        self.ctx.reads.other = true;
        self.ctx.session.closing()
    }

    /// murmur.StopSession: every live task canceled, and what the session
    /// still runs.
    fn stop(&mut self) -> Result<StopReport, String> {
        self.ctx.reads.other = true;
        self.ctx.changed.store(true, Ordering::Relaxed);
        self.ctx.session.tasks.stop()
    }

    fn awaits_delegation(&mut self, delegation_id: String) -> Result<(), CompletionRefusal> {
        self.ctx.reads.other = true;
        self.ctx.session.tasks.awaits_delegation(&delegation_id)
    }

    fn deliver_completion(
        &mut self,
        delegation_id: String,
        message: String,
    ) -> Result<CompletionReceipt, CompletionRefusal> {
        let delivered = self
            .ctx
            .session
            .tasks
            .deliver_completion(&delegation_id, message)
            .map(|context_id| CompletionReceipt { context_id });
        self.ctx.changing(delivered)
    }
}
