//! GetTask, CancelTask and ListTasks ("GetTask", "ListTasks"): the task the
//! caller sees, or -32001 exactly as for an id the session never held.

use serde_json::{Map, Value};

use crate::imports::Imports;
use crate::imports::model::{Caller, Page, Task};
use crate::methods::listing;
use crate::rpc::errors::{InvalidParams, RpcError};

/// `params.id`, required: a GetTask or CancelTask without one, or with "".
fn task_id<'a>(params: &'a Map<String, Value>, method: &str) -> Result<&'a str, RpcError> {
    params
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| RpcError::invalid_params(InvalidParams::NoId(method)))
}

pub fn get_task(
    imports: &impl Imports,
    params: &Map<String, Value>,
    caller: &Caller,
) -> Result<Task, RpcError> {
    let id = task_id(params, "GetTask")?;
    imports
        .get(caller, id)
        .map_err(|e| RpcError::from_store(e, id))
}

/// A live task is answered canceled; one that had ended is left unchanged and
/// answered -32002 naming its state.
pub fn cancel_task(
    imports: &impl Imports,
    params: &Map<String, Value>,
    caller: &Caller,
) -> Result<Task, RpcError> {
    let id = task_id(params, "CancelTask")?;
    match imports.cancel(caller, id) {
        Ok(task) => Ok(task),
        Err(crate::imports::model::TaskError::WrongState(state)) => {
            Err(RpcError::task_not_cancelable(id, state.wire()))
        }
        Err(e) => Err(RpcError::from_store(e, id)),
    }
}

pub fn list_tasks(
    imports: &impl Imports,
    params: &Map<String, Value>,
    caller: &Caller,
) -> Result<listing::Answer, RpcError> {
    let listing = listing::read(params)?;
    let page = if listing.matches_nothing {
        Page::default()
    } else {
        imports
            .list(caller, &listing.query)
            .map_err(|e| RpcError::from_store(e, ""))?
    };
    Ok(listing::Answer { page, listing })
}
