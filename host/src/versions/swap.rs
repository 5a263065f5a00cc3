//! The live door and the one before it. Each request takes the live door
//! lock-free and holds it until its response body ends, so a stream opened
//! on one version finishes on it; a swap compiles and tries the new version
//! off the request path, replaces the live door atomically and keeps the
//! one it replaced for a rollback.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use serde_json::{Value, json};

use crate::imports::events::FrameEvents;
use crate::sandbox::cpu;
use crate::sandbox::engine::{Door, DoorEngine};
use crate::sandbox::framing::Framer;
use crate::sandbox::idle::Idle;
use crate::sandbox::request::Stores;
use crate::session::tasks;
use crate::versions::card::KeptCard;
use crate::versions::reuse::{REUSE_BYTES, Reuse, ReuseCounts};

/// Where a door's component came from: `embedded`, a file's path, or
/// `upload` (bytes sent to the control surface).
pub type Source = String;

/// The source of the door built into the binary.
pub const EMBEDDED: &str = "embedded";

/// The largest door component the host reads (`--max-component-bytes`): from
/// `--component`, on SIGHUP, or sent to the control surface. The door built
/// from `guest/` is under 1 MiB; a debug build with its names, about 10.
pub const MAX_COMPONENT_BYTES: usize = 64 << 20;

/// How long reading a component file may take.
pub const READ_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads the component in `path`, refusing one larger than `max` bytes
/// before reading it (and should it grow while read). Only a regular file
/// is read: it is opened without blocking (a FIFO with no writer would
/// otherwise hold the open forever), checked, and read within
/// [`READ_DEADLINE`].
pub async fn read_component(path: &Path, max: usize) -> anyhow::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let file = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .await?;
    let metadata = file.metadata().await?;
    anyhow::ensure!(metadata.is_file(), "not a regular file");
    let len = metadata.len();
    anyhow::ensure!(
        len <= max as u64,
        "the file has {len} bytes; a component is at most {max} bytes (--max-component-bytes)"
    );
    let mut bytes = Vec::with_capacity(len as usize);
    let mut file = file.take(max as u64 + 1);
    tokio::time::timeout(READ_DEADLINE, file.read_to_end(&mut bytes))
        .await
        .map_err(|_| anyhow::anyhow!("not read within {} s", READ_DEADLINE.as_secs()))??;
    anyhow::ensure!(
        bytes.len() <= max,
        "the file grew past {max} bytes while read (--max-component-bytes)"
    );
    Ok(bytes)
}

/// One loaded version of the door.
pub struct Live {
    /// The compiled component its requests instantiate.
    pub door: Door,
    /// 1 for the door loaded at launch, then one more for each swap.
    pub version: u64,
    /// Where its component came from.
    pub source: Source,
    /// When it was loaded, in milliseconds since the Unix epoch.
    pub loaded_at_ms: i64,
    /// Requests holding this version: answering, or streaming their body.
    in_flight: AtomicU64,
    /// Its answer to a plain GET of the card, once it has given one.
    pub card: KeptCard,
    /// The answers it declared reusable, while what they read holds.
    pub reuse: Reuse,
    /// What frames events for its streams, once one asked.
    framer: std::sync::OnceLock<Option<Arc<Framer>>>,
}

impl Live {
    /// What frames events for this version's streams, with `stores`'
    /// limits, keeping its instance among `idle`'s; none when the door does
    /// not export `framing`.
    pub fn framer(&self, stores: &Stores, idle: &Arc<Idle>) -> Option<Arc<dyn FrameEvents>> {
        let framer = self
            .framer
            .get_or_init(|| Framer::new(&self.door, stores, self.version, idle).map(Arc::new));
        framer.clone().map(|f| f as Arc<dyn FrameEvents>)
    }

    /// Requests holding this version now: answering, or streaming their body.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// What the control surface reports of it.
    pub fn describe(&self) -> Value {
        json!({
            "version": self.version,
            "digest": self.door.digest,
            "loadedAt": rfc3339(self.loaded_at_ms),
            "source": self.source,
            "inFlight": self.in_flight(),
        })
    }
}

/// A request's hold on the door version that serves it, counted in
/// [`Live::in_flight`] and in [`Doors::in_flight`] until dropped.
pub struct Serving(Arc<Live>, Arc<AtomicU64>);

impl Serving {
    /// The version serving the request.
    pub fn live(&self) -> &Live {
        &self.0
    }

    /// The version, to keep beyond this request's hold on it.
    pub fn version(&self) -> Arc<Live> {
        self.0.clone()
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.1.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a swap or a rollback changed.
pub struct Swapped {
    /// The version that was live, now the previous one.
    pub old: Arc<Live>,
    /// The version live now.
    pub new: Arc<Live>,
}

/// A swap that took place.
pub struct SwapDone {
    /// The version replaced and the one now live.
    pub swapped: Swapped,
    /// Compiling, validating, a trial instantiation and the swap itself.
    pub took: Duration,
}

/// A door's versions: the live one, and the one before it that a rollback
/// returns to.
pub struct Doors {
    live: ArcSwap<Live>,
    /// The door before the live one, and the next version number. Swaps
    /// take this lock; requests never do.
    slots: Mutex<Slots>,
    /// Requests in flight on every version, for a closing door to wait on.
    in_flight: Arc<AtomicU64>,
    /// The `--component` file SIGHUP reloads.
    component_file: Option<PathBuf>,
    /// The largest component a swap reads (`--max-component-bytes`).
    max_component_bytes: usize,
    /// Swaps made, refused after compiling (the trial failed), rollbacks.
    pub counts: Arc<SwapCounts>,
    /// Bytes of reusable answers the live version keeps (`--reuse-bytes`);
    /// one swapped out keeps none.
    reuse_bytes: usize,
    /// How answers were reused, across versions.
    pub reuse_counts: Arc<ReuseCounts>,
}

/// How a door's versions changed since launch.
#[derive(Debug, Default)]
pub struct SwapCounts {
    /// Versions made live by a swap.
    pub swapped: AtomicU64,
    /// Swaps refused: the component did not compile, or its trial failed.
    pub refused: AtomicU64,
    /// Rollbacks to the previous version.
    pub rolled_back: AtomicU64,
}

struct Slots {
    previous: Option<Arc<Live>>,
    next_version: u64,
}

impl Doors {
    /// `door` live as version 1.
    pub fn new(door: Door, source: Source) -> Doors {
        let reuse_counts = Arc::<ReuseCounts>::default();
        Doors {
            live: ArcSwap::from_pointee(Live {
                door,
                version: 1,
                source,
                loaded_at_ms: tasks::now_ms(),
                in_flight: AtomicU64::new(0),
                card: KeptCard::default(),
                reuse: Reuse::new(REUSE_BYTES, reuse_counts.clone()),
                framer: std::sync::OnceLock::new(),
            }),
            slots: Mutex::new(Slots {
                previous: None,
                next_version: 2,
            }),
            in_flight: Arc::new(AtomicU64::new(0)),
            component_file: None,
            max_component_bytes: MAX_COMPONENT_BYTES,
            counts: Arc::default(),
            reuse_bytes: REUSE_BYTES,
            reuse_counts,
        }
    }

    /// The live door was loaded from `file`, which SIGHUP reloads.
    pub fn with_component_file(self, file: PathBuf) -> Doors {
        let doors = self.with_source(file.display().to_string());
        Doors {
            component_file: Some(file),
            ..doors
        }
    }

    /// The live door came from `source`.
    pub fn with_source(self, source: Source) -> Doors {
        let door = self.live().door.clone();
        let doors = Doors::new(door, source)
            .with_max_component_bytes(self.max_component_bytes)
            .with_reuse_bytes(self.reuse_bytes);
        Doors {
            component_file: self.component_file,
            ..doors
        }
    }

    /// The live version keeps at most `max` bytes of reusable answers (0:
    /// none).
    pub fn with_reuse_bytes(mut self, max: usize) -> Doors {
        self.reuse_bytes = max;
        self.live().reuse.set_max_bytes(max);
        self
    }

    /// Bytes of reusable answers kept now, by the live version and the
    /// previous one (which keeps none once swapped out).
    pub fn reused_bytes(&self) -> usize {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let previous = slots.previous.as_ref().map_or(0, |p| p.reuse.bytes());
        self.live().reuse.bytes() + previous
    }

    /// A component to swap in is at most `max` bytes.
    pub fn with_max_component_bytes(mut self, max: usize) -> Doors {
        self.max_component_bytes = max;
        self
    }

    /// The largest component a swap reads (`--max-component-bytes`).
    pub fn max_component_bytes(&self) -> usize {
        self.max_component_bytes
    }

    /// Compiles `bytes` off the request path, checks it is a door this host
    /// serves, instantiates it once in a throwaway store made by `stores`,
    /// then makes it the live door. On any failure the live door stays and
    /// the reason is returned.
    pub async fn swap(
        &self,
        bytes: Vec<u8>,
        source: Source,
        stores: &Stores,
    ) -> anyhow::Result<SwapDone> {
        let started = Instant::now();
        let door = compile(&self.live().door.engine, bytes, &source)
            .await
            .inspect_err(|_| {
                self.counts.refused.fetch_add(1, Ordering::Relaxed);
            })?;
        let swapped = self.adopt(door, source, stores).await?;
        Ok(SwapDone {
            swapped,
            took: started.elapsed(),
        })
    }

    /// Makes `door`, compiled already, the live door once an instance of it
    /// has started in a store `stores` makes.
    pub async fn adopt(
        &self,
        door: Door,
        source: Source,
        stores: &Stores,
    ) -> anyhow::Result<Swapped> {
        if let Err(e) = trial(&door, stores).await {
            tracing::warn!(%source, digest = %door.digest, error = %format!("{e:#}"), "door swap refused");
            self.counts.refused.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        let swapped = self.install(door, source);
        self.counts.swapped.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            old_version = swapped.old.version,
            old_digest = %swapped.old.door.digest,
            version = swapped.new.version,
            digest = %swapped.new.door.digest,
            source = %swapped.new.source,
            "door swapped"
        );
        Ok(swapped)
    }

    /// SIGHUP: loads the `--component` file again and swaps to it.
    pub async fn reload(&self, stores: &Stores) {
        let Some(file) = &self.component_file else {
            tracing::info!("SIGHUP: serving the embedded door, no --component file to reload");
            return;
        };
        tracing::info!(path = %file.display(), "SIGHUP: reloading the door component");
        match read_component(file, self.max_component_bytes).await {
            // A refusal is logged by swap.
            Ok(bytes) => drop(self.swap(bytes, file.display().to_string(), stores).await),
            Err(e) => {
                tracing::warn!(path = %file.display(), error = %format!("{e:#}"), "door swap refused: the file cannot be read")
            }
        }
    }

    /// Requests answering or streaming on any version.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The live door, for one request.
    pub fn serving(&self) -> Serving {
        let live = self.live.load_full();
        live.in_flight.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Serving(live, self.in_flight.clone())
    }

    /// The live door, not held: a request takes it with [`Doors::serving`].
    pub fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    /// Makes `door` live as the next version; the live one becomes the
    /// previous.
    pub fn install(&self, door: Door, source: Source) -> Swapped {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let new = Arc::new(Live {
            door,
            version: slots.next_version,
            source,
            loaded_at_ms: tasks::now_ms(),
            in_flight: AtomicU64::new(0),
            card: KeptCard::default(),
            reuse: Reuse::new(self.reuse_bytes, self.reuse_counts.clone()),
            framer: std::sync::OnceLock::new(),
        });
        slots.next_version += 1;
        let old = self.live.swap(new.clone());
        old.reuse.retire();
        slots.previous = Some(old.clone());
        Swapped { old, new }
    }

    /// Makes the previous door live again (its version and digest); the live
    /// one becomes the previous, so a second rollback undoes the first.
    /// None when there is no previous door.
    pub fn rollback(&self) -> Option<Swapped> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let new = slots.previous.take()?;
        let old = self.live.swap(new.clone());
        // The version swapped out keeps nothing; the one back keeps anew
        // (it kept nothing while it was out).
        old.reuse.retire();
        new.reuse.set_max_bytes(self.reuse_bytes);
        slots.previous = Some(old.clone());
        drop(slots);
        self.counts.rolled_back.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            old_version = old.version,
            old_digest = %old.door.digest,
            version = new.version,
            digest = %new.door.digest,
            "door rolled back"
        );
        Some(Swapped { old, new })
    }

    /// `{"live": {...}, "previous": {...} | null}`.
    pub fn status(&self) -> Value {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        json!({
            "live": self.live.load().describe(),
            "previous": slots.previous.as_ref().map(|p| p.describe()),
        })
    }
}

/// `bytes` compiled on `engine` off the request path (or found in its
/// compile cache), checked to be a door this host serves.
pub async fn compile(engine: &DoorEngine, bytes: Vec<u8>, source: &str) -> anyhow::Result<Door> {
    let engine = engine.clone();
    let door = tokio::task::spawn_blocking(move || Door::load_checked(&engine, &bytes))
        .await
        .map_err(|e| anyhow::anyhow!("the compiling task failed: {e}"))?;
    door.inspect_err(|e| tracing::warn!(%source, error = %format!("{e:#}"), "door swap refused"))
}

/// Instantiates `door` once in a store of its own, answering nothing.
async fn trial(door: &Door, stores: &Stores) -> anyhow::Result<()> {
    let mut store = stores.store(&door.engine);
    let meter = store.data().cpu.clone();
    cpu::metered(&meter, door.instantiate(&mut store))
        .await
        .map(drop)
        .map_err(|e| anyhow::Error::from(e).context("instantiating the door component"))
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` of milliseconds since the epoch.
fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_798_675_200_123), "2026-12-31T00:00:00.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
