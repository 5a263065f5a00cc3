//! `murmur-door`: runs a capsule's door standalone.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

use murmur_door_host::admission;
use murmur_door_host::agents::{Agent, CommandAgent, ScriptAgent};
use murmur_door_host::cache::{CompileCache, Compiled};
use murmur_door_host::connections;
use murmur_door_host::control::{CONTROL_PATH, ControlToken};
use murmur_door_host::cpu;
use murmur_door_host::engine::{self, Door};
use murmur_door_host::manifest::Manifest;
use murmur_door_host::memory;
use murmur_door_host::request;
use murmur_door_host::server::{self, Server};
use murmur_door_host::session::Session;
use murmur_door_host::swap;
use murmur_door_host::tasks::events::{DEFAULT_REPLAY_BUFFER, DEFAULT_REPLAY_BUFFER_BYTES, Replay};
use murmur_door_host::tasks::{self, store::Store};

#[derive(Parser)]
#[command(
    name = "murmur-door",
    version,
    about = "The HTTP door of a Murmur capsule, speaking A2A v1.0"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the door of the capsule a manifest describes.
    Serve {
        /// The capsule's manifest (murmur.yaml).
        manifest: PathBuf,
        /// The address to listen on; port 0 picks a free one.
        #[arg(long, default_value = "127.0.0.1:41873")]
        listen: SocketAddr,
        /// The session's state directory.
        #[arg(long, default_value = ".murmur-door")]
        state: PathBuf,
        /// Where the minted tokens are written (mode 0600); default
        /// STATE/tokens.json.
        #[arg(long)]
        tokens_file: Option<PathBuf>,
        /// Reopen the session recorded in STATE/session.db instead of starting
        /// a new one; tasks it left live are failed. Tokens are minted anew.
        #[arg(long)]
        resume: bool,
        /// The agent that runs tasks: `script` runs each task's text as a
        /// script (reply, fail, ask, sleep, progress, detach, await).
        #[arg(long, value_enum, default_value_t = AgentKind::Script)]
        agent: AgentKind,
        /// Run each task with `sh -c CMD`, its text on stdin: exit 0 completes
        /// it with stdout, another exit fails it with stderr's last line.
        #[arg(long, value_name = "CMD", conflicts_with = "agent")]
        agent_cmd: Option<String>,
        /// How many of the newest events a stream can replay from its
        /// Last-Event-ID.
        #[arg(long, value_name = "N", default_value_t = DEFAULT_REPLAY_BUFFER,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 24))]
        replay_buffer: usize,
        /// Bytes of events the replay buffer holds at most; the oldest go
        /// first, and a stream reconnecting from one of them is told it
        /// lost them (a gap).
        #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_REPLAY_BUFFER_BYTES,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 40))]
        replay_buffer_bytes: usize,
        /// Door instances alive at once: each request holds one while it is
        /// answered, each open stream one for its whole life.
        #[arg(long, value_name = "N", default_value_t = engine::MAX_INSTANCES,
              value_parser = clap::value_parser!(u32).range(1..=100_000))]
        max_instances: u32,
        /// Milliseconds a request's door may run without waiting (its wasm
        /// and the host calls it makes); a door past it is stopped and the
        /// request answered -32603 (or 500).
        #[arg(long, value_name = "MS", default_value_t = cpu::MAX_CPU_MS,
              value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
        max_cpu_ms: u64,
        /// Megabytes of linear memory a door instance may grow to; a door
        /// past it fails its request (-32603 or 500).
        #[arg(long, value_name = "MB", default_value_t = (memory::MAX_MEMORY_BYTES >> 20) as u64,
              value_parser = clap::value_parser!(u64).range(1..=4096))]
        max_memory_mb: u64,
        /// Megabytes of linear memory all door instances may hold together;
        /// a door refused memory by it is answered 503.
        #[arg(long, value_name = "MB", default_value_t = (memory::MAX_DOOR_MEMORY_BYTES >> 20) as u64,
              value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
        max_door_memory_mb: u64,
        /// Bytes a request body may have; a larger one is answered 413.
        #[arg(long, value_name = "BYTES", default_value_t = server::MAX_BODY_BYTES,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 32))]
        max_body_bytes: usize,
        /// Header lines a request head may have; hyper answers 431 past it.
        #[arg(long, value_name = "N", default_value_t = server::MAX_HEADERS,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000))]
        max_headers: usize,
        /// Bytes a request head may take (at least 8192); hyper answers 431
        /// past it.
        #[arg(long, value_name = "BYTES", default_value_t = server::MAX_HEADER_BYTES,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(8192..=1 << 24))]
        max_header_bytes: usize,
        /// Milliseconds a client has to send a whole request head; a slower
        /// one is disconnected.
        #[arg(long, value_name = "MS", default_value_t = server::HEADER_TIMEOUT.as_millis() as u64,
              value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
        header_timeout_ms: u64,
        /// Milliseconds a client has, from its head, to send the whole
        /// body; a slower one is answered 408.
        #[arg(long, value_name = "MS", default_value_t = server::BODY_TIMEOUT.as_millis() as u64,
              value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
        body_timeout_ms: u64,
        /// Bytes of request bodies held at once across every connection;
        /// past it a request is answered 503.
        #[arg(long, value_name = "BYTES", default_value_t = server::MAX_BODY_MEMORY_BYTES,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 40))]
        max_body_memory_bytes: usize,
        /// Connections open at once (at most the open-files limit less 128);
        /// at the cap the one that has done least is closed for a new one.
        #[arg(long, value_name = "N", default_value_t = connections::MAX_CONNECTIONS,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 20))]
        max_connections: usize,
        /// Door instances one caller (a token on an authenticated door, a
        /// client address on a public one) may hold at once; past it 429.
        #[arg(long, value_name = "N", default_value_t = admission::MAX_INSTANCES_PER_CALLER,
              value_parser = clap::value_parser!(u32).range(1..=100_000))]
        max_instances_per_caller: u32,
        /// Milliseconds a request waits for a door instance when all are in
        /// use; then 503.
        #[arg(long, value_name = "MS", default_value_t = admission::INSTANCE_WAIT.as_millis() as u64,
              value_parser = clap::value_parser!(u64).range(0..=60_000))]
        instance_wait_ms: u64,
        /// Serve the door component in this file instead of the embedded
        /// one; SIGHUP loads it again.
        #[arg(long, value_name = "FILE")]
        component: Option<PathBuf>,
        /// Where the control surface's token is written (mode 0600);
        /// default `control-token` beside the tokens file.
        #[arg(long, value_name = "FILE")]
        control_token_file: Option<PathBuf>,
        /// Bytes a door component may have: the --component file, the file
        /// SIGHUP reloads, and one sent to the control surface.
        #[arg(long, value_name = "BYTES", default_value_t = swap::MAX_COMPONENT_BYTES,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 30))]
        max_component_bytes: usize,
        /// Where compiled doors are kept, so a launch or swap of a door
        /// compiled before compiles nothing; default
        /// `$XDG_CACHE_HOME/murmur-door` or `~/.cache/murmur-door`.
        #[arg(long, value_name = "DIR", conflicts_with = "no_compile_cache")]
        compile_cache: Option<PathBuf>,
        /// Compile the door at every launch and keep nothing on disk.
        #[arg(long)]
        no_compile_cache: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum AgentKind {
    Script,
}

/// The control token's file name, beside the tokens file by default. Not a
/// key of the tokens file: its keys are credential names, and a capsule may
/// declare a credential named `control`.
const CONTROL_TOKEN_FILE: &str = "control-token";

/// How `serve` runs.
struct Options {
    manifest: PathBuf,
    listen: SocketAddr,
    state: PathBuf,
    tokens_file: PathBuf,
    resume: bool,
    agent: Arc<dyn Agent>,
    replay_buffer: Replay,
    limits: request::Limits,
    http: server::HttpLimits,
    component: Option<PathBuf>,
    control_token_file: PathBuf,
    max_component_bytes: usize,
    compile_cache: Option<PathBuf>,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let Cli {
        command:
            Command::Serve {
                manifest,
                listen,
                state,
                tokens_file,
                resume,
                agent,
                agent_cmd,
                replay_buffer,
                replay_buffer_bytes,
                max_instances,
                max_cpu_ms,
                max_memory_mb,
                max_door_memory_mb,
                max_body_bytes,
                max_headers,
                max_header_bytes,
                header_timeout_ms,
                body_timeout_ms,
                max_body_memory_bytes,
                max_connections,
                max_instances_per_caller,
                instance_wait_ms,
                component,
                control_token_file,
                max_component_bytes,
                compile_cache,
                no_compile_cache,
            },
    } = Cli::parse();
    let compile_cache = match no_compile_cache {
        true => None,
        false => compile_cache.or_else(CompileCache::default_dir),
    };
    let agent: Arc<dyn Agent> = match (agent, agent_cmd) {
        (_, Some(command)) => Arc::new(CommandAgent::new(command)),
        (AgentKind::Script, None) => Arc::new(ScriptAgent),
    };
    let tokens_file = tokens_file.unwrap_or_else(|| state.join("tokens.json"));
    let control_token_file =
        control_token_file.unwrap_or_else(|| tokens_file.with_file_name(CONTROL_TOKEN_FILE));
    let options = Options {
        tokens_file,
        control_token_file,
        component,
        max_component_bytes,
        compile_cache,
        manifest,
        listen,
        state,
        resume,
        agent,
        replay_buffer: Replay {
            events: replay_buffer,
            bytes: replay_buffer_bytes,
        },
        limits: request::Limits {
            max_memory_bytes: (max_memory_mb as usize) << 20,
            max_cpu_ms,
        },
        http: server::HttpLimits {
            max_body_bytes,
            max_headers,
            max_header_bytes,
            header_timeout: Duration::from_millis(header_timeout_ms),
            body_timeout: Duration::from_millis(body_timeout_ms),
            max_body_memory_bytes,
            max_connections,
            max_instances,
            max_instances_per_caller,
            instance_wait: Duration::from_millis(instance_wait_ms),
            max_door_memory_bytes: (max_door_memory_mb as usize) << 20,
        },
    };
    // A write past the file-size limit fails (EFBIG), and the request that
    // needed it is answered -32603, rather than the signal ending the door.
    // SAFETY: ignoring a signal, before any thread is started.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(serve(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("murmur-door: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(options: Options) -> anyhow::Result<()> {
    let Options {
        manifest: manifest_path,
        listen,
        state,
        tokens_file,
        resume,
        agent,
        replay_buffer,
        limits,
        mut http,
        component,
        control_token_file,
        max_component_bytes,
        compile_cache,
    } = options;
    let manifest = Manifest::load(&manifest_path)
        .with_context(|| format!("manifest {}", manifest_path.display()))?;
    let mut engine = engine::engine_for(http.max_instances, limits.max_memory_bytes)?;
    if let Some(dir) = &compile_cache {
        // A cache that cannot be used costs a compile, not the launch.
        match CompileCache::open(dir) {
            Ok(cache) => engine = engine.with_cache(cache),
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "compiled doors are not cached"),
        }
    }
    let door = match &component {
        None => Door::load(&engine, engine::EMBEDDED_DOOR)?,
        Some(path) => {
            let bytes = swap::read_component(path, max_component_bytes)
                .await
                .with_context(|| format!("reading the door component {}", path.display()))?;
            Door::load_checked(&engine, &bytes)
                .with_context(|| format!("the door component {}", path.display()))?
        }
    };
    let opened = Store::open(&state, resume, tasks::now_ms())?;
    // The connection cap, not the default soft limit on open files, bounds
    // the sockets.
    match connections::raise_open_files_limit() {
        Ok(open_files) => {
            let fitted = connections::fit_connections(http.max_connections, open_files);
            if fitted < http.max_connections {
                tracing::warn!(
                    open_files,
                    max_connections = fitted,
                    "the open-files limit lowers --max-connections"
                );
            }
            http.max_connections = fitted;
        }
        Err(e) => tracing::warn!(error = %e, "the open-files limit cannot be read"),
    }
    // A caller's requests in progress each keep a connection busy, and a
    // busy connection is never closed for a new one: one caller must not be
    // able to make them all busy.
    let share_cap = (http.max_connections / 2).max(1) as u32;
    if http.max_instances_per_caller > share_cap {
        tracing::warn!(
            max_instances_per_caller = share_cap,
            max_connections = http.max_connections,
            "a caller's share is at most half the connections"
        );
        http.max_instances_per_caller = share_cap;
    }

    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    let url = listener_url(listener.local_addr()?);
    let session = Arc::new(Session::start(
        &manifest,
        url.clone(),
        opened.store,
        agent,
        replay_buffer,
    )?);
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
    // Installed before the door answers (before the url is logged): the
    // default action of SIGHUP and SIGTERM ends the process at once, and a
    // client that saw the url may signal it right away.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("listening for SIGHUP")?;

    tracing::info!(capsule = %manifest.name, version = %manifest.version, session = %session.id(), "session started");
    if resume {
        tracing::info!(session = %session.id(), failed = opened.failed_by_resume.len(), "session resumed; tasks it left live are failed");
    }
    if let Some(archived) = &opened.archived {
        tracing::info!(path = %archived.display(), "previous session archived");
    }
    let source = component
        .as_ref()
        .map_or("embedded".to_string(), |p| p.display().to_string());
    let compiled = match door.compiled {
        Compiled::Cached => "cached",
        Compiled::Fresh => "compiled",
    };
    tracing::info!(digest = %door.digest, version = 1, %source, %compiled, "door component loaded");
    tracing::info!(path = %tokens_file.display(), "tokens written");
    tracing::info!(path = %control_token_file.display(), surface = CONTROL_PATH, "control token written");
    tracing::info!(%url, "door listening");

    let mut server = Server::new(door, session.clone())
        .with_control(control)
        .with_limits(limits)
        .with_http_limits(http)
        .with_max_component_bytes(max_component_bytes);
    if let Some(path) = component {
        server = server.with_component_file(path);
    }
    let server = Arc::new(server);
    let serving = tokio::spawn(server.clone().serve(listener));
    let reloader = server.clone();
    let reloading = tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            reloader.reload().await;
        }
    });
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; closing the door"),
        _ = terminate.recv() => tracing::info!("terminated; closing the door"),
    }
    // Held requests answer with their task as it stands, streams write
    // capsule-closed and end, detached commands end. The door waits (at most
    // 5 s) for every request to finish, then a moment for the last bytes to
    // reach their clients.
    session.close();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while server.doors.in_flight() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    serving.abort();
    reloading.abort();
    Ok(())
}

/// The address the listener answers on, for the card. An unspecified address
/// (0.0.0.0, ::) answers on every interface; the card then names localhost.
fn listener_url(addr: SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        format!("http://localhost:{}", addr.port())
    } else {
        format!("http://{addr}")
    }
}
