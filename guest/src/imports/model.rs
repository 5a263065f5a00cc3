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
    /// When the session started (ms since the epoch), if known.
    pub started_at_ms: Option<i64>,
    pub task_acceptance: TaskAcceptance,
    pub transport: Transport,
    pub authenticated: bool,
    pub peer_tasks: bool,
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

/// What the planes export (`session.exports`): workdir-relative paths and
/// globs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exports {
    /// `exports.files`
    pub files: Vec<String>,
    /// `exports.peer_files`
    pub peer_files: Vec<String>,
    /// Workdir-relative paths neither plane serves or lists, whatever the
    /// exports: the door's own state.
    pub withheld: Vec<String>,
}

/// A peer handle redeemed (`tokens.redeem-handle`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redeemed {
    pub handle_id: String,
    /// Workdir-relative, `/`-separated.
    pub path: String,
}

/// The capsule's names: what the card shows, and what a few answers name.
/// Asked for apart from [`Capsule`], only where it is needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub version: String,
    pub session_id: String,
    /// The listener's address, with its scheme.
    pub url: String,
    pub tools: Vec<String>,
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

/// Who is asking the task store: none is a caller of a public door.
pub type Caller = Option<Credential>;

/// A task's state ("Task states").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Failed,
    Rejected,
    Canceled,
}

impl TaskState {
    /// Every state, in the order of the reference's table.
    pub const ALL: [TaskState; 7] = [
        TaskState::Submitted,
        TaskState::Working,
        TaskState::InputRequired,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Rejected,
        TaskState::Canceled,
    ];

    /// The name on the wire.
    pub fn wire(self) -> &'static str {
        match self {
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Rejected => "TASK_STATE_REJECTED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
        }
    }

    /// Murmur's word, used off the wire and in the referenced-tasks block.
    pub fn word(self) -> &'static str {
        match self {
            TaskState::Submitted => "submitted",
            TaskState::Working => "working",
            TaskState::InputRequired => "input-required",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Rejected => "rejected",
            TaskState::Canceled => "canceled",
        }
    }

    pub fn terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Rejected | TaskState::Canceled
        )
    }
}

/// A task's current status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub state: TaskState,
    pub message: Option<String>,
    /// Milliseconds since the Unix epoch, UTC.
    pub timestamp_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningCommand {
    pub work_id: String,
    pub binary: String,
    pub command: String,
    pub running_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    pub member: String,
    pub status: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskMetadata {
    pub no_answer: bool,
    pub no_answer_below: Vec<MemberStatus>,
    pub running_commands: Vec<RunningCommand>,
}

/// A task as the store holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    pub id: String,
    pub context_id: String,
    pub status: Status,
    pub response: Option<String>,
    pub prompt: Option<String>,
    pub residue: Vec<ResidueItem>,
    pub metadata: TaskMetadata,
    pub change: u64,
}

/// A task `start` recorded: as first recorded, and as it settled when its
/// agent ended it in the same write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    pub task: Task,
    pub settled: Option<Task>,
}

/// Where a task came from (`x-murmur-task-origin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Client,
    Peer,
    Session,
}

/// An image part the door checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub media_type: String,
    pub bytes: Vec<u8>,
}

/// A new task, as the door read it from a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTask {
    pub caller: Caller,
    pub context_id: Option<String>,
    pub text: String,
    pub images: Vec<Image>,
    pub reference_task_ids: Vec<String>,
    pub origin: Origin,
    pub trust: Option<String>,
    pub forget_session: bool,
    /// The request answers only once the task settles (a held SendMessage).
    pub held: bool,
}

/// Why the store refused a call that names a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskError {
    NotFound,
    WrongState(TaskState),
    OtherContext,
    Unavailable(String),
}

/// A position in the change order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub change: u64,
    pub task_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListQuery {
    pub context_id: Option<String>,
    pub state: Option<TaskState>,
    pub status_after_ms: Option<i64>,
    pub after: Option<Cursor>,
    pub limit: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    pub tasks: Vec<Task>,
    pub next: Option<Cursor>,
    pub total: u32,
}

/// What a task event carries ("events" import).
#[derive(Clone, Debug, PartialEq)]
pub enum EventBody {
    /// A status the task wrote; `message_id` names its status message when
    /// it is written as it happens.
    Status {
        status: Status,
        message_id: Option<String>,
    },
    /// An artifact written whole: response or prompt text, or residue items.
    Artifact {
        artifact_id: String,
        text: Option<String>,
        residue: Vec<ResidueItem>,
    },
    /// A murmur frame: its kind and its fields (a JSON object).
    Frame {
        kind: String,
        body: serde_json::Value,
    },
}

/// One event of the session's log.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub id: u64,
    pub task_id: String,
    pub context_id: String,
    pub body: EventBody,
}

/// An event as a stream framed it: the SSE event it wrote, its request id
/// cut out at `request_id_at`.
#[derive(Clone, Debug, PartialEq)]
pub struct Framed {
    pub id: u64,
    /// The state a status event wrote.
    pub state: Option<TaskState>,
    /// A murmur frame, written only where the stream extension is active.
    pub frame: bool,
    pub sse: Vec<u8>,
    pub request_id_at: usize,
}

impl Framed {
    /// The event as a stream with this request id (JSON) writes it.
    pub fn with_request_id(&self, request_id: &[u8]) -> Vec<u8> {
        let (first, rest) = self.split_for(request_id);
        [&first, rest].concat()
    }

    /// The event in two writes, the host's way: its first 4 KiB with the
    /// request id put in (a small event whole, one body chunk), then the rest
    /// as it is, not copied again.
    pub fn split_for(&self, request_id: &[u8]) -> (Vec<u8>, &[u8]) {
        let (head, tail) = self.sse.split_at(self.request_id_at.min(self.sse.len()));
        let copied = tail
            .len()
            .min(4096usize.saturating_sub(head.len() + request_id.len()));
        (
            [head, request_id, &tail[..copied]].concat(),
            &tail[copied..],
        )
    }
}

/// What a stream's door leaves to the host while it waits: the events its
/// version framed, written with the stream's request id, until one the door
/// must see.
#[derive(Clone, Debug, PartialEq)]
pub struct PassOn {
    /// The stream's JSON-RPC request id, as JSON.
    pub request_id: Vec<u8>,
    /// Frames are written (the stream extension is active).
    pub frames: bool,
    /// The states the stream ends on: the door writes those itself.
    pub ends_at: Vec<TaskState>,
}

impl Event {
    /// The state a status event wrote; none for an artifact or a frame.
    pub fn state(&self) -> Option<TaskState> {
        match &self.body {
            EventBody::Status { status, .. } => Some(status.state),
            _ => None,
        }
    }
}

/// What a stream reads next.
#[derive(Clone, Debug, PartialEq)]
pub enum Delivery {
    Event(Event),
    /// An event a stream of this door version already framed.
    Framed(Framed),
    /// Events after the first id up to the second are no longer buffered.
    Gap(u64, u64),
    /// The reader fell behind: events after the first id up to the second
    /// were dropped.
    Lagged(u64, u64),
    /// The door closes.
    Closed,
}

/// What waiting on a reader gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    Delivery(Delivery),
    /// Nothing arrived within the wait: time for a heartbeat.
    Idle,
    /// The client left while the host passed events on.
    Left,
    /// The host wrote the event the stream ends on.
    Ended,
}
