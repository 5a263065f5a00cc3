//! One request's store: what it holds (wasi, wasi-http, the door's imports,
//! its memory and CPU meters) and the limits it runs under.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;
use wasmtime_wasi_http::{
    RequestOptions, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView,
};

use crate::imports::{DoorCtx, DoorCtxView, DoorView, response_stream};
use crate::manifest::planes::Opened;
use crate::sandbox::cpu::{self, Meter};
use crate::sandbox::memory::{self, DoorMemory, MemoryPool};
use crate::session::Session;

/// What one request's store may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of linear memory per request.
    pub max_memory_bytes: usize,
    /// Milliseconds the door may run without waiting (see [`store`]).
    pub max_cpu_ms: u64,
    /// Bytes a streamed body queues ahead of the socket before the door, or
    /// the host passing events on, waits for the client: rounded up to
    /// writes of [`response_stream::CHUNK_BYTES`].
    pub stream_queue_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_memory_bytes: memory::MAX_MEMORY_BYTES,
            max_cpu_ms: cpu::MAX_CPU_MS,
            stream_queue_bytes: response_stream::QUEUE_BYTES,
        }
    }
}

impl Limits {
    /// The writes of at most [`response_stream::CHUNK_BYTES`] a streamed
    /// body queues.
    pub fn stream_chunks(&self) -> usize {
        response_stream::stream_chunks(self.stream_queue_bytes)
    }
}

/// What one request's store holds.
pub struct RequestState {
    /// What the door's imports answer from.
    pub door: DoorCtx,
    /// The door's linear memory (`--max-memory-mb`, `--max-door-memory-mb`).
    pub memory: DoorMemory,
    /// The CPU the door has used since it last waited (`--max-cpu-ms`).
    pub cpu: Arc<Meter>,
    /// No environment, arguments, files or stdio; on a plane's request,
    /// the plane's directories preopened read-only (see `planes`).
    pub wasi: WasiCtx,
    /// What the preopens in `wasi` were opened through, when it has any.
    pub opened: Option<Opened>,
    http: WasiHttpCtx,
    hooks: NoOutgoingRequests,
    table: ResourceTable,
}

/// Host resources (header fields, bodies, streams, pollables, event
/// readers) a request's door may hold at once; past it the host call that
/// would make one traps. A door needs a few dozen; the default of 1,000,000
/// would let a door pile up host memory the store's limits do not see.
pub const MAX_RESOURCES: usize = 1024;
/// Bytes one header fields object the door builds may hold; past it
/// `append` and `set` fail. With [`MAX_RESOURCES`] it keeps what a door can
/// make the host hold within 64 MiB.
pub const MAX_FIELDS_BYTES: usize = 64 << 10;

impl RequestState {
    /// A fresh request's state: imports answering from `session`, memory
    /// limited by `memory`, and no environment, arguments, files or stdio.
    pub fn new(session: Arc<Session>, memory: DoorMemory) -> RequestState {
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES);
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(MAX_FIELDS_BYTES);
        RequestState {
            door: DoorCtx::new(session),
            memory,
            cpu: Arc::default(),
            // The door gets no environment, arguments, files or stdio.
            wasi: WasiCtx::builder().build(),
            opened: None,
            http,
            hooks: NoOutgoingRequests {
                chunks: response_stream::stream_chunks(response_stream::QUEUE_BYTES),
            },
            table,
        }
    }

    /// Whether its instance may answer another request of the same caller
    /// (see `idle`): the door holds no host resource, was refused no
    /// memory, and holds at most `max_memory` bytes of it.
    pub fn reusable(&self, max_memory: usize) -> bool {
        self.table.is_empty()
            && self.memory.refused().get().is_none()
            && self.memory.taken() <= max_memory
    }
}

impl WasiView for RequestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for RequestState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

impl DoorView for RequestState {
    fn door(&mut self) -> DoorCtxView<'_> {
        DoorCtxView {
            ctx: &mut self.door,
            table: &mut self.table,
        }
    }
}

/// The door answers requests and sends none: the host's default hooks, with
/// outgoing HTTP refused (the crate's default sender is not compiled in).
struct NoOutgoingRequests {
    /// Writes a streamed body queues (`Limits::stream_chunks`).
    chunks: usize,
}

impl WasiHttpHooks for NoOutgoingRequests {
    /// A stream's events queue up to this many writes ahead of the socket, so
    /// the door does not wait on the connection's task for every event.
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        self.chunks
    }

    /// Each of those writes is at most 4 KiB, whoever writes (the door, or
    /// the host passing framed events on): an unread stream queues
    /// `--stream-queue-bytes` (128 KiB).
    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        response_stream::CHUNK_BYTES
    }

    fn send_request(
        &mut self,
        _request: hyper::Request<HyperOutgoingBody>,
        _options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<dyn Future<Output = OutgoingResult> + Send> {
        Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) })
    }
}

type OutgoingResult = Result<
    (
        hyper::Response<HyperOutgoingBody>,
        Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ),
    wasmtime_wasi_http::Error,
>;

/// A store for one request: its memory limited, and its running time metered.
///
/// The epoch ticks every [`cpu::TICK`], wall time. A door running wasm
/// reaches its deadline at the next tick: there it yields to the executor,
/// so other requests run beside a busy one, and its deadline moves one tick
/// on. At each deadline the call traps once the door has run for more than
/// `max_cpu_ms` without waiting ([`crate::sandbox::cpu::Meter`]). A door waiting in
/// `poll` runs no wasm and reaches no deadline. Every call into the store
/// runs inside [`crate::sandbox::cpu::metered`], which sees the door wait.
pub fn store(engine: &Engine, mut state: RequestState, limits: Limits) -> Store<RequestState> {
    state.hooks.chunks = limits.stream_chunks();
    state.door.stream_chunks = limits.stream_chunks();
    let meter = state.cpu.clone();
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.memory);
    let budget = Duration::from_millis(limits.max_cpu_ms);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if meter.used(cpu::TICK) > budget {
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

/// Readies a store kept from an earlier request for the next, which its
/// imports answer from `session` as door version `version`: nothing
/// changed, no CPU used, and its deadline at the next tick, as in a fresh
/// [`store`]. (No kept store was refused memory: see `reusable`.)
pub fn start_over(store: &mut Store<RequestState>, session: Arc<Session>, version: u64) {
    let state = store.data_mut();
    let chunks = state.door.stream_chunks;
    state.door = DoorCtx::new(session);
    state.door.version = version;
    state.door.stream_chunks = chunks;
    state.cpu.start_over();
    store.set_epoch_deadline(1);
}

/// What every request's store is made of: the session its imports answer
/// from, its limits, and the memory all live doors share.
#[derive(Clone)]
pub struct Stores {
    /// The session its imports answer from.
    pub session: Arc<Session>,
    /// What each request's store may use.
    pub limits: Limits,
    /// The memory all live doors share (`--max-door-memory-mb`).
    pub memory: Arc<MemoryPool>,
}

impl Stores {
    /// A store for one request on `engine`, limited and metered.
    pub fn store(&self, engine: &Engine) -> Store<RequestState> {
        let memory = DoorMemory::new(self.limits.max_memory_bytes, self.memory.clone());
        let state = RequestState::new(self.session.clone(), memory);
        store(engine, state, self.limits)
    }
}

#[cfg(test)]
mod tests {
    use super::Limits;

    /// `--stream-queue-bytes` is rounded up to whole 4 KiB writes.
    #[test]
    fn a_stream_queues_whole_writes() {
        let chunks = |bytes| {
            Limits {
                stream_queue_bytes: bytes,
                ..Limits::default()
            }
            .stream_chunks()
        };
        assert_eq!(Limits::default().stream_chunks(), 32);
        assert_eq!(chunks(0), 1);
        assert_eq!(chunks(4096), 1);
        assert_eq!(chunks(4097), 2);
        assert_eq!(chunks(1 << 20), 256);
    }
}
