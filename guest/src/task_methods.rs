//! GetTask, CancelTask and ListTasks ("GetTask", "ListTasks"): the task the
//! caller sees, or -32001 exactly as for an id the session never held.

use serde_json::{Map, Value};

use crate::errors::{InvalidParams, RpcError};
use crate::imports::Imports;
use crate::listing;
use crate::model::{Caller, Page};
use crate::send::store_error;
use crate::task::{self, Artifacts};

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
) -> Result<Value, RpcError> {
    let id = task_id(params, "GetTask")?;
    let task = imports.get(caller, id).map_err(|e| store_error(e, id))?;
    Ok(task::task(&task, Artifacts::AsHeld))
}

/// A live task is answered canceled; one that had ended is left unchanged and
/// answered -32002 naming its state.
pub fn cancel_task(
    imports: &impl Imports,
    params: &Map<String, Value>,
    caller: &Caller,
) -> Result<Value, RpcError> {
    let id = task_id(params, "CancelTask")?;
    match imports.cancel(caller, id) {
        Ok(task) => Ok(task::task(&task, Artifacts::AsHeld)),
        Err(crate::model::TaskError::WrongState(state)) => {
            Err(RpcError::task_not_cancelable(id, state.wire()))
        }
        Err(e) => Err(store_error(e, id)),
    }
}

pub fn list_tasks(
    imports: &impl Imports,
    params: &Map<String, Value>,
    caller: &Caller,
) -> Result<Value, RpcError> {
    let listing = listing::read(params)?;
    let page = if listing.matches_nothing {
        Page::default()
    } else {
        imports
            .list(caller, &listing.query)
            .map_err(|e| store_error(e, ""))?
    };
    Ok(listing::response(&page, &listing))
}
