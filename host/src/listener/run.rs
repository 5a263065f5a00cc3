//! One request's run of its door: the instance taken or made, the call
//! (one call of `answer`, or `wasi:http` for an older door), and then the
//! instance kept for its caller's next request or dropped.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::{Request, Response};
use wasmtime::Store;
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, Scheme};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::imports::request_body::BoxedBody;
use crate::listener::admission::Slot;
use crate::listener::body::Tally;
use crate::listener::failure::Failure;
use crate::listener::response_body::{DoorBody, Failed, ResponseBody};
use crate::sandbox::cpu;
use crate::sandbox::engine::DoorInstance;
use crate::sandbox::idle::{Idle, Kept, KeptFor};
use crate::sandbox::memory::MemoryLimit;
use crate::sandbox::one_call;
use crate::sandbox::request::RequestState;
use crate::versions::reuse::{Reuse, ReuseKey};
use crate::versions::swap::Serving;

/// The head a door sends for its request, or the error code it answers.
pub type Head = Result<Response<HyperOutgoingBody>, ErrorCode>;
pub type HeadSender = tokio::sync::oneshot::Sender<Head>;

/// One request's run of its door: its instance (taken, or made now), the
/// call, and then the instance kept for its caller's next request or
/// dropped. It holds the door version until the guest returns, after the
/// body's last write: a stream opened on one version finishes on it,
/// whatever was swapped in meanwhile.
pub struct Run {
    pub serving: Serving,
    pub owner: KeptFor,
    pub store: Store<RequestState>,
    /// None: instantiated in the run.
    pub instance: Option<DoorInstance>,
    pub uses: u32,
    pub slot: Slot,
    /// What the request's body holds, released with the instance.
    pub held: Tally,
    /// Why the door failed, for the body it may have begun.
    pub failure: Failed,
    pub idle: Arc<Idle>,
    /// What a reusable answer is kept under (see
    /// [`crate::versions::reuse`]).
    pub reuse_key: ReuseKey,
}

impl Run {
    /// Runs the door on the request, its head sent through `sender`.
    pub async fn door(
        self,
        parts: hyper::http::request::Parts,
        body: BoxedBody,
        sender: HeadSender,
    ) -> wasmtime::Result<()> {
        let Run {
            serving,
            owner,
            mut store,
            instance,
            uses,
            slot,
            held,
            failure,
            idle,
            reuse_key,
        } = self;
        let meter = store.data().cpu.clone();
        let door = async {
            let instance = match instance {
                Some(instance) => instance,
                None => idle.instantiate(&serving.live().door, &mut store).await?,
            };
            // One call when the door exports it; through wasi:http
            // otherwise (an older door).
            match &instance.answers {
                Some(answers) => {
                    let reuse = &serving.live().reuse;
                    store.data_mut().door.keeping = reuse.keeps(reuse_key.looked_up());
                    one_call::answer(answers, &mut store, &parts, body, sender).await?;
                    keep_declared(reuse, &mut store, &parts, reuse_key);
                }
                None => {
                    let request = Request::from_parts(parts, body);
                    let mut http = store.data_mut().http();
                    let incoming = http.new_incoming_request(Scheme::Http, request)?;
                    let outparam = http.new_response_outparam(sender)?;
                    instance
                        .proxy
                        .wasi_http_incoming_handler()
                        .call_handle(&mut store, incoming, outparam)
                        .await?;
                }
            }
            Ok::<_, wasmtime::Error>(instance)
        };
        let answered = cpu::metered(&meter, door).await;
        tracing::debug!(door = serving.live().version, uses, "door instance done");
        let answered = match answered {
            // Kept for its caller's next request.
            Ok(instance) => {
                let kept = Kept {
                    store,
                    instance,
                    uses: uses + 1,
                };
                idle.keep(owner, kept);
                Ok(())
            }
            Err(trap) => {
                // A version that trapped keeps nothing it answered before.
                serving.live().reuse.clear();
                // Before the store (and with it the body's sender) drops.
                let _ = failure.set(format!("{trap:#}"));
                drop(store);
                Err(trap)
            }
        };
        // The instance and what its body took are released together.
        held.release();
        drop(slot);
        answered
    }
}

/// Keeps the answer the door just declared reusable for the request
/// `parts` (with the body it read) made, when it changed nothing.
fn keep_declared(
    reuse: &Reuse,
    store: &mut Store<RequestState>,
    parts: &hyper::http::request::Parts,
    reuse_key: ReuseKey,
) {
    let door = &mut store.data_mut().door;
    // Nothing of the body outlives its answer, whatever the door declared:
    // a kept instance does not hold its last request's body.
    let body = door.body_read.take();
    // Noted only when the host may keep it (`DoorCtx::keeping`).
    let Some(declared) = door.declared.take() else {
        return;
    };
    if door.changed.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let lookup = reuse_key.lookup;
    if let Some(request) = reuse_key.request(parts, body.as_ref()) {
        let reads = std::mem::take(&mut door.reads);
        reuse.keep(request, declared, reads, &door.session.planes, lookup);
    }
}

/// The response to a request once its door has sent a head (a door still
/// running then goes on in a task of its own, which the body's end
/// aborts), or the failure when it returned or trapped without one.
pub async fn answered(
    mut door: DoorRun,
    mut receiver: tokio::sync::oneshot::Receiver<Head>,
    failed: Failed,
    span: tracing::Span,
    memory: impl Fn() -> Option<MemoryLimit>,
) -> Result<Response<ResponseBody>, Failure> {
    let (head, done) = tokio::select! {
        biased;
        // A door that returned has answered or never will.
        done = &mut door => (receiver.await, Some(done)),
        head = &mut receiver => (head, None),
    };
    match head {
        Ok(Ok(response)) => {
            let task = done.is_none().then(|| door.detach()).flatten();
            let door = DoorBody {
                failed,
                task: task.map(|task| task.abort_handle()),
                span,
            };
            Ok(response.map(|body| ResponseBody {
                body,
                door: Some(door),
                _busy: None,
                probe: None,
                stream: None,
                bytes: None,
                traced: None,
            }))
        }
        Ok(Err(code)) => Err(Failure::Guest(
            format!("the door answered an error: {code:?}"),
            memory(),
        )),
        Err(_) => {
            let done = match done {
                Some(done) => done,
                None => door.await,
            };
            let why = match done {
                Ok(()) => "the door returned without answering".to_string(),
                Err(trap) => format!("{trap:#}"),
            };
            Err(Failure::Guest(why, memory()))
        }
    }
}

/// A door's run on one request. It is polled on the request's own task, so
/// a door that answers and returns at once (most requests) costs no task
/// and no wake of another thread. A door still running once its head is
/// out (a body it streams), or when the request is dropped before its head
/// (the client left), goes on in a task of its own: a door always runs to
/// its end, as it would with no client.
pub struct DoorRun {
    run: Option<Pin<Box<dyn Future<Output = wasmtime::Result<()>> + Send>>>,
}

impl DoorRun {
    pub fn new(run: impl Future<Output = wasmtime::Result<()>> + Send + 'static) -> DoorRun {
        DoorRun {
            run: Some(Box::pin(run)),
        }
    }

    /// The rest of the run in a task of its own; None once it has ended.
    pub fn detach(&mut self) -> Option<tokio::task::JoinHandle<wasmtime::Result<()>>> {
        let run = self.run.take()?;
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        Some(runtime.spawn(run))
    }
}

impl Future for DoorRun {
    type Output = wasmtime::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(run) = self.run.as_mut() else {
            return Poll::Ready(Err(wasmtime::Error::msg(
                "the door's run was polled after it ended",
            )));
        };
        // A panic in the host's code for the door fails its request, as it
        // fails a task of its own, and not the connection.
        let polled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run.as_mut().poll(cx)))
                .unwrap_or_else(|_| {
                    Poll::Ready(Err(wasmtime::Error::msg("the door's run panicked")))
                });
        if polled.is_ready() {
            self.run = None;
        }
        polled
    }
}

impl Drop for DoorRun {
    fn drop(&mut self) {
        drop(self.detach());
    }
}

#[cfg(test)]
mod tests {
    use super::DoorRun;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// A run dropped before its end (its client left before the head) goes
    /// on to its end in a task of its own; one that ended leaves nothing.
    #[tokio::test]
    async fn a_door_run_dropped_early_still_runs_to_its_end() {
        let ended = Arc::new(AtomicBool::new(false));
        let flag = ended.clone();
        let mut run = DoorRun::new(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            flag.store(true, Ordering::SeqCst);
            Ok(())
        });
        // Polled once on the request's task, then dropped.
        assert!(
            tokio::time::timeout(Duration::from_millis(1), &mut run)
                .await
                .is_err()
        );
        drop(run);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(ended.load(Ordering::SeqCst));

        let mut run = DoorRun::new(async { Ok(()) });
        (&mut run).await.unwrap();
        assert!(run.detach().is_none());
    }

    /// A panic in the run fails the request, not the connection's task.
    #[tokio::test]
    async fn a_door_run_that_panics_fails_its_request() {
        let run = DoorRun::new(async { panic!("a bug in the host") });
        let failed = run.await.unwrap_err();
        assert_eq!(failed.to_string(), "the door's run panicked");
    }
}
