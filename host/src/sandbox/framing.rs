//! Events framed apart from the streams that deliver them. The first stream
//! of a door version to meet an event not framed yet claims it, and the
//! host has the door's `framing` export frame it on an instance of its own,
//! which is dropped once the framing is kept in the replay buffer. Every
//! stream of the version then passes that framing on, so no stream's
//! instance ever holds an event's bytes: what a stream whose client does not
//! read holds stays what it queued, whatever the size of its events.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::bindings::events::{Event, Framed};
use crate::imports::events::{FrameEvents, Framed as Framing};
use crate::sandbox::cpu;
use crate::sandbox::engine::Door;
use crate::sandbox::request::Stores;

/// Frames events for one door version's streams, on instances of its own
/// that draw on the engine's framing slots (see [`crate::sandbox::engine`]) and run
/// under a request's limits.
pub struct Framer {
    door: Door,
    stores: Stores,
    version: u64,
    /// The first failure is logged; each later one costs its event a
    /// framing by the stream's own door, as a door without the export does.
    warned: AtomicBool,
}

impl Framer {
    /// The framer of `door` as `version`, when the door exports `framing`.
    pub fn new(door: &Door, stores: &Stores, version: u64) -> Option<Framer> {
        door.framing.as_ref()?;
        Some(Framer {
            door: door.clone(),
            stores: stores.clone(),
            version,
            warned: AtomicBool::new(false),
        })
    }

    async fn run(&self, event: &Event) -> wasmtime::Result<Framed> {
        let indices = self
            .door
            .framing
            .as_ref()
            .ok_or_else(|| wasmtime::Error::msg("the door does not export framing"))?;
        let _slot = self.door.engine.framing_slot().await;
        let mut store = self.stores.store(&self.door.engine);
        store.data_mut().door.version = self.version;
        let meter = store.data().cpu.clone();
        cpu::metered(&meter, async {
            let instance = self.door.pre.instantiate_async(&mut store).await?;
            let framing = indices.load(&mut store, &instance)?;
            framing
                .murmur_door_framing()
                .call_frame(&mut store, event)
                .await
        })
        .await
    }
}

impl FrameEvents for Framer {
    fn frame(self: Arc<Self>, event: Arc<Event>) -> Framing {
        Box::pin(async move {
            let failure = match self.run(&event).await {
                Ok(framed)
                    if framed.id == event.id
                        && framed.request_id_at as usize <= framed.sse.len() =>
                {
                    return Some((framed.sse, framed.request_id_at as usize));
                }
                Ok(framed) => format!(
                    "the door framed event {} as event {}, its request id at {} of {} bytes",
                    event.id,
                    framed.id,
                    framed.request_id_at,
                    framed.sse.len()
                ),
                Err(e) => format!("{e:#}"),
            };
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    door = self.version,
                    event = event.id,
                    error = %failure,
                    "the door could not frame an event apart: its streams frame what it cannot"
                );
            }
            None
        })
    }
}
