//! The capsule manifest: the subset of murmur.yaml the door reads.
//!
//! The YAML is walked by hand as a `serde_yaml::Value` so that every error
//! names the full dotted key. Keys the door does not read are ignored: a full
//! murmur.yaml carries many more. A key set to null counts as absent, except
//! `network.authentication`, whose mere presence asks for an authenticated
//! door: that fails closed rather than serving a public one.

pub mod planes;

use crate::manifest::planes::Exports;
use std::fmt;
use std::path::Path;

use serde_yaml::Value;

/// `lifecycle.task_acceptance`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TaskAcceptance {
    /// `none`: the door serves no method that starts a task.
    None,
    /// `single`: one live task; a new one is rejected while it runs.
    #[default]
    Single,
    /// `queue`: tasks wait their turn, one running at a time.
    Queue,
}

/// `inference.transport`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// `http`: the capsule reaches its model over HTTP.
    #[default]
    Http,
    /// `process`: through a harness process, which also reports quota and
    /// suggested prompts.
    Process,
}

/// What a token may reach: a door method, or the operator plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// `SendMessage`: start a task, or answer one waiting for input.
    SendMessage,
    /// `SendStreamingMessage`: the same, answered as a stream of the task's events.
    SendStreamingMessage,
    /// `murmur.WatchSession`: a stream of every task's events.
    WatchSession,
    /// `GetTask`: read one task.
    GetTask,
    /// `ListTasks`: page through the tasks the caller sees.
    ListTasks,
    /// `CancelTask`: end a live task, listing what it leaves running.
    CancelTask,
    /// `SubscribeToTask`: a stream of one live task's events.
    SubscribeToTask,
    /// `murmur.StopSession`: end the session.
    StopSession,
    /// `resources/files`: the operator plane's exported files.
    ResourcesFiles,
}

impl Scope {
    /// Every scope, each once: the operator token reaches them all.
    pub const ALL: [Scope; 9] = [
        Scope::SendMessage,
        Scope::SendStreamingMessage,
        Scope::WatchSession,
        Scope::GetTask,
        Scope::ListTasks,
        Scope::CancelTask,
        Scope::SubscribeToTask,
        Scope::StopSession,
        Scope::ResourcesFiles,
    ];

    /// The name a manifest lists, which is also the method it reaches.
    pub fn name(self) -> &'static str {
        match self {
            Scope::SendMessage => "SendMessage",
            Scope::SendStreamingMessage => "SendStreamingMessage",
            Scope::WatchSession => "murmur.WatchSession",
            Scope::GetTask => "GetTask",
            Scope::ListTasks => "ListTasks",
            Scope::CancelTask => "CancelTask",
            Scope::SubscribeToTask => "SubscribeToTask",
            Scope::StopSession => "murmur.StopSession",
            Scope::ResourcesFiles => "resources/files",
        }
    }

    /// The scope named `name` as a manifest lists it; None for any other name,
    /// an A2A 0.3 one included.
    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.name() == name)
    }

    /// The v1.0 scope replacing an A2A 0.3 name, so the refusal can say what to write.
    fn replacing_a2a_03(name: &str) -> Option<Scope> {
        match name {
            "message/send" => Some(Scope::SendMessage),
            "message/stream" => Some(Scope::SendStreamingMessage),
            "tasks/get" => Some(Scope::GetTask),
            "tasks/cancel" => Some(Scope::CancelTask),
            "tasks/resubscribe" => Some(Scope::SubscribeToTask),
            "stream/watch" => Some(Scope::WatchSession),
            "session/stop" => Some(Scope::StopSession),
            _ => None,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A credential declared under `network.authentication.credentials`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    /// Its key under `credentials`, and its token's key in the tokens file.
    pub name: String,
    /// De-duplicated, in manifest order.
    pub scopes: Vec<Scope>,
}

/// What the door reads of a capsule's murmur.yaml.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// `name`, required: the card's name.
    pub name: String,
    /// `version`, required: the card's version.
    pub version: String,
    /// `tools`: the installed artifacts the model can call, in manifest order.
    pub tools: Vec<String>,
    /// `lifecycle.task_acceptance`: how many tasks the capsule takes at once.
    pub task_acceptance: TaskAcceptance,
    /// `lifecycle.after_task: exit`: the capsule exits once its launch task
    /// has ended. Any other value keeps it running.
    pub exit_after_task: bool,
    /// `capabilities.shell.allow`
    pub shell_allow: Vec<String>,
    /// `capabilities.network.allow`
    pub network_allow: Vec<String>,
    /// Some exactly when `network.authentication` is declared; manifest order.
    pub credentials: Option<Vec<Credential>>,
    /// `exports.files`, when declared: what the operator plane exports.
    pub files: Option<Exports>,
    /// `exports.peer_files`, when declared: what the peer plane exports.
    pub peer_files: Option<Exports>,
    /// `exports.peer_tasks.accept`
    pub peer_tasks_accept: bool,
    /// `inference.transport`: how the capsule reaches its model.
    pub transport: Transport,
    /// `context.images.max_bytes`
    pub image_max_bytes: u64,
    /// `context.images.max_per_turn`
    pub image_max_per_turn: u32,
}

const DEFAULT_IMAGE_MAX_BYTES: u64 = 5 * 1024 * 1024;
const DEFAULT_IMAGE_MAX_PER_TURN: u32 = 4;

const AUTHENTICATION: &str = "network.authentication";
const SCHEME: &str = "network.authentication.scheme";
const CREDENTIALS: &str = "network.authentication.credentials";

/// A manifest the door cannot run: `key` is the dotted key at fault, or ""
/// when the file cannot be read or is not YAML.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestError {
    /// The dotted key at fault, or "".
    pub key: String,
    /// What is wrong, without the key.
    pub message: String,
}

impl ManifestError {
    fn new(key: &str, message: impl Into<String>) -> ManifestError {
        ManifestError {
            key: key.to_string(),
            message: message.into(),
        }
    }

    fn expected(key: &str, what: &str, found: &Value) -> ManifestError {
        ManifestError::new(key, format!("expected {what}, found {}", kind(found)))
    }
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ManifestError {}

impl Manifest {
    /// Reads and parses the manifest at `path`; a file that cannot be read is
    /// an error with key "".
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        let yaml = std::fs::read_to_string(path).map_err(|err| {
            ManifestError::new("", format!("cannot read {}: {err}", path.display()))
        })?;
        Manifest::parse(&yaml)
    }

    /// Parses a manifest's YAML text, checking every key the door reads.
    pub fn parse(yaml: &str) -> Result<Manifest, ManifestError> {
        let mut root: Value =
            serde_yaml::from_str(yaml).map_err(|err| ManifestError::new("", err.to_string()))?;
        // `<<: *anchor` is YAML a hand-written manifest may use.
        root.apply_merge()
            .map_err(|err| ManifestError::new("", err.to_string()))?;
        if !matches!(root, Value::Mapping(_) | Value::Null) {
            return Err(ManifestError::expected(
                "",
                "a mapping at the top level",
                &root,
            ));
        }
        let root = &root;

        Ok(Manifest {
            name: required_text(root, "name")?,
            version: required_text(root, "version")?,
            tools: string_list(root, "tools")?,
            task_acceptance: choice(
                root,
                "lifecycle.task_acceptance",
                &[
                    ("single", TaskAcceptance::Single),
                    ("queue", TaskAcceptance::Queue),
                    ("none", TaskAcceptance::None),
                ],
            )?
            .unwrap_or_default(),
            exit_after_task: match get(root, "lifecycle.after_task")? {
                None => false,
                Some(Value::String(after)) => after == "exit",
                Some(other) => {
                    return Err(ManifestError::expected(
                        "lifecycle.after_task",
                        "a string",
                        other,
                    ));
                }
            },
            shell_allow: string_list(root, "capabilities.shell.allow")?,
            network_allow: string_list(root, "capabilities.network.allow")?,
            credentials: credentials(root)?,
            files: exported(root, "exports.files")?,
            peer_files: exported(root, "exports.peer_files")?,
            peer_tasks_accept: flag(root, "exports.peer_tasks.accept")?.unwrap_or(false),
            transport: choice(
                root,
                "inference.transport",
                &[("http", Transport::Http), ("process", Transport::Process)],
            )?
            .unwrap_or_default(),
            image_max_bytes: integer(root, "context.images.max_bytes", 1)?
                .unwrap_or(DEFAULT_IMAGE_MAX_BYTES),
            image_max_per_turn: integer(root, "context.images.max_per_turn", 0)?
                .unwrap_or(DEFAULT_IMAGE_MAX_PER_TURN),
        })
    }
}

/// A name a capsule or a formation member may take: 1 to 64 letters,
/// digits, `-`, `_` or `.`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// How an error names a value of the wrong type.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// The value at a dotted key, null included; None when it or a parent is
/// absent or null. A parent of another type is an error naming that parent.
fn entry<'a>(root: &'a Value, key: &str) -> Result<Option<&'a Value>, ManifestError> {
    let mut here = root;
    let mut parent = 0;
    for segment in key.split('.') {
        let map = match here {
            Value::Null => return Ok(None),
            Value::Mapping(map) => map,
            other => {
                let parent = &key[..parent.max(1) - 1];
                return Err(ManifestError::expected(parent, "a mapping", other));
            }
        };
        match map.get(segment) {
            Some(value) => here = value,
            None => return Ok(None),
        }
        parent += segment.len() + 1;
    }
    Ok(Some(here))
}

/// The value at a dotted key, treating null as absent.
fn get<'a>(root: &'a Value, key: &str) -> Result<Option<&'a Value>, ManifestError> {
    Ok(entry(root, key)?.filter(|value| !value.is_null()))
}

/// A required, non-blank string without control characters (the name lands
/// in a WWW-Authenticate realm, where a control character breaks the header).
fn required_text(root: &Value, key: &str) -> Result<String, ManifestError> {
    let text = match get(root, key)? {
        None => return Err(ManifestError::new(key, "is required")),
        Some(Value::String(text)) => text,
        Some(other) => return Err(ManifestError::expected(key, "a string", other)),
    };
    if text.trim().is_empty() {
        return Err(ManifestError::new(key, "is required"));
    }
    if text.chars().any(char::is_control) {
        return Err(ManifestError::new(
            key,
            "must not contain control characters",
        ));
    }
    Ok(text.clone())
}

fn string_list(root: &Value, key: &str) -> Result<Vec<String>, ManifestError> {
    match get(root, key)? {
        None => Ok(Vec::new()),
        Some(value) => strings(key, value),
    }
}

fn strings(key: &str, value: &Value) -> Result<Vec<String>, ManifestError> {
    let Value::Sequence(items) = value else {
        return Err(ManifestError::expected(key, "a list of strings", value));
    };
    items
        .iter()
        .enumerate()
        .map(|(index, item)| match item {
            Value::String(text) => Ok(text.clone()),
            other => Err(ManifestError::new(
                key,
                format!(
                    "expected a list of strings, found {} at index {index}",
                    kind(other)
                ),
            )),
        })
        .collect()
}

/// One of a fixed set of strings; the error lists them all.
fn choice<T: Copy>(
    root: &Value,
    key: &str,
    options: &[(&str, T)],
) -> Result<Option<T>, ManifestError> {
    let Some(value) = get(root, key)? else {
        return Ok(None);
    };
    let found = match value {
        Value::String(text) => match options.iter().find(|(name, _)| name == text) {
            Some((_, chosen)) => return Ok(Some(*chosen)),
            None => format!("'{text}'"),
        },
        other => kind(other).to_string(),
    };
    let names: Vec<&str> = options.iter().map(|(name, _)| *name).collect();
    Err(ManifestError::new(
        key,
        format!("expected one of {}, found {found}", names.join(", ")),
    ))
}

fn flag(root: &Value, key: &str) -> Result<Option<bool>, ManifestError> {
    match get(root, key)? {
        None => Ok(None),
        Some(Value::Bool(flag)) => Ok(Some(*flag)),
        Some(other) => Err(ManifestError::expected(key, "a boolean", other)),
    }
}

/// An integer of at least `min` that fits in `T`.
fn integer<T: TryFrom<u64>>(root: &Value, key: &str, min: u64) -> Result<Option<T>, ManifestError> {
    let Some(value) = get(root, key)? else {
        return Ok(None);
    };
    let found = match value {
        Value::Number(number) => match number.as_u64() {
            Some(n) if n >= min => match T::try_from(n) {
                Ok(n) => return Ok(Some(n)),
                Err(_) => format!("{n}, which is too large"),
            },
            _ => number.to_string(),
        },
        other => kind(other).to_string(),
    };
    let what = if min == 0 {
        "a non-negative integer"
    } else {
        "a positive integer"
    };
    Err(ManifestError::new(
        key,
        format!("expected {what}, found {found}"),
    ))
}

/// An export is declared by a list of workdir-relative paths and globs, or
/// by a mapping: `{root: DIR}` exports DIR and everything under it, and a
/// mapping without `root` (`{}`) declares the plane with nothing exported
/// yet. Other keys of the mapping are not read.
fn exported(root: &Value, key: &str) -> Result<Option<Exports>, ManifestError> {
    let patterns = match get(root, key)? {
        None => return Ok(None),
        Some(Value::Mapping(mapping)) => match mapping.get("root") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(dir)) => vec![dir.clone()],
            Some(other) => {
                return Err(ManifestError::expected(
                    &format!("{key}.root"),
                    "a workdir-relative path",
                    other,
                ));
            }
        },
        Some(list @ Value::Sequence(_)) => strings(key, list)?,
        Some(other) => {
            return Err(ManifestError::expected(
                key,
                "a list of paths or a mapping",
                other,
            ));
        }
    };
    Exports::new(patterns)
        .map(Some)
        .map_err(|why| ManifestError::new(key, why))
}

fn credentials(root: &Value) -> Result<Option<Vec<Credential>>, ManifestError> {
    match entry(root, AUTHENTICATION)? {
        None => return Ok(None),
        Some(Value::Null | Value::Mapping(_)) => {}
        Some(other) => return Err(ManifestError::expected(AUTHENTICATION, "a mapping", other)),
    }
    if choice(root, SCHEME, &[("bearer", ())])?.is_none() {
        return Err(ManifestError::new(SCHEME, "is required"));
    }
    // Absent or empty: no declared credentials, but the door still needs the operator token.
    let declared = match get(root, CREDENTIALS)? {
        None => return Ok(Some(Vec::new())),
        Some(Value::Mapping(declared)) => declared,
        Some(other) => {
            return Err(ManifestError::expected(
                CREDENTIALS,
                "a mapping of credential names",
                other,
            ));
        }
    };
    declared
        .iter()
        .map(|(name, body)| credential(name, body))
        .collect::<Result<_, _>>()
        .map(Some)
}

fn credential(name: &Value, body: &Value) -> Result<Credential, ManifestError> {
    let Value::String(name) = name else {
        return Err(ManifestError::new(
            CREDENTIALS,
            format!("a credential name is a string, found {}", kind(name)),
        ));
    };
    if name.is_empty() {
        return Err(ManifestError::new(
            CREDENTIALS,
            "a credential name must not be empty",
        ));
    }
    let key = format!("{CREDENTIALS}.{name}");
    if name.chars().any(char::is_control) {
        return Err(ManifestError::new(
            &key,
            "a credential name must not contain control characters",
        ));
    }
    if name == "operator" {
        return Err(ManifestError::new(
            &key,
            "'operator' is reserved: the operator token is always minted",
        ));
    }
    if name.starts_with("member:") {
        return Err(ManifestError::new(
            &key,
            "a name starting with 'member:' is reserved for formation members",
        ));
    }

    let Value::Mapping(body) = body else {
        return Err(ManifestError::expected(&key, "a mapping with scopes", body));
    };
    let scopes_key = format!("{key}.scopes");
    let listed = match body.get("scopes") {
        None | Some(Value::Null) => return Err(ManifestError::new(&scopes_key, "is required")),
        Some(listed) => strings(&scopes_key, listed)?,
    };
    let mut scopes = Vec::new();
    for listed in &listed {
        let scope = scope(&scopes_key, listed)?;
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    Ok(Credential {
        name: name.clone(),
        scopes,
    })
}

fn scope(key: &str, name: &str) -> Result<Scope, ManifestError> {
    if let Some(scope) = Scope::parse(name) {
        return Ok(scope);
    }
    let message = match Scope::replacing_a2a_03(name) {
        Some(scope) => format!("'{name}' is an A2A 0.3 scope name; use '{scope}'"),
        None => format!(
            "unknown scope '{name}'; a scope is one of {}",
            Scope::ALL.map(Scope::name).join(", ")
        ),
    };
    Err(ManifestError::new(key, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(yaml: &str) -> ManifestError {
        Manifest::parse(yaml).expect_err("the manifest should be refused")
    }

    /// A minimal valid manifest with `extra` appended.
    fn with(extra: &str) -> String {
        format!("name: my-agent\nversion: 0.1.0\n{extra}")
    }

    fn assert_error(yaml: &str, key: &str, message: &str) {
        let err = error(yaml);
        assert_eq!(
            (err.key.as_str(), err.message.as_str()),
            (key, message),
            "for:\n{yaml}"
        );
    }

    #[test]
    fn full_manifest() {
        let manifest = Manifest::parse(
            r#"
name: my-agent
version: 0.1.0
description: ignored, like every key the door does not read
tools: [bash, read_file]
lifecycle:
  task_acceptance: queue
  max_turns: 40
capabilities:
  shell:
    allow: [git, cargo]
  network:
    allow: [api.example.com]
network:
  authentication:
    scheme: bearer
    credentials:
      watcher:
        scopes: [murmur.WatchSession, GetTask, GetTask]
      client:
        scopes: [SendMessage, SendStreamingMessage, resources/files]
exports:
  files: [out/**, report.md]
  peer_files:
    root: shared
  peer_tasks:
    accept: true
inference:
  transport: process
context:
  images:
    max_bytes: 1048576
    max_per_turn: 0
"#,
        )
        .unwrap();
        assert_eq!(
            manifest,
            Manifest {
                name: "my-agent".into(),
                version: "0.1.0".into(),
                tools: vec!["bash".into(), "read_file".into()],
                task_acceptance: TaskAcceptance::Queue,
                exit_after_task: false,
                shell_allow: vec!["git".into(), "cargo".into()],
                network_allow: vec!["api.example.com".into()],
                credentials: Some(vec![
                    Credential {
                        name: "watcher".into(),
                        scopes: vec![Scope::WatchSession, Scope::GetTask],
                    },
                    Credential {
                        name: "client".into(),
                        scopes: vec![
                            Scope::SendMessage,
                            Scope::SendStreamingMessage,
                            Scope::ResourcesFiles
                        ],
                    },
                ]),
                files: Some(Exports(vec!["out/**".into(), "report.md".into()])),
                peer_files: Some(Exports(vec!["shared".into()])),
                peer_tasks_accept: true,
                transport: Transport::Process,
                image_max_bytes: 1_048_576,
                image_max_per_turn: 0,
            }
        );
    }

    #[test]
    fn defaults() {
        let manifest = Manifest::parse(&with("")).unwrap();
        assert_eq!(
            manifest,
            Manifest {
                name: "my-agent".into(),
                version: "0.1.0".into(),
                tools: vec![],
                task_acceptance: TaskAcceptance::Single,
                exit_after_task: false,
                shell_allow: vec![],
                network_allow: vec![],
                credentials: None,
                files: None,
                peer_files: None,
                peer_tasks_accept: false,
                transport: Transport::Http,
                image_max_bytes: 5_242_880,
                image_max_per_turn: 4,
            }
        );
    }

    #[test]
    fn null_blocks_count_as_absent() {
        let manifest =
            Manifest::parse(&with("tools:\ncapabilities:\nexports:\n  files: ~\n")).unwrap();
        assert!(manifest.tools.is_empty());
        assert_eq!(manifest.files, None);
    }

    #[test]
    fn authentication_without_credentials() {
        for auth in [
            "network:\n  authentication:\n    scheme: bearer\n",
            "network:\n  authentication:\n    scheme: bearer\n    credentials: {}\n",
            "network:\n  authentication:\n    scheme: bearer\n    credentials:\n",
        ] {
            let manifest = Manifest::parse(&with(auth)).unwrap();
            assert_eq!(manifest.credentials, Some(vec![]), "for:\n{auth}");
        }
    }

    #[test]
    fn an_empty_scope_list_is_allowed() {
        let manifest = Manifest::parse(&with(
            "network:\n  authentication:\n    scheme: bearer\n    credentials:\n      card: {scopes: []}\n",
        ))
        .unwrap();
        assert_eq!(manifest.credentials.unwrap()[0].scopes, vec![]);
    }

    #[test]
    fn merge_keys_are_applied() {
        let manifest = Manifest::parse(&with(
            "base: &base\n  allow: [git]\ncapabilities:\n  shell:\n    <<: *base\n",
        ))
        .unwrap();
        assert_eq!(manifest.shell_allow, vec!["git".to_string()]);
    }

    #[test]
    fn wrong_types() {
        let cases = [
            (
                "name: [a]\nversion: 1.0.0\n",
                "name",
                "expected a string, found a list",
            ),
            (
                "name: a\nversion: 1.0\n",
                "version",
                "expected a string, found a number",
            ),
            (
                "tools: bash\n",
                "tools",
                "expected a list of strings, found a string",
            ),
            (
                "tools: [bash, 3]\n",
                "tools",
                "expected a list of strings, found a number at index 1",
            ),
            (
                "lifecycle: single\n",
                "lifecycle",
                "expected a mapping, found a string",
            ),
            (
                "lifecycle:\n  task_acceptance: 1\n",
                "lifecycle.task_acceptance",
                "expected one of single, queue, none, found a number",
            ),
            (
                "capabilities:\n  shell:\n    allow: git\n",
                "capabilities.shell.allow",
                "expected a list of strings, found a string",
            ),
            (
                "capabilities:\n  shell: [git]\n",
                "capabilities.shell",
                "expected a mapping, found a list",
            ),
            (
                "capabilities:\n  network:\n    allow: {a: b}\n",
                "capabilities.network.allow",
                "expected a list of strings, found a mapping",
            ),
            (
                "network: bearer\n",
                "network",
                "expected a mapping, found a string",
            ),
            (
                "network:\n  authentication: bearer\n",
                "network.authentication",
                "expected a mapping, found a string",
            ),
            (
                "network:\n  authentication:\n    scheme: [bearer]\n",
                "network.authentication.scheme",
                "expected one of bearer, found a list",
            ),
            (
                "network:\n  authentication:\n    scheme: bearer\n    credentials: [watcher]\n",
                "network.authentication.credentials",
                "expected a mapping of credential names, found a list",
            ),
            (
                "network:\n  authentication:\n    scheme: bearer\n    credentials:\n      watcher: GetTask\n",
                "network.authentication.credentials.watcher",
                "expected a mapping with scopes, found a string",
            ),
            (
                "network:\n  authentication:\n    scheme: bearer\n    credentials:\n      watcher:\n        scopes: GetTask\n",
                "network.authentication.credentials.watcher.scopes",
                "expected a list of strings, found a string",
            ),
            (
                "network:\n  authentication:\n    scheme: bearer\n    credentials:\n      1: {scopes: [GetTask]}\n",
                "network.authentication.credentials",
                "a credential name is a string, found a number",
            ),
            (
                "exports:\n  files: true\n",
                "exports.files",
                "expected a list of paths or a mapping, found a boolean",
            ),
            (
                "exports:\n  files: out/\n",
                "exports.files",
                "expected a list of paths or a mapping, found a string",
            ),
            (
                "exports:\n  peer_files: [1]\n",
                "exports.peer_files",
                "expected a list of strings, found a number at index 0",
            ),
            // Issue 33: the launch stops, naming the key, on an absolute
            // path, a `..` segment or a glob that does not parse.
            (
                "exports:\n  files: [out/**, /etc/passwd]\n",
                "exports.files",
                "\"/etc/passwd\" is absolute: exports are relative to the workdir",
            ),
            (
                "exports:\n  peer_files: [shared/../..]\n",
                "exports.peer_files",
                "\"shared/../..\" has a `..` segment: exports stay inside the workdir",
            ),
            (
                "exports:\n  files: ['logs/[a-']\n",
                "exports.files",
                "\"logs/[a-\" invalid range pattern",
            ),
            (
                "exports:\n  files: {root: /srv}\n",
                "exports.files",
                "\"/srv\" is absolute: exports are relative to the workdir",
            ),
            (
                "exports:\n  files: {root: [a]}\n",
                "exports.files.root",
                "expected a workdir-relative path, found a list",
            ),
            (
                "exports:\n  peer_tasks:\n    accept: 'yes'\n",
                "exports.peer_tasks.accept",
                "expected a boolean, found a string",
            ),
            (
                "exports:\n  peer_tasks: true\n",
                "exports.peer_tasks",
                "expected a mapping, found a boolean",
            ),
            (
                "inference:\n  transport: true\n",
                "inference.transport",
                "expected one of http, process, found a boolean",
            ),
            (
                "context:\n  images:\n    max_bytes: 5MiB\n",
                "context.images.max_bytes",
                "expected a positive integer, found a string",
            ),
            (
                "context:\n  images:\n    max_bytes: 0\n",
                "context.images.max_bytes",
                "expected a positive integer, found 0",
            ),
            (
                "context:\n  images:\n    max_bytes: 1.5\n",
                "context.images.max_bytes",
                "expected a positive integer, found 1.5",
            ),
            (
                "context:\n  images:\n    max_per_turn: -1\n",
                "context.images.max_per_turn",
                "expected a non-negative integer, found -1",
            ),
            (
                "context:\n  images:\n    max_per_turn: 5000000000\n",
                "context.images.max_per_turn",
                "expected a non-negative integer, found 5000000000, which is too large",
            ),
        ];
        for (extra, key, message) in cases {
            let yaml = if extra.starts_with("name:") {
                extra.to_string()
            } else {
                with(extra)
            };
            assert_error(&yaml, key, message);
        }
    }

    #[test]
    fn error_display_names_the_key() {
        let err = error(&with("capabilities:\n  shell:\n    allow: git\n"));
        assert_eq!(
            err.to_string(),
            "capabilities.shell.allow: expected a list of strings, found a string"
        );
    }

    #[test]
    fn name_and_version_are_required() {
        assert_error("version: 0.1.0\n", "name", "is required");
        assert_error("name: ''\nversion: 0.1.0\n", "name", "is required");
        assert_error("name:\nversion: 0.1.0\n", "name", "is required");
        assert_error("name: a\n", "version", "is required");
        assert_error("name: a\nversion: ' '\n", "version", "is required");
        assert_error("", "name", "is required");
        assert_error(
            "name: \"a\\nb\"\nversion: 0.1.0\n",
            "name",
            "must not contain control characters",
        );
    }

    #[test]
    fn the_top_level_is_a_mapping() {
        assert_error(
            "- name\n",
            "",
            "expected a mapping at the top level, found a list",
        );
    }

    fn credentials_with(scopes: &str) -> String {
        with(&format!(
            "network:\n  authentication:\n    scheme: bearer\n    credentials:\n      watcher:\n        scopes: {scopes}\n"
        ))
    }

    #[test]
    fn unknown_scope() {
        assert_error(
            &credentials_with("[GetTask, sendmessage]"),
            "network.authentication.credentials.watcher.scopes",
            "unknown scope 'sendmessage'; a scope is one of SendMessage, SendStreamingMessage, \
             murmur.WatchSession, GetTask, ListTasks, CancelTask, SubscribeToTask, \
             murmur.StopSession, resources/files",
        );
    }

    #[test]
    fn a2a_03_scope_names_name_their_replacement() {
        for (old, new) in [
            ("message/send", "SendMessage"),
            ("message/stream", "SendStreamingMessage"),
            ("tasks/get", "GetTask"),
            ("tasks/cancel", "CancelTask"),
            ("tasks/resubscribe", "SubscribeToTask"),
            ("stream/watch", "murmur.WatchSession"),
            ("session/stop", "murmur.StopSession"),
        ] {
            assert_error(
                &credentials_with(&format!("['{old}']")),
                "network.authentication.credentials.watcher.scopes",
                &format!("'{old}' is an A2A 0.3 scope name; use '{new}'"),
            );
        }
    }

    #[test]
    fn scope_names_round_trip() {
        for scope in Scope::ALL {
            assert_eq!(Scope::parse(scope.name()), Some(scope));
        }
        assert_eq!(Scope::parse("getTask"), None);
    }

    #[test]
    fn scopes_are_required() {
        assert_error(
            &with(
                "network:\n  authentication:\n    scheme: bearer\n    credentials:\n      watcher: {}\n",
            ),
            "network.authentication.credentials.watcher.scopes",
            "is required",
        );
    }

    #[test]
    fn reserved_credential_names() {
        let named = |name: &str| {
            with(&format!(
                "network:\n  authentication:\n    scheme: bearer\n    credentials:\n      '{name}': {{scopes: [GetTask]}}\n"
            ))
        };
        assert_error(
            &named("operator"),
            "network.authentication.credentials.operator",
            "'operator' is reserved: the operator token is always minted",
        );
        assert_error(
            &named("member:alice"),
            "network.authentication.credentials.member:alice",
            "a name starting with 'member:' is reserved for formation members",
        );
        assert_error(
            &named(""),
            "network.authentication.credentials",
            "a credential name must not be empty",
        );
    }

    #[test]
    fn bad_enum_values() {
        assert_error(
            &with("lifecycle:\n  task_acceptance: sometimes\n"),
            "lifecycle.task_acceptance",
            "expected one of single, queue, none, found 'sometimes'",
        );
        assert_error(
            &with("inference:\n  transport: grpc\n"),
            "inference.transport",
            "expected one of http, process, found 'grpc'",
        );
        assert_error(
            &with("network:\n  authentication:\n    scheme: basic\n"),
            "network.authentication.scheme",
            "expected one of bearer, found 'basic'",
        );
    }

    #[test]
    fn authentication_needs_a_scheme() {
        for auth in [
            "network:\n  authentication:\n",
            "network:\n  authentication:\n    credentials: {}\n",
        ] {
            assert_error(&with(auth), "network.authentication.scheme", "is required");
        }
    }

    #[test]
    fn yaml_syntax_error() {
        let err = error("name: [unclosed\nversion: 0.1.0\n");
        assert_eq!(err.key, "");
        assert!(err.message.contains("line"), "{err}");
        assert_eq!(err.to_string(), err.message);
    }

    #[test]
    fn load_names_the_path() {
        let path = Path::new("/nonexistent/murmur.yaml");
        let err = Manifest::load(path).unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/murmur.yaml"),
            "{err}"
        );
    }
}
