//! Settle pollables: what a held SendMessage waits on. Each watches its
//! task's [`Progress`] and the session's closing, so it is ready once the
//! task ends or pauses in `input-required`, or the session closes.

use std::sync::Arc;

use tokio::sync::watch;

use super::model::is_settled;
use crate::bindings::task_store::{Task, TaskState};

/// What a settle pollable watches on a live task.
#[derive(Clone, Debug)]
pub(super) struct Progress {
    pub(super) state: TaskState,
    /// How many times the task has settled: a pollable made before a settle
    /// stays ready even when a reply moves the task on before it looks.
    pub(super) settles: u64,
    /// The task as its ending wrote it, once it has ended.
    pub(super) ended: Option<Arc<Task>>,
}

/// The pollable behind `task-store.settled`: ready once its task settles or
/// the session closes. Waiting holds no thread: it awaits a watch channel.
#[derive(Clone)]
pub struct Settled {
    /// `None`: the task had ended when the pollable was made.
    watch: Option<watch::Receiver<Progress>>,
    since: u64,
    closed: watch::Receiver<bool>,
}

impl Settled {
    /// A pollable on a live task's progress (`None`: the task has ended),
    /// which the session's closing also makes ready.
    pub(super) fn new(
        watch: Option<watch::Receiver<Progress>>,
        closed: watch::Receiver<bool>,
    ) -> Settled {
        let since = watch.as_ref().map_or(0, |w| w.borrow().settles);
        Settled {
            watch,
            since,
            closed,
        }
    }

    /// The task as its ending wrote it, once it has ended while watched:
    /// what a held SendMessage answers, without reading it again.
    pub fn ended(&self) -> Option<Task> {
        let ended = self.watch.as_ref()?.borrow().ended.clone()?;
        Some(Arc::unwrap_or_clone(ended))
    }

    /// Resolves once the task has settled or the session closed; at once if
    /// it already has. Cancel-safe, and ready for good once ready.
    pub async fn wait(&mut self) {
        let Some(watch) = &mut self.watch else {
            return;
        };
        loop {
            if *self.closed.borrow_and_update() {
                return;
            }
            {
                let now = watch.borrow_and_update();
                if now.settles > self.since || is_settled(now.state) {
                    return;
                }
            }
            tokio::select! {
                changed = watch.changed() => if changed.is_err() {
                    // The task ended and its sender is gone.
                    return;
                },
                _ = self.closed.changed() => {}
            }
        }
    }
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for Settled {
    async fn ready(&mut self) {
        self.wait().await;
    }
}
