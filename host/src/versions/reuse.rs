//! Answers a door version declared reusable (`murmur:door/answer`'s
//! `reusable`: a GetTask or ListTasks result; `reusable-file`: a file of
//! the operator plane), kept and sent again without an instance while what
//! they depend on holds (`--reuse-bytes`).
//!
//! An answer is kept under its request: the method, the path and every
//! header line as sent (`content-length` aside, which the body fixes), the
//! client's address on a public door (on an authenticated one, its
//! `Authorization` line says who is asking), and the body with its JSON-RPC
//! id cut out. A repeat is sent the same bytes with its own id in place
//! while
//! - no write to the store since the door read it changed a task it read,
//!   nor any task, for a page of the listing
//!   ([`crate::session::tasks::store::writes`]);
//! - no member token was minted or revoked since it verified a token;
//! - the session is not closing;
//! - its door version is live: each version keeps its own answers, and a
//!   swap, a rollback or a trap of the version drops them;
//! - for a file, its path, opened again beneath the workdir with no link
//!   followed (`openat2`), reaches the very file the door read: the same
//!   device, inode, size and last change to the nanosecond. Its bytes are
//!   read then, from that file.
//!
//! The host never guesses what an answer depends on: it keeps only what the
//! door declared, and only when the door did nothing beside reading a task,
//! a page and a token (no write, no wait, no stream, no refusal of a task,
//! no question of whether the session closes). Only a request whose body is
//! whole in at most [`MAX_BODY`] bytes, a JSON object with a valid id (a
//! string or an integer), is kept or looked up.
//!
//! What it costs: at most `--reuse-bytes` per capsule ([`REUSE_BYTES`]),
//! counting each answer's request key, head, body and bookkeeping, and the
//! copy of each distinct request head the lookup reads; the oldest answer
//! kept goes first. The host reads a body before the door only when the
//! live version keeps an answer for a request of the same head (method,
//! path, header lines, client), so a caller whose token is refused (it has
//! no answer kept) is refused before its body as without; the door then
//! reads the host's copy. While lookups mostly miss, one request in
//! [`SAMPLE`] is looked up, and only the answers of requests looked up are
//! kept, each only the second time its request is looked up and missed, so
//! a poll that never finds its answer costs what it costs with nothing
//! kept, and answers never asked again do not churn the kept answers; until an
//! answer is kept, no request is looked up at all.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{BufMut, Bytes, BytesMut};
use hyper::http::request::Parts;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use http_body_util::{BodyExt, Full};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::imports::response_stream;
use crate::imports::{Declared, Depends, FileDeclared, Reads};
use crate::manifest::planes::Planes;
use crate::sandbox::one_call::declared_length;
use crate::session::Session;

/// Bytes of answers a door version keeps, by default (`--reuse-bytes`).
pub const REUSE_BYTES: usize = 4 << 20;
/// The largest request body kept or looked up: a GetTask or ListTasks is a
/// few hundred bytes.
pub const MAX_BODY: usize = 4 << 10;
/// Bytes an answer is counted for beyond what it holds on the heap: the
/// entry, its key's place in the map and its pointer's counts, and the two
/// places in the order it may take (kept again, it leaves a stale one).
const ENTRY_BYTES: usize = size_of::<Entry>()
    + size_of::<Arc<[u8]>>()
    + 2 * size_of::<usize>()
    + 2 * size_of::<(Arc<[u8]>, u64)>()
    + MAP_SLOT;
/// A map's own bytes for a pair beyond the pair: its control byte, and the
/// room a map keeps free, at most an eighth.
const MAP_SLOT: usize = 8;
/// Bytes a distinct request head is counted for beyond its own: the copy
/// the lookup reads is a map's key (see [`Answers::heads`]).
const HEAD_BYTES: usize = size_of::<(Vec<u8>, usize)>() + MAP_SLOT;
/// A version looks up every request that may be a repeat while at least
/// one lookup in this many lately found its answer: below that, a lookup
/// and the answer kept after a miss (about 7 µs together, against the
/// 30 µs a hit saves) cost more than the hits save.
const FOUND: u64 = 4;
/// While a version's lookups mostly miss (every poll finds its task
/// changed, or every request is new), it looks up one request in this
/// many: a poll that finds nothing then costs what it costs with nothing
/// kept, within a few tenths of a microsecond, and the first repeats found
/// open the way again.
const SAMPLE: u64 = 32;
/// Lookups counted before the counts are halved, so the rate follows what
/// the clients do now.
const WINDOW: u64 = 1024;
/// Requests remembered (by their key's hash, a slot each) as looked up one
/// in [`SAMPLE`] and missed: such a request's answer is kept the second
/// time it is seen.
const SEEN: usize = 64;

/// How answers were reused, across a door's versions.
#[derive(Debug, Default)]
pub struct ReuseCounts {
    /// Requests answered with a kept answer.
    pub hits: AtomicU64,
    /// Requests looked up and not found.
    pub misses: AtomicU64,
    /// Answers kept.
    pub kept: AtomicU64,
    /// Answers dropped: what they read changed, their version was swapped
    /// out or trapped, the session closed, or room was needed.
    pub dropped: AtomicU64,
}

/// One door version's kept answers.
#[derive(Debug)]
pub struct Reuse {
    max_bytes: AtomicUsize,
    answers: Mutex<Answers>,
    counts: Arc<ReuseCounts>,
    /// Requests looked up lately, and how many of them were found (see
    /// [`SAMPLE`]): written only by lookups, so a request not looked up
    /// reads them and writes nothing another thread reads.
    looked: AtomicU64,
    recent_hits: AtomicU64,
    /// Whether any answer is kept, as of its last unlock: read
    /// without the lock by every request.
    held: AtomicBool,
}

#[derive(Debug, Default)]
struct Answers {
    entries: HashMap<Arc<[u8]>, Entry>,
    /// Keys oldest first, with the generation they were kept at: a key
    /// kept again, or dropped, leaves a stale pair that eviction skips.
    order: VecDeque<(Arc<[u8]>, u64)>,
    /// The heads of the requests kept, and how many of each: a request of
    /// another head is never a repeat, and its body is not read before the
    /// door (a caller refused a token is refused at once, as without). A
    /// head is a copy, up to `--max-header-bytes`: each distinct one counts
    /// in `bytes` ([`head_bytes`]) while an answer holds it.
    heads: HashMap<Vec<u8>, usize>,
    /// The entries' bytes and the heads'.
    bytes: usize,
    generation: u64,
    /// The hashes of requests sampled and missed, by slot ([`SEEN`]).
    seen: Vec<u64>,
}

impl Answers {
    /// Whether the request of `key` was seen (sampled and missed) before;
    /// it is remembered as seen now, in a slot another may take.
    fn seen_again(&mut self, key: &[u8]) -> bool {
        let hash = self.entries.hasher().hash_one(key);
        if self.seen.is_empty() {
            self.seen = vec![0; SEEN];
        }
        let slot = &mut self.seen[hash as usize % SEEN];
        let again = *slot == hash;
        *slot = hash;
        again
    }

    /// Drops the answer kept under `key`, if it is the one of `generation`
    /// (any, when None): whether it was there.
    fn remove(&mut self, key: &[u8], generation: Option<u64>) -> bool {
        // One look in the map: an answer kept again since is put back.
        let Some((kept, entry)) = self.entries.remove_entry(key) else {
            return false;
        };
        if generation.is_some_and(|g| g != entry.generation) {
            self.entries.insert(kept, entry);
            return false;
        }
        self.bytes -= entry.bytes;
        let head = &key[..entry.head];
        if let Some(count) = self.heads.get_mut(head) {
            *count -= 1;
            if *count == 0 {
                self.heads.remove(head);
                self.bytes -= head_bytes(head);
            }
        }
        true
    }

    /// One more answer of `head`.
    fn add_head(&mut self, head: &[u8]) {
        match self.heads.get_mut(head) {
            Some(count) => *count += 1,
            None => {
                self.heads.insert(head.to_vec(), 1);
                self.bytes += head_bytes(head);
            }
        }
    }
}

/// What `strings` hold, with their own bytes.
fn strings_bytes<'a>(strings: impl IntoIterator<Item = &'a String>) -> usize {
    strings
        .into_iter()
        .map(|s| size_of::<String>() + s.len())
        .sum()
}

/// What the kept answers' copy of a distinct request head costs.
fn head_bytes(head: &[u8]) -> usize {
    HEAD_BYTES + head.len()
}

#[derive(Debug)]
struct Entry {
    status: u16,
    headers: Vec<(String, String)>,
    /// The body before and after the id.
    before: Bytes,
    after: Bytes,
    /// The store's version it is known to hold at.
    since: u64,
    tasks: Vec<String>,
    listing: bool,
    /// The tokens' version when it verified one.
    tokens: Option<u64>,
    bytes: usize,
    generation: u64,
    /// How much of its key is its request's head.
    head: usize,
    /// The file it was made of, for a file's answer.
    file: Option<KeptFile>,
}

/// The file a file's answer was made of, as the host found it when it kept
/// the answer: a repeat is answered while the same path reaches the same
/// file, of the same size and last change.
#[derive(Clone, Debug)]
struct KeptFile {
    path: Vec<String>,
    identity: FileIdentity,
    /// The range of it the body is; None for a whole answer (a HEAD, a
    /// 304), sent as kept.
    range: Option<(u64, u64)>,
}

/// What a file's answer depends on of the file: its device and inode, and
/// its size and last change to the nanosecond.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileIdentity {
    device: u64,
    inode: u64,
    size: u64,
    modified: (u64, u32),
}

impl FileIdentity {
    fn of(stat: &rustix::fs::Stat) -> Option<FileIdentity> {
        Some(FileIdentity {
            device: stat.st_dev,
            inode: stat.st_ino,
            size: u64::try_from(stat.st_size).ok()?,
            modified: (
                u64::try_from(stat.st_mtime).ok()?,
                u32::try_from(stat.st_mtime_nsec).ok()?,
            ),
        })
    }
}

/// The file `declared` names, found again by its path as a repeat will
/// find it, when it is the file the door read: the size and last change
/// the door saw, and the very file it opened for the bytes it sent.
fn found(planes: &Planes, declared: &FileDeclared) -> Option<FileIdentity> {
    let (_, stat) = planes.open_file(&declared.path)?;
    let identity = FileIdentity::of(&stat)?;
    let seen = (identity.size, identity.modified) == (declared.size, declared.modified);
    let opened = match &declared.sent {
        Some(sent) => FileIdentity::of(&rustix::fs::fstat(&*sent.file).ok()?)?,
        None => identity,
    };
    (seen && opened == identity).then_some(identity)
}

/// A request's head as the kept answers know it: its method, path and
/// header lines (but `content-length`), and the client on a public door.
#[derive(Debug, PartialEq)]
pub struct Head(Vec<u8>);

impl Head {
    /// The head of `parts` from `client` (None on an authenticated door).
    pub fn of(parts: &Parts, client: Option<IpAddr>) -> Head {
        let mut key = Vec::with_capacity(512);
        key.extend_from_slice(parts.method.as_str().as_bytes());
        key.push(0);
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        key.extend_from_slice(path.as_bytes());
        key.push(0);
        for (name, value) in &parts.headers {
            if name == hyper::header::CONTENT_LENGTH {
                continue;
            }
            key.extend_from_slice(name.as_str().as_bytes());
            key.push(0);
            key.extend_from_slice(value.as_bytes());
            key.push(0);
        }
        key.push(0xff);
        if let Some(client) = client {
            key.extend_from_slice(client.to_string().as_bytes());
        }
        key.push(0xff);
        Head(key)
    }
}

/// A request as the kept answers know it.
#[derive(Debug, PartialEq)]
pub struct Request {
    /// Its head, then its body with the id cut out (and where it was).
    key: Vec<u8>,
    /// How much of `key` is the head.
    head: usize,
    /// Its JSON-RPC id, as the door writes it.
    id: Vec<u8>,
}

impl Request {
    /// `parts` and `body` from `client` (None on an authenticated door),
    /// or None when such a request is never reused: a body past
    /// [`MAX_BODY`], not a JSON object, or without a valid id.
    pub fn of(parts: &Parts, client: Option<IpAddr>, body: &[u8]) -> Option<Request> {
        Request::with_head(Head::of(parts, client), body)
    }

    /// The request of `head` and `body`, as [`Request::of`].
    pub fn with_head(Head(mut key): Head, body: &[u8]) -> Option<Request> {
        if body.len() > MAX_BODY {
            return None;
        }
        let (at, len, id) = id_of(body)?;
        let head = key.len();
        key.extend_from_slice(&(at as u64).to_le_bytes());
        key.extend_from_slice(&body[..at]);
        key.extend_from_slice(&body[at + len..]);
        Some(Request { key, head, id })
    }
}

impl Request {
    /// A request without a body (a GET or HEAD of a plane's file), as
    /// [`Request::of`].
    pub fn bodiless(Head(mut key): Head) -> Request {
        let head = key.len();
        key.push(0xfe);
        Request {
            key,
            head,
            id: Vec::new(),
        }
    }
}

/// Where a JSON-RPC request's id is in `body` (its first byte and length,
/// as sent) and the id as the door writes it, when the body is a JSON
/// object whose `id` is a string or an integer. The object's last `id`
/// counts, as the door reads it.
fn id_of(body: &[u8]) -> Option<(usize, usize, Vec<u8>)> {
    let IdMember(raw) = serde_json::from_slice(body).ok()?;
    let raw = raw?.get();
    let at = (raw.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    let id: serde_json::Value = serde_json::from_str(raw).ok()?;
    let valid = match &id {
        serde_json::Value::String(_) => true,
        serde_json::Value::Number(n) => n.is_i64() || n.is_u64(),
        _ => false,
    };
    if !valid || at + raw.len() > body.len() {
        return None;
    }
    Some((at, raw.len(), serde_json::to_vec(&id).ok()?))
}

/// A JSON object's last `id` member, as sent; every other member skipped
/// without being kept.
struct IdMember<'a>(Option<&'a RawValue>);

impl<'de: 'a, 'a> Deserialize<'de> for IdMember<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(IdVisitor(std::marker::PhantomData))
    }
}

struct IdVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for IdVisitor<'a> {
    type Value = IdMember<'a>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<IdMember<'a>, M::Error> {
        let mut id = None;
        while let Some(IsId(is_id)) = map.next_key()? {
            match is_id {
                true => id = Some(map.next_value::<&'de RawValue>()?),
                false => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(IdMember(id))
    }
}

/// Whether a member's name is `id`, escaped or not, read without keeping it.
struct IsId(bool);

impl<'de> Deserialize<'de> for IsId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(IsIdVisitor)
    }
}

struct IsIdVisitor;

impl Visitor<'_> for IsIdVisitor {
    type Value = IsId;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, name: &str) -> Result<IsId, E> {
        Ok(IsId(name == "id"))
    }
}

/// How a request that may be a repeat is looked up ([`Reuse::samples`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// As every such request is, while lookups lately find answers: the
    /// answer of one not found is kept.
    Every,
    /// As one in [`SAMPLE`] is, while lookups mostly miss: the answer of
    /// one not found is kept the second time the request is seen, so
    /// answers never asked again (every request new) are not kept.
    Sampled,
}

/// What an answer the door declares reusable is kept under: the client on
/// a public door, and the request, when the host read its body already.
#[derive(Debug, Default)]
pub struct ReuseKey {
    /// The client's address on a public door; None on an authenticated one.
    pub client: Option<IpAddr>,
    /// The request, when the host looked it up before the door ran.
    pub request: Option<Request>,
    /// Its head, when the host made it before the door ran.
    pub head: Option<Head>,
    /// How it was looked up, when it was.
    pub lookup: Option<Lookup>,
}

impl ReuseKey {
    /// Whether the request was looked up (its head made, or found with an
    /// answer kept under it) before the door ran.
    pub fn looked_up(&self) -> bool {
        self.lookup.is_some()
    }

    /// The request as looked up, or made of `parts` and the body the door
    /// read (a GET or HEAD without one, when it read none).
    pub fn request(self, parts: &Parts, body: Option<&Bytes>) -> Option<Request> {
        let ReuseKey {
            client,
            request,
            head,
            lookup: _,
        } = self;
        request.or_else(|| {
            let head = || head.unwrap_or_else(|| Head::of(parts, client));
            match body {
                Some(body) => Request::with_head(head(), body),
                None => bodiless(parts).then(|| Request::bodiless(head())),
            }
        })
    }
}

/// Whether `parts` is a GET or HEAD that declares no body: such a request
/// is all head.
pub fn bodiless(parts: &Parts) -> bool {
    let headers = &parts.headers;
    matches!(parts.method, hyper::Method::GET | hyper::Method::HEAD)
        && !headers.contains_key(hyper::header::TRANSFER_ENCODING)
        && headers
            .get(hyper::header::CONTENT_LENGTH)
            .is_none_or(|length| length.as_bytes() == b"0")
}

/// A kept answer, as sent again.
pub struct Reused {
    /// Its status.
    pub status: u16,
    /// Its header lines.
    pub headers: Vec<(String, String)>,
    /// Its body: bytes with the repeat's id, or a range of a file.
    pub body: ReusedBody,
}

/// The body of a kept answer, as sent again.
pub enum ReusedBody {
    /// Its bytes, and the length its `content-length` names (a HEAD's
    /// names its GET's).
    Bytes(Bytes, usize),
    /// `length` bytes of `file` from `offset`, read as they are sent.
    File(Arc<std::fs::File>, u64, u64),
}

impl Reused {
    /// The response that sends it, or None when its head is refused (then
    /// the door answers).
    pub fn response(self) -> Option<hyper::Response<HyperOutgoingBody>> {
        let (length, body) = match self.body {
            ReusedBody::Bytes(bytes, length) => (
                length,
                Full::new(bytes)
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            ),
            ReusedBody::File(file, offset, length) => (
                usize::try_from(length).ok()?,
                response_stream::file_bytes(file, offset, length),
            ),
        };
        response_stream::response(self.status, self.headers, Some(length), body).ok()
    }
}

impl Reuse {
    /// Keeps at most `max_bytes` of answers, counted in `counts`.
    pub fn new(max_bytes: usize, counts: Arc<ReuseCounts>) -> Reuse {
        Reuse {
            max_bytes: AtomicUsize::new(max_bytes),
            answers: Mutex::default(),
            counts,
            looked: AtomicU64::new(0),
            recent_hits: AtomicU64::new(0),
            held: AtomicBool::new(false),
        }
    }

    /// Keeps at most `max_bytes` from now on (0: none).
    pub fn set_max_bytes(&self, max_bytes: usize) {
        self.max_bytes.store(max_bytes, Ordering::Relaxed);
        let mut answers = self.lock();
        self.evict(&mut answers);
    }

    /// Keeps nothing from now on, and drops what it kept: a version swapped
    /// out, whose requests still in flight would otherwise keep answers no
    /// one looks up, beside the live version's `--reuse-bytes`.
    pub fn retire(&self) {
        self.set_max_bytes(0);
    }

    /// Bytes of answers kept now (at most `--reuse-bytes`).
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Whether any answer is kept: until one is, no request is looked up
    /// and its head is not made for it.
    pub fn holds_any(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }

    /// Whether and how a request that may be a repeat is looked up: every
    /// one while at least one lookup in [`FOUND`] lately found its answer,
    /// one in [`SAMPLE`] (counted by each thread) while they mostly miss
    /// (every poll finds its task changed, or every request is new). Asked
    /// before the request's head is made: a request not looked up reads two
    /// counts and adds to one of its thread's own.
    pub fn samples(&self) -> Option<Lookup> {
        thread_local! {
            static PASSED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
        }
        let looked = self.looked.load(Ordering::Relaxed);
        let hits = self.recent_hits.load(Ordering::Relaxed);
        // The first few of a version are all looked up.
        let lookup = if (hits + 1) * FOUND > looked {
            Lookup::Every
        } else {
            let n = PASSED.with(|passed| {
                let n = passed.get() + 1;
                passed.set(n);
                n
            });
            match n.is_multiple_of(SAMPLE) {
                true => Lookup::Sampled,
                false => return None,
            }
        };
        let looked = self.looked.fetch_add(1, Ordering::Relaxed) + 1;
        if looked >= WINDOW {
            self.looked.store(looked / 2, Ordering::Relaxed);
            self.recent_hits.store(hits / 2, Ordering::Relaxed);
        }
        Some(lookup)
    }

    /// Whether an answer is kept for a request of `head`: only then is a
    /// body read before the door, so a caller refused a token (it has no
    /// answer kept) is refused before its body, as without.
    pub fn looks_up(&self, head: &Head) -> bool {
        self.lock().heads.contains_key(&head.0)
    }

    /// Whether an answer the door just declared reusable is kept: when its
    /// request was looked up ([`Reuse::samples`]: every one while lookups
    /// lately found answers, one in [`SAMPLE`] while they mostly miss), or
    /// nothing is kept yet. Keeping what is never asked again then costs
    /// little, and a request not looked up costs nothing here.
    pub fn keeps(&self, looked_up: bool) -> bool {
        self.max_bytes.load(Ordering::Relaxed) != 0 && (looked_up || !self.holds_any())
    }

    /// The answer kept for `request`, with its id, if it still holds.
    pub fn reused(&self, request: &Request, session: &Session) -> Option<Reused> {
        let mut answers = self.lock();
        let Some(entry) = answers.entries.get_mut(request.key.as_slice()) else {
            self.counts.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        if session.tasks.closing() {
            drop(answers);
            self.clear();
            self.counts.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let tokens_hold = entry
            .tokens
            .is_none_or(|since| since == session.tokens.version());
        let writes = session.tasks.store().writes();
        match writes
            .unchanged(entry.since, &entry.tasks, entry.listing)
            .filter(|_| tokens_hold)
        {
            Some(now) => entry.since = now,
            None => return self.dropped(answers, request, None),
        }
        let (status, headers) = (entry.status, entry.headers.clone());
        let Some(file) = entry.file.clone() else {
            let body = self.spliced(entry, &request.id);
            let length = body.len();
            // The id's length may differ from the one the door wrote.
            let headers = with_length(headers, length);
            return Some(Reused {
                status,
                headers,
                body: ReusedBody::Bytes(body, length),
            });
        };
        let generation = entry.generation;
        // The file is looked at without the answers locked.
        drop(answers);
        let found = session.planes.open_file(&file.path).filter(|(_, stat)| {
            FileIdentity::of(stat).is_some_and(|identity| identity == file.identity)
        });
        let Some((opened, _)) = found else {
            return self.dropped(self.lock(), request, Some(generation));
        };
        self.counts.hits.fetch_add(1, Ordering::Relaxed);
        self.recent_hits.fetch_add(1, Ordering::Relaxed);
        let body = match file.range {
            Some((offset, length)) => ReusedBody::File(Arc::new(opened), offset, length),
            // A HEAD names its GET's length; a 304 names none.
            None => ReusedBody::Bytes(Bytes::new(), declared_length(&headers).unwrap_or(0)),
        };
        Some(Reused {
            status,
            headers,
            body,
        })
    }

    /// `entry`'s body with `id` in place of the door's, counted a hit.
    fn spliced(&self, entry: &Entry, id: &[u8]) -> Bytes {
        let mut body = BytesMut::with_capacity(entry.before.len() + id.len() + entry.after.len());
        body.put_slice(&entry.before);
        body.put_slice(id);
        body.put_slice(&entry.after);
        self.counts.hits.fetch_add(1, Ordering::Relaxed);
        self.recent_hits.fetch_add(1, Ordering::Relaxed);
        body.freeze()
    }

    /// Drops the answer kept for `request` (when it is still the one of
    /// `generation`), which no longer holds: a miss.
    fn dropped(
        &self,
        mut answers: Locked<'_>,
        request: &Request,
        generation: Option<u64>,
    ) -> Option<Reused> {
        if answers.remove(&request.key, generation) {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
        self.counts.misses.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Keeps `declared`, the answer to `request`, when the door's `reads`
    /// let it stand for a repeat and what it depends on is as the door
    /// says: the id it names is the request's, or the file it names is the
    /// one it read (found again in `planes`). A request looked up as
    /// [`Lookup::Sampled`] has its answer kept only the second time it is
    /// seen. Whether it was kept.
    pub fn keep(
        &self,
        request: Request,
        declared: Declared,
        reads: Reads,
        planes: &Planes,
        lookup: Option<Lookup>,
    ) -> bool {
        let store_read = !reads.tasks.is_empty() || reads.listing;
        if reads.other || store_read && reads.tasks_since.is_none() {
            return false;
        }
        let (before, after, file) = match &declared.depends {
            Depends::Id { at, len } => {
                let id = declared.body.get(*at..at.saturating_add(*len));
                if declared.status != 200 || id != Some(request.id.as_slice()) {
                    return false;
                }
                (
                    declared.body.slice(..*at),
                    declared.body.slice(at + len..),
                    None,
                )
            }
            Depends::File(file) => {
                if !matches!(declared.status, 200 | 206 | 304) || !request.id.is_empty() {
                    return false;
                }
                let Some(identity) = found(planes, file) else {
                    return false;
                };
                let range = file.sent.as_ref().map(|sent| (sent.offset, sent.length));
                let path = file.path.clone();
                (
                    declared.body.clone(),
                    Bytes::new(),
                    Some(KeptFile {
                        path,
                        identity,
                        range,
                    }),
                )
            }
        };
        let head = strings_bytes(declared.headers.iter().flat_map(|(n, v)| [n, v]));
        let path = file.as_ref().map_or(0, |f| strings_bytes(&f.path));
        let tasks = strings_bytes(&reads.tasks);
        let bytes = ENTRY_BYTES + request.key.len() + head + declared.body.len() + path + tasks;
        let max = self.max_bytes.load(Ordering::Relaxed);
        // Its request's head counted too, as when it is the first of it.
        if bytes + head_bytes(&request.key[..request.head]) > max / 8 {
            return false;
        }
        let mut answers = self.lock();
        if lookup == Some(Lookup::Sampled) && !answers.seen_again(&request.key) {
            return false;
        }
        answers.generation += 1;
        let generation = answers.generation;
        let entry = Entry {
            status: declared.status,
            headers: declared.headers,
            before,
            after,
            since: reads.tasks_since.unwrap_or(0),
            tasks: reads.tasks,
            listing: reads.listing,
            tokens: reads.tokens_since,
            bytes,
            generation,
            head: request.head,
            file,
        };
        answers.remove(&request.key, None);
        let key: Arc<[u8]> = request.key.into();
        answers.add_head(&key[..request.head]);
        answers.entries.insert(key.clone(), entry);
        answers.bytes += bytes;
        answers.order.push_back((key, generation));
        self.evict(&mut answers);
        self.counts.kept.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Drops every answer kept.
    pub fn clear(&self) {
        let mut answers = self.lock();
        let dropped = answers.entries.len() as u64;
        *answers = Answers {
            generation: answers.generation,
            ..Answers::default()
        };
        self.counts.dropped.fetch_add(dropped, Ordering::Relaxed);
    }

    /// Drops the oldest answers until what is kept fits.
    fn evict(&self, answers: &mut Answers) {
        let max = self.max_bytes.load(Ordering::Relaxed);
        while answers.bytes > max {
            let Some((key, generation)) = answers.order.pop_front() else {
                break;
            };
            if answers.remove(&key, Some(generation)) {
                self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Pairs left by answers kept again or dropped: never more than
        // there are answers, and a few.
        if answers.order.len() > 2 * answers.entries.len() + 64 {
            let entries = &answers.entries;
            let live = |(key, generation): &(Arc<[u8]>, u64)| {
                entries
                    .get(key)
                    .is_some_and(|e| e.generation == *generation)
            };
            let order = answers.order.drain(..).filter(live).collect();
            answers.order = order;
        }
    }

    fn lock(&self) -> Locked<'_> {
        Locked {
            answers: self.answers.lock().unwrap_or_else(|p| p.into_inner()),
            held: &self.held,
        }
    }
}

/// The answers, locked; on unlock, [`Reuse::holds_any`] learns whether it
/// holds an answer.
struct Locked<'a> {
    answers: std::sync::MutexGuard<'a, Answers>,
    held: &'a AtomicBool,
}

impl std::ops::Deref for Locked<'_> {
    type Target = Answers;
    fn deref(&self) -> &Answers {
        &self.answers
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Answers {
        &mut self.answers
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.held
            .store(!self.answers.entries.is_empty(), Ordering::Relaxed);
    }
}

/// `headers` with their `content-length` naming `length`.
fn with_length(headers: Vec<(String, String)>, length: usize) -> Vec<(String, String)> {
    let length = length.to_string();
    headers
        .into_iter()
        .map(
            |(name, value)| match name.eq_ignore_ascii_case("content-length") {
                true => (name, length.clone()),
                false => (name, value),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut request = hyper::Request::post("/");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    fn key(body: &str) -> Option<Request> {
        Request::of(&parts(&[("a2a-version", "1.0")]), None, body.as_bytes())
    }

    /// A repeat is the same request but for its id; anything else differs.
    #[test]
    fn a_repeat_differs_only_in_its_id() {
        let one = key(r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"t"}}"#);
        let two = key(r#"{"jsonrpc":"2.0","id":"2x","method":"GetTask","params":{"id":"t"}}"#);
        let (one, two) = (one.unwrap(), two.unwrap());
        assert_eq!(one.key, two.key);
        assert_eq!(
            (one.id.as_slice(), two.id.as_slice()),
            (&b"1"[..], &br#""2x""#[..])
        );
        let other = key(r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"u"}}"#);
        assert_ne!(other.unwrap().key, one.key);
        // Headers and the client count; content-length does not.
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"GetTask"}"#;
        let bob = Request::of(&parts(&[("authorization", "Bearer b")]), None, body).unwrap();
        let alice = Request::of(&parts(&[("authorization", "Bearer a")]), None, body).unwrap();
        assert_ne!(bob.key, alice.key);
        let here = Request::of(&parts(&[]), Some([10, 0, 0, 1].into()), body).unwrap();
        let there = Request::of(&parts(&[]), Some([10, 0, 0, 2].into()), body).unwrap();
        assert_ne!(here.key, there.key);
        let sized = Request::of(&parts(&[("content-length", "44")]), None, body).unwrap();
        assert_eq!(sized.key, Request::of(&parts(&[]), None, body).unwrap().key);
    }

    fn declared(body: &str) -> Declared {
        Declared {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: Bytes::copy_from_slice(body.as_bytes()),
            depends: Depends::Id { at: 6, len: 1 },
        }
    }

    fn read_nothing() -> Reads {
        Reads {
            tasks_since: Some(0),
            ..Reads::default()
        }
    }

    /// While lookups mostly miss, a request looked up as one of a sample has
    /// its answer kept only the second time it is seen: answers never asked
    /// again do not churn the answers. One looked up as every request is has
    /// it kept at once.
    #[test]
    fn a_sampled_request_is_kept_the_second_time_it_is_seen() {
        let reuse = Reuse::new(REUSE_BYTES, Arc::default());
        let planes = Planes::default();
        let body = r#"{"id":1,"method":"GetTask","params":{"id":"t"}}"#;
        let keep = |lookup| {
            let request = key(body).unwrap();
            reuse.keep(
                request,
                declared(r#"{"id":1}"#),
                read_nothing(),
                &planes,
                lookup,
            )
        };
        assert!(!keep(Some(Lookup::Sampled)));
        assert!(!reuse.holds_any());
        assert!(keep(Some(Lookup::Sampled)));
        assert!(reuse.holds_any());
        let other = r#"{"id":1,"method":"GetTask","params":{"id":"u"}}"#;
        let request = key(other).unwrap();
        let kept = reuse.keep(
            request,
            declared(r#"{"id":1}"#),
            read_nothing(),
            &planes,
            Some(Lookup::Every),
        );
        assert!(kept);
        assert_eq!(reuse.counts.kept.load(Ordering::Relaxed), 2);
    }

    /// What the kept answers hold by their own count: every answer's
    /// bytes, and each distinct head's copy.
    fn counted(answers: &Answers) -> usize {
        let bodies: usize = answers.entries.values().map(|e| e.bytes).sum();
        let heads: usize = answers.heads.keys().map(|head| head_bytes(head)).sum();
        bodies + heads
    }

    /// A client asking many different requests twice each (so every one
    /// is kept) holds at most the kept answers' bytes: the oldest answers give way,
    /// an answer over an eighth of them is not kept, and a version retired
    /// by a swap keeps nothing until it is live again (docs/operations.md,
    /// "What a client can make the host hold"). Issue 47: the copies of
    /// the requests' heads count too, so requests of large distinct heads
    /// hold their keys and heads within the bytes, not twice them.
    #[test]
    fn kept_answers_stay_within_their_bytes() {
        let max = 16 << 10;
        let reuse = Reuse::new(max, Arc::default());
        let planes = Planes::default();
        let filler = "x".repeat(200);
        let keep = |page: usize, answer: &str| {
            let body = format!(r#"{{"id":1,"method":"ListTasks","params":{{"pageSize":{page}}}}}"#);
            let answer = format!(r#"{{"id":1,"result":"{answer}"}}"#);
            let request = key(&body).unwrap();
            let lookup = Some(Lookup::Every);
            reuse.keep(request, declared(&answer), read_nothing(), &planes, lookup)
        };
        for page in 0..2_000 {
            assert!(keep(page, &filler));
            // Some kept again: the pairs they leave in the order are swept.
            assert!(keep(page / 2, &filler));
            let answers = reuse.lock();
            assert_eq!(answers.bytes, counted(&answers));
            assert!(answers.bytes <= max, "{} bytes kept", answers.bytes);
            assert!(answers.order.len() <= 2 * answers.entries.len() + 65);
            assert!(answers.heads.values().sum::<usize>() == answers.entries.len());
        }
        let held = reuse.bytes();
        assert!(held > max / 2, "{held}");
        let dropped = reuse.counts.dropped.load(Ordering::Relaxed);
        assert!(dropped > 2_500, "{dropped} dropped, {held} held");

        assert!(!keep(1, &"x".repeat(max / 8)));
        assert_eq!(reuse.bytes(), held);

        // Distinct heads of 512 bytes each: what they hold on the heap, each
        // head in its key and in its copy, is within the bytes.
        let body = r#"{"id":1,"method":"ListTasks","params":{}}"#;
        for n in 0..200 {
            let pad = format!("{n:04}{}", "p".repeat(508));
            let parts = parts(&[("a2a-version", "1.0"), ("x-pad", &pad)]);
            let request = Request::of(&parts, None, body.as_bytes()).unwrap();
            let lookup = Some(Lookup::Every);
            let answer = declared(r#"{"id":1,"result":{}}"#);
            assert!(reuse.keep(request, answer, read_nothing(), &planes, lookup));
            let answers = reuse.lock();
            assert_eq!(answers.bytes, counted(&answers));
            let keys: usize = answers.entries.keys().map(|key| key.len()).sum();
            let heads: usize = answers.heads.keys().map(Vec::len).sum();
            assert!(keys + heads <= max, "{keys} + {heads} bytes of heads");
            assert!(answers.bytes <= max, "{} bytes kept", answers.bytes);
        }
        // The last of them are kept, each with its own head.
        let answers = reuse.lock();
        assert_eq!(answers.heads.len(), answers.entries.len());
        assert!(answers.entries.len() >= 6, "{} kept", answers.entries.len());
        drop(answers);

        reuse.retire();
        assert_eq!((reuse.bytes(), reuse.holds_any()), (0, false));
        assert!(!reuse.keeps(true));
        assert!(!keep(1, &filler));
        reuse.set_max_bytes(max);
        assert!(reuse.keeps(true));
        assert!(keep(1, &filler));
    }

    /// Every request is looked up while at least one lookup in FOUND finds
    /// its answer, and one in SAMPLE once they all miss.
    #[test]
    fn lookups_thin_out_while_they_miss() {
        let reuse = Reuse::new(REUSE_BYTES, Arc::default());
        let lookups: Vec<_> = (0..4 * WINDOW).map(|_| reuse.samples()).collect();
        let first = &lookups[..FOUND as usize];
        assert!(first.iter().all(|l| *l == Some(Lookup::Every)));
        let later = &lookups[2 * WINDOW as usize..];
        let sampled = later
            .iter()
            .filter(|l| **l == Some(Lookup::Sampled))
            .count();
        assert_eq!(sampled, later.len() / SAMPLE as usize);
        assert!(!later.contains(&Some(Lookup::Every)));
        // Found answers bring every request back.
        reuse
            .recent_hits
            .store(reuse.looked.load(Ordering::Relaxed), Ordering::Relaxed);
        assert_eq!(reuse.samples(), Some(Lookup::Every));
    }

    /// The id as the door writes it back: escapes resolved, the last of two.
    #[test]
    fn the_id_is_the_one_the_door_reads() {
        let id = |body: &str| key(body).map(|r| String::from_utf8(r.id).unwrap());
        assert_eq!(id(r#"{"id":"a\u0041"}"#).as_deref(), Some(r#""aA""#));
        assert_eq!(id(r#"{"id":1,"id":2}"#).as_deref(), Some("2"));
        assert_eq!(id(r#"{"\u0069d":7}"#).as_deref(), Some("7"));
        for refused in [
            r#"{"id":1.5}"#,
            r#"{"id":null}"#,
            r#"{"id":[1]}"#,
            "[1]",
            "{",
            r#"{"x":1}"#,
        ] {
            assert_eq!(key(refused), None, "{refused}");
        }
        assert_eq!(
            key(&format!(r#"{{"id":1,"p":"{}"}}"#, "x".repeat(MAX_BODY))),
            None
        );
    }
}
