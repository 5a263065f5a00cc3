//! The wasmtime engine and a loaded door: compiled once, linked against the
//! host's imports and pre-instantiated, so each request only instantiates.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{
    Config, Engine, EngineWeak, InstanceAllocationStrategy, PoolingAllocationConfig, Store,
    UpdateDeadline,
};
use wasmtime_wasi_http::p2::bindings::ProxyPre;

use crate::imports::{RequestState, events, session, task_store, token_types};

/// The door component built from `guest/`, embedded at build time.
pub const EMBEDDED_DOOR: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/door.wasm"));

/// Door instances alive at once (`--max-instances`): a request holds one
/// while it is answered, an open stream holds one for its whole life, so
/// 1,100 fits 1,000 streams beside ordinary requests. A Rust wasip2 component
/// makes 3 core instances and 1 memory, hence the room for 4 core instances
/// and 2 memories (a door built with the preview1 adapter has 2) each; the
/// pool reserves 4 GiB of address space for every memory up front but only
/// touches what a live instance uses.
pub const MAX_INSTANCES: u32 = 1100;
/// A door's linear memory may grow to this many bytes per request
/// (`--max-memory-mb`).
pub const MAX_MEMORY_BYTES: usize = 128 << 20;
/// Milliseconds a request's door may run without waiting
/// (`--max-cpu-ms`, see [`crate::cpu`]).
pub const MAX_CPU_MS: u64 = 1000;
/// How often the epoch ticks: a running door yields to other requests once
/// per tick, and its running time is checked against the budget.
pub const TICK: Duration = Duration::from_millis(10);

/// Bytes of a door's linear memory its pool slot keeps resident between
/// requests (see [`engine_for`]).
pub const KEEP_RESIDENT: usize = 128 << 10;

/// What one request's store may use.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Bytes of linear memory per request.
    pub max_memory_bytes: usize,
    /// Milliseconds the door may run without waiting (see [`store`]).
    pub max_cpu_ms: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_memory_bytes: MAX_MEMORY_BYTES,
            max_cpu_ms: MAX_CPU_MS,
        }
    }
}

/// The engines the ticker advances every [`TICK`]; it starts with the first
/// one.
fn tick_engine(engine: &Engine) {
    static ENGINES: OnceLock<Mutex<Vec<EngineWeak>>> = OnceLock::new();
    let engines = ENGINES.get_or_init(|| {
        std::thread::Builder::new()
            .name("epoch-ticker".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(TICK);
                    let mut engines = ENGINES.get().unwrap().lock().unwrap();
                    engines.retain(|weak| match weak.upgrade() {
                        Some(engine) => {
                            engine.increment_epoch();
                            true
                        }
                        None => false,
                    });
                }
            })
            .expect("starting the epoch ticker");
        Mutex::new(Vec::new())
    });
    engines.lock().unwrap().push(engine.weak());
}

/// A store for one request: its memory limited, and its running time metered.
///
/// The epoch ticks every [`TICK`], wall time. A door running wasm reaches
/// its deadline at the next tick: there it yields to the executor, so other
/// requests run beside a busy one, and its deadline moves one tick on. At
/// each deadline the call traps once the door has run for more than
/// `max_cpu_ms` without waiting ([`crate::cpu::Meter`]). A door waiting in
/// `poll` runs no wasm and reaches no deadline. Every call into the store
/// runs inside [`crate::cpu::metered`], which sees the door wait.
pub fn store(engine: &Engine, state: RequestState, limits: Limits) -> Store<RequestState> {
    let meter = state.cpu.clone();
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.memory);
    let budget = Duration::from_millis(limits.max_cpu_ms);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if meter.used(TICK) > budget {
            return Err(wasmtime::Error::msg(format!(
                "the door ran for more than {} ms without waiting (--max-cpu-ms)",
                limits.max_cpu_ms
            )));
        }
        meter.yielding();
        let meter = meter.clone();
        Ok(UpdateDeadline::YieldCustom(
            1,
            Box::pin(async move {
                tokio::task::yield_now().await;
                meter.resumed();
            }),
        ))
    });
    store
}

/// The engine every door version runs on: the pooling allocator sized for
/// [`MAX_INSTANCES`].
pub fn engine() -> anyhow::Result<Engine> {
    engine_for(MAX_INSTANCES, MAX_MEMORY_BYTES)
}

/// The engine, its pool sized for `max_instances` door instances at once,
/// each memory at most `max_memory_bytes`. One more request than that waits
/// for nothing: it is answered -32603. The epoch ticker advances it.
pub fn engine_for(max_instances: u32, max_memory_bytes: usize) -> anyhow::Result<Engine> {
    // Without PAGEMAP_SCAN, keeping pages resident would memset the lowest
    // addresses of every memory (the door's unused stack) on each reset.
    let engine = Engine::new(&config(max_instances, max_memory_bytes, true)).or_else(|e| {
        tracing::info!(error = %e, "no PAGEMAP_SCAN: door memory is reset with madvise");
        Engine::new(&config(max_instances, max_memory_bytes, false))
    });
    let engine = wasm_context(engine, "creating the wasmtime engine")?;
    tick_engine(&engine);
    Ok(engine)
}

/// The engine's configuration; `resident`: dirty pages are found with
/// PAGEMAP_SCAN and reset in place (an engine with it fails to build on a
/// kernel without it).
fn config(max_instances: u32, max_memory_bytes: usize, resident: bool) -> Config {
    // One more than the requests may hold: a swap's trial instance.
    let max_instances = max_instances.saturating_add(1);
    let cores = max_instances.saturating_mul(4);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(max_instances)
        .total_core_instances(cores)
        .total_memories(max_instances.saturating_mul(2))
        .total_tables(cores)
        // Every instance runs on a fiber of its own (async calls).
        .total_stacks(max_instances)
        .max_memory_size(max_memory_bytes);
    if resident {
        // A request dirties a few dozen pages of its door's memory. Reset
        // with madvise, each costs a page fault on the next request in the
        // slot, and the reset a TLB shootdown across cores; PAGEMAP_SCAN
        // (Linux 6.7+) finds the dirty pages, which are copied back from the
        // image in place, up to KEEP_RESIDENT bytes. It halves a short
        // request's cost; a slot keeps at most that much resident.
        pool.linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(64 << 10)
            .pagemap_scan(wasmtime::Enabled::Yes);
    }
    let mut config = Config::new();
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config.epoch_interruption(true);
    config
}

/// A door component ready to serve.
#[derive(Clone)]
pub struct Door {
    pub pre: ProxyPre<RequestState>,
    /// `sha256:<hex>` of the component's bytes.
    pub digest: String,
}

impl Door {
    /// Compiles `bytes`, links it against the host's imports and
    /// pre-instantiates it.
    pub fn load(engine: &Engine, bytes: &[u8]) -> anyhow::Result<Door> {
        let component = compile(engine, bytes)?;
        link(engine, &component, bytes)
    }

    /// [`Door::load`] for a component that is to replace a live door: it must
    /// be the `door` world as this host serves it (see [`check_world`]).
    pub fn load_checked(engine: &Engine, bytes: &[u8]) -> anyhow::Result<Door> {
        let component = compile(engine, bytes)?;
        check_world(engine, &component)?;
        link(engine, &component, bytes)
    }
}

/// The `murmur:door` interfaces the host answers, without their version.
pub const HOST_INTERFACES: [&str; 4] = [
    "murmur:door/session",
    "murmur:door/tokens",
    "murmur:door/task-store",
    "murmur:door/events",
];

/// The imports a door cannot be our door without: a component that does not
/// import them answers from state of its own (a door composed with a fixture
/// provider links fine, and would silently replace the session and tokens).
pub const REQUIRED_IMPORTS: [&str; 2] = ["murmur:door/session", "murmur:door/tokens"];

/// Whether `component` is a door this host serves: it exports
/// `wasi:http/incoming-handler`, imports only `wasi:*` and the host's
/// `murmur:door` interfaces, and imports session and tokens. Linking checks
/// that each import is one the linker provides, with its types.
pub fn check_world(engine: &Engine, component: &Component) -> anyhow::Result<()> {
    let ty = component.component_type();
    let unversioned = |name: &str| name.split('@').next().unwrap_or(name).to_string();
    let exports: Vec<String> = ty.exports(engine).map(|(n, _)| unversioned(n)).collect();
    anyhow::ensure!(
        exports.iter().any(|n| n == "wasi:http/incoming-handler"),
        "the component does not export wasi:http/incoming-handler (it exports {exports:?})"
    );
    let imports: Vec<String> = ty.imports(engine).map(|(n, _)| unversioned(n)).collect();
    let foreign: Vec<&String> = imports
        .iter()
        .filter(|n| !n.starts_with("wasi:") && !HOST_INTERFACES.contains(&n.as_str()))
        .collect();
    anyhow::ensure!(
        foreign.is_empty(),
        "the component imports what the host does not provide: {foreign:?}"
    );
    let missing: Vec<&str> = REQUIRED_IMPORTS
        .into_iter()
        .filter(|r| !imports.iter().any(|n| n == r))
        .collect();
    anyhow::ensure!(
        missing.is_empty(),
        "the component does not import {missing:?}: it would answer from state of its own \
         (a door composed with a provider), not the host's session"
    );
    Ok(())
}

fn compile(engine: &Engine, bytes: &[u8]) -> anyhow::Result<Component> {
    wasm_context(
        Component::new(engine, bytes),
        "compiling the door component",
    )
    .map_err(|e| e.context(NotAComponent))
}

/// Marks an error from bytes that do not compile as a component: its detail
/// may quote those bytes, so a refusal of a file named by path shows only
/// this.
#[derive(Clone, Copy, Debug)]
pub struct NotAComponent;

impl std::fmt::Display for NotAComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "not a WebAssembly component: a door is a component of the `door` world (wit/door.wit)",
        )
    }
}

fn link(engine: &Engine, component: &Component, bytes: &[u8]) -> anyhow::Result<Door> {
    let mut linker = Linker::<RequestState>::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    session::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
    token_types::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
    task_store::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
    events::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
    let pre = wasm_context(
        linker.instantiate_pre(component),
        "linking the door component",
    )?;
    let pre = wasm_context(
        ProxyPre::new(pre),
        "the door component does not export wasi:http/incoming-handler",
    )?;
    Ok(Door {
        pre,
        digest: digest(bytes),
    })
}

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A wasmtime error as an anyhow error, with what the host was doing.
fn wasm_context<T>(result: wasmtime::Result<T>, doing: &'static str) -> anyhow::Result<T> {
    result.map_err(|e| anyhow::Error::from(e).context(doing))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The resident set of this process, in KiB.
    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// What one pool slot costs the host when its instance waits: first a
    /// bare instance, then a held SendMessage (an instance suspended in
    /// `poll` on a pollable, the shape of an open stream). Prints the numbers.
    #[test]
    #[ignore = "a measurement: cargo test --release -p murmur-door-host --lib -- --ignored --nocapture idle"]
    fn idle_instances_cost() {
        use std::sync::Arc;

        use crate::memory::DoorMemory;
        use bytes::Bytes;

        use crate::manifest::Manifest;
        use crate::server::Server;
        use crate::session::Session;

        const N: usize = 200;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let engine = engine().unwrap();
        let door = Door::load(&engine, EMBEDDED_DOOR).unwrap();
        let manifest =
            Manifest::parse("name: m\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n")
                .unwrap();
        let session = Arc::new(Session::launch(&manifest, "http://127.0.0.1:1".into()).unwrap());
        let server = Arc::new(Server::new(door.clone(), session.clone()));
        // Warm up: one of each, so lazily built state is not counted.
        runtime.block_on(async {
            let mut store = store(
                &engine,
                RequestState::new(session.clone(), DoorMemory::unshared(MAX_MEMORY_BYTES)),
                Limits::default(),
            );
            door.pre.instantiate_async(&mut store).await.unwrap();
        });

        let before = rss_kib();
        let stores: Vec<_> = (0..N)
            .map(|_| {
                runtime.block_on(async {
                    let mut store = store(
                        &engine,
                        RequestState::new(session.clone(), DoorMemory::unshared(MAX_MEMORY_BYTES)),
                        Limits::default(),
                    );
                    let proxy = door.pre.instantiate_async(&mut store).await.unwrap();
                    (store, proxy)
                })
            })
            .collect();
        let bare = rss_kib();
        drop(stores);

        let held = rss_kib();
        let send = |n: usize| {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{n},"method":"SendMessage","params":{{"message":{{"messageId":"m{n}","role":"ROLE_USER","parts":[{{"text":"sleep 100000"}}]}}}}}}"#
            );
            hyper::Request::post("/")
                .header("content-type", "application/json")
                .header("a2a-version", "1.0")
                .body(Bytes::from(body))
                .unwrap()
        };
        let waiting: Vec<_> = (0..N)
            .map(|n| {
                let server = server.clone();
                runtime.spawn(async move { server.respond(send(n)).await })
            })
            .collect();
        runtime.block_on(async {
            while session
                .tasks
                .list(
                    &None,
                    &crate::imports::task_store::ListQuery {
                        context_id: None,
                        state: None,
                        status_after_ms: None,
                        after: None,
                        limit: 1,
                    },
                )
                .unwrap()
                .total
                < N as u32
            {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        });
        let after = rss_kib();
        assert!(waiting.iter().all(|w| !w.is_finished()));
        println!(
            "RSS {before} KiB with no instance; {N} bare instances: {bare} KiB (+{} KiB each); \
             {N} held SendMessage: {held} -> {after} KiB (+{} KiB each)",
            bare.saturating_sub(before) / N as u64,
            after.saturating_sub(held) / N as u64,
        );
        session.close();
        runtime.block_on(async {
            for w in waiting {
                w.await.unwrap();
            }
        });
    }

    /// The embedded door is the `door` world: it exports the wasi:http
    /// handler and imports session and tokens beside wasi's own interfaces.
    #[test]
    fn the_embedded_door_is_the_door_world() {
        let engine = engine().unwrap();
        let component = Component::new(&engine, EMBEDDED_DOOR).unwrap();
        check_world(&engine, &component).unwrap();
        let ty = component.component_type();
        let exports: Vec<&str> = ty.exports(&engine).map(|(name, _)| name).collect();
        assert_eq!(exports, ["wasi:http/incoming-handler@0.2.12"]);
        let imports: Vec<&str> = ty.imports(&engine).map(|(name, _)| name).collect();
        for ours in ["murmur:door/session@0.1.0", "murmur:door/tokens@0.1.0"] {
            assert!(imports.contains(&ours), "{imports:?}");
        }
        let foreign: Vec<&&str> = imports
            .iter()
            .filter(|n| !n.starts_with("wasi:") && !n.starts_with("murmur:door/"))
            .collect();
        assert!(foreign.is_empty(), "{foreign:?}");
        // The door sends no requests and opens no files or sockets.
        for denied in [
            "wasi:http/outgoing-handler",
            "wasi:sockets/",
            "wasi:filesystem/preopens",
        ] {
            assert!(
                !imports.iter().any(|n| n.starts_with(denied)),
                "{denied} in {imports:?}"
            );
        }
    }
}
