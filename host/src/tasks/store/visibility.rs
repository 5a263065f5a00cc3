//! Who a task belongs to, and which tasks a caller sees: the owner columns
//! a task is written with and the condition a read is filtered by.

use rusqlite::types::Value as SqlValue;

use crate::bindings::tokens::Credential;

/// Who a task belongs to: whose requests see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// Started by a caller of a public door, or by the session itself.
    Public,
    Operator,
    Declared(String),
    Member(String),
}

impl Owner {
    /// The owner of a task a request carrying `caller` starts.
    pub fn of(caller: &Option<Credential>) -> Owner {
        match caller {
            None => Owner::Public,
            Some(Credential::Operator) => Owner::Operator,
            Some(Credential::Declared(name)) => Owner::Declared(name.clone()),
            Some(Credential::Member(name)) => Owner::Member(name.clone()),
        }
    }

    pub(super) fn columns(&self) -> (&'static str, &str) {
        match self {
            Owner::Public => ("public", ""),
            Owner::Operator => ("operator", ""),
            Owner::Declared(name) => ("declared", name),
            Owner::Member(name) => ("member", name),
        }
    }
}

/// Which tasks a caller sees ("Who sees a task").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sees {
    /// A public door's caller, and the operator.
    Every,
    /// A declared credential or a formation member: the tasks it started.
    Own(Owner),
}

impl Sees {
    pub fn of(caller: &Option<Credential>) -> Sees {
        match caller {
            None | Some(Credential::Operator) => Sees::Every,
            Some(_) => Sees::Own(Owner::of(caller)),
        }
    }

    /// A SQL condition and its parameters.
    pub(super) fn condition(&self) -> Option<(&'static str, [SqlValue; 2])> {
        match self {
            Sees::Every => None,
            Sees::Own(owner) => {
                let (kind, name) = owner.columns();
                Some((
                    "owner_kind = ? AND owner_name = ?",
                    [kind.to_string().into(), name.to_string().into()],
                ))
            }
        }
    }
}
