//! An echo agent on a2a-rs (`a2a-server-lf`): its `DefaultRequestHandler` and
//! `InMemoryTaskStore` behind its JSON-RPC router on `/` and its card router.
//! A message's task goes working, gets one artifact echoing the message's
//! text, and completes with an agent message holding the same text.
//!
//! Usage: a2a-rs-echo [ADDR] (default 127.0.0.1:0). Prints
//! `listening on http://ADDR` once it accepts connections.

use std::sync::Arc;

use a2a::*;
use a2a_server::*;
use axum::serve::ListenerExt;
use futures::stream::{self, BoxStream};

struct Echo;

impl AgentExecutor for Echo {
    fn execute(
        &self,
        ctx: ExecutorContext,
    ) -> BoxStream<'static, Result<StreamResponse, A2AError>> {
        let text = ctx
            .message
            .as_ref()
            .and_then(Message::text)
            .unwrap_or_default()
            .to_string();
        let (task_id, context_id) = ctx.task_info();
        let status = |state, message| {
            StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: task_id.clone(),
                context_id: context_id.clone(),
                status: TaskStatus {
                    state,
                    message,
                    timestamp: Some(chrono::Utc::now()),
                },
                metadata: None,
            })
        };
        let working = status(TaskState::Working, None);
        let artifact = StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: task_id.clone(),
            context_id: context_id.clone(),
            artifact: Artifact {
                artifact_id: new_artifact_id(),
                name: Some("response".into()),
                description: None,
                parts: vec![Part::text(text.clone())],
                metadata: None,
                extensions: None,
            },
            append: None,
            last_chunk: Some(true),
            metadata: None,
        });
        let reply = Message {
            task_id: Some(task_id.clone()),
            context_id: Some(context_id.clone()),
            ..Message::new(Role::Agent, vec![Part::text(text)])
        };
        let completed = status(TaskState::Completed, Some(reply));
        Box::pin(stream::iter([Ok(working), Ok(artifact), Ok(completed)]))
    }

    fn cancel(&self, ctx: ExecutorContext) -> BoxStream<'static, Result<StreamResponse, A2AError>> {
        let (task_id, context_id) = ctx.task_info();
        Box::pin(stream::once(async move {
            Ok(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id,
                context_id,
                status: TaskStatus {
                    state: TaskState::Canceled,
                    message: None,
                    timestamp: Some(chrono::Utc::now()),
                },
                metadata: None,
            }))
        }))
    }
}

fn card(url: &str) -> AgentCard {
    AgentCard {
        name: "echo".into(),
        description: "Echoes the text of each message".into(),
        version: "0.1.0".into(),
        supported_interfaces: vec![AgentInterface::new(url, TRANSPORT_PROTOCOL_JSONRPC)],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extensions: None,
            extended_agent_card: None,
        },
        default_input_modes: vec!["text/plain".into()],
        default_output_modes: vec!["text/plain".into()],
        skills: vec![AgentSkill {
            id: "echo".into(),
            name: "Echo".into(),
            description: "Echoes the text of each message".into(),
            tags: vec!["echo".into()],
            examples: None,
            input_modes: None,
            output_modes: None,
            security_requirements: None,
        }],
        provider: None,
        documentation_url: None,
        icon_url: None,
        security_schemes: None,
        security_requirements: None,
        signatures: None,
    }
}

#[tokio::main]
async fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let listener = tokio::net::TcpListener::bind(&addr).await.expect("binding");
    let url = format!("http://{}", listener.local_addr().unwrap());
    // TCP_NODELAY, as murmur-door, Node and uvicorn set it: without it a
    // stream's second event waits for the client's delayed ACK (40 ms).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let handler = Arc::new(DefaultRequestHandler::new(Echo, InMemoryTaskStore::new()));
    let app = a2a_server::jsonrpc::jsonrpc_router(handler).merge(
        a2a_server::agent_card::agent_card_router(Arc::new(StaticAgentCard::new(card(&url)))),
    );
    println!("listening on {url}");
    axum::serve(listener, app).await.expect("serving");
}
