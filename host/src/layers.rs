//! The folders of `src/` are layers: each uses only the ones below it, and
//! inside a folder each module only the ones below it there. This test
//! reads the sources and fails on a `crate::` or `super::` path that points
//! up or sideways, and on a module the README's layer table leaves out.

use std::collections::BTreeSet;
use std::path::Path;

/// Bottom to top: each folder of `src/` (or a file standing alone) and its
/// modules, bottom to top; modules on one line use none of each other, and
/// a folder's `mod.rs` sits above them all. A folder with no lines is one
/// module: its files share what its `mod.rs` defines.
const LAYERS: &[(&str, &[&[&str]])] = &[
    // The WIT as Rust types and host traits.
    ("bindings", &[]),
    // The manifest, and the planes' exports it names.
    ("manifest", &[&["planes"]]),
    // The domain: process groups, tokens, peer handles, the task store and
    // hub, the agents, and the session over them.
    (
        "session",
        &[
            &["process"],
            &["tokens"],
            &["handles"],
            &["tasks"],
            &["agents"],
        ],
    ),
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
            &["framing"],
            &["idle"],
        ],
    ),
    // Versions of the door, and the operator's surface over them.
    (
        "versions",
        &[&["card_cache", "reuse"], &["swap"], &["control"]],
    ),
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
            &["answer"],
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

/// A place in the layers: a folder's rank, a module's rank inside it (the
/// folder's `mod.rs` above every module), and the module's name.
#[derive(Debug, PartialEq)]
struct Place {
    folder: usize,
    rank: usize,
    module: String,
}

/// Where the module at `path` (`["listener", "server", ...]`) sits, or
/// `None` for a path outside every folder.
fn place(path: &[String]) -> Option<Place> {
    let folder = LAYERS
        .iter()
        .position(|(name, _)| Some(*name) == path.first().map(String::as_str))?;
    let lines = LAYERS[folder].1;
    let found = path.get(1).and_then(|module| {
        let rank = lines
            .iter()
            .position(|line| line.contains(&module.as_str()))?;
        Some((rank, module.clone()))
    });
    let (rank, module) = found.unwrap_or((lines.len(), String::new()));
    Some(Place {
        folder,
        rank,
        module,
    })
}

/// Whether code at `from` may use what is at `to`: a lower folder, or in
/// its own folder itself or a lower line.
fn may_use(from: &Place, to: &Place) -> bool {
    if from.folder != to.folder {
        return to.folder < from.folder;
    }
    to.module == from.module || to.rank < from.rank
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

/// The paths (a folder, and a module in it when named) that `code`, in the
/// module at `module` (`["listener", "server"]`), names through `crate::`
/// or `super::`, grouped imports (`use crate::{a, b::{c, D}}`) included.
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

/// Adds to `found` the paths `rest` names below `prefix`, up to a folder
/// and a module.
fn paths(rest: &str, prefix: &[String], found: &mut BTreeSet<Vec<String>>) {
    if prefix.len() == 2 {
        found.insert(prefix.to_vec());
        return;
    }
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
/// `["listener", "server"]`, a folder's `mod.rs` the folder.
fn module_of(relative: &Path) -> Vec<String> {
    let mut path: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
}

#[test]
fn each_module_uses_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut wrong = Vec::new();
    let mut seen = BTreeSet::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let module = module_of(relative);
        // The crate root, the binary, test files and this test.
        if [["lib"], ["main"], ["layers"]].iter().any(|m| module == m)
            || file.file_name().is_some_and(|n| n == "tests.rs")
        {
            continue;
        }
        let Some(from) = place(&module) else {
            wrong.push(format!("{} is in no layer of LAYERS", relative.display()));
            continue;
        };
        seen.insert((LAYERS[from.folder].0, from.module.clone()));
        let code = non_test_code(&std::fs::read_to_string(&file).unwrap());
        for used in uses(&code, &module) {
            if !place(&used).is_some_and(|to| may_use(&from, &to)) {
                wrong.push(format!(
                    "{} uses crate::{}",
                    relative.display(),
                    used.join("::")
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    let listed: BTreeSet<(&str, String)> = LAYERS
        .iter()
        .flat_map(|(folder, lines)| {
            let modules = lines
                .iter()
                .flat_map(|line| line.iter())
                .map(|m| m.to_string());
            modules.chain([String::new()]).map(move |m| (*folder, m))
        })
        .collect();
    assert_eq!(seen, listed, "LAYERS and the files of src/ differ");
}

/// The README's layer table names every folder and module of LAYERS.
#[test]
fn the_readme_names_every_module() {
    let readme = include_str!("../../README.md");
    let table: String = readme
        .lines()
        .skip_while(|line| !line.starts_with("| Layer |"))
        .take_while(|line| line.starts_with('|'))
        .collect();
    let missing: Vec<&str> = LAYERS
        .iter()
        .flat_map(|(folder, lines)| {
            [*folder]
                .into_iter()
                .chain(lines.iter().flat_map(|l| l.iter().copied()))
        })
        .filter(|name| {
            !table.contains(&format!("`{name}`")) && !table.contains(&format!("`{name}/`"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the README's layer table leaves out {missing:?}"
    );
}

fn names(paths: &[&str]) -> BTreeSet<Vec<String>> {
    paths
        .iter()
        .map(|p| p.split("::").map(String::from).collect())
        .collect()
}

#[test]
fn a_use_of_a_higher_layer_is_found() {
    let code = non_test_code(
        "use crate::listener::server::Server;\n// crate::versions in a comment\n#[cfg(test)]\nmod tests {\n    use crate::versions::swap;\n}\n",
    );
    assert_eq!(uses(&code, &[]), names(&["listener::server"]));
    let from = place(&names(&["sandbox::engine"]).pop_first().unwrap()).unwrap();
    let to = place(&["listener".to_string(), "server".to_string()]).unwrap();
    assert!(!may_use(&from, &to) && may_use(&to, &from));
}

/// A grouped import names each of its modules: no rustfmt setting that
/// merges imports can hide one.
#[test]
fn a_grouped_use_names_each_module() {
    let code = "use crate::{\n    listener::{body, server::Server},\n    versions::swap::{self, Doors},\n    bindings,\n};\nuse crate::{};\n";
    let expected = names(&[
        "listener::body",
        "listener::server",
        "versions::swap",
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
    let expected = names(&["listener::server", "listener::admission", "hosting::host"]);
    assert_eq!(uses(code, &module), expected);
    let body = place(&module).unwrap();
    let server = place(&names(&["listener::server"]).pop_first().unwrap()).unwrap();
    let sibling = place(&names(&["listener::admission"]).pop_first().unwrap()).unwrap();
    assert!(!may_use(&body, &server));
    assert!(
        !may_use(&body, &sibling),
        "modules on one line use none of each other"
    );
}
