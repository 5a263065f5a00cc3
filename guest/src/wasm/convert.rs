// The imports' types to the door's model and back. Included, not a module:
// the door's `wasm` edge includes it beside wit-bindgen's types, and the
// host's native baseline beside wasmtime's, and both name the interfaces
// `session`, `tokens`, `store` (task-store) and `events`, with the model's
// types in scope.

fn from_capsule(c: session::Capsule) -> Capsule {
    Capsule {
        started_at_ms: c.started_at_ms,
        task_acceptance: match c.task_acceptance {
            session::TaskAcceptance::None => TaskAcceptance::None,
            session::TaskAcceptance::Single => TaskAcceptance::Single,
            session::TaskAcceptance::Queue => TaskAcceptance::Queue,
        },
        transport: match c.inference_transport {
            session::InferenceTransport::Http => Transport::Http,
            session::InferenceTransport::Process => Transport::Process,
        },
        authenticated: c.authenticated,
        peer_tasks: c.peer_tasks,
        shell: c.shell,
        network: c.network,
        files_plane: c.planes.contains(session::Planes::FILES),
        peer_files_plane: c.planes.contains(session::Planes::PEER_FILES),
        images: ImageLimits {
            max_bytes: c.images.max_bytes,
            max_per_turn: c.images.max_per_turn,
        },
    }
}

fn from_identity(i: session::Identity) -> Identity {
    Identity {
        name: i.name,
        version: i.version,
        session_id: i.session_id,
        url: i.url,
        tools: i.tools,
    }
}

fn from_grant(grant: tokens::Grant) -> Grant {
    let credential = match grant.credential {
        tokens::Credential::Operator => Credential::Operator,
        tokens::Credential::Declared(name) => Credential::Declared(name),
        tokens::Credential::Member(caller) => Credential::Member(caller),
    };
    let flags = [
        (tokens::Scopes::SEND_MESSAGE, Scope::SendMessage),
        (
            tokens::Scopes::SEND_STREAMING_MESSAGE,
            Scope::SendStreamingMessage,
        ),
        (tokens::Scopes::WATCH_SESSION, Scope::WatchSession),
        (tokens::Scopes::GET_TASK, Scope::GetTask),
        (tokens::Scopes::LIST_TASKS, Scope::ListTasks),
        (tokens::Scopes::CANCEL_TASK, Scope::CancelTask),
        (tokens::Scopes::SUBSCRIBE_TO_TASK, Scope::SubscribeToTask),
        (tokens::Scopes::STOP_SESSION, Scope::StopSession),
        (tokens::Scopes::RESOURCES_FILES, Scope::ResourcesFiles),
    ];
    let scopes = flags
        .into_iter()
        .filter(|(flag, _)| grant.scopes.contains(*flag))
        .map(|(_, s)| s)
        .collect();
    Grant { credential, scopes }
}

fn from_stop_report(report: session::StopReport) -> StopReport {
    StopReport {
        canceled: report.canceled,
        residue: report.residue.into_iter().map(residue_item).collect(),
    }
}

fn to_new_task(task: NewTask) -> store::NewTask {
    store::NewTask {
        caller: caller(&task.caller),
        context_id: task.context_id,
        text: task.text,
        images: task
            .images
            .into_iter()
            .map(|image| store::Image {
                media_type: image.media_type,
                bytes: image.bytes,
            })
            .collect(),
        reference_task_ids: task.reference_task_ids,
        origin: match task.origin {
            Origin::Client => store::Origin::Client,
            Origin::Peer => store::Origin::Peer,
            Origin::Session => store::Origin::Session,
        },
        trust: task.trust,
        forget_session: task.forget_session,
        held: task.held,
    }
}

fn to_list_query(query: &ListQuery) -> store::ListQuery {
    store::ListQuery {
        context_id: query.context_id.clone(),
        state: query.state.map(to_store_state),
        status_after_ms: query.status_after_ms,
        after: query.after.as_ref().map(|c| store::Cursor {
            change: c.change,
            task_id: c.task_id.clone(),
        }),
        limit: query.limit,
    }
}

fn from_page(page: store::Page) -> Page {
    Page {
        tasks: page.tasks.into_iter().map(from_store).collect(),
        next: page.next.map(|c| Cursor {
            change: c.change,
            task_id: c.task_id,
        }),
        total: page.total,
    }
}

fn completion_refusal(refusal: session::CompletionRefusal) -> CompletionRefusal {
    match refusal {
        session::CompletionRefusal::NotAwaited => CompletionRefusal::NotAwaited,
        session::CompletionRefusal::Ending => CompletionRefusal::Ending,
    }
}

fn caller(caller: &Caller) -> Option<tokens::Credential> {
    caller.as_ref().map(|credential| match credential {
        Credential::Operator => tokens::Credential::Operator,
        Credential::Declared(name) => tokens::Credential::Declared(name.clone()),
        Credential::Member(name) => tokens::Credential::Member(name.clone()),
    })
}

fn task_error(error: store::TaskError) -> TaskError {
    match error {
        store::TaskError::NotFound => TaskError::NotFound,
        store::TaskError::WrongState(state) => TaskError::WrongState(from_store_state(state)),
        store::TaskError::OtherContext => TaskError::OtherContext,
        store::TaskError::Unavailable(why) => TaskError::Unavailable(why),
    }
}

const STATES: [(store::TaskState, TaskState); 7] = [
    (store::TaskState::Submitted, TaskState::Submitted),
    (store::TaskState::Working, TaskState::Working),
    (store::TaskState::InputRequired, TaskState::InputRequired),
    (store::TaskState::Completed, TaskState::Completed),
    (store::TaskState::Failed, TaskState::Failed),
    (store::TaskState::Rejected, TaskState::Rejected),
    (store::TaskState::Canceled, TaskState::Canceled),
];

fn from_store_state(state: store::TaskState) -> TaskState {
    STATES
        .iter()
        .find(|(s, _)| *s == state)
        .map(|(_, t)| *t)
        .expect("every state is mapped")
}

fn to_store_state(state: TaskState) -> store::TaskState {
    STATES
        .iter()
        .find(|(_, t)| *t == state)
        .map(|(s, _)| *s)
        .expect("every state is mapped")
}

fn from_started(started: store::Started) -> Started {
    Started {
        task: from_store(started.task),
        settled: started.settled.map(from_store),
    }
}

fn from_store(task: store::Task) -> Task {
    Task {
        id: task.id,
        context_id: task.context_id,
        status: Status {
            state: from_store_state(task.status.state),
            message: task.status.message,
            timestamp_ms: task.status.timestamp_ms,
        },
        response: task.response,
        prompt: task.prompt,
        residue: task.residue.into_iter().map(residue_item).collect(),
        metadata: TaskMetadata {
            no_answer: task.metadata.no_answer,
            no_answer_below: task
                .metadata
                .no_answer_below
                .into_iter()
                .map(|m| MemberStatus {
                    member: m.member,
                    status: m.status,
                })
                .collect(),
            running_commands: task
                .metadata
                .running_commands
                .into_iter()
                .map(|c| RunningCommand {
                    work_id: c.work_id,
                    binary: c.binary,
                    command: c.command,
                    running_ms: c.running_ms,
                })
                .collect(),
        },
        change: task.change,
    }
}

fn residue_item(item: session::ResidueItem) -> ResidueItem {
    match item {
        session::ResidueItem::DetachedShell(s) => ResidueItem::DetachedShell {
            work_id: s.work_id,
            binary: s.binary,
            command: s.command,
            started_at_ms: s.started_at_ms,
        },
        session::ResidueItem::Delegation(d) => ResidueItem::Delegation {
            delegation_id: d.delegation_id,
            capsule: d.capsule,
            version: d.version,
            child_session_id: d.child_session_id,
            child_workdir: d.child_workdir,
        },
    }
}

fn from_delivery(delivery: events::Delivery) -> Delivery {
    match delivery {
        events::Delivery::Event(event) => Delivery::Event(Event {
            id: event.id,
            task_id: event.task_id,
            context_id: event.context_id,
            body: match event.body {
                events::EventBody::Status(update) => EventBody::Status {
                    status: Status {
                        state: from_store_state(update.status.state),
                        message: update.status.message,
                        timestamp_ms: update.status.timestamp_ms,
                    },
                    message_id: update.message_id,
                },
                events::EventBody::Artifact(artifact) => EventBody::Artifact {
                    artifact_id: artifact.artifact_id,
                    text: artifact.text,
                    residue: artifact.residue.into_iter().map(residue_item).collect(),
                },
                events::EventBody::Frame(frame) => EventBody::Frame {
                    kind: frame.kind,
                    // The frame's fields are opaque JSON from the agent; an
                    // unreadable body carries no fields.
                    body: serde_json::from_str(&frame.body)
                        .unwrap_or_else(|_| serde_json::json!({})),
                },
            },
        }),
        events::Delivery::Framed(framed) => Delivery::Framed(Framed {
            id: framed.id,
            state: framed.state.map(from_store_state),
            frame: framed.frame,
            sse: framed.sse,
            request_id_at: framed.request_id_at as usize,
        }),
        events::Delivery::Gap((after, through)) => Delivery::Gap(after, through),
        events::Delivery::Lagged((after, through)) => Delivery::Lagged(after, through),
        events::Delivery::Closed => Delivery::Closed,
    }
}
