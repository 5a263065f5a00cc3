//! An in-memory host for the door's native tests: the session, tokens and a
//! task store that records every call, so tests see what the door asked.

use std::cell::{Cell, RefCell};

use std::collections::VecDeque;

use murmur_door_guest::imports::model::{
    Caller, Capsule, CompletionRefusal, Credential, Delivery, Event, Exports, Framed, Grant,
    Identity, ImageLimits, ListQuery, NewTask, Next, Page, PassOn, Redeemed, Scope, Started,
    Status, StopReport, Task, TaskAcceptance, TaskError, TaskMetadata, TaskState, Transport,
};
use murmur_door_guest::imports::tree::{Preopened, StdDir};
use murmur_door_guest::{Imports, Request, Response};
use serde_json::Value;

pub struct FakeHost {
    pub capsule: Capsule,
    pub identity: Identity,
    /// How many times the door asked for the identity.
    pub identities: Cell<u32>,
    pub tasks: RefCell<Vec<(Caller, Task)>>,
    pub started: RefCell<Vec<NewTask>>,
    pub replies: RefCell<Vec<(String, String)>>,
    pub verified: RefCell<Vec<String>>,
    pub awaited: RefCell<Vec<String>>,
    /// The session is ending: a delegation no task awaits is refused as
    /// ending rather than as not awaited.
    pub ending: Cell<bool>,
    pub stops: Cell<u32>,
    pub waits: Cell<u32>,
    /// What a started task becomes once it settles.
    pub settles_as: Cell<TaskState>,
    /// Start answers the task settled too, as an agent that ends it in the
    /// same write as its start.
    pub settles_at_start: Cell<bool>,
    /// Start answers rejected (the capsule is busy).
    pub busy: Cell<bool>,
    /// The event log: deliveries every reader opened from now on reads, in
    /// order, before the door closes.
    pub log: RefCell<Vec<Delivery>>,
    pub opened: RefCell<Vec<(Option<String>, Option<u64>)>>,
    /// Waits that time out (a heartbeat each) before the log is read.
    pub idle_waits: Cell<u32>,
    /// What the door framed once for the other streams (`keep-framed`).
    pub kept: RefCell<Vec<Framed>>,
    /// The store fails, saying this: list and stop answer it as an error.
    pub failing: RefCell<Option<String>>,
    /// What the planes export, and the directories preopened for them, by
    /// workdir-relative name.
    pub exports: RefCell<Exports>,
    pub preopened: RefCell<Vec<(String, std::path::PathBuf)>>,
    /// How many times the rules asked for the preopens: looked at files.
    pub preopens_asked: Cell<u32>,
    next: Cell<u64>,
}

impl FakeHost {
    pub fn new(authenticated: bool) -> FakeHost {
        FakeHost {
            capsule: Capsule {
                started_at_ms: Some(1_791_882_000_123),
                task_acceptance: TaskAcceptance::Single,
                transport: Transport::Http,
                authenticated,
                peer_tasks: false,
                shell: true,
                network: true,
                files_plane: true,
                peer_files_plane: false,
                images: ImageLimits {
                    max_bytes: 64,
                    max_per_turn: 2,
                },
            },
            identity: Identity {
                name: "my-agent".into(),
                version: "0.1.0".into(),
                session_id: "ses_019f01a940ce7761854e768ecbe3d399".into(),
                url: "http://localhost:41873".into(),
                tools: vec!["bash".into()],
            },
            identities: Cell::new(0),
            tasks: RefCell::default(),
            started: RefCell::default(),
            replies: RefCell::default(),
            verified: RefCell::default(),
            awaited: RefCell::default(),
            ending: Cell::new(false),
            stops: Cell::new(0),
            waits: Cell::new(0),
            kept: RefCell::default(),
            settles_as: Cell::new(TaskState::Completed),
            settles_at_start: Cell::new(false),
            busy: Cell::new(false),
            failing: RefCell::new(None),
            log: RefCell::default(),
            opened: RefCell::default(),
            idle_waits: Cell::new(0),
            exports: RefCell::default(),
            preopened: RefCell::default(),
            preopens_asked: Cell::new(0),
            next: Cell::new(1),
        }
    }

    /// Adds a task owned by `owner` and returns its id.
    pub fn hold(
        &self,
        owner: Caller,
        state: TaskState,
        message: Option<&str>,
        response: Option<&str>,
    ) -> String {
        let n = self.next.replace(self.next.get() + 1);
        let id = format!("tsk_{n:032x}");
        let task = Task {
            id: id.clone(),
            context_id: format!("ctx_{n:032x}"),
            status: Status {
                state,
                message: message.map(Into::into),
                timestamp_ms: 1_760_346_000_000 + n as i64,
            },
            response: response.map(Into::into),
            prompt: (state == TaskState::InputRequired).then(|| "Which branch?".to_string()),
            residue: vec![],
            metadata: TaskMetadata::default(),
            change: n,
        };
        self.tasks.borrow_mut().push((owner, task));
        id
    }

    fn sees(caller: &Caller, owner: &Caller) -> bool {
        matches!(caller, None | Some(Credential::Operator)) || caller == owner
    }

    fn find(&self, caller: &Caller, id: &str) -> Result<Task, TaskError> {
        self.tasks
            .borrow()
            .iter()
            .find(|(owner, t)| t.id == id && Self::sees(caller, owner))
            .map(|(_, t)| t.clone())
            .ok_or(TaskError::NotFound)
    }

    fn set_state(&self, id: &str, state: TaskState) {
        for (_, task) in self
            .tasks
            .borrow_mut()
            .iter_mut()
            .filter(|(_, t)| t.id == id)
        {
            task.status.state = state;
            if state == TaskState::Completed {
                task.response = Some("done".into());
            }
        }
    }
}

impl Imports for FakeHost {
    fn capsule(&self) -> Capsule {
        self.capsule.clone()
    }

    fn identity(&self) -> Identity {
        self.identities.set(self.identities.get() + 1);
        self.identity.clone()
    }

    fn exports(&self) -> Exports {
        self.exports.borrow().clone()
    }

    /// `h_good` for audience `beta` grants `shared/a.txt`.
    fn redeem(&self, handle: &str, audience: &str) -> Option<Redeemed> {
        (handle == "h_good" && audience == "beta").then(|| Redeemed {
            handle_id: "hdl_0000000000000001".into(),
            path: "shared/a.txt".into(),
        })
    }

    type Dir = StdDir;

    fn preopens(&self) -> Preopened<StdDir> {
        self.preopens_asked.set(self.preopens_asked.get() + 1);
        Preopened::new(
            self.preopened
                .borrow()
                .iter()
                .map(|(name, path)| (name.clone(), StdDir(path.clone()))),
        )
    }

    fn verify(&self, token: &str) -> Option<Grant> {
        self.verified.borrow_mut().push(token.to_string());
        match token {
            "op" => Some(Grant {
                credential: Credential::Operator,
                scopes: vec![],
            }),
            // As the end-to-end tests declare it: `watcher: {scopes:
            // [murmur.WatchSession, GetTask]}`.
            "watcher" => Some(Grant {
                credential: Credential::Declared("watcher".into()),
                scopes: vec![Scope::WatchSession, Scope::GetTask],
            }),
            "client" => Some(Grant {
                credential: Credential::Declared("client".into()),
                scopes: vec![
                    Scope::SendMessage,
                    Scope::GetTask,
                    Scope::ListTasks,
                    Scope::CancelTask,
                ],
            }),
            _ => None,
        }
    }

    fn stop(&self) -> Result<StopReport, String> {
        if let Some(why) = self.failing.borrow().clone() {
            return Err(why);
        }
        self.stops.set(self.stops.get() + 1);
        Ok(StopReport::default())
    }

    fn awaits_delegation(&self, delegation_id: &str) -> Result<(), CompletionRefusal> {
        self.awaited.borrow_mut().push(delegation_id.to_string());
        if delegation_id == "dlg_awaited" {
            Ok(())
        } else if self.ending.get() {
            Err(CompletionRefusal::Ending)
        } else {
            Err(CompletionRefusal::NotAwaited)
        }
    }

    fn deliver_completion(
        &self,
        delegation_id: &str,
        _message: &str,
    ) -> Result<String, CompletionRefusal> {
        if delegation_id == "dlg_awaited" {
            Ok("ctx_parent".into())
        } else {
            Err(CompletionRefusal::NotAwaited)
        }
    }

    fn start(&self, task: NewTask) -> Result<Started, TaskError> {
        let state = if self.busy.get() {
            TaskState::Rejected
        } else {
            TaskState::Submitted
        };
        let message = self.busy.get().then_some("task rejected: capsule is busy");
        let id = self.hold(task.caller.clone(), state, message, None);
        if let Some(context) = &task.context_id {
            for (_, t) in self
                .tasks
                .borrow_mut()
                .iter_mut()
                .filter(|(_, t)| t.id == id)
            {
                t.context_id = context.clone();
            }
        }
        self.started.borrow_mut().push(task);
        let first = self.find(&None, &id)?;
        let settled = (self.settles_at_start.get() && !self.busy.get()).then(|| {
            self.set_state(&id, self.settles_as.get());
            self.find(&None, &id)
        });
        Ok(Started {
            task: first,
            settled: settled.transpose()?,
        })
    }

    fn reply(
        &self,
        caller: &Caller,
        task_id: &str,
        context_id: Option<&str>,
        text: &str,
    ) -> Result<Task, TaskError> {
        let task = self.find(caller, task_id)?;
        if task.status.state != TaskState::InputRequired {
            return Err(TaskError::WrongState(task.status.state));
        }
        if context_id.is_some_and(|c| c != task.context_id) {
            return Err(TaskError::OtherContext);
        }
        self.replies
            .borrow_mut()
            .push((task_id.to_string(), text.to_string()));
        self.set_state(task_id, TaskState::Working);
        self.find(caller, task_id)
    }

    fn get(&self, caller: &Caller, task_id: &str) -> Result<Task, TaskError> {
        self.find(caller, task_id)
    }

    fn cancel(&self, caller: &Caller, task_id: &str) -> Result<Task, TaskError> {
        let task = self.find(caller, task_id)?;
        if task.status.state.terminal() {
            return Err(TaskError::WrongState(task.status.state));
        }
        self.set_state(task_id, TaskState::Canceled);
        self.find(caller, task_id)
    }

    fn list(&self, caller: &Caller, query: &ListQuery) -> Result<Page, TaskError> {
        if let Some(why) = self.failing.borrow().clone() {
            return Err(TaskError::Unavailable(why));
        }
        let mut seen: Vec<Task> = self
            .tasks
            .borrow()
            .iter()
            .filter(|(owner, _)| Self::sees(caller, owner))
            .map(|(_, t)| t.clone())
            .filter(|t| query.state.is_none_or(|s| s == t.status.state))
            .collect();
        seen.sort_by_key(|t| std::cmp::Reverse(t.change));
        let total = seen.len() as u32;
        Ok(Page {
            tasks: seen.into_iter().take(query.limit as usize).collect(),
            next: None,
            total,
        })
    }

    type Reader = RefCell<VecDeque<Delivery>>;

    fn latest_event(&self) -> u64 {
        40
    }

    fn task_events(
        &self,
        caller: &Caller,
        task_id: &str,
        after: Option<u64>,
    ) -> Result<Self::Reader, TaskError> {
        self.find(caller, task_id)?;
        self.opened
            .borrow_mut()
            .push((Some(task_id.to_string()), after));
        Ok(RefCell::new(self.log.borrow().iter().cloned().collect()))
    }

    fn session_events(&self, after: Option<u64>) -> Self::Reader {
        self.opened.borrow_mut().push((None, after));
        RefCell::new(self.log.borrow().iter().cloned().collect())
    }

    /// The log in order, then the door closes.
    /// Passes nothing on: every delivery comes to the door.
    fn next_event(&self, reader: &Self::Reader, _wait_ms: u64, _pass: &PassOn) -> Next {
        if self.idle_waits.get() > 0 {
            self.idle_waits.set(self.idle_waits.get() - 1);
            return Next::Idle;
        }
        Next::Delivery(reader.borrow_mut().pop_front().unwrap_or(Delivery::Closed))
    }

    fn keep_framed(&self, _reader: &Self::Reader, framed: &Framed) {
        self.kept.borrow_mut().push(framed.clone());
    }

    fn new_message_id(&self) -> String {
        let n = self.next.replace(self.next.get() + 1);
        format!("msg_{n:032x}")
    }

    fn wait_settled(&self, caller: &Caller, task_id: &str) -> Result<(), TaskError> {
        self.waits.set(self.waits.get() + 1);
        self.find(caller, task_id)?;
        self.set_state(task_id, self.settles_as.get());
        Ok(())
    }
}

/// A JSON-RPC POST / with A2A-Version: 1.0 and the extra headers.
pub fn post(headers: &[(&str, &str)]) -> Request {
    let mut all = vec![("content-type", "application/json"), ("a2a-version", "1.0")];
    all.extend_from_slice(headers);
    Request::new("POST", "/", all)
}

/// A request with exactly these headers, in order.
pub fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> Request {
    Request::new(method, path, headers.iter().copied())
}

/// A JSON-RPC body with id 1, as the end-to-end tests write it.
pub fn rpc(method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#)
}

/// The whole answer to a request with this body; the body is read only if
/// the check order reaches it.
pub fn answer(host: &FakeHost, request: &Request, body: &[u8]) -> Response {
    murmur_door_guest::handle(host, request, || body.to_vec())
        .whole()
        .expect("a whole answer, not a stream")
}

/// A JSON-RPC error answer: HTTP 200, application/json, no A2A-Extensions
/// (a refusal names none), and exactly `{"jsonrpc", "id", "error"}`, byte for
/// byte and key order included.
#[track_caller]
pub fn assert_rpc_error(response: &Response, id: Value, error: Value) {
    let text = String::from_utf8_lossy(&response.body);
    assert_eq!(response.status, 200, "{text}");
    assert_eq!(response.header("content-type"), Some("application/json"));
    assert_eq!(response.header("a2a-extensions"), None);
    let expected = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": error});
    assert_eq!(text, serde_json::to_string(&expected).unwrap());
}

/// An A2A error object with its one ErrorInfo ("Errors").
pub fn a2a_error(code: i64, message: &str, reason: &str, metadata: Value) -> Value {
    serde_json::json!({"code": code, "message": message, "data": [{
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "a2a-protocol.org",
        "metadata": metadata,
    }]})
}

/// -32602 with its message: a standard error, no data.
pub fn invalid(message: &str) -> Value {
    serde_json::json!({"code": -32602, "message": message})
}

/// An HTTP refusal ("What the door answers"): `status`, application/json,
/// exactly `body`, the www-authenticate `challenge` if any, no A2A-Extensions.
#[track_caller]
pub fn assert_refusal(response: &Response, status: u16, body: &str, challenge: Option<&str>) {
    let text = String::from_utf8_lossy(&response.body);
    assert_eq!(response.status, status, "{text}");
    assert_eq!(response.header("content-type"), Some("application/json"));
    assert_eq!(text, body);
    assert_eq!(response.header("www-authenticate"), challenge);
    assert_eq!(response.header("a2a-extensions"), None);
}

/// Sends `body` as a JSON-RPC request and parses the answer.
pub fn call(host: &FakeHost, headers: &[(&str, &str)], body: &str) -> (Response, Value) {
    let response = murmur_door_guest::handle(host, &post(headers), || body.as_bytes().to_vec())
        .whole()
        .unwrap();
    let value = serde_json::from_slice(&response.body).unwrap();
    (response, value)
}

/// An event of the log.
pub fn event(
    id: u64,
    task_id: &str,
    body: murmur_door_guest::imports::model::EventBody,
) -> Delivery {
    Delivery::Event(Event {
        id,
        task_id: task_id.into(),
        context_id: "ctx_1".into(),
        body,
    })
}
