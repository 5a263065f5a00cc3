//! The session a door answers for: the capsule's facts derived from the
//! manifest at launch, its id, its minted tokens, its tasks, what its
//! planes export, the peer handles it minted, and what the operator asks
//! of it on the control surface (`operator`).

pub mod agents;
pub mod handles;
pub mod operator;
pub mod process;
pub mod tasks;
pub mod tokens;

use std::path::PathBuf;
use std::sync::Arc;

use crate::bindings::session::{
    Capsule, Identity, ImageLimits, InferenceTransport, Planes as Flags, TaskAcceptance,
};
use crate::manifest::planes::Planes;
use crate::manifest::{self, Manifest};
use crate::session::agents::{Agent, ScriptAgent};
use crate::session::handles::Handles;
use crate::session::operator::Operated;
use crate::session::tasks::Hub;
use crate::session::tasks::events::DEFAULT_REPLAY_BUFFER;
use crate::session::tasks::store::Store;
use crate::session::tokens::Tokens;

/// A capsule's session: the facts its door reads, and the tokens, tasks,
/// planes and handles it keeps.
pub struct Session {
    /// What the door's rules read on every request, derived from the manifest.
    pub capsule: Capsule,
    /// The capsule's name, version and tools, the session id and the url it
    /// answers on.
    pub identity: Identity,
    /// The bearer tokens minted for this session.
    pub tokens: Tokens,
    /// The session's tasks, the agent that runs them and their event log.
    pub tasks: Arc<Hub>,
    /// What the planes export, from which workdir.
    pub planes: Planes,
    /// The peer handles minted for this session.
    pub handles: Handles,
}

impl Session {
    /// What the operator's requests on the door's control surface reach
    /// ([`operator::serve`]).
    pub fn operated(&self) -> Operated<'_> {
        Operated {
            handles: &self.handles,
            peer_files: self.planes.peer_files.as_ref(),
            url: &self.identity.url,
            tokens: &self.tokens,
        }
    }

    /// A session kept in memory only, answering on `url`: a fresh session id,
    /// freshly minted tokens, the script agent and the default replay
    /// buffer. Nothing survives it.
    pub fn launch(manifest: &Manifest, url: String) -> anyhow::Result<Session> {
        let store = Store::in_memory(tasks::now_ms())?;
        Session::start(
            manifest,
            url,
            store,
            Arc::new(ScriptAgent),
            DEFAULT_REPLAY_BUFFER,
        )
    }

    /// The session `store` records, for `manifest`, answering on `url`, its
    /// tasks run by `agent`, its event log replaying the newest events
    /// `replay_buffer` keeps. Tokens are minted anew: they are never stored.
    pub fn start(
        manifest: &Manifest,
        url: String,
        store: Store,
        agent: Arc<dyn Agent>,
        replay_buffer: impl Into<crate::session::tasks::events::Replay>,
    ) -> anyhow::Result<Session> {
        let tokens = Tokens::mint(manifest.credentials.as_deref().unwrap_or_default())?;
        let capsule = capsule(manifest, store.created_ms());
        let identity = Identity {
            name: manifest.name.clone(),
            version: manifest.version.clone(),
            session_id: store.session_id().to_string(),
            url,
            tools: manifest.tools.clone(),
        };
        let tasks = Hub::new(store, agent, capsule.task_acceptance, replay_buffer);
        let planes = Planes {
            workdir: PathBuf::from("."),
            files: manifest.files.clone(),
            peer_files: manifest.peer_files.clone(),
            withheld: Vec::new(),
        };
        Ok(Session {
            capsule,
            identity,
            tokens,
            tasks,
            planes,
            handles: Handles::default(),
        })
    }

    /// The session with its planes' exports relative to `workdir` (by
    /// default the directory the host runs in).
    pub fn with_workdir(mut self, workdir: PathBuf) -> Session {
        self.planes.workdir = workdir;
        self
    }

    /// The session id, `ses_…`; `--resume` keeps it.
    pub fn id(&self) -> &str {
        &self.identity.session_id
    }

    /// Whether the session is closing: new tasks are rejected.
    pub fn closing(&self) -> bool {
        self.tasks.closing()
    }

    /// The session ends: new tasks are rejected, held requests answer,
    /// streams end, and detached commands are killed.
    pub fn close(&self) {
        self.tasks.close();
        self.handles.clear();
    }
}

/// `ses_` and 32 lowercase hex digits, time-ordered (a UUIDv7's bits).
pub fn new_session_id() -> String {
    tasks::ids::session_id()
}

/// The facts the door's rules read on every request.
fn capsule(manifest: &Manifest, started_at_ms: i64) -> Capsule {
    let mut planes = Flags::empty();
    if manifest.files.is_some() {
        planes |= Flags::FILES;
    }
    if manifest.peer_files.is_some() {
        planes |= Flags::PEER_FILES;
    }
    Capsule {
        started_at_ms: Some(started_at_ms),
        task_acceptance: match manifest.task_acceptance {
            manifest::TaskAcceptance::None => TaskAcceptance::None,
            manifest::TaskAcceptance::Single => TaskAcceptance::Single,
            manifest::TaskAcceptance::Queue => TaskAcceptance::Queue,
        },
        inference_transport: match manifest.transport {
            manifest::Transport::Http => InferenceTransport::Http,
            manifest::Transport::Process => InferenceTransport::Process,
        },
        authenticated: manifest.credentials.is_some(),
        peer_tasks: manifest.peer_tasks_accept,
        shell: !manifest.shell_allow.is_empty(),
        network: !manifest.network_allow.is_empty(),
        planes,
        images: ImageLimits {
            max_bytes: manifest.image_max_bytes,
            max_per_turn: manifest.image_max_per_turn,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::new_session_id;

    #[test]
    fn session_ids_are_time_ordered_hex() {
        let a = new_session_id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = new_session_id();
        for id in [&a, &b] {
            let hex = id.strip_prefix("ses_").unwrap();
            assert_eq!(hex.len(), 32);
            assert!(
                hex.bytes()
                    .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
            );
        }
        assert!(a < b);
    }
}
