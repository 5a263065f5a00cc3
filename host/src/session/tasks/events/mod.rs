//! The session's event log: every task event, numbered session-wide, in a
//! bounded replay buffer, and the readers (`events` resources) a stream
//! follows it with.
//!
//! The hub writes every event: a status the task writes (each transition,
//! each progress note), an artifact it writes (`response`, `prompt`,
//! `residue`, always before the status that ends or pauses the task), and the
//! murmur frames its agent reports. The store numbers them (ids start at 1
//! and keep increasing across `--resume`: the last id is part of the session
//! record, written with the change it numbers), and the hub publishes them
//! here in that order, under its live lock.
//!
//! The buffer keeps the newest `capacity` events; its ids are contiguous, so
//! a reader finds its place by subtraction. A reader is a position (the last
//! id it delivered or passed over) and an optional task filter. What it reads
//! next, in order:
//!
//! 1. `gap(after, oldest - 1)` once, when the id it was opened after is older
//!    than the buffer can supply;
//! 2. `lagged(position, through)` whenever it fell so far behind that the
//!    buffer evicted the events after its position: a session reader goes
//!    on from the newest event (`through` is it), a task reader from the
//!    oldest buffered one, so it still reads how its task ends;
//! 3. the buffered events after its position (of its task, for a task
//!    reader);
//! 4. `closed` once the door closes and it has read every event written
//!    until then; nothing after that.
//!
//! A waiting reader holds no thread and no lock: `pass-on` awaits a watch
//! channel the log bumps on every publish and on close.
//!
//! Framed once: the first reader of a door version to meet an event not
//! framed yet claims its framing ([`Reader::read_claiming`]), has it framed
//! apart, and reports it ([`EventLog::framed`]); the other readers of that
//! version wait for it, then get those bytes (`framed`, or written by
//! `pass-on`) instead of the event to render. A door that frames in its
//! stream keeps its framing the same way ([`Reader::keep_framed`]). Each
//! door version keeps its own: a swap never mixes two versions' framing.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio::sync::watch;

pub use crate::bindings::events::{
    ArtifactUpdate, Delivery, Event, EventBody, Frame, Framed, StatusUpdate,
};
use crate::bindings::session::ResidueItem;
use crate::bindings::task_store::{Status, TaskState};

/// `--replay-buffer`: how many of the newest events a reconnecting stream can
/// replay.
pub const DEFAULT_REPLAY_BUFFER: usize = 4096;
/// `--replay-buffer-bytes`: how many bytes of events the buffer holds at
/// most; the oldest go first.
pub const DEFAULT_REPLAY_BUFFER_BYTES: usize = 64 << 20;

/// What the replay buffer keeps: the newest `events`, within `bytes`. The
/// newest event is kept whatever its size, so a stream waiting for it gets
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replay {
    /// How many of the newest events (`--replay-buffer`).
    pub events: usize,
    /// How many bytes of events at most (`--replay-buffer-bytes`).
    pub bytes: usize,
}

impl Default for Replay {
    fn default() -> Replay {
        Replay {
            events: DEFAULT_REPLAY_BUFFER,
            bytes: DEFAULT_REPLAY_BUFFER_BYTES,
        }
    }
}

impl From<usize> for Replay {
    /// The newest `events`, within the default bytes.
    fn from(events: usize) -> Replay {
        Replay {
            events,
            ..Replay::default()
        }
    }
}

/// The bytes an event holds in the buffer: its strings, and a fixed part.
pub fn event_bytes(event: &Event) -> usize {
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let residue = |items: &[ResidueItem]| -> usize {
        items
            .iter()
            .map(|item| match item {
                ResidueItem::DetachedShell(s) => s.work_id.len() + s.binary.len() + s.command.len(),
                ResidueItem::Delegation(d) => {
                    d.delegation_id.len()
                        + d.capsule.len()
                        + d.version.len()
                        + d.child_session_id.len()
                        + d.child_workdir.len()
                }
            } + 64)
            .sum()
    };
    let body = match &event.body {
        EventBody::Status(s) => text(&s.status.message) + text(&s.message_id),
        EventBody::Artifact(a) => a.artifact_id.len() + text(&a.text) + residue(&a.residue),
        EventBody::Frame(f) => f.kind.len() + f.body.len(),
    };
    std::mem::size_of::<Event>() + event.task_id.len() + event.context_id.len() + body
}

/// The kinds of murmur frame an agent reports beside the A2A events.
/// `quota` and `suggested-prompt` are written only by a capsule on
/// `inference.transport: process`; the runtime that embeds the host decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// Text the agent writes as it goes: `{"text": …}`.
    Text,
    /// The model's reasoning, as it goes.
    Thinking,
    /// The model calls a tool.
    ToolCallStarted,
    /// Progress of a tool call under way.
    ToolCallProgress,
    /// An artifact the agent writes as it goes.
    Artifact,
    /// The harness's quota (`process` only).
    Quota,
    /// A prompt the client may send next (`process` only).
    SuggestedPrompt,
}

impl FrameKind {
    /// Every kind, in the order the card lists them.
    pub const ALL: [FrameKind; 7] = [
        FrameKind::Text,
        FrameKind::Thinking,
        FrameKind::ToolCallStarted,
        FrameKind::ToolCallProgress,
        FrameKind::Artifact,
        FrameKind::Quota,
        FrameKind::SuggestedPrompt,
    ];

    /// The kind the stream extension spells `kind`.
    pub fn named(kind: &str) -> Option<FrameKind> {
        FrameKind::ALL.into_iter().find(|k| k.as_str() == kind)
    }

    /// The kind as the stream extension spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            FrameKind::Text => "text",
            FrameKind::Thinking => "thinking",
            FrameKind::ToolCallStarted => "tool-call-started",
            FrameKind::ToolCallProgress => "tool-call-progress",
            FrameKind::Artifact => "artifact",
            FrameKind::Quota => "quota",
            FrameKind::SuggestedPrompt => "suggested-prompt",
        }
    }
}

/// A status update: `message_id` names the status message of a status
/// written as it happens (a progress note, a question); none otherwise.
pub fn status(
    state: TaskState,
    message: Option<String>,
    message_id: Option<String>,
    timestamp_ms: i64,
) -> EventBody {
    EventBody::Status(StatusUpdate {
        status: Status {
            state,
            message,
            timestamp_ms,
        },
        message_id,
    })
}

/// The `response` or `prompt` artifact, whole.
pub fn text_artifact(artifact_id: &str, text: String) -> EventBody {
    EventBody::Artifact(ArtifactUpdate {
        artifact_id: artifact_id.to_string(),
        text: Some(text),
        residue: Vec::new(),
    })
}

/// The `residue` artifact of a cancel that left something running.
pub fn residue_artifact(items: Vec<ResidueItem>) -> EventBody {
    EventBody::Artifact(ArtifactUpdate {
        artifact_id: "residue".to_string(),
        text: None,
        residue: items,
    })
}

/// A murmur frame; `body` is a JSON object.
pub fn frame(kind: FrameKind, body: &serde_json::Map<String, serde_json::Value>) -> EventBody {
    EventBody::Frame(Frame {
        kind: kind.as_str().to_string(),
        body: serde_json::Value::Object(body.clone()).to_string(),
    })
}

/// The log: the replay buffer and what wakes its readers.
pub struct EventLog {
    capacity: usize,
    max_bytes: usize,
    buffer: Mutex<Buffer>,
    /// Bumped on every publish and on close.
    wake: watch::Sender<()>,
    /// Readers alive, for the curious (and the tests that drop them).
    readers: AtomicUsize,
}

struct Buffer {
    /// The newest events: `events[i].event.id == first + i`.
    events: VecDeque<Entry>,
    /// The id of the oldest buffered event; `latest + 1` while none is.
    first: u64,
    /// What the buffered events and their framings hold ([`Entry::bytes`]).
    bytes: usize,
    /// The newest id published, 0 before the first.
    latest: u64,
    /// Once the door closes: the newest id then. Readers end after it.
    closed_at: Option<u64>,
}

/// A buffered event and the SSE events door versions framed it as.
struct Entry {
    event: Arc<Event>,
    /// At most one per door version.
    framed: Vec<Arc<Framing>>,
    /// Door versions framing it on an instance of their own, or that could
    /// not ([`Reader::read_claiming`]).
    claims: Vec<Claim>,
}

/// A door version's framing of an event, once a reader asked for it.
#[derive(Clone, Copy)]
struct Claim {
    version: u64,
    /// It could not be framed apart: each stream's door is given the event.
    failed: bool,
}

/// Events one claim holds at most: framed together, on one instance.
pub const FRAME_BATCH: usize = 16;
/// A claim takes an event after its first only while the events it holds
/// stay within these bytes: a large one is framed alone, so that the
/// framings kept at once stay small beside the replay buffer's bound, and
/// its readers read each before the next is kept.
pub const FRAME_BATCH_BYTES: usize = 16 << 10;

/// What [`Reader::read_claiming`] read.
pub enum Claimed {
    /// As [`Reader::read`] reads it.
    Read(Read),
    /// Events no door of the reader's version framed yet, oldest first: the
    /// next one the reader reads, and those after it the reader reads too
    /// that nothing of its version framed or claimed ([`FRAME_BATCH`] in
    /// all at most). The reader is to have them framed, then report each
    /// with [`EventLog::framed`].
    Frame(Vec<Arc<Event>>),
    /// Another reader is having the next event framed: wait for a change
    /// ([`Reader::changed`]).
    Wait,
}

/// One door version's SSE event for an event, its request id cut out at
/// `request_id_at`.
pub struct Framing {
    version: u64,
    sse: Bytes,
    request_id_at: usize,
}

impl Framing {
    /// The bytes of the event as a stream with `request_id` (JSON) writes
    /// it.
    pub fn written_len(&self, request_id: &[u8]) -> usize {
        self.sse.len() + request_id.len()
    }

    /// Bytes `at..` of the event as a stream with `request_id` writes it,
    /// `max` at most, copied: what a stream has queued never keeps the
    /// framing itself alive.
    pub fn copy_out(&self, request_id: &[u8], at: usize, max: usize) -> Bytes {
        let (head, tail) = self.sse.split_at(self.request_id_at);
        let mut out = Vec::with_capacity(max.min(self.written_len(request_id).saturating_sub(at)));
        let mut skip = at;
        for part in [head, request_id, tail] {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            let take = (part.len() - skip).min(max - out.len());
            out.extend_from_slice(&part[skip..skip + take]);
            skip = 0;
            if out.len() == max {
                break;
            }
        }
        Bytes::from(out)
    }
}

impl Entry {
    /// What the entry holds: its event and its framings.
    fn bytes(&self) -> usize {
        event_bytes(&self.event)
            + self
                .framed
                .iter()
                .map(|f| std::mem::size_of::<Framing>() + f.sse.len())
                .sum::<usize>()
    }
}

impl Buffer {
    /// Drops the oldest events until the buffer is within `capacity` events
    /// and `max_bytes`; the bytes never evict event `keep` or a newer one
    /// (the newest always stays).
    fn evict(&mut self, capacity: usize, max_bytes: usize, keep: u64) {
        while self.events.len() > capacity || (self.bytes > max_bytes && self.first < keep) {
            let Some(oldest) = self.events.pop_front() else {
                break;
            };
            self.bytes -= oldest.bytes();
            self.first += 1;
        }
    }
}

impl EventLog {
    /// An empty log keeping the newest events `replay` allows (at least
    /// one), whose next event is `latest + 1`.
    pub fn new(replay: impl Into<Replay>, latest: u64) -> Arc<EventLog> {
        let replay = replay.into();
        Arc::new(EventLog {
            capacity: replay.events.max(1),
            max_bytes: replay.bytes,
            buffer: Mutex::new(Buffer {
                events: VecDeque::new(),
                first: latest + 1,
                bytes: 0,
                latest,
                closed_at: None,
            }),
            wake: watch::Sender::new(()),
            readers: AtomicUsize::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Buffer> {
        // Every critical section leaves the buffer consistent.
        self.buffer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many events the buffer keeps at most: `--replay-buffer`, at least
    /// one.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes the buffered events hold now ([`event_bytes`]).
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// The id of the newest event, 0 before the first.
    pub fn latest(&self) -> u64 {
        self.lock().latest
    }

    /// The id of the oldest event the buffer still holds; `latest + 1` when
    /// it holds none.
    pub fn oldest(&self) -> u64 {
        self.lock().first
    }

    /// How many readers are open.
    pub fn readers(&self) -> usize {
        self.readers.load(Ordering::SeqCst)
    }

    /// Appends one write's events, numbered `ids` (as the store numbered
    /// them), and wakes the readers. Ids must follow the newest one: the
    /// hub publishes in numbering order. Should they not, the log stays
    /// consistent: an id already published is dropped, and a hole empties
    /// the buffer, so every reader reports the hole as lost.
    pub fn publish(
        &self,
        ids: Range<u64>,
        task_id: &str,
        context_id: &str,
        bodies: Vec<EventBody>,
    ) {
        debug_assert_eq!(ids.end - ids.start, bodies.len() as u64);
        let mut buffer = self.lock();
        for (id, body) in ids.zip(bodies) {
            if id <= buffer.latest {
                tracing::error!(
                    id,
                    latest = buffer.latest,
                    "an event id was published twice"
                );
                continue;
            }
            if id > buffer.latest + 1 {
                tracing::error!(id, latest = buffer.latest, "event ids were skipped");
                buffer.events.clear();
                buffer.bytes = 0;
                buffer.first = id;
            }
            let entry = Entry {
                event: Arc::new(Event {
                    id,
                    task_id: task_id.to_string(),
                    context_id: context_id.to_string(),
                    body,
                }),
                framed: Vec::new(),
                claims: Vec::new(),
            };
            buffer.bytes += entry.bytes();
            buffer.events.push_back(entry);
            buffer.latest = id;
            buffer.evict(self.capacity, self.max_bytes, id);
        }
        drop(buffer);
        self.wake.send_replace(());
    }

    /// Keeps `sse` as door `version`'s framing of event `id`, unless the
    /// event has left the buffer or that version framed it already (or the
    /// cut is not within it). Counted in the buffer's bytes, which may evict
    /// the oldest events.
    fn keep_framed(&self, id: u64, version: u64, sse: Vec<u8>, request_id_at: usize) {
        if request_id_at > sse.len() {
            return;
        }
        let mut buffer = self.lock();
        if id < buffer.first || id > buffer.latest {
            return;
        }
        let index = (id - buffer.first) as usize;
        let entry = &mut buffer.events[index];
        if entry.framed.iter().any(|f| f.version == version) {
            return;
        }
        let framing = Framing {
            version,
            sse: Bytes::from(sse),
            request_id_at,
        };
        let bytes = std::mem::size_of::<Framing>() + framing.sse.len();
        entry.framed.push(Arc::new(framing));
        buffer.bytes += bytes;
        // Never the event framed: the readers waiting for its framing
        // read it next.
        buffer.evict(self.capacity, self.max_bytes, id);
    }

    /// How door `version`'s framing of event `id`, on an instance of its
    /// own, went: kept as [`EventLog::keep_framed`] keeps it, or, when it
    /// could not be framed (`None`), each stream's door is given the event.
    /// Wakes the readers waiting for it.
    pub fn framed(&self, id: u64, version: u64, framed: Option<(Vec<u8>, usize)>) {
        {
            let mut buffer = self.lock();
            if id >= buffer.first && id <= buffer.latest {
                let index = (id - buffer.first) as usize;
                let claims = &mut buffer.events[index].claims;
                match &framed {
                    Some(_) => claims.retain(|c| c.version != version),
                    None => claims
                        .iter_mut()
                        .filter(|c| c.version == version)
                        .for_each(|c| c.failed = true),
                }
            }
        }
        if let Some((sse, request_id_at)) = framed {
            self.keep_framed(id, version, sse, request_id_at);
        }
        self.wake.send_replace(());
    }

    /// The door closes: every reader ends with `closed` once it has read the
    /// events published until now.
    pub fn close(&self) {
        let mut buffer = self.lock();
        if buffer.closed_at.is_none() {
            buffer.closed_at = Some(buffer.latest);
        }
        drop(buffer);
        self.wake.send_replace(());
    }

    /// Every task's events after `after`; from the oldest buffered event when
    /// `after` is none. An id newer than the newest (another log's, from
    /// before a fresh launch) reads as 0: everything this log holds.
    pub fn session_reader(self: &Arc<Self>, after: Option<u64>) -> Reader {
        let buffer = self.lock();
        let position = match after {
            None => buffer.first - 1,
            Some(after) if after > buffer.latest => 0,
            Some(after) => after,
        };
        Reader::new(self, &buffer, None, position)
    }

    /// The events of task `task_id` after `after`; only the events published
    /// from now on when `after` is none. Who may read it is the hub's
    /// business.
    pub fn task_reader(self: &Arc<Self>, task_id: &str, after: Option<u64>) -> Reader {
        let buffer = self.lock();
        let position = match after {
            None => buffer.latest,
            Some(after) if after > buffer.latest => 0,
            Some(after) => after,
        };
        Reader::new(self, &buffer, Some(task_id.to_string()), position)
    }
}

/// What a reader reads next: an event its door version framed, as that
/// framing, or a delivery for the door.
pub enum Read {
    /// An event its door version has framed, passed on as that framing.
    Framed {
        /// Session-wide and increasing: the SSE `id`.
        id: u64,
        /// The state a status event wrote; None for an artifact or a frame.
        state: Option<TaskState>,
        /// A murmur frame: written only where the stream extension is active.
        frame: bool,
        /// The SSE event as the door version framed it.
        framing: Arc<Framing>,
    },
    /// What the door must see itself: an event not framed yet, a gap, a lag
    /// or the close.
    Delivery(Delivery),
}

impl Read {
    /// As the door reads it.
    pub fn into_delivery(self) -> Delivery {
        match self {
            Read::Framed {
                id,
                state,
                frame,
                framing,
            } => Delivery::Framed(Framed {
                id,
                state,
                frame,
                sse: framing.sse.to_vec(),
                request_id_at: framing.request_id_at as u32,
            }),
            Read::Delivery(delivery) => delivery,
        }
    }
}

/// A reader of the log: the host side of an `events` resource.
pub struct Reader {
    log: Arc<EventLog>,
    cursor: Cursor,
    wake: watch::Receiver<()>,
    /// The door version reading: the framings it gets and keeps.
    version: u64,
    /// The id of the last event delivered: the only one it may frame.
    delivered: Option<u64>,
}

/// Where a reader is.
struct Cursor {
    /// Only this task's events; every task's when none.
    task_id: Option<String>,
    /// The id of the last event read or passed over.
    position: u64,
    /// The reader was opened after an id whose successor the buffer had
    /// already evicted: its first delivery is a gap (later losses are lags).
    opened_in_gap: bool,
    /// `closed` has been read.
    ended: bool,
}

/// What a reader reads next, before it reads it.
enum Next {
    Lost(Delivery),
    /// The event at this index of the buffer.
    Event(usize),
    Closed,
    Nothing,
}

/// Claims for `version` the event at `index` of `buffer`, which `cursor`
/// reads next, and the events after it `cursor` reads until one that
/// `version` framed or claimed, [`FRAME_BATCH`] in all at most, and
/// [`FRAME_BATCH_BYTES`] but for the first.
fn claim_from(buffer: &mut Buffer, cursor: &Cursor, index: usize, version: u64) -> Vec<Arc<Event>> {
    let end = buffer.closed_at.unwrap_or(buffer.latest);
    let last = ((end + 1).saturating_sub(buffer.first) as usize).min(buffer.events.len());
    let mut claimed = Vec::new();
    let mut bytes = 0;
    for entry in buffer.events.range_mut(index..last) {
        if claimed.len() == FRAME_BATCH {
            break;
        }
        if cursor
            .task_id
            .as_ref()
            .is_some_and(|task| entry.event.task_id != *task)
        {
            continue;
        }
        let taken = entry.framed.iter().any(|f| f.version == version)
            || entry.claims.iter().any(|c| c.version == version);
        let size = event_bytes(&entry.event);
        if taken || !claimed.is_empty() && bytes + size > FRAME_BATCH_BYTES {
            break;
        }
        bytes += size;
        entry.claims.push(Claim {
            version,
            failed: false,
        });
        claimed.push(entry.event.clone());
    }
    claimed
}

impl Cursor {
    /// What comes next, passing over the events of other tasks.
    fn peek(&mut self, buffer: &Buffer) -> Next {
        if self.ended {
            return Next::Nothing;
        }
        if self.position + 1 < buffer.first {
            if self.opened_in_gap {
                return Next::Lost(Delivery::Gap((self.position, buffer.first - 1)));
            }
            // A session reader that fell behind goes on from the live edge;
            // a task reader from the oldest buffered event, so that it
            // still reads how its task ends.
            let through = match self.task_id {
                None => buffer
                    .closed_at
                    .unwrap_or(buffer.latest)
                    .max(buffer.first - 1),
                Some(_) => buffer.first - 1,
            };
            return Next::Lost(Delivery::Lagged((self.position, through)));
        }
        let end = buffer.closed_at.unwrap_or(buffer.latest);
        while self.position < end {
            // position + 1 >= first and position < latest: in the buffer.
            let index = (self.position + 1 - buffer.first) as usize;
            match &self.task_id {
                Some(task) if buffer.events[index].event.task_id != *task => self.position += 1,
                _ => return Next::Event(index),
            }
        }
        if buffer.closed_at.is_some() {
            Next::Closed
        } else {
            Next::Nothing
        }
    }
}

impl Reader {
    /// A reader at `position`, made while `buffer` is locked.
    fn new(log: &Arc<EventLog>, buffer: &Buffer, task_id: Option<String>, position: u64) -> Reader {
        log.readers.fetch_add(1, Ordering::SeqCst);
        Reader {
            log: log.clone(),
            cursor: Cursor {
                task_id,
                position,
                opened_in_gap: position + 1 < buffer.first,
                ended: false,
            },
            wake: log.wake.subscribe(),
            version: 0,
            delivered: None,
        }
    }

    /// The reader for door `version`: it gets that version's framings of
    /// events, and keeps its own for that version.
    pub fn for_version(mut self, version: u64) -> Reader {
        self.version = version;
        self
    }

    /// The task this reader follows; none for the session's.
    pub fn task_id(&self) -> Option<&str> {
        self.cursor.task_id.as_deref()
    }

    /// The next delivery, or none while nothing is waiting (and for good
    /// after `closed`).
    pub fn next_delivery(&mut self) -> Option<Delivery> {
        self.read().map(Read::into_delivery)
    }

    /// The next delivery, a framed event as its framing.
    pub fn read(&mut self) -> Option<Read> {
        match self.read_with(false)? {
            Claimed::Read(read) => Some(read),
            Claimed::Frame(_) | Claimed::Wait => unreachable!("claims are not made"),
        }
    }

    /// As [`Reader::read`], but an event its version has not framed is
    /// framed apart, once: the first reader to meet it claims it, with the
    /// unframed events after it that it reads too, which a stream's burst
    /// (a task's statuses and its artifact) then costs one instance
    /// ([`Claimed::Frame`]), the others wait for the framing
    /// ([`Claimed::Wait`]), and none moves past it until it is framed or
    /// could not be (then it is read as an event).
    pub fn read_claiming(&mut self) -> Option<Claimed> {
        // Marked seen before looking: a framing kept after the look wakes
        // a reader told to wait.
        self.wake.borrow_and_update();
        self.read_with(true)
    }

    /// Resolves at the log's next change (a publish, a framing, the close).
    /// Cancel-safe.
    pub async fn changed(&mut self) {
        let _ = self.wake.changed().await;
    }

    /// The log this reader reads, and its door version: where a framing it
    /// claimed is reported.
    pub fn log(&self) -> (&Arc<EventLog>, u64) {
        (&self.log, self.version)
    }

    fn read_with(&mut self, claiming: bool) -> Option<Claimed> {
        let event = {
            let mut buffer = self.log.lock();
            let cursor = &mut self.cursor;
            match cursor.peek(&buffer) {
                Next::Nothing => return None,
                Next::Lost(delivery) => {
                    let (Delivery::Gap((_, through)) | Delivery::Lagged((_, through))) = delivery
                    else {
                        unreachable!("a loss is a gap or a lag")
                    };
                    cursor.position = through;
                    cursor.opened_in_gap = false;
                    return Some(Claimed::Read(Read::Delivery(delivery)));
                }
                Next::Closed => {
                    cursor.ended = true;
                    return Some(Claimed::Read(Read::Delivery(Delivery::Closed)));
                }
                Next::Event(index) => {
                    let version = self.version;
                    let entry = &mut buffer.events[index];
                    let framing = entry.framed.iter().find(|f| f.version == version);
                    if claiming && framing.is_none() {
                        match entry.claims.iter().find(|c| c.version == version) {
                            None => {
                                let claimed = claim_from(&mut buffer, &*cursor, index, version);
                                return Some(Claimed::Frame(claimed));
                            }
                            Some(claim) if !claim.failed => return Some(Claimed::Wait),
                            Some(_) => {}
                        }
                    }
                    cursor.position = entry.event.id;
                    cursor.opened_in_gap = false;
                    (entry.event.clone(), framing.cloned())
                }
            }
        };
        // Copied outside the lock: a large response holds up no one.
        let (event, framing) = event;
        self.delivered = Some(event.id);
        Some(Claimed::Read(match framing {
            Some(framing) => Read::Framed {
                id: event.id,
                state: match &event.body {
                    EventBody::Status(update) => Some(update.status.state),
                    _ => None,
                },
                frame: matches!(event.body, EventBody::Frame(_)),
                framing,
            },
            None => Read::Delivery(Delivery::Event(Event::clone(&event))),
        }))
    }

    /// Keeps the door's framing of the last event this reader delivered
    /// (see [`EventLog::keep_framed`]); any other id is ignored.
    pub fn keep_framed(&mut self, id: u64, sse: Vec<u8>, request_id_at: usize) {
        if self.delivered == Some(id) {
            self.log.keep_framed(id, self.version, sse, request_id_at);
        }
    }

    /// Whether [`Reader::next_delivery`] has something to return. Also true
    /// after `closed`, so a stream waiting on an ended reader is not left
    /// waiting forever.
    pub fn ready_now(&mut self) -> bool {
        if self.cursor.ended {
            return true;
        }
        let buffer = self.log.lock();
        !matches!(self.cursor.peek(&buffer), Next::Nothing)
    }

    /// Resolves once [`Reader::next_delivery`] has something to return.
    /// Cancel-safe.
    pub async fn wait(&mut self) {
        loop {
            // Marked seen before looking: a publish after the look wakes us.
            self.wake.borrow_and_update();
            if self.ready_now() {
                return;
            }
            if self.wake.changed().await.is_err() {
                // The log is gone; it cannot be while we hold it, but never
                // wait on nothing.
                return;
            }
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.log.readers.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
pub(crate) mod tests;
