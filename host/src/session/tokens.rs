//! The door's bearer tokens, minted at launch: the operator's, then one per
//! credential the manifest declares. They live until the session ends. The
//! runtime mints formation members' tokens while the session runs
//! (`member:<caller>`, [`Tokens::mint_member`]), and revokes them.

use std::fmt;
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{Context, anyhow, ensure};
use subtle::{Choice, ConditionallySelectable, ConstantTimeEq};

use crate::manifest::{self, Scope};

/// Whose token a request presented: the tokens interface's own type.
pub use crate::bindings::tokens::Credential;

impl fmt::Display for Credential {
    /// The credential's name, as the tokens file and a scope refusal spell it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::Operator => f.write_str("operator"),
            Credential::Declared(name) => f.write_str(name),
            Credential::Member(caller) => write!(f, "member:{caller}"),
        }
    }
}

/// What a valid token lets its bearer do.
#[derive(Clone, Debug, PartialEq)]
pub struct Grant {
    /// Whose token it is.
    pub credential: Credential,
    /// The scopes it reaches, each once.
    pub scopes: Vec<Scope>,
}

/// The session's bearer tokens: the operator's and the declared
/// credentials', minted at launch, and the formation members', minted and
/// revoked while it runs.
pub struct Tokens {
    minted: Vec<Minted>,
    /// Formation members' tokens, by caller; at most [`MAX_MEMBERS`].
    members: std::sync::RwLock<Vec<Minted>>,
    /// Moves on with each member token minted or revoked: an answer that
    /// verified a token holds while it has not moved.
    version: std::sync::atomic::AtomicU64,
}

/// Member tokens a session holds at once.
pub const MAX_MEMBERS: usize = 1024;

struct Minted {
    grant: Grant,
    token: String,
}

impl Minted {
    /// Whether it is the formation member `caller`'s token.
    fn is_member(&self, caller: &str) -> bool {
        matches!(&self.grant.credential, Credential::Member(c) if c == caller)
    }
}

/// 256 bits.
const TOKEN_BYTES: usize = 32;

impl Tokens {
    /// The operator token, then one per declared credential (manifest order),
    /// each 256 bits from the OS RNG as 64 lowercase hex characters.
    pub fn mint(credentials: &[manifest::Credential]) -> anyhow::Result<Tokens> {
        let mut minted = vec![Minted {
            grant: Grant {
                credential: Credential::Operator,
                scopes: Scope::ALL.to_vec(),
            },
            token: hex::encode(random::<TOKEN_BYTES>()?),
        }];
        for declared in credentials {
            // The manifest refuses these names; a clash would also drop a
            // token from the tokens file, whose keys are the names.
            ensure!(
                !declared.name.starts_with("member:")
                    && minted
                        .iter()
                        .all(|m| m.grant.credential.to_string() != declared.name),
                "credential '{}' is reserved or declared twice",
                declared.name
            );
            minted.push(Minted {
                grant: Grant {
                    credential: Credential::Declared(declared.name.clone()),
                    scopes: declared.scopes.clone(),
                },
                token: hex::encode(random::<TOKEN_BYTES>()?),
            });
        }
        Ok(Tokens {
            minted,
            members: Default::default(),
            version: Default::default(),
        })
    }

    /// Mints the token of the formation member `caller` (credential
    /// `member:<caller>`), reaching `scopes` and seeing the tasks it
    /// starts; a token minted for it before stops working. `caller` is 1 to
    /// 64 letters, digits, `-`, `_` or `.`.
    pub fn mint_member(&self, caller: &str, scopes: &[Scope]) -> anyhow::Result<String> {
        ensure!(
            manifest::valid_name(caller),
            "a member's caller is 1 to 64 letters, digits, '-', '_' or '.'"
        );
        let mut members = self.members.write().unwrap_or_else(|e| e.into_inner());
        members.retain(|m| !m.is_member(caller));
        ensure!(
            members.len() < MAX_MEMBERS,
            "this session holds {MAX_MEMBERS} member tokens: revoke some first"
        );
        let token = hex::encode(random::<TOKEN_BYTES>()?);
        members.push(Minted {
            grant: Grant {
                credential: Credential::Member(caller.to_string()),
                scopes: Scope::ALL
                    .into_iter()
                    .filter(|s| scopes.contains(s))
                    .collect(),
            },
            token: token.clone(),
        });
        self.moved();
        Ok(token)
    }

    /// Revokes the member `caller`'s token; false when it has none.
    pub fn revoke_member(&self, caller: &str) -> bool {
        let mut members = self.members.write().unwrap_or_else(|e| e.into_inner());
        let before = members.len();
        members.retain(|m| !m.is_member(caller));
        self.moved();
        members.len() < before
    }

    /// The version of the tokens `verify` finds: read before a `verify`, it
    /// is one the answer is at least as new as.
    pub fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::Acquire)
    }

    /// After a change to the members, under their lock.
    fn moved(&self) {
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// The members holding a token, and their scopes, in minting order.
    pub fn members(&self) -> Vec<Grant> {
        let members = self.members.read().unwrap_or_else(|e| e.into_inner());
        members.iter().map(|m| m.grant.clone()).collect()
    }

    /// The grant of the minted token equal to `token`, if any. Every minted
    /// token is compared whatever matched before, so the time taken tells
    /// nothing of which token matched, nor how much of it.
    pub fn verify(&self, token: &str) -> Option<Grant> {
        let members = self.members.read().unwrap_or_else(|e| e.into_inner());
        let all = || self.minted.iter().chain(members.iter());
        let mut found = Choice::from(0);
        let mut index = 0u64;
        for (i, minted) in all().enumerate() {
            // A length mismatch answers false at once: lengths are not secret.
            let equal = token.as_bytes().ct_eq(minted.token.as_bytes());
            index.conditional_assign(&(i as u64), equal);
            found |= equal;
        }
        match bool::from(found) {
            true => all().nth(index as usize).map(|m| m.grant.clone()),
            false => None,
        }
    }

    /// Writes `{"operator": "<token>", "<credential>": "<token>", ...}` with
    /// mode 0600, atomically replacing `path`: a reader never sees half a file.
    pub fn write_file(&self, path: &Path) -> anyhow::Result<()> {
        write_secret(path, &self.json()?)
    }

    fn json(&self) -> anyhow::Result<String> {
        let object: serde_json::Map<String, serde_json::Value> = self
            .minted
            .iter()
            .map(|m| (m.grant.credential.to_string(), m.token.clone().into()))
            .collect();
        Ok(serde_json::to_string_pretty(&object)? + "\n")
    }
}

/// Writes `contents` to `path` with mode 0600, atomically replacing it: a
/// reader never sees half a file. A directory it creates is the owner's only.
///
/// Not fsynced: a secret written here is valid only while the process that
/// minted it runs, and a power cut ends that process; its next launch mints
/// and writes new ones. Four fsyncs per capsule were a third of the time it
/// takes to add one to a host.
pub(crate) fn write_secret(path: &Path, contents: &str) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let file_name = path
        .file_name()
        .with_context(|| format!("the path {} names no file", path.display()))?;
    // Only the owner may look into a directory created for tokens.
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;

    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        file_name.to_string_lossy(),
        hex::encode(random::<8>()?)
    ));
    // create_new: never follow a symlink or reuse a file someone else put there.
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    let written = file
        .write_all(contents.as_bytes())
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(err) = written {
        let _ = fs::remove_file(&tmp);
        return Err(err).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}

impl fmt::Debug for Tokens {
    /// Names only: a token in a log line would be a leaked credential.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self
            .minted
            .iter()
            .map(|m| m.grant.credential.to_string())
            .collect();
        f.debug_struct("Tokens")
            .field("credentials", &names)
            .finish_non_exhaustive()
    }
}

pub(crate) fn random<const N: usize>() -> anyhow::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|err| anyhow!("the OS random generator failed: {err}"))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    use super::*;

    fn declared() -> Vec<manifest::Credential> {
        vec![
            manifest::Credential {
                name: "watcher".into(),
                scopes: vec![Scope::WatchSession, Scope::GetTask],
            },
            manifest::Credential {
                name: "client".into(),
                scopes: vec![Scope::SendMessage],
            },
        ]
    }

    fn token<'a>(tokens: &'a Tokens, name: &str) -> &'a str {
        let minted = tokens
            .minted
            .iter()
            .find(|m| m.grant.credential.to_string() == name)
            .expect("a minted credential");
        &minted.token
    }

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            let dir = std::env::temp_dir().join(format!(
                "murmur-door-tokens-{}",
                hex::encode(random::<8>().unwrap())
            ));
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn mint_gives_distinct_hex_tokens() {
        let tokens = Tokens::mint(&declared()).unwrap();
        let all: Vec<&str> = tokens.minted.iter().map(|m| m.token.as_str()).collect();
        assert_eq!(all.len(), 3);
        for token in &all {
            assert_eq!(token.len(), 64);
            assert!(
                token
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            );
        }
        assert!(all[0] != all[1] && all[1] != all[2] && all[0] != all[2]);
        let again = Tokens::mint(&declared()).unwrap();
        assert_ne!(token(&tokens, "operator"), token(&again, "operator"));
    }

    #[test]
    fn mint_refuses_reserved_and_duplicate_names() {
        for name in ["operator", "member:alice", "watcher"] {
            let mut credentials = declared();
            credentials.push(manifest::Credential {
                name: name.into(),
                scopes: vec![],
            });
            assert!(Tokens::mint(&credentials).is_err(), "{name}");
        }
    }

    #[test]
    fn verify_finds_each_grant() {
        let tokens = Tokens::mint(&declared()).unwrap();
        assert_eq!(
            tokens.verify(token(&tokens, "operator")),
            Some(Grant {
                credential: Credential::Operator,
                scopes: Scope::ALL.to_vec(),
            })
        );
        assert_eq!(
            tokens.verify(token(&tokens, "watcher")),
            Some(Grant {
                credential: Credential::Declared("watcher".into()),
                scopes: vec![Scope::WatchSession, Scope::GetTask],
            })
        );
        assert_eq!(
            tokens.verify(token(&tokens, "client")).unwrap().credential,
            Credential::Declared("client".into())
        );
    }

    #[test]
    fn verify_refuses_everything_else() {
        let tokens = Tokens::mint(&declared()).unwrap();
        let operator = token(&tokens, "operator");
        let mut flipped = operator.to_string();
        let last = if flipped.ends_with('0') { "1" } else { "0" };
        flipped.replace_range(63.., last);
        for presented in [
            String::new(),
            "0".repeat(64),
            flipped,
            operator[..63].to_string(),
            format!("{operator}0"),
            operator.to_uppercase(),
            "operator".to_string(),
        ] {
            assert_eq!(tokens.verify(&presented), None, "{presented:?}");
        }
    }

    #[test]
    fn write_file_content_order_and_mode() {
        let tmp = TempDir::new();
        let path = tmp.0.join("session").join("tokens.json");
        let tokens = Tokens::mint(&declared()).unwrap();
        // Overwrites a file already there, even a looser one.
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, "stale").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();

        tokens.write_file(&path).unwrap();

        let text = fs::read_to_string(&path).unwrap();
        let object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).unwrap();
        let keys: Vec<&str> = object.keys().map(String::as_str).collect();
        assert_eq!(keys, ["operator", "watcher", "client"]);
        for name in keys {
            assert_eq!(object[name], token(&tokens, name));
        }
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // No temp file is left behind.
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn write_file_creates_the_directory() {
        let tmp = TempDir::new();
        let path = tmp.0.join("a").join("b").join("tokens.json");
        Tokens::mint(&[]).unwrap().write_file(&path).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("{\n  \"operator\": \""), "{text}");
        let dir_mode = fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o077, 0);
    }

    /// Reference, "Who sees a task": a formation token, credential
    /// `member:<caller>`, minted while the session runs.
    #[test]
    fn members_are_minted_replaced_and_revoked() {
        let tokens = Tokens::mint(&declared()).unwrap();
        let first = tokens
            .mint_member(
                "alice",
                &[Scope::GetTask, Scope::SendMessage, Scope::GetTask],
            )
            .unwrap();
        let grant = tokens.verify(&first).unwrap();
        assert_eq!(grant.credential, Credential::Member("alice".into()));
        assert_eq!(grant.scopes, [Scope::SendMessage, Scope::GetTask]);
        assert_eq!(grant.credential.to_string(), "member:alice");
        // Minting again replaces the token; the tokens file never holds one.
        let second = tokens.mint_member("alice", &[Scope::GetTask]).unwrap();
        assert_eq!(tokens.verify(&first), None);
        assert_eq!(tokens.verify(&second).unwrap().scopes, [Scope::GetTask]);
        assert!(!tokens.json().unwrap().contains(&second));
        assert_eq!(tokens.members().len(), 1);
        assert!(tokens.revoke_member("alice"));
        assert!(!tokens.revoke_member("alice"));
        assert_eq!(tokens.verify(&second), None);
        // The launch's own tokens are untouched.
        assert!(tokens.verify(token(&tokens, "operator")).is_some());
        for bad in ["", "a b", "member:x", &"x".repeat(65)] {
            assert_eq!(
                tokens.mint_member(bad, &[]).unwrap_err().to_string(),
                "a member's caller is 1 to 64 letters, digits, '-', '_' or '.'"
            );
        }
    }

    #[test]
    fn debug_shows_no_token() {
        let tokens = Tokens::mint(&declared()).unwrap();
        let debug = format!("{tokens:?}");
        assert!(debug.contains("watcher"), "{debug}");
        for minted in &tokens.minted {
            assert!(!debug.contains(&minted.token), "{debug}");
            assert!(!debug.contains(&minted.token[..8]), "{debug}");
        }
    }

    #[test]
    fn credential_names() {
        assert_eq!(Credential::Operator.to_string(), "operator");
        assert_eq!(Credential::Declared("ci".into()).to_string(), "ci");
        assert_eq!(
            Credential::Member("alice".into()).to_string(),
            "member:alice"
        );
    }
}
