//! Events framed apart from the streams that deliver them. The first stream
//! of a door version to meet an event not framed yet claims it, with the
//! unframed events after it that the stream reads too (a task's statuses
//! and artifact, published together), and the host has the door's
//! `framing` export frame them one after the other on an instance of their
//! own, which is dropped once the framings are kept in the replay buffer.
//! Every stream of the version then passes that framing on, so no stream's
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

    /// `events` framed one after the other on one instance; a failure
    /// (a trap leaves the instance unusable) fails the events not framed
    /// yet with it.
    async fn run(&self, events: &[Arc<Event>]) -> Vec<Result<Framed, String>> {
        let Some(indices) = self.door.framing.as_ref() else {
            return failed(events.len(), "the door does not export framing");
        };
        let _slot = self.door.engine.framing_slot().await;
        let mut store = self.stores.store(&self.door.engine);
        store.data_mut().door.version = self.version;
        let meter = store.data().cpu.clone();
        let mut framed = Vec::with_capacity(events.len());
        let ran = cpu::metered(&meter, async {
            let instance = self.door.pre.instantiate_async(&mut store).await?;
            let framing = indices.load(&mut store, &instance)?;
            for event in events {
                let call = framing.murmur_door_framing().call_frame(&mut store, event);
                framed.push(Ok(call.await?));
            }
            Ok::<_, wasmtime::Error>(())
        })
        .await;
        if let Err(e) = ran {
            framed.extend(failed(events.len() - framed.len(), &format!("{e:#}")));
        }
        framed
    }
}

/// `count` failures saying `why`.
fn failed(count: usize, why: &str) -> Vec<Result<Framed, String>> {
    vec![Err(why.to_string()); count]
}

impl FrameEvents for Framer {
    fn frame(self: Arc<Self>, events: Vec<Arc<Event>>) -> Framing {
        Box::pin(async move {
            let framed = self.run(&events).await;
            events
                .iter()
                .zip(framed)
                .map(|(event, framed)| {
                    let failure = match framed {
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
                        Err(why) => why,
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
                .collect()
        })
    }
}
