//! Events framed apart from the streams that deliver them. The first stream
//! of a door version to meet an event not framed yet claims it, with the
//! unframed events after it that the stream reads too (a task's statuses
//! and artifact, published together), and the host has the door's
//! `framing` export frame them one after the other on an instance of their
//! own. Every stream of the version then passes that framing on, so no
//! stream's instance ever holds an event's bytes: what a stream whose client
//! does not read holds stays what it queued, whatever the size of its events.
//!
//! An instance that framed cleanly is kept idle ([`crate::sandbox::idle`])
//! for the session's next framing, as a request's instance is for its
//! caller's next request: it frames only that session's events and never
//! answers a request, and the door keeps nothing from one call to the next
//! (it declares no global), so a burst framed on it is framed as on a
//! fresh one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::bindings::events::{Event, Framed};
use crate::imports::events::{FrameEvents, Framed as Framing};
use crate::sandbox::cpu;
use crate::sandbox::engine::Door;
use crate::sandbox::idle::{Idle, Kept, KeptFor};
use crate::sandbox::request::Stores;

/// Frames events for one door version's streams, on instances of its own
/// that draw on the engine's framing slots (see [`crate::sandbox::engine`]) and run
/// under a request's limits.
pub struct Framer {
    door: Door,
    stores: Stores,
    version: u64,
    /// Where its instance waits between two framings.
    idle: Arc<Idle>,
    /// The first failure is logged; each later one costs its event a
    /// framing by the stream's own door, as a door without the export does.
    warned: AtomicBool,
}

impl Framer {
    /// The framer of `door` as `version`, when the door exports `framing`,
    /// keeping its instance among `idle`'s.
    pub fn new(door: &Door, stores: &Stores, version: u64, idle: &Arc<Idle>) -> Option<Framer> {
        door.framing.as_ref()?;
        Some(Framer {
            door: door.clone(),
            stores: stores.clone(),
            version,
            idle: idle.clone(),
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
        let owner = KeptFor::framing(&self.door, self.stores.limits);
        let (mut store, instance, uses) =
            self.idle
                .store_for(&owner, &self.stores, &self.door, self.version);
        let meter = store.data().cpu.clone();
        let mut framed = Vec::with_capacity(events.len());
        let ran = cpu::metered(&meter, async {
            let instance = match instance {
                Some(instance) => instance,
                None => self.idle.instantiate(&self.door, &mut store).await?,
            };
            let framing = indices.load(&mut store, &instance.instance)?;
            for event in events {
                let call = framing.murmur_door_framing().call_frame(&mut store, event);
                framed.push(Ok(call.await?));
            }
            Ok::<_, wasmtime::Error>(instance)
        })
        .await;
        match ran {
            // Kept for the session's next framing.
            Ok(instance) => {
                let uses = uses + 1;
                self.idle.keep(
                    owner,
                    Kept {
                        store,
                        instance,
                        uses,
                    },
                );
            }
            Err(e) => framed.extend(failed(events.len() - framed.len(), &format!("{e:#}"))),
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::bindings::events::EventBody;
    use crate::bindings::task_store::TaskState;
    use crate::manifest::Manifest;
    use crate::sandbox::engine::{self, EMBEDDED_DOOR};
    use crate::sandbox::memory::MemoryPool;
    use crate::sandbox::request::Limits;
    use crate::session::Session;
    use crate::session::tasks::events;

    fn event(id: u64, task: &str, body: EventBody) -> Arc<Event> {
        Arc::new(Event {
            id,
            task_id: task.to_string(),
            context_id: format!("ctx_{task}"),
            body,
        })
    }

    /// A task's burst: its statuses and its answer of `text`.
    fn burst(first: u64, task: &str, text: &str) -> Vec<Arc<Event>> {
        let status = |state| events::status(state, None, None, 1_765_000_000_000);
        vec![
            event(first, task, status(TaskState::Submitted)),
            event(first + 1, task, status(TaskState::Working)),
            event(
                first + 2,
                task,
                events::text_artifact("response", text.into()),
            ),
            event(first + 3, task, status(TaskState::Completed)),
        ]
    }

    /// A burst framed on the instance another task's burst left idle is
    /// framed byte for byte as on a fresh instance: nothing of one task's
    /// events reaches another's framing.
    #[test]
    fn a_kept_instance_frames_as_a_fresh_one() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let manifest = Manifest::parse("name: m\nversion: 0.1.0\n").unwrap();
        let session = Arc::new(Session::launch(&manifest, "http://127.0.0.1:1".into()).unwrap());
        let door = Door::load(&engine::engine().unwrap(), EMBEDDED_DOOR).unwrap();
        let stores = Stores {
            session,
            limits: Limits::default(),
            memory: MemoryPool::new(usize::MAX),
        };
        let idle = Idle::new(8);
        let kept = Arc::new(Framer::new(&door, &stores, 1, &idle).unwrap());
        let fresh = Arc::new(Framer::new(&door, &stores, 1, &Idle::new(0)).unwrap());
        runtime.block_on(async {
            let long = burst(1, "tsk_a", &"a".repeat(64 << 10));
            let framed = kept.clone().frame(long.clone()).await;
            assert_eq!(framed, fresh.clone().frame(long).await);
            assert!(framed.iter().all(Option::is_some), "{framed:?}");
            assert_eq!(idle.len(), 1);
            let short = burst(5, "tsk_b", "b");
            let framed = kept.clone().frame(short.clone()).await;
            assert_eq!(framed, fresh.frame(short).await);
            let sse = String::from_utf8(framed[2].clone().unwrap().0).unwrap();
            assert!(
                sse.contains(r#""text":"b""#) && !sse.contains("aa"),
                "{sse}"
            );
            // The same instance, kept again.
            assert_eq!(idle.len(), 1);
        });
    }
}
