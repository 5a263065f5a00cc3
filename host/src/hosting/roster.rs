//! The capsules file of `murmur-door host`: the host's control listener and
//! one entry per capsule. Paths are relative to the file's directory.
//!
//! ```yaml
//! control:
//!   listen: 127.0.0.1:41900        # the host's control listener
//!   token_file: host-control-token # default: beside this file
//! listen: 0.0.0.0:8080             # one port for the capsules named by host
//! capsules:
//!   - name: alpha                  # default: the manifest's name
//!     manifest: alpha/murmur.yaml
//!     workdir: alpha/work          # default: the manifest's directory
//!     listen: 127.0.0.1:41873      # a port of its own, or:
//!     # hostnames: [alpha.example.com]   # on the file's listen, by Host
//!     state: alpha/.murmur-door
//!     tokens_file: alpha/tokens.json       # default: STATE/tokens.json
//!     control_token_file: alpha/control    # default: beside the tokens file
//!     resume: false
//!     instances: 64                # default: --capsule-instances
//! ```
//!
//! An entry names either a `listen` address of its own or `hostnames`,
//! served on the file's top-level `listen`: a request there reaches the
//! capsule whose host name its `Host` names (see
//! [`crate::listener::hostnames`]). An entry added to a running host (the
//! control surface's `POST /capsules`) has the same keys, as JSON. A bad
//! entry is refused naming its capsule and key.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_yaml::Value;

use crate::manifest::{self, Manifest};

/// The control token's file name beside the tokens file, as `serve` has it.
pub const CONTROL_TOKEN_FILE: &str = "control-token";
/// The host's control token's file name beside the capsules file.
pub const HOST_CONTROL_TOKEN_FILE: &str = "host-control-token";

/// One capsule, as an entry names it.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Names the capsule in the control surface's paths and in metrics: the
    /// manifest's name unless the entry names one.
    pub name: String,
    /// The manifest's file, resolved against the capsules file's directory.
    pub manifest_path: PathBuf,
    /// The manifest, loaded from `manifest_path` and checked.
    pub manifest: Manifest,
    /// What the planes' exports are relative to: the manifest's directory
    /// unless the entry names one.
    pub workdir: PathBuf,
    /// The launch's own task: `serve --task` or `--task-file`, else a
    /// `task.md` or `input.txt` in the workdir (see [`launch_task`]).
    pub task: Option<String>,
    /// Where its door listens: a port of its own, or host names on the
    /// host's shared listener.
    pub listen: Listen,
    /// Where clients reach the door from outside (a TLS terminator, a
    /// proxy): the card's `supportedInterfaces[0].url` and every absolute
    /// URL the door writes. None: the listener's own address.
    pub public_url: Option<String>,
    /// The state directory: its lock, `session.db` and archived sessions.
    pub state: PathBuf,
    /// `state` resolved, so two spellings of one directory compare equal.
    pub state_key: PathBuf,
    /// Where the minted tokens are written: `STATE/tokens.json` unless the
    /// entry names one.
    pub tokens_file: PathBuf,
    /// Where its control token is written: `control-token` beside the tokens
    /// file unless the entry names one.
    pub control_token_file: PathBuf,
    /// Reopen the session in `state` (`--resume`) instead of archiving it
    /// and starting a new one.
    pub resume: bool,
    /// Instances of the host's pool this capsule may hold at once, when not
    /// the host's `--capsule-instances`.
    pub instances: Option<u32>,
    /// `agent_stdio: CMD`: this capsule's sessions are run by `sh -c CMD`,
    /// one process a session, whatever agent the host runs others with.
    pub agent_stdio: Option<String>,
}

/// Where a capsule's door is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// A listener of its own; port 0 takes any free port (and clashes with
    /// no other entry).
    Port(SocketAddr),
    /// The host's shared listener, for requests whose `Host` is one of
    /// these names (lowercase, at least one, none another capsule's).
    Hostnames(Vec<String>),
}

impl Listen {
    /// The host names it is reached by; none on a port of its own.
    pub fn hostnames(&self) -> &[String] {
        match self {
            Listen::Hostnames(names) => names,
            Listen::Port(_) => &[],
        }
    }
}

/// The most host names one entry may claim.
const MAX_HOSTNAMES: usize = 64;

/// A host name as an entry may claim it: letters, digits and `-` in dot
/// separated labels of 1 to 63, at most 253 in all, no wildcard; compared
/// in lowercase, as it is answered.
pub fn hostname(text: &str) -> Result<String, String> {
    let valid_label = |label: &str| {
        (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if text.is_empty() || text.len() > 253 || !text.split('.').all(valid_label) {
        return Err(format!(
            "{text:?} is not a host name (dot-separated labels of letters, digits and '-'; no wildcard, port or trailing dot)"
        ));
    }
    Ok(text.to_ascii_lowercase())
}

/// A public URL as the card will name it: `http` or `https`, a host, no
/// query, fragment or credentials, and no trailing `/` (the door appends
/// its paths to it). The error says what is wrong.
pub fn public_url(text: &str) -> Result<String, String> {
    let uri: hyper::Uri = text
        .parse()
        .map_err(|e| format!("{text:?} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(format!("{text:?} is not an http or https URL")),
    }
    let authority = uri
        .authority()
        .ok_or_else(|| format!("{text:?} names no host"))?;
    if authority.host().is_empty() || authority.as_str().contains('@') {
        return Err(format!("{text:?} must name a host, and no credentials"));
    }
    if uri.query().is_some() || text.contains('#') {
        return Err(format!("{text:?} must have no query or fragment"));
    }
    Ok(text.trim_end_matches('/').to_string())
}

/// The directory that holds a manifest: a capsule's workdir by default.
pub fn manifest_dir(manifest: &Path) -> PathBuf {
    match manifest.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The files in a capsule's workdir whose text is its launch task, in the
/// order they are looked for (reference, "Who sees a task").
pub const LAUNCH_TASK_FILES: [&str; 2] = ["task.md", "input.txt"];

/// The text of the launch's own task a workdir holds: its `task.md`, else
/// its `input.txt`; None when it has neither. An error names a file that is
/// there but cannot be read as UTF-8 text.
pub fn launch_task(workdir: &Path) -> Result<Option<String>, String> {
    for name in LAUNCH_TASK_FILES {
        let path = workdir.join(name);
        match std::fs::read(&path) {
            Ok(bytes) => {
                return String::from_utf8(bytes)
                    .map(Some)
                    .map_err(|_| format!("{} is not UTF-8 text", path.display()));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
    Ok(None)
}

/// The most instances an entry may ask for.
const MAX_SHARE: u64 = 1 << 20;

/// The capsules file.
#[derive(Clone, Debug)]
pub struct Roster {
    /// Where the host's control surface listens.
    pub control_listen: SocketAddr,
    /// Where the host's control token is written: `host-control-token`
    /// beside the capsules file unless `control.token_file` names one.
    pub control_token_file: PathBuf,
    /// The shared listener of the capsules that name `hostnames`.
    pub listen: Option<SocketAddr>,
    /// Every entry, in the file's order: no two share a name, a state
    /// directory or a fixed listen address.
    pub capsules: Vec<Entry>,
}

/// A refused entry or file: where, which key, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RosterError {
    /// `capsules[1] (beta)`, `control`, or empty for the file itself.
    pub at: String,
    /// The key refused (`listen`), or empty when the whole entry or file is.
    pub key: String,
    /// Why it was refused.
    pub message: String,
}

impl fmt::Display for RosterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.at.is_empty(), self.key.is_empty()) {
            (true, true) => f.write_str(&self.message),
            (true, false) => write!(f, "{}: {}", self.key, self.message),
            (false, true) => write!(f, "{}: {}", self.at, self.message),
            (false, false) => write!(f, "{}: {}: {}", self.at, self.key, self.message),
        }
    }
}

impl std::error::Error for RosterError {}

fn error(at: &str, key: &str, message: impl Into<String>) -> RosterError {
    RosterError {
        at: at.to_string(),
        key: key.to_string(),
        message: message.into(),
    }
}

impl Roster {
    /// Reads and parses the capsules file at `path`; its paths are relative
    /// to the file's directory.
    pub fn load(path: &Path) -> Result<Roster, RosterError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| error("", "", format!("{}: {e}", path.display())))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Roster::parse(&text, base)
    }

    /// The file `text`, its paths relative to `base`. Every entry is checked,
    /// names, state directories and fixed listen addresses are each used
    /// once, before anything is opened.
    pub fn parse(text: &str, base: &Path) -> Result<Roster, RosterError> {
        let root: Value = serde_yaml::from_str(text).map_err(|e| error("", "", e.to_string()))?;
        let Value::Mapping(root) = root else {
            return Err(error(
                "",
                "",
                "expected a mapping with control and capsules",
            ));
        };
        only(&root, "", &["control", "listen", "capsules"])?;
        let control = match root.get("control") {
            Some(Value::Mapping(control)) => control.clone(),
            Some(_) => return Err(error("", "control", "expected a mapping")),
            None => return Err(error("", "control", "is required")),
        };
        only(&control, "control", &["listen", "token_file"])?;
        let control_listen = address(control.get("listen"), "control", "listen")?;
        let control_token_file = match control.get("token_file") {
            None | Some(Value::Null) => base.join(HOST_CONTROL_TOKEN_FILE),
            Some(v) => base.join(path(Some(v), "control", "token_file")?),
        };
        let listen = match root.get("listen") {
            None | Some(Value::Null) => None,
            value => Some(address(value, "", "listen")?),
        };
        let entries = match root.get("capsules") {
            Some(Value::Sequence(entries)) => entries.clone(),
            None | Some(Value::Null) => Vec::new(),
            Some(_) => return Err(error("", "capsules", "expected a list of entries")),
        };
        let mut capsules = Vec::new();
        for (i, value) in entries.iter().enumerate() {
            let at = format!("capsules[{i}]");
            let entry = Entry::parse(value, base, &at)?;
            if listen.is_none() && matches!(entry.listen, Listen::Hostnames(_)) {
                return Err(error(
                    &format!("capsule {}", entry.name),
                    "hostnames",
                    "needs the file's top-level listen to be served on",
                ));
            }
            check_unique(&capsules, &entry)?;
            capsules.push(entry);
        }
        Ok(Roster {
            control_listen,
            control_token_file,
            listen,
            capsules,
        })
    }
}

/// Refuses `entry` when it reuses a name, a state directory, a fixed
/// listen address or a host name of `others`.
pub fn check_unique<'a>(
    others: impl IntoIterator<Item = &'a Entry>,
    entry: &Entry,
) -> Result<(), RosterError> {
    let at = format!("capsule {}", entry.name);
    for other in others {
        if other.name == entry.name {
            return Err(error(&at, "name", "another capsule has this name"));
        }
        if other.state_key == entry.state_key {
            return Err(error(
                &at,
                "state",
                "another capsule has this state directory",
            ));
        }
        match (&other.listen, &entry.listen) {
            (Listen::Port(theirs), Listen::Port(ours)) if ours.port() != 0 && theirs == ours => {
                return Err(error(
                    &at,
                    "listen",
                    "another capsule listens on this address",
                ));
            }
            (Listen::Hostnames(theirs), Listen::Hostnames(ours)) => {
                if let Some(name) = ours.iter().find(|name| theirs.contains(name)) {
                    return Err(error(
                        &at,
                        "hostnames",
                        format!("another capsule has the host name {name}"),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The state directory `state` names, whatever path names it: canonical
/// where it exists, else its parent's canonical path and its name, else
/// the path as written.
fn state_key(state: &Path) -> PathBuf {
    if let Ok(canonical) = state.canonicalize() {
        return canonical;
    }
    match (state.parent().map(Path::canonicalize), state.file_name()) {
        (Some(Ok(parent)), Some(name)) => parent.join(name),
        _ => state.to_path_buf(),
    }
}

impl Entry {
    /// One entry, `at` naming it in errors (`capsules[2]`).
    pub fn parse(value: &Value, base: &Path, at: &str) -> Result<Entry, RosterError> {
        let Value::Mapping(map) = value else {
            return Err(error(at, "", "expected a mapping"));
        };
        // Named as soon as its name is known.
        let named = match map.get("name") {
            Some(Value::String(name)) => format!("{at} ({name})"),
            _ => at.to_string(),
        };
        let at = named.as_str();
        only(
            map,
            at,
            &[
                "name",
                "manifest",
                "workdir",
                "listen",
                "hostnames",
                "public_url",
                "state",
                "tokens_file",
                "control_token_file",
                "resume",
                "instances",
                "agent_stdio",
            ],
        )?;
        let manifest_path = base.join(path(map.get("manifest"), at, "manifest")?);
        let manifest = Manifest::load(&manifest_path)
            .map_err(|e| error(at, "manifest", format!("{}: {e}", manifest_path.display())))?;
        let name = match map.get("name") {
            None | Some(Value::Null) => manifest.name.clone(),
            Some(Value::String(name)) if manifest::valid_name(name) => name.clone(),
            Some(_) => {
                return Err(error(
                    at,
                    "name",
                    "expected 1 to 64 letters, digits, '-', '_' or '.'",
                ));
            }
        };
        let workdir = match map.get("workdir") {
            None | Some(Value::Null) => manifest_dir(&manifest_path),
            Some(v) => base.join(path(Some(v), at, "workdir")?),
        };
        let listen = match (map.get("listen"), map.get("hostnames")) {
            (listen, None | Some(Value::Null)) => Listen::Port(address(listen, at, "listen")?),
            (None | Some(Value::Null), Some(names)) => Listen::Hostnames(hostnames(names, at)?),
            (Some(_), Some(_)) => {
                return Err(error(
                    at,
                    "hostnames",
                    "names the capsule on the shared listener: an entry has a listen or hostnames, not both",
                ));
            }
        };
        let public_url = match map.get("public_url") {
            None | Some(Value::Null) => None,
            Some(Value::String(url)) => {
                Some(public_url(url).map_err(|why| error(at, "public_url", why))?)
            }
            Some(_) => return Err(error(at, "public_url", "expected a string")),
        };
        let state = base.join(path(map.get("state"), at, "state")?);
        let tokens_file = match map.get("tokens_file") {
            None | Some(Value::Null) => state.join("tokens.json"),
            Some(v) => base.join(path(Some(v), at, "tokens_file")?),
        };
        let control_token_file = match map.get("control_token_file") {
            None | Some(Value::Null) => tokens_file.with_file_name(CONTROL_TOKEN_FILE),
            Some(v) => base.join(path(Some(v), at, "control_token_file")?),
        };
        let resume = match map.get("resume") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(resume)) => *resume,
            Some(_) => return Err(error(at, "resume", "expected a boolean")),
        };
        let instances = match map.get("instances") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => match n.as_u64() {
                Some(n @ 1..=MAX_SHARE) => Some(n as u32),
                _ => return Err(error(at, "instances", format!("expected 1 to {MAX_SHARE}"))),
            },
            Some(_) => return Err(error(at, "instances", format!("expected 1 to {MAX_SHARE}"))),
        };
        let agent_stdio = match map.get("agent_stdio") {
            None | Some(Value::Null) => None,
            Some(Value::String(command)) if !command.trim().is_empty() => Some(command.clone()),
            Some(_) => return Err(error(at, "agent_stdio", "expected a command")),
        };
        let task = launch_task(&workdir).map_err(|e| error(at, "workdir", e))?;
        Ok(Entry {
            name,
            manifest_path,
            manifest,
            workdir,
            task,
            listen,
            public_url,
            state_key: state_key(&state),
            state,
            tokens_file,
            control_token_file,
            resume,
            instances,
            agent_stdio,
        })
    }
}

/// A capsule's name: it names the capsule in paths of the control surface
/// and in metrics.
fn only(map: &serde_yaml::Mapping, at: &str, keys: &[&str]) -> Result<(), RosterError> {
    for key in map.keys() {
        let known = key.as_str().is_some_and(|k| keys.contains(&k));
        if !known {
            let key = key
                .as_str()
                .map_or_else(|| format!("{key:?}"), str::to_string);
            return Err(error(
                at,
                &key,
                format!("is not a key here (expected one of {})", keys.join(", ")),
            ));
        }
    }
    Ok(())
}

/// An entry's `hostnames`: a list of 1 to [`MAX_HOSTNAMES`] host names,
/// each once.
fn hostnames(value: &Value, at: &str) -> Result<Vec<String>, RosterError> {
    let expected = || {
        error(
            at,
            "hostnames",
            format!("expected a list of 1 to {MAX_HOSTNAMES} host names"),
        )
    };
    let Value::Sequence(list) = value else {
        return Err(expected());
    };
    if list.is_empty() || list.len() > MAX_HOSTNAMES {
        return Err(expected());
    }
    let mut names: Vec<String> = Vec::with_capacity(list.len());
    for item in list {
        let Value::String(text) = item else {
            return Err(expected());
        };
        let name = hostname(text).map_err(|why| error(at, "hostnames", why))?;
        if names.contains(&name) {
            return Err(error(at, "hostnames", format!("{name} is named twice")));
        }
        names.push(name);
    }
    Ok(names)
}

fn path(value: Option<&Value>, at: &str, key: &str) -> Result<PathBuf, RosterError> {
    match value {
        Some(Value::String(p)) if !p.is_empty() => Ok(PathBuf::from(p)),
        None | Some(Value::Null) => Err(error(at, key, "is required")),
        Some(_) => Err(error(at, key, "expected a path")),
    }
}

fn address(value: Option<&Value>, at: &str, key: &str) -> Result<SocketAddr, RosterError> {
    let text = match value {
        Some(Value::String(text)) => text,
        None | Some(Value::Null) => return Err(error(at, key, "is required")),
        Some(_) => {
            return Err(error(
                at,
                key,
                "expected an address such as 127.0.0.1:41873",
            ));
        }
    };
    text.parse().map_err(|_| {
        error(
            at,
            key,
            format!("expected an address such as 127.0.0.1:41873, found '{text}'"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own for each test (they run at once), beside the
    /// manifests the entries name.
    fn dir() -> PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "roster-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.yaml"), "name: alpha\nversion: 0.1.0\n").unwrap();
        std::fs::write(dir.join("bad.yaml"), "name: beta\n").unwrap();
        dir
    }

    fn refused(text: &str) -> String {
        refused_in(text, &dir())
    }

    fn refused_in(text: &str, base: &Path) -> String {
        Roster::parse(text, base).unwrap_err().to_string()
    }

    const CONTROL: &str = "control: {listen: 127.0.0.1:0}\n";

    #[test]
    fn a_file_of_two_capsules() {
        let base = dir();
        let roster = Roster::parse(
            &format!(
                "{CONTROL}capsules:\n  - {{manifest: a.yaml, listen: 127.0.0.1:0, state: s1}}\n  - {{name: second, manifest: a.yaml, listen: 127.0.0.1:0, state: s2, resume: true, instances: 3}}\n"
            ),
            &base,
        )
        .unwrap();
        assert_eq!(
            roster.control_token_file,
            base.join(HOST_CONTROL_TOKEN_FILE)
        );
        let [first, second] = &roster.capsules[..] else {
            panic!()
        };
        assert_eq!(first.name, "alpha");
        assert_eq!(first.state, base.join("s1"));
        assert_eq!(first.tokens_file, base.join("s1/tokens.json"));
        assert_eq!(first.control_token_file, base.join("s1/control-token"));
        assert!(!first.resume);
        assert_eq!(first.instances, None);
        assert_eq!(second.name, "second");
        assert!(second.resume);
        assert_eq!(second.instances, Some(3));
    }

    #[test]
    fn a_bad_entry_is_refused_with_its_capsule_and_key() {
        let base = dir();
        let entry = |e: &str| refused_in(&format!("{CONTROL}capsules:\n  - {e}\n"), &base);
        assert_eq!(
            entry("{manifest: bad.yaml, listen: 127.0.0.1:0, state: s}"),
            format!(
                "capsules[0]: manifest: {}: version: is required",
                base.join("bad.yaml").display()
            )
        );
        assert_eq!(
            entry("{name: beta, manifest: a.yaml, listen: nowhere, state: s}"),
            "capsules[0] (beta): listen: expected an address such as 127.0.0.1:41873, found 'nowhere'"
        );
        assert_eq!(
            entry("{name: beta, manifest: a.yaml, listen: 127.0.0.1:0}"),
            "capsules[0] (beta): state: is required"
        );
        assert_eq!(
            entry("{name: beta, manifest: a.yaml, listen: 127.0.0.1:0, state: s, colour: red}"),
            "capsules[0] (beta): colour: is not a key here (expected one of name, manifest, workdir, listen, hostnames, public_url, state, tokens_file, control_token_file, resume, instances, agent_stdio)"
        );
        assert_eq!(
            entry("{name: b, manifest: a.yaml, listen: 127.0.0.1:0, state: s, agent_stdio: ' '}"),
            "capsules[0] (b): agent_stdio: expected a command"
        );
        assert_eq!(
            entry(
                "{name: b, manifest: a.yaml, listen: 127.0.0.1:0, state: s, public_url: 'ftp://b.example'}"
            ),
            "capsules[0] (b): public_url: \"ftp://b.example\" is not an http or https URL"
        );
        assert_eq!(
            entry("{name: 'a/b', manifest: a.yaml, listen: 127.0.0.1:0, state: s}"),
            "capsules[0] (a/b): name: expected 1 to 64 letters, digits, '-', '_' or '.'"
        );
        assert_eq!(
            entry("{name: b, manifest: a.yaml, listen: 127.0.0.1:0, state: s, resume: yes please}"),
            "capsules[0] (b): resume: expected a boolean"
        );
        assert_eq!(
            entry("{name: b, manifest: a.yaml, listen: 127.0.0.1:0, state: s, instances: 0}"),
            "capsules[0] (b): instances: expected 1 to 1048576"
        );
    }

    #[test]
    fn names_state_directories_and_addresses_are_used_once() {
        let two = |a: &str, b: &str| {
            refused(&format!(
                "{CONTROL}capsules:\n  - {{manifest: a.yaml, {a}}}\n  - {{name: other, manifest: a.yaml, {b}}}\n"
            ))
        };
        assert_eq!(
            refused(&format!(
                "{CONTROL}capsules:\n  - {{manifest: a.yaml, listen: 127.0.0.1:0, state: s1}}\n  - {{manifest: a.yaml, listen: 127.0.0.1:0, state: s2}}\n"
            )),
            "capsule alpha: name: another capsule has this name"
        );
        assert_eq!(
            two(
                "listen: 127.0.0.1:0, state: s",
                "listen: 127.0.0.1:0, state: s"
            ),
            "capsule other: state: another capsule has this state directory"
        );
        assert_eq!(
            two(
                "listen: 127.0.0.1:5000, state: s1",
                "listen: 127.0.0.1:5000, state: s2"
            ),
            "capsule other: listen: another capsule listens on this address"
        );
    }

    /// Issue 37, "Many capsules on one port": an entry names a listen
    /// address or host names on the file's listen, never both; a host name
    /// is claimed once, in lowercase, without wildcard or port.
    #[test]
    fn host_names_are_valid_and_claimed_once() {
        let base = dir();
        let roster = Roster::parse(
            &format!(
                "{CONTROL}listen: 127.0.0.1:0\ncapsules:\n  - {{manifest: a.yaml, hostnames: [Alpha.Example.com, a2], state: s1}}\n  - {{name: b, manifest: a.yaml, listen: 127.0.0.1:0, state: s2}}\n"
            ),
            &base,
        )
        .unwrap();
        assert_eq!(roster.listen, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(
            roster.capsules[0].listen,
            Listen::Hostnames(vec!["alpha.example.com".into(), "a2".into()])
        );
        assert_eq!(
            roster.capsules[1].listen,
            Listen::Port("127.0.0.1:0".parse().unwrap())
        );
        let shared = |entries: &str| {
            refused_in(
                &format!("{CONTROL}listen: 127.0.0.1:0\ncapsules:\n{entries}"),
                &base,
            )
        };
        assert_eq!(
            shared(
                "  - {manifest: a.yaml, hostnames: [a.example], state: s1}\n  - {name: b, manifest: a.yaml, hostnames: [b.example, A.example], state: s2}\n"
            ),
            "capsule b: hostnames: another capsule has the host name a.example"
        );
        assert_eq!(
            shared(
                "  - {manifest: a.yaml, hostnames: [a.example], listen: 127.0.0.1:0, state: s1}\n"
            ),
            "capsules[0]: hostnames: names the capsule on the shared listener: an entry has a listen or hostnames, not both"
        );
        for bad in [
            "'*.example.com'",
            "'a.example:80'",
            "'a.example.'",
            "'-a.example'",
            "'a..b'",
            "''",
        ] {
            let text = bad.trim_matches('\'');
            assert_eq!(
                shared(&format!(
                    "  - {{manifest: a.yaml, hostnames: [{bad}], state: s1}}\n"
                )),
                format!(
                    "capsules[0]: hostnames: {text:?} is not a host name (dot-separated labels of letters, digits and '-'; no wildcard, port or trailing dot)"
                ),
            );
        }
        for bad in ["[]", "a.example", "[a, A]"] {
            assert!(
                shared(&format!(
                    "  - {{manifest: a.yaml, hostnames: {bad}, state: s1}}\n"
                ))
                .starts_with("capsules[0]: hostnames: "),
                "{bad}"
            );
        }
        assert_eq!(
            refused_in(
                &format!(
                    "{CONTROL}capsules:\n  - {{manifest: a.yaml, hostnames: [a.example], state: s1}}\n"
                ),
                &base
            ),
            "capsule alpha: hostnames: needs the file's top-level listen to be served on"
        );
    }

    #[test]
    fn the_file_needs_a_control_listener() {
        assert_eq!(refused("capsules: []\n"), "control: is required");
        assert_eq!(
            refused("control: {listen: 127.0.0.1:0, port: 1}\n"),
            "control: port: is not a key here (expected one of listen, token_file)"
        );
        assert_eq!(
            refused("control: {listen: 127.0.0.1:0}\nlisten: everywhere\n"),
            "listen: expected an address such as 127.0.0.1:41873, found 'everywhere'"
        );
    }

    /// Issue 37, "A public URL": validated at launch; the card's url is it
    /// without a trailing `/`.
    #[test]
    fn a_public_url_is_http_or_https_with_a_host_and_nothing_after_its_path() {
        assert_eq!(
            public_url("https://alpha.example.com/").unwrap(),
            "https://alpha.example.com"
        );
        assert_eq!(
            public_url("http://10.0.0.7:8080/capsules/alpha").unwrap(),
            "http://10.0.0.7:8080/capsules/alpha"
        );
        for bad in [
            "ftp://a.example",
            "a.example",
            "https://a.example/?x=1",
            "https://a.example/#x",
            "https://u:p@a.example",
            "",
        ] {
            assert!(public_url(bad).is_err(), "{bad}");
        }
    }
}
