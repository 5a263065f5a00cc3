//! Who a task belongs to, and which tasks a caller sees: the owner columns
//! a task is written with and the condition a read is filtered by.

use rusqlite::types::Value as SqlValue;

use crate::bindings::tokens::Credential;

/// Who a task belongs to: whose requests see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// Started by a caller of a public door, or by the session itself.
    Public,
    /// Started with the operator token.
    Operator,
    /// Started with the token of the declared credential it names.
    Declared(String),
    /// Started with the token of the formation member it names
    /// (`member:<caller>`).
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
    /// Which tasks a request carrying `caller` sees: every task for none and
    /// for the operator, else those it started.
    pub fn of(caller: &Option<Credential>) -> Sees {
        match caller {
            None | Some(Credential::Operator) => Sees::Every,
            Some(_) => Sees::Own(Owner::of(caller)),
        }
    }

    /// A SQL condition and its parameter. The kind is written into the
    /// condition, not bound: the owner indexes hold only the tasks of
    /// declared credentials and members, and SQLite uses such an index for
    /// a condition that names one of those kinds as a literal.
    pub(super) fn condition(&self) -> Option<(&'static str, SqlValue)> {
        match self {
            Sees::Every => None,
            Sees::Own(owner) => {
                let condition = match owner {
                    Owner::Public => "owner_kind = 'public' AND owner_name = ?",
                    Owner::Operator => "owner_kind = 'operator' AND owner_name = ?",
                    Owner::Declared(_) => "owner_kind = 'declared' AND owner_name = ?",
                    Owner::Member(_) => "owner_kind = 'member' AND owner_name = ?",
                };
                Some((condition, owner.columns().1.to_string().into()))
            }
        }
    }

    /// Whether the owner indexes hold the tasks this caller sees: those of
    /// a declared credential or a member. (The public caller and the
    /// operator see every task; [`Sees::of`] never makes them `Own`.)
    pub(super) fn by_owner_index(&self) -> bool {
        matches!(self, Sees::Own(Owner::Declared(_) | Owner::Member(_)))
    }
}
