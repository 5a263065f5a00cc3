//! The facts the door reads from its imports, as plain Rust types. They mirror
//! the records of `wit/session.wit` and `wit/tokens.wit`; the wasm edge
//! converts, so the door's rules never depend on generated bindings.

/// `lifecycle.task_acceptance`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskAcceptance {
    None,
    Single,
    Queue,
}

/// `inference.transport`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Http,
    Process,
}

/// `context.images`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageLimits {
    pub max_bytes: u64,
    pub max_per_turn: u32,
}

/// The capsule a door answers for (`session.capsule`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capsule {
    pub name: String,
    pub version: String,
    pub session_id: String,
    pub url: String,
    pub task_acceptance: TaskAcceptance,
    pub transport: Transport,
    pub authenticated: bool,
    pub peer_tasks: bool,
    pub tools: Vec<String>,
    pub shell: bool,
    pub network: bool,
    /// `exports.files` is declared.
    pub files_plane: bool,
    /// `exports.peer_files` is declared.
    pub peer_files_plane: bool,
    pub images: ImageLimits,
}

impl Capsule {
    /// The door starts tasks: SendMessage and the task streams are served.
    pub fn starts_tasks(&self) -> bool {
        self.task_acceptance != TaskAcceptance::None
    }
}

/// Who a token speaks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    Operator,
    Declared(String),
    Member(String),
}

impl Credential {
    /// The name the door's messages use for it.
    pub fn name(&self) -> String {
        match self {
            Credential::Operator => "operator".to_string(),
            Credential::Declared(name) => name.clone(),
            Credential::Member(caller) => format!("member:{caller}"),
        }
    }
}

/// A scope: a door method's name, or `resources/files` for the operator plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    SendMessage,
    SendStreamingMessage,
    WatchSession,
    GetTask,
    ListTasks,
    CancelTask,
    SubscribeToTask,
    StopSession,
    ResourcesFiles,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::SendMessage => "SendMessage",
            Scope::SendStreamingMessage => "SendStreamingMessage",
            Scope::WatchSession => "murmur.WatchSession",
            Scope::GetTask => "GetTask",
            Scope::ListTasks => "ListTasks",
            Scope::CancelTask => "CancelTask",
            Scope::SubscribeToTask => "SubscribeToTask",
            Scope::StopSession => "murmur.StopSession",
            Scope::ResourcesFiles => "resources/files",
        }
    }
}

/// What a valid token grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub credential: Credential,
    pub scopes: Vec<Scope>,
}

impl Grant {
    pub fn reaches(&self, scope: Scope) -> bool {
        self.credential == Credential::Operator || self.scopes.contains(&scope)
    }
}

/// One thing the session leaves running ("Residue items").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResidueItem {
    DetachedShell {
        work_id: String,
        binary: String,
        command: String,
        started_at_ms: u64,
    },
    Delegation {
        delegation_id: String,
        capsule: String,
        version: String,
        child_session_id: String,
        child_workdir: String,
    },
}

/// The answer of `session.stop`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopReport {
    pub canceled: Vec<String>,
    pub residue: Vec<ResidueItem>,
}

/// Why a completion is not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionRefusal {
    NotAwaited,
    Ending,
}
