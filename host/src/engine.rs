//! The wasmtime engine and a loaded door: compiled once, linked against the
//! host's imports and pre-instantiated, so each request only instantiates.

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};
use wasmtime_wasi_http::p2::bindings::ProxyPre;

use crate::imports::{RequestState, events, session, task_store, token_types};

/// The door component built from `guest/`, embedded at build time.
pub const EMBEDDED_DOOR: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/door.wasm"));

/// Requests served at once. Each holds one component instance, and a Rust
/// wasip2 component makes 3 core instances, hence the 4x below.
pub const MAX_INSTANCES: u32 = 256;
/// A door's linear memory may grow to this many bytes per request.
pub const MAX_MEMORY_BYTES: usize = 64 << 20;

/// The engine every door version runs on: the pooling allocator sized for
/// [`MAX_INSTANCES`].
pub fn engine() -> anyhow::Result<Engine> {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(MAX_INSTANCES)
        .total_core_instances(MAX_INSTANCES * 4)
        .total_memories(MAX_INSTANCES * 4)
        .total_tables(MAX_INSTANCES * 4)
        .total_stacks(MAX_INSTANCES)
        .max_memory_size(MAX_MEMORY_BYTES);
    let mut config = Config::new();
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    wasm_context(Engine::new(&config), "creating the wasmtime engine")
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
        let component = wasm_context(
            Component::new(engine, bytes),
            "compiling the door component",
        )?;
        let mut linker = Linker::<RequestState>::new(engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        session::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        token_types::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        task_store::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        events::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        let pre = wasm_context(
            linker.instantiate_pre(&component),
            "linking the door component",
        )?;
        let pre = wasm_context(
            ProxyPre::new(pre),
            "the door component does not export wasi:http/incoming-handler",
        )?;
        Ok(Door {
            pre,
            digest: format!("sha256:{}", hex::encode(Sha256::digest(bytes))),
        })
    }
}

/// A wasmtime error as an anyhow error, with what the host was doing.
fn wasm_context<T>(result: wasmtime::Result<T>, doing: &'static str) -> anyhow::Result<T> {
    result.map_err(|e| anyhow::Error::from(e).context(doing))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded door is the `door` world: it exports the wasi:http
    /// handler and imports session and tokens beside wasi's own interfaces.
    #[test]
    fn the_embedded_door_is_the_door_world() {
        let engine = engine().unwrap();
        let component = Component::new(&engine, EMBEDDED_DOOR).unwrap();
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
