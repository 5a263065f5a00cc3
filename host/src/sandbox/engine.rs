//! The wasmtime engine and a loaded door: compiled once, linked against the
//! host's imports and pre-instantiated, so each request only instantiates.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};

use anyhow::Context;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, InstancePre, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi_http::p2::bindings::{Proxy, ProxyIndices};

use crate::bindings::answers::{Answers, AnswersIndices};
use crate::bindings::framings::FramingsIndices;

use crate::imports;
use crate::sandbox::cache::{CompileCache, Compiled};
use crate::sandbox::cpu::TICK;
use crate::sandbox::memory::MAX_MEMORY_BYTES;
use crate::sandbox::request::RequestState;

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
/// Door instances kept between requests across the host
/// (`--idle-instances`, see `idle`): enough for the requests a few cores
/// answer at once. The pool holds them beside `--max-instances`.
pub const IDLE_INSTANCES: u32 = 16;
/// Bytes of a door's linear memory its pool slot keeps resident between
/// requests (see [`engine_for`]).
pub const KEEP_RESIDENT: usize = 128 << 10;
/// Instances framing events at once, across the engine (see
/// [`crate::sandbox::framing`]): the pool holds them beside every other, so a pool
/// full of streams still frames their events.
pub const FRAMING_SLOTS: u32 = 2;

/// The engine every door version runs on, and the thread that ticks its
/// epoch every [`TICK`]. Clones share both; the thread stops, and is
/// joined, when the last clone (a [`Door`] holds one) is dropped.
#[derive(Clone)]
pub struct DoorEngine {
    engine: Engine,
    _ticker: Arc<EpochTicker>,
    /// Where compiled doors are kept, if anywhere.
    cache: Option<CompileCache>,
    /// Doors compiled, and doors loaded from the cache, on this engine.
    pub compiles: Arc<Compiles>,
    /// The pool slots kept for instances that frame events.
    framing: Arc<tokio::sync::Semaphore>,
}

impl DoorEngine {
    /// Where compiled doors are kept, if anywhere.
    pub fn cache_dir(&self) -> Option<&std::path::Path> {
        self.cache.as_ref().map(|cache| cache.dir())
    }

    /// One of the pool slots kept for framing events, once one is free.
    pub async fn framing_slot(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.framing
            .acquire()
            .await
            .expect("the framing slots are never closed")
    }

    /// Doors compiled on this engine are kept in `cache`, and a door found
    /// there is not compiled again.
    pub fn with_cache(mut self, cache: CompileCache) -> DoorEngine {
        self.cache = Some(cache);
        self
    }
}

impl std::ops::Deref for DoorEngine {
    type Target = Engine;

    fn deref(&self) -> &Engine {
        &self.engine
    }
}

/// Advances an engine's epoch every [`TICK`] until dropped.
struct EpochTicker {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EpochTicker {
    fn start(engine: Engine) -> anyhow::Result<EpochTicker> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("epoch-ticker".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(TICK) {
                    engine.increment_epoch();
                }
            })
            .context("starting the epoch ticker")?;
        Ok(EpochTicker {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The engine every door version runs on: the pooling allocator sized for
/// [`MAX_INSTANCES`] and [`IDLE_INSTANCES`].
pub fn engine() -> anyhow::Result<DoorEngine> {
    engine_for(MAX_INSTANCES + IDLE_INSTANCES, MAX_MEMORY_BYTES)
}

/// The engine, its pool sized for `max_instances` door instances at once
/// (those requests hold and those kept idle), each memory at most
/// `max_memory_bytes`, with its epoch ticker.
pub fn engine_for(max_instances: u32, max_memory_bytes: usize) -> anyhow::Result<DoorEngine> {
    // Without PAGEMAP_SCAN, keeping pages resident would memset the lowest
    // addresses of every memory (the door's unused stack) on each reset.
    let engine = Engine::new(&config(max_instances, max_memory_bytes, true)).or_else(|e| {
        tracing::info!(error = %e, "no PAGEMAP_SCAN: door memory is reset with madvise");
        Engine::new(&config(max_instances, max_memory_bytes, false))
    });
    let engine = wasm_context(engine, "creating the wasmtime engine")?;
    let ticker = EpochTicker::start(engine.clone())?;
    Ok(DoorEngine {
        engine,
        _ticker: Arc::new(ticker),
        cache: None,
        compiles: Arc::default(),
        framing: Arc::new(tokio::sync::Semaphore::new(FRAMING_SLOTS as usize)),
    })
}

/// The engine's configuration; `resident`: dirty pages are found with
/// PAGEMAP_SCAN and reset in place (an engine with it fails to build on a
/// kernel without it).
fn config(max_instances: u32, max_memory_bytes: usize, resident: bool) -> Config {
    // One more than the requests may hold, a swap's trial instance, and
    // the instances that frame events.
    let max_instances = max_instances.saturating_add(1 + FRAMING_SLOTS);
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
    /// The component linked against the host's imports: each request
    /// instantiates it.
    pub pre: InstancePre<RequestState>,
    /// Where its `wasi:http` handler is.
    pub proxy: ProxyIndices,
    /// Where its one-call `answer` export is, when it has one.
    pub answers: Option<AnswersIndices>,
    /// The `framing` export, when the door has it (see [`crate::sandbox::framing`]).
    pub framing: Option<FramingsIndices>,
    /// `sha256:<hex>` of the component's bytes.
    pub digest: String,
    /// The engine it was compiled for, which a swap compiles the next
    /// version with.
    pub engine: DoorEngine,
    /// Whether it was compiled or found in the compile cache.
    pub compiled: Compiled,
}

/// One instance of a door: its `wasi:http` handler, and its one-call
/// answer when it exports one.
pub struct DoorInstance {
    /// The instance, whose other exports (`framing`) are looked up on it.
    pub instance: wasmtime::component::Instance,
    /// Its `wasi:http` handler, which answers when the door has no `answer`.
    pub proxy: Proxy,
    /// Its one-call `answer` export; None for an older door.
    pub answers: Option<Answers>,
}

impl Door {
    /// A new instance of the door in `store`.
    pub async fn instantiate(
        &self,
        store: &mut Store<RequestState>,
    ) -> wasmtime::Result<DoorInstance> {
        let instance = self.pre.instantiate_async(&mut *store).await?;
        let proxy = self.proxy.load(&mut *store, &instance)?;
        let answers = match &self.answers {
            Some(indices) => Some(indices.load(&mut *store, &instance)?),
            None => None,
        };
        Ok(DoorInstance {
            instance,
            proxy,
            answers,
        })
    }

    /// Compiles `bytes`, links it against the host's imports and
    /// pre-instantiates it.
    pub fn load(engine: &DoorEngine, bytes: &[u8]) -> anyhow::Result<Door> {
        let (component, compiled) = compile(engine, bytes)?;
        link(engine, &component, bytes, compiled)
    }

    /// [`Door::load`] for a component that is to replace a live door: it must
    /// be the `door` world as this host serves it (see [`check_world`]).
    pub fn load_checked(engine: &DoorEngine, bytes: &[u8]) -> anyhow::Result<Door> {
        let (component, compiled) = compile(engine, bytes)?;
        check_world(engine, &component)?;
        link(engine, &component, bytes, compiled)
    }
}

/// The `murmur:door` interfaces the host answers, without their version.
pub const HOST_INTERFACES: [&str; 6] = [
    "murmur:door/session",
    "murmur:door/tokens",
    "murmur:door/task-store",
    "murmur:door/events",
    "murmur:door/request-body",
    "murmur:door/response-stream",
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

/// `bytes` compiled for `engine`, or found in its compile cache.
fn compile(engine: &DoorEngine, bytes: &[u8]) -> anyhow::Result<(Component, Compiled)> {
    let compile = || {
        wasm_context(
            Component::new(engine, bytes),
            "compiling the door component",
        )
        .map_err(|e| e.context(NotAComponent))
    };
    let compiled = match &engine.cache {
        Some(cache) => cache.load(engine, bytes, compile),
        None => Ok((compile()?, Compiled::Fresh)),
    }?;
    let counted = match compiled.1 {
        Compiled::Fresh => &engine.compiles.compiled,
        Compiled::Cached => &engine.compiles.cached,
    };
    counted.fetch_add(1, Ordering::Relaxed);
    Ok(compiled)
}

/// How an engine came by its doors.
#[derive(Debug, Default)]
pub struct Compiles {
    /// Compiled from a component's bytes.
    pub compiled: AtomicU64,
    /// Loaded from the compile cache: no compile.
    pub cached: AtomicU64,
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

fn link(
    engine: &DoorEngine,
    component: &Component,
    bytes: &[u8],
    compiled: Compiled,
) -> anyhow::Result<Door> {
    let mut linker = Linker::<RequestState>::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    imports::add_to_linker(&mut linker)?;
    let pre = wasm_context(
        linker.instantiate_pre(component),
        "linking the door component",
    )?;
    let proxy = wasm_context(
        ProxyIndices::new(&pre),
        "the door component does not export wasi:http/incoming-handler",
    )?;
    // A door without the export (an older build) answers through wasi:http.
    let answers = AnswersIndices::new(&pre).ok();
    let framing = FramingsIndices::new(&pre).ok();
    Ok(Door {
        pre,
        proxy,
        answers,
        framing,
        digest: digest(bytes),
        engine: engine.clone(),
        compiled,
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

    /// The epoch ticker lives while the engine or a door compiled on it
    /// does, and its thread has stopped (been joined) once the last drops.
    #[test]
    fn the_ticker_stops_with_the_last_engine_clone() {
        let engine = engine_for(1, 16 << 20).unwrap();
        let ticker = Arc::downgrade(&engine._ticker);
        let door = Door::load(&engine, EMBEDDED_DOOR).unwrap();
        drop(engine);
        assert!(ticker.upgrade().is_some(), "the door keeps the ticker");
        // Dropping the last clone joins the thread: a thread that did not
        // stop would hold the drop, which must return within seconds.
        let (dropped, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(door);
            let _ = dropped.send(());
        });
        done.recv_timeout(std::time::Duration::from_secs(5))
            .expect("the ticker's thread stopped");
        assert!(ticker.upgrade().is_none());
    }

    /// The embedded door is the `door` world: it exports the wasi:http
    /// handler, the one-call answer and the framing of events, and imports session and tokens
    /// beside wasi's own interfaces.
    #[test]
    fn the_embedded_door_is_the_door_world() {
        let engine = engine().unwrap();
        let component = Component::new(&engine, EMBEDDED_DOOR).unwrap();
        check_world(&engine, &component).unwrap();
        let ty = component.component_type();
        // In no particular order: the component lists them as it was built.
        let mut exports: Vec<&str> = ty.exports(&engine).map(|(name, _)| name).collect();
        exports.sort_unstable();
        assert_eq!(
            exports,
            [
                "murmur:door/answer@0.1.0",
                "murmur:door/framing@0.1.0",
                "wasi:http/incoming-handler@0.2.12",
            ]
        );
        let imports: Vec<&str> = ty.imports(&engine).map(|(name, _)| name).collect();
        for ours in ["murmur:door/session@0.1.0", "murmur:door/tokens@0.1.0"] {
            assert!(imports.contains(&ours), "{imports:?}");
        }
        let foreign: Vec<&&str> = imports
            .iter()
            .filter(|n| !n.starts_with("wasi:") && !n.starts_with("murmur:door/"))
            .collect();
        assert!(foreign.is_empty(), "{foreign:?}");
        // The door sends no requests and opens no sockets; it reads files
        // only through what a plane's request finds preopened.
        assert!(
            imports.contains(&"wasi:filesystem/preopens@0.2.12"),
            "{imports:?}"
        );
        for denied in ["wasi:http/outgoing-handler", "wasi:sockets/"] {
            assert!(
                !imports.iter().any(|n| n.starts_with(denied)),
                "{denied} in {imports:?}"
            );
        }
    }
}
