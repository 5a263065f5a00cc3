//! Peer handles (reference "Planes", the peer plane; "Runtime headers"):
//! what the runtime mints so that one peer capsule may fetch one file of
//! `exports.peer_files`. A handle is 256 bits from the OS's random source,
//! URL-safe; the session keeps only its SHA-256, in memory, so nothing on
//! disk redeems one, and a restart or `--resume` ends every handle as it
//! ends every token. A handle is redeemed by the audience it was issued to,
//! until it expires, is revoked or used up, or the session ends.

use std::collections::HashMap;
use std::sync::Mutex;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use murmur_door_guest::planes::exports::ExportSet;
use murmur_door_guest::planes::paths::is_segment;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::manifest::planes::Exports;
use crate::session::tokens;

/// How long a handle lives when its minting names no `ttlSeconds`.
pub const DEFAULT_TTL_SECONDS: u64 = 3600;
/// The longest life a handle may be given: a week.
pub const MAX_TTL_SECONDS: u64 = 7 * 24 * 3600;
/// Handles a session keeps at once; minting past it is refused.
pub const MAX_HANDLES: usize = 10_000;

/// What the runtime asks for: a handle to `path` for `audience`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mint {
    /// Workdir-relative, under `exports.peer_files`.
    pub path: String,
    /// The capsule that may redeem it (its `x-murmur-audience`).
    pub audience: String,
    /// How long the handle lives, in seconds, at most [`MAX_TTL_SECONDS`];
    /// [`DEFAULT_TTL_SECONDS`] when None.
    pub ttl_seconds: Option<u64>,
    /// How many redeems it allows, at least 1; no limit when None.
    pub max_uses: Option<u32>,
}

/// A handle as minted: the value, shown this once, and its id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Minted {
    /// The value the bearer presents: 43 URL-safe characters, never kept.
    pub handle: String,
    /// What the session keeps of it, and lists.
    pub info: HandleInfo,
}

/// What is kept of a handle, and listed: never its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandleInfo {
    /// `hdl_` and 16 lowercase hex digits.
    pub id: String,
    /// The file it grants, workdir-relative.
    pub path: String,
    /// The capsule that may redeem it.
    pub audience: String,
    /// When it was minted, in milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// When it stops redeeming, in milliseconds since the Unix epoch.
    pub expires_at_ms: i64,
    /// How many redeems it allows; no limit when None.
    pub max_uses: Option<u32>,
    /// How many times it has been redeemed.
    pub uses: u32,
}

/// A redeemed handle: which one, and the path it grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redeemed {
    /// The handle's id, `hdl_…`.
    pub id: String,
    /// The file it grants, workdir-relative.
    pub path: String,
}

/// Why a redeem is refused: one answer to the client whatever it is, but
/// the log and the metrics tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// No handle kept has this value: never minted, revoked, or dropped.
    Unknown,
    /// Its time to live has passed.
    Expired,
    /// It has been redeemed `max_uses` times.
    UsedUp,
    /// Presented by a capsule other than its audience.
    WrongAudience,
}

impl Refused {
    /// The reason as the log line names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Unknown => "unknown",
            Refused::Expired => "expired",
            Refused::UsedUp => "used_up",
            Refused::WrongAudience => "wrong_audience",
        }
    }
}

/// A session's handles, by the SHA-256 of their value.
#[derive(Default)]
pub struct Handles {
    kept: Mutex<HashMap<[u8; 32], HandleInfo>>,
}

impl Handles {
    /// Mints a handle to `mint.path` under `exports` (the peer plane's),
    /// at `now_ms`. The error is the reason, for a 422.
    pub fn mint(&self, exports: &Exports, mint: Mint, now_ms: i64) -> Result<Minted, String> {
        let path = workdir_path(&mint.path)?;
        if !ExportSet::new(&exports.0).exported(&path) {
            return Err(format!(
                "path {:?} is not under exports.peer_files",
                mint.path
            ));
        }
        if mint.audience.is_empty()
            || mint.audience.len() > 256
            || mint.audience.contains(['\r', '\n', '\0'])
        {
            return Err("audience must name the redeeming capsule (1 to 256 characters)".into());
        }
        let ttl = mint.ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS);
        if ttl == 0 || ttl > MAX_TTL_SECONDS {
            return Err(format!("ttlSeconds must be from 1 to {MAX_TTL_SECONDS}"));
        }
        if mint.max_uses == Some(0) {
            return Err("maxUses must be at least 1".into());
        }
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        // Expired and used-up handles make room before a mint is refused.
        kept.retain(|_, info| info.expires_at_ms > now_ms && !used_up(info));
        if kept.len() >= MAX_HANDLES {
            return Err(format!(
                "this session holds {MAX_HANDLES} handles: revoke some first"
            ));
        }
        let handle = URL_SAFE_NO_PAD.encode(tokens::random::<32>().map_err(|e| e.to_string())?);
        let id = format!(
            "hdl_{}",
            hex::encode(tokens::random::<8>().map_err(|e| e.to_string())?)
        );
        let info = HandleInfo {
            id,
            path: path.join("/"),
            audience: mint.audience,
            created_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(i64::try_from(ttl * 1000).unwrap_or(i64::MAX)),
            max_uses: mint.max_uses,
            uses: 0,
        };
        kept.insert(hash(&handle), info.clone());
        Ok(Minted { handle, info })
    }

    /// Redeems `handle` for `audience` at `now_ms`, counting one use.
    pub fn redeem(&self, handle: &str, audience: &str, now_ms: i64) -> Result<Redeemed, Refused> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        // Found by the SHA-256 of what was presented: how long the lookup
        // takes can only tell about hashes, never about a handle's value.
        let Some(found) = kept.get_mut(&hash(handle)) else {
            return Err(Refused::Unknown);
        };
        let same_audience = bool::from(audience.as_bytes().ct_eq(found.audience.as_bytes()));
        if found.expires_at_ms <= now_ms {
            return Err(Refused::Expired);
        }
        if used_up(found) {
            return Err(Refused::UsedUp);
        }
        if !same_audience {
            return Err(Refused::WrongAudience);
        }
        found.uses += 1;
        Ok(Redeemed {
            id: found.id.clone(),
            path: found.path.clone(),
        })
    }

    /// Every live handle, oldest first.
    pub fn list(&self, now_ms: i64) -> Vec<HandleInfo> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let mut live: Vec<HandleInfo> = kept
            .values()
            .filter(|info| info.expires_at_ms > now_ms && !used_up(info))
            .cloned()
            .collect();
        live.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        live
    }

    /// Revokes the handle `id`; false when there is none.
    pub fn revoke(&self, id: &str) -> bool {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let before = kept.len();
        kept.retain(|_, info| info.id != id);
        kept.len() < before
    }

    /// Ends every handle: the session ends.
    pub fn clear(&self) {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

fn used_up(info: &HandleInfo) -> bool {
    info.max_uses.is_some_and(|max| info.uses >= max)
}

fn hash(handle: &str) -> [u8; 32] {
    Sha256::digest(handle.as_bytes()).into()
}

/// A workdir-relative file path as segments: no empty, `.` or `..`
/// segment, no backslash or NUL, not absolute.
fn workdir_path(path: &str) -> Result<Vec<String>, String> {
    match path.split('/').all(is_segment) {
        true => Ok(path.split('/').map(String::from).collect()),
        false => Err(format!(
            "path {path:?} must be workdir-relative, with no empty, '.' or '..' segment"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exports() -> Exports {
        Exports(vec!["shared/**".into(), "report.md".into()])
    }

    fn mint(path: &str, audience: &str) -> Mint {
        Mint {
            path: path.into(),
            audience: audience.into(),
            ttl_seconds: None,
            max_uses: None,
        }
    }

    /// Issue 33, "A handle": at least 128 bits, URL-safe, redeemed only by
    /// its audience, until it expires, is revoked or is used up.
    #[test]
    fn a_handle_is_redeemed_by_its_audience_until_it_ends() {
        let handles = Handles::default();
        let minted = handles
            .mint(&exports(), mint("shared/a.txt", "beta"), 1_000)
            .unwrap();
        assert_eq!(minted.handle.len(), 43);
        assert!(
            minted
                .handle
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert!(minted.info.id.starts_with("hdl_"));
        assert_eq!(minted.info.expires_at_ms, 1_000 + 3_600_000);
        let redeemed = handles.redeem(&minted.handle, "beta", 2_000).unwrap();
        assert_eq!(
            redeemed,
            Redeemed {
                id: minted.info.id.clone(),
                path: "shared/a.txt".into()
            }
        );
        assert_eq!(
            handles.redeem(&minted.handle, "gamma", 2_000),
            Err(Refused::WrongAudience)
        );
        assert_eq!(handles.redeem("nope", "beta", 2_000), Err(Refused::Unknown));
        assert_eq!(
            handles.redeem(&minted.handle, "beta", 3_601_000),
            Err(Refused::Expired)
        );
        assert_eq!(handles.list(2_000)[0].uses, 1);
        assert!(handles.revoke(&minted.info.id));
        assert!(!handles.revoke(&minted.info.id));
        assert_eq!(
            handles.redeem(&minted.handle, "beta", 2_000),
            Err(Refused::Unknown)
        );

        let once = Mint {
            max_uses: Some(1),
            ..mint("report.md", "beta")
        };
        let once = handles.mint(&exports(), once, 1_000).unwrap();
        assert!(handles.redeem(&once.handle, "beta", 1_001).is_ok());
        assert_eq!(
            handles.redeem(&once.handle, "beta", 1_002),
            Err(Refused::UsedUp)
        );
        assert!(handles.list(1_002).is_empty());
    }

    #[test]
    fn a_handle_is_minted_only_for_a_peer_export() {
        let handles = Handles::default();
        for (path, why) in [
            (
                "secret.txt",
                "path \"secret.txt\" is not under exports.peer_files",
            ),
            (
                "shared/../secret.txt",
                "path \"shared/../secret.txt\" must be workdir-relative, with no empty, '.' or '..' segment",
            ),
            (
                "/etc/passwd",
                "path \"/etc/passwd\" must be workdir-relative, with no empty, '.' or '..' segment",
            ),
            (
                "",
                "path \"\" must be workdir-relative, with no empty, '.' or '..' segment",
            ),
        ] {
            assert_eq!(
                handles.mint(&exports(), mint(path, "beta"), 0).unwrap_err(),
                why
            );
        }
        assert_eq!(
            handles
                .mint(&exports(), mint("report.md", ""), 0)
                .unwrap_err(),
            "audience must name the redeeming capsule (1 to 256 characters)"
        );
        let forever = Mint {
            ttl_seconds: Some(MAX_TTL_SECONDS + 1),
            ..mint("report.md", "b")
        };
        assert_eq!(
            handles.mint(&exports(), forever, 0).unwrap_err(),
            "ttlSeconds must be from 1 to 604800"
        );
        let never = Mint {
            max_uses: Some(0),
            ..mint("report.md", "b")
        };
        assert_eq!(
            handles.mint(&exports(), never, 0).unwrap_err(),
            "maxUses must be at least 1"
        );
    }
}
