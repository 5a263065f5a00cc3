//! The folders of a crate's `src/` are layers: each uses only the ones below
//! it, and inside a folder each module only the ones below it there, at
//! every depth. This test reads the sources of the host (`host/src`) and of
//! the door (`guest/src`) and fails on a `crate::` or `super::` path that
//! points up or sideways, on a module its table leaves out, and on a module
//! the README's layer tables leave out.

use std::collections::BTreeSet;
use std::path::Path;

/// A crate's layers: each folder whose modules are checked, by its path
/// below `src/` (`""` is `src/` itself, whose `lib.rs` sits above them
/// all), and its modules bottom to top; modules on one line use none of
/// each other, and the folder's `mod.rs` sits above them all. A module on a
/// line may be a folder with lines of its own, checked the same way, to any
/// depth; a folder with no lines is one module: its files share what its
/// `mod.rs` defines.
type Layers = &'static [(&'static str, &'static [&'static [&'static str]])];

/// The host's layers.
const HOST: Layers = &[
    // Bottom to top: each folder (or a file standing alone) above the ones
    // before it.
    (
        "",
        &[
            // The WIT as Rust types and host traits; what both control
            // surfaces are made of; the log and the traces.
            &["bindings", "surface", "telemetry"],
            &["manifest"],
            &["session"],
            &["imports"],
            &["sandbox"],
            &["versions"],
            &["listener"],
            &["hosting"],
        ],
    ),
    // The manifest, and the planes' exports it names.
    ("manifest", &[&["planes"]]),
    // The domain: process groups, tokens, peer handles, the task store and
    // hub, the agents, what the operator asks of the session, and the
    // session over them.
    (
        "session",
        &[
            &["process"],
            &["tokens"],
            &["handles"],
            &["tasks"],
            &["agents", "operator"],
        ],
    ),
    // The tasks: what every part speaks of, the ids, the state directory's
    // lock, the event log, what the session's own tasks say; then each
    // concern a type of its own, the record (`store`) among them; the
    // handle an agent gets, and the events a change writes; what an agent
    // is; the queue, each live task's lifecycle and the held tasks not
    // written yet; what is live, under one lock. The hub (`mod.rs`)
    // composes them.
    (
        "session/tasks",
        &[
            &["events", "ids", "lock", "model", "own"],
            &["delegations", "detached", "settled", "store"],
            &["handle", "record"],
            &["agent"],
            &["capacity", "lifecycle", "unwritten"],
            &["live"],
        ],
    ),
    // The record: a connection to its file, the columns' conversions, who
    // sees a task, the numbered writes; the readers and the checkpoints;
    // the store; its tables, its reads and writes; opening it.
    (
        "session/tasks/store",
        &[
            &["codecs", "file", "visibility", "writes"],
            &["checkpoint", "readers"],
            &["base"],
            &["queries", "schema"],
            &["open"],
        ],
    ),
    // The agents: the image files a process reads, then one agent a file
    // (`stdio` a folder: its lines, then the process that speaks them).
    (
        "session/agents",
        &[&["images"], &["command", "script", "stdio"]],
    ),
    ("session/agents/stdio", &[&["lines"], &["process"]]),
    // The door's imports: the request's context, then one file per WIT
    // interface over a view of it.
    (
        "imports",
        &[
            &["ctx"],
            &[
                "events",
                "request_body",
                "response_stream",
                "session",
                "task_store",
                "tokens",
            ],
        ],
    ),
    // The engine and one request's store, and what runs a door on them.
    (
        "sandbox",
        &[
            &["cpu", "memory"],
            &["request", "cache"],
            &["engine"],
            &["one_call"],
            &["idle"],
            &["framing"],
        ],
    ),
    // Versions of the door, and the operator's surface over them.
    ("versions", &[&["card", "reuse"], &["swap"], &["control"]]),
    // The listener and what it bounds; the native baseline it may answer
    // with (a benchmark-only build).
    (
        "listener",
        &[
            &[
                "admission",
                "body",
                "connections",
                "metrics",
                "native",
                "proxies",
                "redeems",
            ],
            &["failure"],
            &["response_body"],
            &["run"],
            &["server"],
            &["hostnames"],
            &["accept"],
        ],
    ),
    // The capsules file, a capsule's door, a host of them, its control.
    (
        "hosting",
        &[&["roster"], &["capsule"], &["host"], &["host_control"]],
    ),
];

/// The door's layers (`guest/src`).
const GUEST: Layers = &[
    // Bottom to top.
    (
        "",
        &[
            &["imports", "timestamp"],
            &["rpc"],
            &["methods", "planes"],
            &["door"],
            &["wasm"],
        ],
    ),
    // What the door asks the host: the facts it answers and the workdir it
    // preopens for a plane, then the trait over them.
    ("imports", &[&["model", "tree"]]),
    // The extensions' names and HTTP, every error, A2A-Version; JSON-RPC
    // framing in the folder's own file.
    ("rpc", &[&["extensions", "http"], &["errors"], &["version"]]),
    // The planes: exports and paths, then a file and a directory.
    ("planes", &[&["exports", "paths"], &["directory", "file"]]),
    // The A2A methods: the door extension's list and the wire's shapes,
    // then what reads them, then each method.
    (
        "methods",
        &[
            &["extension_methods", "message", "task"],
            &["agent_text", "listing"],
            &["send", "task_methods"],
            &["streams"],
        ],
    ),
    // The card and who may call; the check order over them.
    ("door", &[&["card", "security"]]),
    // The component's edge (wasm32 only). `convert` is included by `host`
    // (and by the host's native baseline), not a module of its own.
    (
        "wasm",
        &[
            &["convert", "files"],
            &["host"],
            &["body"],
            &["answer", "http"],
        ],
    ),
];

/// The lines of the folder at `folder` (`"listener"`, `"session/tasks"`),
/// or `None` for a file or a folder that is one module.
fn lines_of(layers: Layers, folder: &str) -> Option<&'static [&'static [&'static str]]> {
    layers
        .iter()
        .find(|(name, _)| *name == folder)
        .map(|(_, lines)| *lines)
}

/// One step of a module's place, in one folder: the module's name there
/// (`""` for the folder's `mod.rs`) and the rank of its line (a `mod.rs`
/// above every line).
#[derive(Clone, Debug, PartialEq)]
struct Step {
    name: String,
    rank: usize,
}

/// Where the module or item at `path` (`["listener", "server", ...]`)
/// sits: a step in each folder from `src/` down, until a file or a folder
/// that is one module. A name no line of its folder lists is an item of
/// that folder's `mod.rs`; a path that ends at a folder with lines is its
/// `mod.rs`.
fn place(layers: Layers, path: &[String]) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut folder = String::new();
    for name in path {
        let Some(lines) = lines_of(layers, &folder) else {
            return steps;
        };
        let Some(rank) = lines.iter().position(|line| line.contains(&name.as_str())) else {
            steps.push(Step {
                name: String::new(),
                rank: lines.len(),
            });
            return steps;
        };
        steps.push(Step {
            name: name.clone(),
            rank,
        });
        folder = if folder.is_empty() {
            name.clone()
        } else {
            format!("{folder}/{name}")
        };
    }
    if let Some(lines) = lines_of(layers, &folder) {
        steps.push(Step {
            name: String::new(),
            rank: lines.len(),
        });
    }
    steps
}

/// Whether the source file that is the module at `module` has a place of
/// its own: each folder with lines on its way lists it, or it is the
/// `mod.rs` of one.
fn listed(layers: Layers, module: &[String]) -> bool {
    let steps = place(layers, module);
    steps
        .iter()
        .position(|step| step.name.is_empty())
        .is_none_or(|at| at == module.len())
}

/// Whether code at `from` may use what is at `to`: in the first folder
/// where their places part, a lower line; or the same module.
fn may_use(from: &[Step], to: &[Step]) -> bool {
    match from.iter().zip(to).find(|(f, t)| f.name != t.name) {
        Some((f, t)) => t.rank < f.rank,
        None => true,
    }
}

/// The code of `source` outside `#[cfg(test)]` items and comments.
fn non_test_code(source: &str) -> String {
    let mut code = String::new();
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            // Skip the item that follows: one line, or a braced block.
            let mut depth = 0i32;
            for line in lines.by_ref() {
                depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
                if depth <= 0 && (line.contains('}') || line.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// The paths that `code`, in the module at `module` (`["listener",
/// "server"]`), names through `crate::` or `super::`, grouped imports
/// (`use crate::{a, b::{c, D}}`) included, each as far as it is written.
fn uses(code: &str, module: &[String]) -> BTreeSet<Vec<String>> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        paths(&code[at + "crate::".len()..], &[], &mut found);
    }
    for (at, _) in code.match_indices("super::") {
        // The first `super::` of a chain climbs as many levels as it has.
        if code[..at].ends_with("super::") {
            continue;
        }
        let mut rest = &code[at..];
        let mut base = module;
        while let Some(next) = rest.strip_prefix("super::") {
            base = &base[..base.len().saturating_sub(1)];
            rest = next;
        }
        paths(rest, base, &mut found);
    }
    found
}

/// Adds to `found` the paths `rest` names below `prefix`.
fn paths(rest: &str, prefix: &[String], found: &mut BTreeSet<Vec<String>>) {
    let rest = rest.trim_start();
    if let Some(group) = rest.strip_prefix('{') {
        for item in group_items(group) {
            paths(item, prefix, found);
        }
        return;
    }
    let name = ident(rest);
    if name.is_empty() || name == "self" {
        if !prefix.is_empty() {
            found.insert(prefix.to_vec());
        }
        return;
    }
    let mut path = prefix.to_vec();
    path.push(name.clone());
    match rest[name.len()..].trim_start().strip_prefix("::") {
        Some(next) => paths(next, &path, found),
        None => {
            found.insert(path);
        }
    }
}

/// The top-level items of a `{...}` group whose opening brace is already
/// read: `a, b::{c, d}, e` gives `a`, `b::{c, d}` and `e`.
fn group_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..at]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
}

/// The identifier `text` starts with, past leading whitespace.
fn ident(text: &str) -> String {
    text.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// Every `.rs` file below `dir`.
pub(crate) fn sources(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The module a source file is, from `src/`: `listener/server.rs` is
/// `["listener", "server"]`, a folder's `mod.rs` the folder, and the crate
/// root (`lib.rs`, `main.rs`) `[]`.
fn module_of(relative: &Path) -> Vec<String> {
    let mut path: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|last| last == "mod") || path == ["lib"] || path == ["main"] {
        path.pop();
    }
    path
}

/// The modules of `files` their folder declares under `#[cfg(test)]`
/// (`#[cfg(test)] mod tests;`): test code, as the items `non_test_code`
/// leaves out are.
fn test_modules(files: &[(String, String)]) -> BTreeSet<Vec<String>> {
    let mut tests = BTreeSet::new();
    for (relative, source) in files {
        let mut lines = source.lines().map(str::trim);
        while let Some(line) = lines.next() {
            if line != "#[cfg(test)]" {
                continue;
            }
            let declared = lines.next().unwrap_or("");
            let name = declared
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'));
            if let Some(name) = name {
                let mut module = module_of(Path::new(relative));
                module.push(name.to_string());
                tests.insert(module);
            }
        }
    }
    tests
}

/// What is wrong with the sources of `files` (`(path from src/, text)`)
/// against `layers`: a use that points up or sideways, a file no table
/// lists, a listed module no file is. `skip` names the modules left out
/// (this test); test modules are not checked.
fn check(layers: Layers, files: &[(String, String)], skip: &[&str]) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut seen = BTreeSet::new();
    let tests = test_modules(files);
    for (relative, source) in files {
        let module = module_of(Path::new(relative));
        if module.len() == 1 && skip.contains(&module[0].as_str()) || tests.contains(&module) {
            continue;
        }
        if !listed(layers, &module) {
            wrong.push(format!("{relative} is in no line of its folder"));
            continue;
        }
        let from = place(layers, &module);
        seen.insert(from.iter().map(|s| s.name.clone()).collect::<Vec<_>>());
        for used in uses(&non_test_code(source), &module) {
            if !may_use(&from, &place(layers, &used)) {
                wrong.push(format!("{relative} uses crate::{}", used.join("::")));
            }
        }
    }
    // Every listed module, and every listed folder's `mod.rs`, is a file.
    for (folder, lines) in layers {
        let at: Vec<String> = folder
            .split('/')
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        let modules = lines.iter().flat_map(|line| line.iter());
        for name in modules.map(|m| m.to_string()).chain([String::new()]) {
            let mut path = at.clone();
            path.push(name.clone());
            if !name.is_empty() && lines_of(layers, &path.join("/")).is_some() {
                // A folder with lines: its own entry checks it.
                continue;
            }
            if !seen.contains(&path) {
                wrong.push(format!("{} is listed but no file is", path.join("/")));
            }
        }
    }
    wrong
}

/// The `.rs` files below `src`, each as its path from `src` and its text.
fn read_sources(src: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files
        .into_iter()
        .filter(|file| file.file_name().is_none_or(|n| n != "tests.rs"))
        .map(|file| {
            let relative = file.strip_prefix(src).unwrap();
            let relative = relative.to_string_lossy().replace('\\', "/");
            (relative, std::fs::read_to_string(&file).unwrap())
        })
        .collect()
}

#[test]
fn each_host_module_uses_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let wrong = check(HOST, &read_sources(&src), &["layers"]);
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn each_door_module_uses_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest/src");
    let files = read_sources(&src);
    assert!(files.len() > 20, "{}", src.display());
    let wrong = check(GUEST, &files, &[]);
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Every folder and module of `layers` the README's table under `header`
/// leaves out.
fn left_out(layers: Layers, header: &str) -> Vec<&'static str> {
    let readme = include_str!("../../README.md");
    let table: String = readme
        .lines()
        .skip_while(|line| !line.starts_with(header))
        .take_while(|line| line.starts_with('|'))
        .collect();
    assert!(!table.is_empty(), "the README has no table {header}");
    layers
        .iter()
        .flat_map(|(_, lines)| lines.iter().flat_map(|line| line.iter().copied()))
        .filter(|name| {
            !table.contains(&format!("`{name}`")) && !table.contains(&format!("`{name}/`"))
        })
        .collect()
}

/// The README's layer tables name every folder and module of the tables.
#[test]
fn the_readme_names_every_module() {
    let host = left_out(HOST, "| Layer | Modules (`host/src/`)");
    assert!(
        host.is_empty(),
        "the host's layer table leaves out {host:?}"
    );
    let guest = left_out(GUEST, "| Layer | Modules (`guest/src/`)");
    assert!(
        guest.is_empty(),
        "the door's layer table leaves out {guest:?}"
    );
}

fn names(paths: &[&str]) -> BTreeSet<Vec<String>> {
    paths
        .iter()
        .map(|p| p.split("::").map(String::from).collect())
        .collect()
}

fn path(text: &str) -> Vec<String> {
    names(&[text]).pop_first().unwrap()
}

#[test]
fn a_use_of_a_higher_layer_is_found() {
    let code = non_test_code(
        "use crate::listener::server::Server;\n// crate::versions in a comment\n#[cfg(test)]\nmod tests {\n    use crate::versions::swap;\n}\n",
    );
    assert_eq!(uses(&code, &[]), names(&["listener::server::Server"]));
    let engine = place(HOST, &path("sandbox::engine"));
    let server = place(HOST, &path("listener::server::Server"));
    assert!(!may_use(&engine, &server) && may_use(&server, &engine));
}

/// A grouped import names each of its modules: no rustfmt setting that
/// merges imports can hide one.
#[test]
fn a_grouped_use_names_each_module() {
    let code = "use crate::{\n    listener::{body, server::Server},\n    versions::swap::{self, Doors},\n    bindings,\n};\nuse crate::{};\n";
    let expected = names(&[
        "listener::body",
        "listener::server::Server",
        "versions::swap",
        "versions::swap::Doors",
        "bindings",
    ]);
    assert_eq!(uses(code, &[]), expected);
}

/// `super::` climbs from the module it is written in, so a sibling reached
/// through it is checked like one reached through `crate::`.
#[test]
fn a_super_path_is_resolved_from_its_module() {
    let module = module_of(Path::new("listener/body.rs"));
    let code = "use super::server::Server;\nuse super::{admission, server};\nuse super::super::hosting::host;\n";
    let expected = names(&[
        "listener::server::Server",
        "listener::admission",
        "listener::server",
        "hosting::host",
    ]);
    assert_eq!(uses(code, &module), expected);
    let body = place(HOST, &module);
    let server = place(HOST, &path("listener::server"));
    let sibling = place(HOST, &path("listener::admission"));
    assert!(!may_use(&body, &server));
    assert!(
        !may_use(&body, &sibling),
        "modules on one line use none of each other"
    );
}

/// A table three folders deep, and sources that keep to it.
const DEEP: Layers = &[
    ("", &[&["low"], &["high"]]),
    ("high", &[&["base"], &["inner"], &["top"]]),
    ("high/inner", &[&["a", "b"], &["c"]]),
];

fn deep_sources(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut files = vec![
        ("lib.rs", "pub mod low;\npub mod high;\n"),
        ("low.rs", ""),
        ("high/mod.rs", "use crate::high::inner::c;\n"),
        ("high/base.rs", "use crate::low;\n"),
        ("high/inner/mod.rs", "use self::c::C;\n"),
        ("high/inner/a.rs", "use crate::high::base;\n"),
        ("high/inner/b.rs", "use super::super::base::B;\n"),
        (
            "high/inner/c.rs",
            "use super::{a, b::B};\nuse crate::low;\n",
        ),
        ("high/top.rs", "use super::inner::c::C;\n"),
    ];
    files.extend_from_slice(extra);
    files
        .iter()
        .map(|(path, code)| (path.to_string(), code.to_string()))
        .collect()
}

/// The checker holds at every depth: sources that keep to a table three
/// folders deep pass, and one import back up or sideways at the deepest
/// folder fails, whether through `crate::` or `super::`, as does a file
/// its folder's lines leave out.
#[test]
fn an_import_back_up_is_found_at_any_depth() {
    assert_eq!(check(DEEP, &deep_sources(&[]), &[]), Vec::<String>::new());
    let with = |path: &str, code: &str| {
        let mut files = deep_sources(&[]);
        files.retain(|(p, _)| p != path);
        files.push((path.to_string(), code.to_string()));
        check(DEEP, &files, &[])
    };
    // A module of `high/inner` using a higher line there, a sibling on its
    // line, its folder's `mod.rs`, and a folder above it.
    for (path, code) in [
        ("high/inner/a.rs", "use crate::high::inner::c::C;\n"),
        ("high/inner/a.rs", "use super::b;\n"),
        ("high/inner/b.rs", "use super::C;\n"),
        ("high/inner/c.rs", "use super::super::top;\n"),
        ("high/inner/c.rs", "use crate::high::{base, top::T};\n"),
        ("high/base.rs", "use crate::high::inner::a;\n"),
        ("low.rs", "use crate::high::inner::a::A;\n"),
    ] {
        let wrong = with(path, code);
        assert!(
            wrong
                .iter()
                .any(|w| w.starts_with(&format!("{path} uses crate::"))),
            "{path}: {code} {wrong:?}"
        );
    }
    let unlisted = check(DEEP, &deep_sources(&[("high/inner/d.rs", "")]), &[]);
    assert_eq!(unlisted, ["high/inner/d.rs is in no line of its folder"]);
    // A module its folder declares for tests alone is test code: unlisted,
    // and free to use what it tests.
    let mut tested = deep_sources(&[("high/inner/tests.rs", "use super::*;\nuse super::c::C;\n")]);
    for (path, code) in &mut tested {
        if path == "high/inner/mod.rs" {
            code.push_str("#[cfg(test)]\nmod tests;\n");
        }
    }
    assert_eq!(check(DEEP, &tested, &[]), Vec::<String>::new());
    let mut missing = deep_sources(&[]);
    missing.retain(|(p, _)| p != "high/inner/b.rs");
    assert_eq!(
        check(DEEP, &missing, &[]),
        ["high/inner/b is listed but no file is"]
    );
}
