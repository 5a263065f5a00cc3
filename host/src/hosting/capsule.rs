//! One capsule's door, opened and closed: its session (the state directory
//! locked, the store opened or resumed), its listener, its minted tokens and
//! control token, and the server answering on it. `murmur-door serve` opens
//! one; a host of capsules ([`crate::hosting::host`]) opens many on one engine.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::hosting::roster::{Entry, Listen};
use crate::listener::accept;
use crate::listener::server::Server;
use crate::sandbox::engine::Door;
use crate::session::Session;
use crate::session::agents::{Agents, StdioAgent};
use crate::session::tasks::events::Replay;
use crate::session::tasks::{self, store::Store};
use crate::versions::control::{CONTROL_PATH, ControlToken};

/// What a capsule is opened from: its entry (a capsules file's, or
/// `serve`'s flags), the agent running its tasks and its replay buffer.
pub struct CapsuleConfig {
    /// Its name, manifest, listen address, state directory and files.
    pub entry: Entry,
    /// Runs the session's tasks, unless the entry names its own
    /// (`agent_stdio`).
    pub agent: Agents,
    /// What the session's replay buffer keeps, for streams that reconnect.
    pub replay: Replay,
    /// The host's shared listener, where an entry of host names is reached
    /// (the host routes its requests; the capsule opens no listener).
    pub shared: Option<SocketAddr>,
    /// Whether it may be reached past loopback without declaring
    /// `network.authentication` (`--public`): see [`exposed`].
    pub public: bool,
}

/// Why a capsule may not open where it would listen: it declares no
/// `network.authentication`, so whoever reaches it may call every task
/// method and read its operator plane, and its address is not loopback
/// (on a host's shared listener, that listener's). None when it may.
pub fn exposed(
    name: &str,
    manifest: &crate::manifest::Manifest,
    listen: &Listen,
    shared: Option<SocketAddr>,
    public: bool,
) -> Option<String> {
    let address = match listen {
        Listen::Port(address) => *address,
        Listen::Hostnames(_) => shared?,
    };
    if public || manifest.credentials.is_some() || address.ip().is_loopback() {
        return None;
    }
    Some(format!(
        "capsule {name} declares no network.authentication and would listen on {address}, \
         which is not loopback: anyone reaching it could call its task methods and read its \
         operator plane. Declare network.authentication, listen on loopback, or pass --public"
    ))
}

/// A capsule's door, answering.
pub struct Capsule {
    /// The server answering on its listener, with its live door (`doors`).
    pub server: Arc<Server>,
    /// The session it keeps: its tasks, tokens and task store.
    pub session: Arc<Session>,
    /// Where it listens, `http://ADDR` (`http://NAME:PORT` on a host's
    /// shared listener, NAME its first host name): its card's
    /// `supportedInterfaces[0].url` unless it has a public URL.
    pub url: String,
    /// The id of the launch's own task, when this launch started one.
    pub launch_task: Option<String>,
    /// The host names it is reached by on a host's shared listener; none
    /// on a listener of its own.
    pub hostnames: Vec<String>,
    /// Accepting on its own listener; None on a host's shared listener.
    serving: Option<tokio::task::JoinHandle<()>>,
}

impl Capsule {
    /// Opens the session `config` names and serves `door` for it on
    /// `config.listen`, the server set up by `configure` (limits, a host's
    /// shared pool). A capsule of host names opens no listener: the host
    /// routes the shared listener's requests to its server. The tokens and the control token are on disk before
    /// anyone is answered. Fails, with nothing listening, when the state
    /// directory is locked by another door or cannot be opened, the address
    /// is taken, or a file cannot be written.
    pub async fn open(
        config: CapsuleConfig,
        door: Door,
        configure: impl FnOnce(Server) -> Server,
    ) -> anyhow::Result<Capsule> {
        let CapsuleConfig {
            entry:
                Entry {
                    name,
                    manifest,
                    workdir,
                    task,
                    listen,
                    public_url,
                    state,
                    tokens_file,
                    control_token_file,
                    resume,
                    agent_stdio,
                    ..
                },
            agent,
            replay,
            shared,
            public,
        } = config;
        if let Some(why) = exposed(&name, &manifest, &listen, shared, public) {
            anyhow::bail!(why);
        }
        let opened = Store::open(&state, resume, tasks::now_ms())?;
        let hostnames = listen.hostnames().to_vec();
        let (listener, url) = match listen {
            Listen::Port(listen) => {
                let listener = TcpListener::bind(listen)
                    .await
                    .with_context(|| format!("listening on {listen}"))?;
                let url = listener_url(listener.local_addr()?);
                (Some(listener), url)
            }
            Listen::Hostnames(names) => {
                let shared = shared.context("host names need the host's shared listener")?;
                (None, format!("http://{}:{}", names[0], shared.port()))
            }
        };
        // The card names the public URL when there is one.
        let card_url = public_url.unwrap_or_else(|| url.clone());
        let agents = match agent_stdio {
            Some(command) => Agents::Stdio(StdioAgent::new(command)),
            None => agent,
        };
        let process_transport = manifest.transport == crate::manifest::Transport::Process;
        let agent = agents.for_session(&name, &workdir, process_transport);
        let mut session =
            Session::start(&manifest, card_url, opened.store, agent, replay)?.with_workdir(workdir);
        // The door's own state is never served, whatever the exports match.
        let mut own = vec![
            state.clone(),
            tokens_file.clone(),
            control_token_file.clone(),
        ];
        own.extend(tasks::store::own_files(&state));
        own.extend(door.engine.cache_dir().map(Path::to_path_buf));
        session.planes.withhold(own.iter().map(PathBuf::as_path));
        let session = Arc::new(session);
        // The tokens are on disk before the door answers anyone.
        session
            .tokens
            .write_file(&tokens_file)
            .with_context(|| format!("writing tokens to {}", tokens_file.display()))?;
        let control = ControlToken::mint()?;
        control.write_file(&control_token_file).with_context(|| {
            format!(
                "writing the control token to {}",
                control_token_file.display()
            )
        })?;
        let capsule = name.as_str();
        tracing::info!(capsule = %capsule, version = %manifest.version, session = %session.id(), "session started");
        if resume {
            tracing::info!(capsule = %capsule, session = %session.id(), failed = opened.failed_by_resume.len(), "session resumed; tasks it left live are failed");
        }
        if let Some(archived) = &opened.archived {
            tracing::info!(capsule = %capsule, path = %archived.display(), "previous session archived");
        }
        tracing::info!(capsule = %capsule, path = %tokens_file.display(), "tokens written");
        tracing::info!(capsule = %capsule, path = %control_token_file.display(), surface = CONTROL_PATH, "control token written");
        // The launch's own task is on the door before anyone is answered; a
        // resumed session has it already.
        let mut launch_task = None;
        if let Some(text) = task.filter(|_| !resume) {
            let launched = session
                .tasks
                .start_own(text)
                .map_err(|e| anyhow::anyhow!("starting the launch task: {e:?}"))?;
            tracing::info!(capsule = %capsule, task = %launched.id, "launch task started");
            launch_task = Some(launched.id);
        }
        // A resumed launch reports the detached commands its last run lost,
        // as a task of its own, before anyone is answered.
        if !opened.lost_commands.is_empty() {
            let report = session
                .tasks
                .start_own(tasks::own::lost_commands(&opened.lost_commands))
                .map_err(|e| anyhow::anyhow!("reporting the lost commands: {e:?}"))?;
            tracing::info!(capsule = %capsule, task = %report.id, lost = opened.lost_commands.len(), "lost commands reported");
        }

        let server = Arc::new(configure(
            Server::new(door, session.clone())
                .with_control(control)
                .with_name(&name),
        ));
        let serving =
            listener.map(|listener| tokio::spawn(accept::serve(server.clone(), listener)));
        tracing::info!(capsule = %capsule, %url, "door listening");
        Ok(Capsule {
            server,
            session,
            url,
            launch_task,
            hostnames,
            serving,
        })
    }

    /// Resolves once the launch's own task has ended (`lifecycle.after_task:
    /// exit`), or the session has closed; never when this launch started
    /// none. A task waiting for input has not ended. Holds the session, not
    /// the capsule.
    pub fn launch_task_ended(&self) -> impl Future<Output = ()> + Send + 'static {
        let launch_task = self.launch_task.clone();
        let session = self.session.clone();
        async move {
            let Some(id) = launch_task else {
                return std::future::pending().await;
            };
            loop {
                session.tasks.settled_started(&id).wait().await;
                let ended = match session.tasks.get(&None, &id) {
                    Ok(task) => !tasks::is_live(task.status.state),
                    Err(_) => true,
                };
                if ended || session.closing() {
                    return;
                }
            }
        }
    }

    /// Closes its session, listener and connections at once, without
    /// waiting: for a capsule something else still holds.
    pub fn close_now(&self) {
        self.session.close();
        tokio::spawn(self.session.tasks.agent().close(Duration::ZERO));
        if let Some(serving) = &self.serving {
            serving.abort();
        }
        self.server.shut();
    }

    /// Closes the capsule as SIGTERM does. First its listener: a new
    /// connection is refused (a load balancer moves on), while the ones
    /// open are still answered. Then the session: new tasks are rejected,
    /// held requests answer with their task as it stands, streams end with
    /// `capsule-closed`, detached commands are killed. It waits up to the
    /// server's drain (`--drain-ms`) for every request in flight to finish
    /// and a moment for the last bytes to leave, then closes every
    /// connection.
    pub async fn close(self) {
        if let Some(serving) = self.serving {
            serving.abort();
            // Dropped, with its listener, once the abort has taken.
            let _ = serving.await;
        }
        self.session.close();
        let drain = self.server.http_limits().drain;
        let deadline = tokio::time::Instant::now() + drain;
        // The agent's program stops beside the requests that drain.
        let agent = self.session.tasks.agent().close(drain);
        let requests = async {
            while self.server.doors.in_flight() > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.server.shut();
        };
        tokio::join!(agent, requests);
    }
}

/// The address the listener answers on, for the card. An unspecified address
/// (0.0.0.0, ::) answers on every interface; the card then names localhost.
pub fn listener_url(addr: SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        format!("http://localhost:{}", addr.port())
    } else {
        format!("http://{addr}")
    }
}
