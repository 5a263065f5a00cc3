//! `murmur:door/task-store`: the session's tasks, as the caller may see
//! them.

use wasmtime::component::Resource;
use wasmtime_wasi::p2::DynPollable;

use super::ctx::DoorCtxView;
use crate::bindings::task_store::{
    Caller, Host, ListQuery, NewTask, Page, Started, Task, TaskError,
};
use crate::session::tasks::Settled;
use crate::telemetry;

/// The attribute naming the task a traced request started or asked about.
const TASK_ID: &str = "a2a.task.id";

impl Host for DoorCtxView<'_> {
    /// Written in one batch with the starts of the requests running
    /// meanwhile (see [`crate::session::tasks::Hub::start_batched`]).
    async fn start(&mut self, task: NewTask) -> Result<Started, TaskError> {
        let caller = task.caller.clone();
        let started = self.ctx.session.tasks.start_batched(task).await;
        let (task, settled) = self.ctx.changing(started)?;
        self.ctx.started = Some((caller, task.id.clone()));
        telemetry::attribute(TASK_ID, task.id.clone());
        Ok(Started { task, settled })
    }

    fn reply(
        &mut self,
        caller: Caller,
        task_id: String,
        context_id: Option<String>,
        text: String,
    ) -> Result<Task, TaskError> {
        telemetry::attribute(TASK_ID, task_id.clone());
        let replied = self
            .ctx
            .session
            .tasks
            .reply(&caller, &task_id, context_id.as_deref(), text);
        self.ctx.changing(replied)
    }

    fn get(&mut self, caller: Caller, task_id: String) -> Result<Task, TaskError> {
        self.ctx.reading_tasks();
        telemetry::attribute(TASK_ID, task_id.clone());
        // The task this request started and waited for, as its ending wrote
        // it: no read of the store.
        let ended = match self.ctx.started_by(&caller, &task_id) {
            true => self.ctx.settling.as_ref().and_then(Settled::ended),
            false => None,
        };
        if let Some(task) = ended {
            self.ctx.reads.tasks.push(task_id);
            return Ok(task);
        }
        let task = self.ctx.session.tasks.get(&caller, &task_id);
        match &task {
            Ok(_) => self.ctx.reads.tasks.push(task_id),
            // A refusal may say something of existence: never reused.
            Err(_) => self.ctx.reads.other = true,
        }
        task
    }

    fn cancel(&mut self, caller: Caller, task_id: String) -> Result<Task, TaskError> {
        telemetry::attribute(TASK_ID, task_id.clone());
        let canceled = self.ctx.session.tasks.cancel(&caller, &task_id);
        self.ctx.changing(canceled)
    }

    fn list(&mut self, caller: Caller, query: ListQuery) -> Result<Page, TaskError> {
        self.ctx.reading_tasks();
        self.ctx.reads.listing = true;
        let page = self.ctx.session.tasks.list(&caller, &query);
        self.ctx.reads.other |= page.is_err();
        page
    }

    /// A pollable ready once the task settles; the request's table holds it.
    fn settled(
        &mut self,
        caller: Caller,
        task_id: String,
    ) -> Result<Resource<DynPollable>, TaskError> {
        self.ctx.reads.other = true;
        let tasks = &self.ctx.session.tasks;
        let settled = if self.ctx.started_by(&caller, &task_id) {
            let settled = tasks.settled_started(&task_id);
            self.ctx.settling = Some(settled.clone());
            settled
        } else {
            tasks.settled(&caller, &task_id)?
        };
        let full = |e: &dyn std::fmt::Display| {
            TaskError::Unavailable(format!("the request holds too many resources: {e}"))
        };
        let resource = self.table.push(settled).map_err(|e| full(&e))?;
        wasmtime_wasi::p2::subscribe(self.table, resource).map_err(|e| full(&e))
    }
}
