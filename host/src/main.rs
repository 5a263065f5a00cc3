//! `murmur-door`: runs a capsule's door standalone.

use std::cell::Cell;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use tokio::net::TcpListener;

use murmur_door_host::agents::{Agents, CommandAgent, ScriptAgent, StdioAgent};
use murmur_door_host::cache::{CompileCache, Compiled};
use murmur_door_host::capsule::{self, Capsule, CapsuleConfig};
use murmur_door_host::control::ControlToken;
use murmur_door_host::engine::{self, Door};
use murmur_door_host::host::{Host, HostLimits};
use murmur_door_host::host_control;
use murmur_door_host::imports::response_stream;
use murmur_door_host::internal::admission;
use murmur_door_host::internal::connections;
use murmur_door_host::internal::cpu;
use murmur_door_host::internal::memory;
use murmur_door_host::internal::reuse;
use murmur_door_host::internal::telemetry;
use murmur_door_host::manifest::Manifest;
use murmur_door_host::proxies::{self, ClientHeader, TrustedProxies};
use murmur_door_host::request;
use murmur_door_host::roster::{self, Entry, Listen, Roster};
use murmur_door_host::server;
use murmur_door_host::swap;
use murmur_door_host::tasks::events::{DEFAULT_REPLAY_BUFFER, DEFAULT_REPLAY_BUFFER_BYTES, Replay};

/// The library leaves the allocator to its embedder; the binary takes
/// mimalloc (see Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How often at most a worker hands the memory mimalloc keeps for it back
/// to the system.
const GIVE_BACK_EVERY: Duration = Duration::from_secs(1);

/// Run by each worker as it goes idle: at most every [`GIVE_BACK_EVERY`],
/// mimalloc returns the pages the worker's heap freed and kept. A burst of
/// instances frees their host-side state at once (1,000 streams: about
/// 60 MB), which mimalloc would otherwise keep for as long as the process
/// runs; once a second costs a busy worker nothing measurable.
fn give_back_freed_memory() {
    thread_local!(static LAST: Cell<Option<Instant>> = const { Cell::new(None) });
    let now = Instant::now();
    LAST.with(|last| {
        if last
            .get()
            .is_none_or(|at| now.duration_since(at) >= GIVE_BACK_EVERY)
        {
            last.set(Some(now));
            // SAFETY: mi_collect frees only what the calling thread's own
            // heap holds unused, and takes mimalloc's locks for what it
            // shares.
            unsafe { libmimalloc_sys::mi_collect(true) };
        }
    });
}

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
        /// The capsule's workdir, which the planes' exports are relative
        /// to; default the manifest's directory.
        #[arg(long, value_name = "DIR")]
        workdir: Option<PathBuf>,
        /// The launch's own task: started before the door answers anyone,
        /// and listed by the first ListTasks. Default: the workdir's
        /// `task.md`, else its `input.txt`, if there is one.
        #[arg(long, value_name = "TEXT", conflicts_with = "task_file")]
        task: Option<String>,
        /// The launch's own task, read from FILE.
        #[arg(long, value_name = "FILE")]
        task_file: Option<PathBuf>,
        /// The address to listen on; port 0 picks a free one.
        #[arg(long, default_value = "127.0.0.1:41873")]
        listen: SocketAddr,
        /// Where clients reach the door from outside (behind a TLS terminator
        /// or a proxy): the card's url and every absolute URL the door
        /// writes. http or https, no query or fragment. Default: the
        /// listener's own address
        #[arg(long, value_name = "URL", value_parser = roster::public_url)]
        public_url: Option<String>,
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
        /// Where the control surface's token is written (mode 0600);
        /// default `control-token` beside the tokens file.
        #[arg(long, value_name = "FILE")]
        control_token_file: Option<PathBuf>,
        #[command(flatten)]
        door: DoorArgs,
    },
    /// Serve many capsules in one process, one engine and one compiled door
    /// shared by all, from a capsules file (see docs/hosting.md).
    Host {
        /// The capsules file: the host's control listener and one entry per
        /// capsule (manifest, listen, state).
        capsules: PathBuf,
        /// Door instances of the pool (--max-instances) one capsule may hold
        /// at once; default a quarter of the pool.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        capsule_instances: Option<u32>,
        #[command(flatten)]
        door: DoorArgs,
    },
}

/// What every door of the process runs under.
#[derive(Args)]
struct DoorArgs {
    /// The agent that runs tasks: `script` runs each task's text as a
    /// script (reply, fail, ask, sleep, progress, detach, await); it runs
    /// no process (`detach` only records the command).
    #[arg(long, value_enum, default_value_t = AgentKind::Script)]
    pub agent: AgentKind,
    /// Run each task with `sh -c CMD`, its text on stdin: exit 0 completes
    /// it with stdout, another exit fails it with stderr's last line.
    #[arg(long, value_name = "CMD", conflicts_with = "agent")]
    pub agent_cmd: Option<String>,
    /// Start `sh -c CMD` once for each session, in the workdir: it serves
    /// every task of the session over JSON lines on stdin and stdout
    /// (docs/agents.md).
    #[arg(long, value_name = "CMD", conflicts_with_all = ["agent", "agent_cmd"])]
    pub agent_stdio: Option<String>,
    /// How many of the newest events a stream can replay from its
    /// Last-Event-ID.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_REPLAY_BUFFER,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 24))]
    pub replay_buffer: usize,
    /// Bytes of events the replay buffer holds at most; the oldest go
    /// first, and a stream reconnecting from one of them is told it
    /// lost them (a gap).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_REPLAY_BUFFER_BYTES,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 40))]
    pub replay_buffer_bytes: usize,
    /// Door instances alive at once: each request holds one while it is
    /// answered, each open stream one for its whole life.
    #[arg(long, value_name = "N", default_value_t = engine::MAX_INSTANCES,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_instances: u32,
    /// Door instances kept between requests, across the host: an instance
    /// whose request ended cleanly answers the next request of the same
    /// caller (credential and address) to the same door without
    /// instantiating. 0 gives every request a fresh instance.
    #[arg(long, value_name = "N", default_value_t = engine::IDLE_INSTANCES,
          value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub idle_instances: u32,
    /// Milliseconds a request's door may run without waiting (its wasm
    /// and the host calls it makes); a door past it is stopped and the
    /// request answered -32603 (or 500).
    #[arg(long, value_name = "MS", default_value_t = cpu::MAX_CPU_MS,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub max_cpu_ms: u64,
    /// Megabytes of linear memory a door instance may grow to; a door
    /// past it fails its request (-32603 or 500).
    #[arg(long, value_name = "MB", default_value_t = (memory::MAX_MEMORY_BYTES >> 20) as u64,
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub max_memory_mb: u64,
    /// Bytes one stream queues ahead of the socket (in 4 KiB writes) for a
    /// client that does not read, before its door waits.
    #[arg(long, value_name = "BYTES", default_value_t = response_stream::QUEUE_BYTES,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(4096..=1 << 30))]
    pub stream_queue_bytes: usize,
    /// Megabytes of linear memory all door instances may hold together;
    /// a door refused memory by it is answered 503.
    #[arg(long, value_name = "MB", default_value_t = (memory::MAX_DOOR_MEMORY_BYTES >> 20) as u64,
          value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub max_door_memory_mb: u64,
    /// Bytes a request body may have; a larger one is answered 413.
    #[arg(long, value_name = "BYTES", default_value_t = server::MAX_BODY_BYTES,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 32))]
    pub max_body_bytes: usize,
    /// Header lines a request head may have; hyper answers 431 past it.
    #[arg(long, value_name = "N", default_value_t = server::MAX_HEADERS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000))]
    pub max_headers: usize,
    /// Bytes a request head may take (at least 8192); hyper answers 431
    /// past it.
    #[arg(long, value_name = "BYTES", default_value_t = server::MAX_HEADER_BYTES,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(8192..=1 << 24))]
    pub max_header_bytes: usize,
    /// Milliseconds a client has to send a whole request head; a slower
    /// one is disconnected.
    #[arg(long, value_name = "MS", default_value_t = server::HEADER_TIMEOUT.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub header_timeout_ms: u64,
    /// Milliseconds a client may take no byte of an answer that is not a
    /// stream; then its connection is dropped.
    #[arg(long, value_name = "MS", default_value_t = connections::WRITE_TIMEOUT.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub write_timeout_ms: u64,
    /// Milliseconds a door closing on SIGTERM (or ctrl-c) waits for the
    /// requests in flight, once it has stopped accepting connections; then
    /// it closes every connection and exits 0
    #[arg(long, value_name = "MS", default_value_t = server::DRAIN.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    pub drain_ms: u64,
    /// Bytes of answers the door declared reusable (GetTask, ListTasks)
    /// each capsule keeps, to send again without an instance while what
    /// they read is unchanged; 0 keeps none
    #[arg(long, value_name = "BYTES", default_value_t = reuse::REUSE_BYTES)]
    pub reuse_bytes: usize,
    /// Milliseconds a client has, from its head, to send the whole
    /// body; a slower one is answered 408.
    #[arg(long, value_name = "MS", default_value_t = server::BODY_TIMEOUT.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub body_timeout_ms: u64,
    /// Bytes of request bodies held at once across every connection;
    /// past it a request is answered 503.
    #[arg(long, value_name = "BYTES", default_value_t = server::MAX_BODY_MEMORY_BYTES,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 40))]
    pub max_body_memory_bytes: usize,
    /// Connections open at once (at most the open-files limit less 128);
    /// at the cap the one that has done least is closed for a new one.
    #[arg(long, value_name = "N", default_value_t = connections::MAX_CONNECTIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 20))]
    pub max_connections: usize,
    /// Door instances one caller (a token on an authenticated door, a
    /// client address on a public one) may hold at once; past it 429.
    /// Default: half of --max-instances, at most 512.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_instances_per_caller: Option<u32>,
    /// Milliseconds a request waits for a door instance when all are in
    /// use; then 503.
    #[arg(long, value_name = "MS", default_value_t = admission::INSTANCE_WAIT.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub instance_wait_ms: u64,
    /// Let a capsule that declares no `network.authentication` listen on an
    /// address other than loopback. Anyone who reaches it may then call
    /// every task method (SendMessage, GetTask, CancelTask, ...) and
    /// murmur.StopSession, and read what its operator plane exports.
    /// Without it such a launch is refused.
    #[arg(long)]
    pub public: bool,
    /// A proxy (an address, or a CIDR network) whose
    /// --client-address-header names the client, for its share of the
    /// instances; repeatable. From anyone else the header is ignored.
    #[arg(long = "trusted-proxy", value_name = "ADDR", value_parser = proxies::parse)]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The one header a trusted proxy names the client in:
    /// `x-forwarded-for` or `forwarded` (RFC 7239). The other is never
    /// read, since a proxy passes through what a client wrote in a header
    /// it does not set itself.
    #[arg(long, value_name = "NAME", default_value = "x-forwarded-for",
          value_parser = proxies::parse_header)]
    pub client_address_header: ClientHeader,
    /// Serve the door component in this file instead of the embedded
    /// one; SIGHUP loads it again.
    #[arg(long, value_name = "FILE")]
    pub component: Option<PathBuf>,
    /// Bytes a door component may have: the --component file, the file
    /// SIGHUP reloads, and one sent to the control surface.
    #[arg(long, value_name = "BYTES", default_value_t = swap::MAX_COMPONENT_BYTES,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 30))]
    pub max_component_bytes: usize,
    /// Where compiled doors are kept, so a launch or swap of a door
    /// compiled before compiles nothing; default
    /// `$XDG_CACHE_HOME/murmur-door` or `~/.cache/murmur-door`.
    #[arg(long, value_name = "DIR", conflicts_with = "no_compile_cache")]
    pub compile_cache: Option<PathBuf>,
    /// Compile the door at every launch and keep nothing on disk.
    #[arg(long)]
    pub no_compile_cache: bool,
    /// Threads running requests and their doors; default one per core.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Option<u16>,
    /// Answer with the door's rules compiled natively, not the component:
    /// the benchmark baseline (`bench/native.sh`), with no sandbox.
    #[cfg(feature = "native-door")]
    #[arg(long)]
    pub native_door: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum AgentKind {
    Script,
}

/// What every door of the process runs under, from the flags.
struct Settings {
    agent: Agents,
    /// The flag that chose the agent, when one did.
    agent_flag: Option<&'static str>,
    public: bool,
    replay: Replay,
    limits: request::Limits,
    http: server::HttpLimits,
    trusted_proxies: TrustedProxies,
    component: Option<PathBuf>,
    max_component_bytes: usize,
    compile_cache: Option<PathBuf>,
    #[cfg(feature = "native-door")]
    native_door: bool,
}

impl DoorArgs {
    fn settings(self) -> Settings {
        let (agent, agent_flag): (Agents, _) = match (self.agent, self.agent_cmd, self.agent_stdio)
        {
            (_, _, Some(command)) => (StdioAgent::new(command).into(), Some("--agent-stdio")),
            (_, Some(command), None) => (
                Agents::Shared(Arc::new(CommandAgent::new(command))),
                Some("--agent-cmd"),
            ),
            (AgentKind::Script, None, None) => (Agents::Shared(Arc::new(ScriptAgent)), None),
        };
        if let Some(share) = self
            .max_instances_per_caller
            .filter(|share| *share > self.max_instances)
        {
            tracing::warn!(
                max_instances_per_caller = share,
                max_instances = self.max_instances,
                "one caller may take every door instance: its share is above --max-instances"
            );
        }
        Settings {
            agent,
            agent_flag,
            public: self.public,
            replay: Replay {
                events: self.replay_buffer,
                bytes: self.replay_buffer_bytes,
            },
            limits: request::Limits {
                max_memory_bytes: (self.max_memory_mb as usize) << 20,
                max_cpu_ms: self.max_cpu_ms,
                stream_queue_bytes: self.stream_queue_bytes,
            },
            http: server::HttpLimits {
                max_body_bytes: self.max_body_bytes,
                max_headers: self.max_headers,
                max_header_bytes: self.max_header_bytes,
                header_timeout: Duration::from_millis(self.header_timeout_ms),
                write_timeout: Duration::from_millis(self.write_timeout_ms),
                body_timeout: Duration::from_millis(self.body_timeout_ms),
                max_body_memory_bytes: self.max_body_memory_bytes,
                max_connections: self.max_connections,
                max_instances: self.max_instances,
                idle_instances: self.idle_instances,
                max_instances_per_caller: admission::caller_share(
                    self.max_instances,
                    self.max_instances_per_caller,
                ),
                instance_wait: Duration::from_millis(self.instance_wait_ms),
                max_door_memory_bytes: (self.max_door_memory_mb as usize) << 20,
                drain: Duration::from_millis(self.drain_ms),
                reuse_bytes: self.reuse_bytes,
            },
            trusted_proxies: TrustedProxies::new(self.trusted_proxies, self.client_address_header),
            component: self.component,
            max_component_bytes: self.max_component_bytes,
            compile_cache: match self.no_compile_cache {
                true => None,
                false => self.compile_cache.or_else(CompileCache::default_dir),
            },
            #[cfg(feature = "native-door")]
            native_door: self.native_door,
        }
    }
}

fn main() -> ExitCode {
    let command = Cli::parse().command;
    // A write past the file-size limit fails (EFBIG), and the request that
    // needed it is answered -32603, rather than the signal ending the door.
    // SAFETY: ignoring a signal, before any thread is started.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let workers = match &command {
        Command::Serve { door, .. } | Command::Host { door, .. } => door.workers,
    };
    // Before the runtime's threads start: growing the descriptor table
    // later makes the thread that opens a descriptor wait 10 to 20 ms.
    if let Ok(open_files) = connections::raise_open_files_limit() {
        let _ = connections::reserve_descriptors(open_files);
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = workers {
        runtime.worker_threads(workers.into());
    }
    // A worker going idle gives back what mimalloc keeps for it.
    runtime.on_thread_park(give_back_freed_memory);
    let runtime = runtime.enable_all().build().expect("a tokio runtime");
    // The log, and the traces when the OpenTelemetry variables name a
    // collector: they are sent on the runtime.
    let tracing = telemetry::install(runtime.handle().clone());
    // Wakes a worker every second, so that one which went idle right after
    // a burst still gives its memory back.
    runtime.spawn(async {
        let mut tick = tokio::time::interval(GIVE_BACK_EVERY);
        loop {
            tick.tick().await;
        }
    });
    let ran = match command {
        Command::Serve {
            manifest,
            workdir,
            task,
            task_file,
            listen,
            public_url,
            state,
            tokens_file,
            resume,
            control_token_file,
            door,
        } => {
            let tokens_file = tokens_file.unwrap_or_else(|| state.join("tokens.json"));
            let control_token_file = control_token_file
                .unwrap_or_else(|| tokens_file.with_file_name(roster::CONTROL_TOKEN_FILE));
            runtime.block_on(async {
                let loaded = Manifest::load(&manifest)
                    .with_context(|| format!("manifest {}", manifest.display()))?;
                let workdir = workdir.unwrap_or_else(|| roster::manifest_dir(&manifest));
                let task = match (task, task_file) {
                    (Some(text), _) => Some(text),
                    (None, Some(file)) => Some(
                        std::fs::read_to_string(&file)
                            .with_context(|| format!("--task-file {}", file.display()))?,
                    ),
                    (None, None) => roster::launch_task(&workdir).map_err(anyhow::Error::msg)?,
                };
                let entry = Entry {
                    name: loaded.name.clone(),
                    manifest_path: manifest,
                    manifest: loaded,
                    workdir,
                    task,
                    listen: Listen::Port(listen),
                    public_url,
                    state_key: state.clone(),
                    state,
                    tokens_file,
                    control_token_file,
                    resume,
                    instances: None,
                    agent_stdio: None,
                };
                serve(entry, door.settings()).await
            })
        }
        Command::Host {
            capsules,
            capsule_instances,
            door,
        } => runtime.block_on(host(capsules, capsule_instances, door.settings())),
    };
    // Before the runtime goes: the last spans are sent on it.
    if let Some(tracing) = tracing {
        tracing.shutdown();
    }
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("murmur-door: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The engine, with the compile cache when there is one, and the door every
/// capsule starts on: the `--component` file or the embedded door.
async fn load_door(settings: &Settings) -> anyhow::Result<(Door, String)> {
    let mut engine = engine::engine_for(
        settings
            .http
            .max_instances
            .saturating_add(settings.http.idle_instances),
        settings.limits.max_memory_bytes,
    )?;
    if let Some(dir) = &settings.compile_cache {
        // A cache that cannot be used costs a compile, not the launch.
        match CompileCache::open(dir) {
            Ok(cache) => engine = engine.with_cache(cache),
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "compiled doors are not cached"),
        }
    }
    let door = match &settings.component {
        None => Door::load(&engine, engine::EMBEDDED_DOOR)?,
        Some(path) => {
            let bytes = swap::read_component(path, settings.max_component_bytes)
                .await
                .with_context(|| format!("reading the door component {}", path.display()))?;
            Door::load_checked(&engine, &bytes)
                .with_context(|| format!("the door component {}", path.display()))?
        }
    };
    let source = settings
        .component
        .as_ref()
        .map_or(swap::EMBEDDED.to_string(), |p| p.display().to_string());
    let compiled = match door.compiled {
        Compiled::Cached => "cached",
        Compiled::Fresh => "compiled",
    };
    tracing::info!(digest = %door.digest, version = 1, %source, %compiled, "door component loaded");
    Ok((door, source))
}

/// Raises the open-files limit and fits the connections (and so each
/// caller's share) to it.
fn fit_to_open_files(http: &mut server::HttpLimits) {
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
}

/// SIGTERM, SIGHUP: installed before anything answers (before a url is
/// logged), since their default action ends the process at once and a
/// client that saw the url may signal it right away.
fn signals() -> anyhow::Result<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)> {
    use tokio::signal::unix::{SignalKind, signal};
    Ok((
        signal(SignalKind::terminate()).context("listening for SIGTERM")?,
        signal(SignalKind::hangup()).context("listening for SIGHUP")?,
    ))
}

async fn serve(entry: Entry, mut settings: Settings) -> anyhow::Result<()> {
    let (door, _source) = load_door(&settings).await?;
    fit_to_open_files(&mut settings.http);
    let (mut terminate, mut hangup) = signals()?;
    let exits_after_task = entry.manifest.exit_after_task;
    let config = CapsuleConfig {
        entry,
        agent: settings.agent,
        replay: settings.replay,
        shared: None,
        public: settings.public,
    };
    let (limits, http, max_component_bytes) =
        (settings.limits, settings.http, settings.max_component_bytes);
    let proxies = settings.trusted_proxies;
    let component = settings.component;
    #[cfg(feature = "native-door")]
    let native = settings.native_door;
    let capsule = Capsule::open(config, door, |server| {
        let server = server
            .with_limits(limits)
            .with_http_limits(http)
            .with_trusted_proxies(proxies)
            .with_max_component_bytes(max_component_bytes);
        #[cfg(feature = "native-door")]
        let server = server.with_native_door(native);
        match component {
            Some(path) => server.with_component_file(path),
            None => server,
        }
    })
    .await?;
    let reloader = capsule.server.clone();
    let reloading = tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            reloader.reload().await;
        }
    });
    let after_task = async {
        match exits_after_task {
            true => capsule.launch_task_ended().await,
            false => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; closing the door"),
        _ = terminate.recv() => tracing::info!("terminated; closing the door"),
        _ = after_task => tracing::info!("the launch task ended; lifecycle.after_task: exit closes the door"),
    }
    reloading.abort();
    capsule.close().await;
    Ok(())
}

/// The environment variable that gives `murmur-door host` its control token.
const HOST_CONTROL_TOKEN_ENV: &str = "MURMUR_DOOR_HOST_CONTROL_TOKEN";

/// `murmur-door host`: every entry of the capsules file checked before
/// anything listens, then every capsule opened on one engine, and the host's
/// control surface.
async fn host(
    path: PathBuf,
    capsule_instances: Option<u32>,
    mut settings: Settings,
) -> anyhow::Result<()> {
    let roster =
        Roster::load(&path).with_context(|| format!("capsules file {}", path.display()))?;
    let (door, source) = load_door(&settings).await?;
    fit_to_open_files(&mut settings.http);
    let (mut terminate, _hangup) = signals()?;
    let limits = HostLimits {
        limits: settings.limits,
        http: settings.http,
        capsule_instances: capsule_instances
            .unwrap_or((settings.http.max_instances / 4).max(1))
            .min(settings.http.max_instances),
        max_component_bytes: settings.max_component_bytes,
    };
    let host = Arc::new(
        Host::new(door, source, limits, settings.agent, settings.replay)
            .with_trusted_proxies(settings.trusted_proxies)
            .with_public(settings.public)
            .with_agent_flag(settings.agent_flag),
    );
    // The shared listener is open before the capsules reached on it: their
    // cards name its port.
    if let Some(listen) = roster.listen {
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("listening on {listen}"))?;
        let url = host.listen_by_hostname(listener)?;
        tracing::info!(%url, "shared listener open for capsules by host name");
    }
    for entry in roster.capsules {
        let name = entry.name.clone();
        if let Err(e) = host.add(entry).await {
            host.close().await;
            return Err(anyhow::Error::new(e).context(format!("opening capsule {name}")));
        }
    }
    let listener = TcpListener::bind(roster.control_listen)
        .await
        .with_context(|| format!("listening on {}", roster.control_listen))?;
    // A token the operator gives (a secret store's) when there is one.
    let token = match std::env::var(HOST_CONTROL_TOKEN_ENV) {
        Ok(text) => ControlToken::given(&text)
            .map_err(|why| anyhow::anyhow!("{HOST_CONTROL_TOKEN_ENV}: {why}"))?,
        Err(_) => ControlToken::mint()?,
    };
    token
        .write_file(&roster.control_token_file)
        .with_context(|| {
            format!(
                "writing the host's control token to {}",
                roster.control_token_file.display()
            )
        })?;
    let url = capsule::listener_url(listener.local_addr()?);
    tracing::info!(path = %roster.control_token_file.display(), "host control token written");
    tracing::info!(%url, "host listening");
    let base = path
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .to_path_buf();
    let control = tokio::spawn(host_control::serve(
        host.clone(),
        Arc::new(token),
        base,
        listener,
    ));
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; closing every capsule"),
        _ = terminate.recv() => tracing::info!("terminated; closing every capsule"),
    }
    control.abort();
    host.close().await;
    Ok(())
}
