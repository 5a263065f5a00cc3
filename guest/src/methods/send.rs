//! SendMessage ("Continuing a task", "Answers", "Completion errors"): read the
//! message, compose the agent's text, route it by taskId, and answer once the
//! task settles or at once.

use serde_json::{Map, Value, json};

use crate::imports::Imports;
use crate::imports::model::{
    Caller, Capsule, CompletionRefusal, NewTask, Origin, Started, Task, TaskError, TaskState,
};
use crate::methods::agent_text;
use crate::methods::message::{self, Message};
use crate::methods::task::{Keyed, TaskJson};
use crate::rpc::errors::{InvalidParams, RpcError};
use crate::rpc::extensions;
use crate::rpc::http::Response;
use crate::rpc::{self, Id};

/// Where the request came from, as its runtime headers say.
pub struct Provenance {
    pub origin: Origin,
    /// `x-murmur-task-trust`.
    pub trust: Option<String>,
}

/// The trust class whose text is wrapped in the untrusted fence.
const UNTRUSTED: &str = "untrusted";

pub fn send_message(
    imports: &impl Imports,
    capsule: &Capsule,
    params: &Map<String, Value>,
    caller: &Caller,
    provenance: Provenance,
    id: &Id,
) -> Result<Response, RpcError> {
    let (message, Started { task, settled }) =
        accept(imports, capsule, params, caller, provenance, true)?;
    // A rejected task is answered at once; otherwise the task is held until
    // it settles unless the client asked for returnImmediately. A task its
    // agent ended as it started is answered as it settled.
    let task = if message.return_immediately || task.status.state == TaskState::Rejected {
        task
    } else if let Some(settled) = settled {
        settled
    } else {
        imports
            .wait_settled(caller, &task.id)
            .map_err(|e| RpcError::from_store(e, &task.id))?;
        imports
            .get(caller, &task.id)
            .map_err(|e| RpcError::from_store(e, &task.id))?
    };
    Ok(answer(id, &message, &task))
}

/// Reads the message and hands it to the session: a new task, or the reply
/// to the task its taskId names (never settled as it starts). Every refusal
/// comes before anything starts. `holds`: the request answers a new task
/// only once it settles, unless the message asks for returnImmediately
/// (SendMessage; a stream opens with the task as first recorded).
pub fn accept(
    imports: &impl Imports,
    capsule: &Capsule,
    params: &Map<String, Value>,
    caller: &Caller,
    provenance: Provenance,
    holds: bool,
) -> Result<(Message, Started), RpcError> {
    let message = message::read(params, capsule)?;
    let text = text_for_agent(imports, caller, &message, provenance.trust.as_deref());
    let started = match &message.task_id {
        None => imports
            .start(NewTask {
                caller: caller.clone(),
                context_id: message.context_id.clone(),
                text,
                images: message.images.clone(),
                reference_task_ids: message.reference_task_ids.clone(),
                origin: provenance.origin,
                trust: provenance.trust,
                forget_session: message.forget_session,
                held: holds && !message.return_immediately,
            })
            .map_err(|e| RpcError::from_store(e, ""))?,
        Some(task_id) => Started {
            task: imports
                .reply(caller, task_id, message.context_id.as_deref(), &text)
                .map_err(|e| continue_error(e, task_id, message.context_id.as_deref()))?,
            settled: None,
        },
    };
    Ok((message, started))
}

fn answer(id: &Id, message: &Message, task: &Task) -> Response {
    let response = rpc::result(id, &Keyed("task", TaskJson::as_held(task)));
    if message.uses_door_extension {
        response.with_header(extensions::HEADER, extensions::DOOR)
    } else {
        response
    }
}

/// The parts, the referenced tasks as they stand now, and for an untrusted
/// task the untrusted fence around it all.
fn text_for_agent(
    imports: &impl Imports,
    caller: &Caller,
    message: &Message,
    trust: Option<&str>,
) -> String {
    let referenced: Vec<agent_text::Referenced> = message
        .reference_task_ids
        .iter()
        .map(|id| (id.clone(), imports.get(caller, id).ok()))
        .collect();
    let text = agent_text::compose(&agent_text::parts(&message.parts), &referenced);
    if trust == Some(UNTRUSTED) {
        agent_text::fenced(UNTRUSTED, &text)
    } else {
        text
    }
}

/// A message naming a task that does not take it ("Continuing a task").
fn continue_error(error: TaskError, task_id: &str, context_id: Option<&str>) -> RpcError {
    match error {
        TaskError::WrongState(state) if state.terminal() => {
            RpcError::continues_ended_task(task_id, state.wire())
        }
        TaskError::WrongState(state) => RpcError::continues_busy_task(task_id, state.wire()),
        TaskError::OtherContext => RpcError::invalid_params(InvalidParams::OtherContext {
            context_id: context_id.unwrap_or_default(),
            task_id,
        }),
        other => RpcError::from_store(other, task_id),
    }
}

/// A completion the door accepted: handed to the task that awaits the
/// delegation, answered with the `msg_<delegation>_received` message.
pub fn deliver_completion(
    imports: &impl Imports,
    params: &Map<String, Value>,
    delegation_id: &str,
    id: &Id,
) -> Result<Response, RpcError> {
    let message = match params.get("message") {
        Some(message @ Value::Object(_)) => message,
        Some(_) => return Err(RpcError::invalid_params(InvalidParams::MessageNotObject)),
        None => return Err(RpcError::invalid_params(InvalidParams::MessageRequired)),
    };
    let context_id = imports
        .deliver_completion(delegation_id, &message.to_string())
        .map_err(|refusal| {
            RpcError::completion_not_awaited(
                Some(delegation_id),
                refusal == CompletionRefusal::Ending,
            )
        })?;
    Ok(rpc::result(
        id,
        &json!({"message": {
            "messageId": format!("msg_{delegation_id}_received"),
            "contextId": context_id,
            "role": "ROLE_AGENT",
            "parts": [{"data": {"delegation_id": delegation_id, "received": true}, "mediaType": "application/json"}],
        }}),
    ))
}
