//! The modules of this crate form layers: each uses only the ones below it.
//! This test reads the sources and fails on a `crate::` path that points up
//! or sideways, so the layering the README's layout table shows holds.

use std::collections::BTreeSet;
use std::path::Path;

/// Bottom to top; modules on one line use none of each other.
const LAYERS: &[&[&str]] = &[
    // Generated types, and leaves that know no other module.
    &["bindings", "process", "cpu", "memory", "planes"],
    // The manifest, and the planes' exports it names.
    &["manifest"],
    // The domain: tokens, the task store and hub, the agents, the session.
    &["tokens"],
    &["handles"],
    &["tasks"],
    &["agents"],
    &["session"],
    // The door's imports, over a view of the store's data.
    &["imports"],
    // One request's store, compiled doors kept on disk, and the engine that
    // instantiates doors in a store.
    &["request", "cache"],
    &["engine"],
    // A request answered in one call of the door's `answer` export.
    &["one_call"],
    // Events framed once for every stream, on instances of their own.
    &["framing"],
    // What a door version answered that is the same for every request.
    &["card_cache"],
    // Versions of the door, and the operator's surface over them.
    &["swap"],
    &["control"],
    // Door instances kept between requests of one caller.
    &["idle"],
    // The listener and what it bounds; the native baseline it may answer
    // with (a benchmark-only build).
    &[
        "admission",
        "body",
        "connections",
        "metrics",
        "native",
        "proxies",
        "redeems",
    ],
    &["server"],
    // The capsules file, and a capsule's door opened and closed on a server.
    &["roster"],
    &["capsule"],
    // A host of capsules on one engine, and its control surface.
    &["host"],
    &["host_control"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
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

/// The top-level modules `code` names through `crate::`, a grouped import
/// (`use crate::{a, b::C}`) included.
fn uses(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => found.extend(group_items(group).iter().map(|item| ident(item))),
            None => {
                found.insert(ident(rest));
            }
        }
    }
    found.remove("");
    found
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

#[test]
fn each_module_uses_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut wrong = Vec::new();
    let mut seen = BTreeSet::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let top = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap()
            .trim_end_matches(".rs")
            .to_string();
        // The crate root, the binary, test files and this test.
        if ["lib", "main", "layers"].contains(&top.as_str())
            || file.file_name().is_some_and(|n| n == "tests.rs")
        {
            continue;
        }
        let Some(from) = layer_of(&top) else {
            wrong.push(format!("{top} is in no layer of LAYERS"));
            continue;
        };
        seen.insert(top.clone());
        let code = non_test_code(&std::fs::read_to_string(&file).unwrap());
        for used in uses(&code).into_iter().filter(|m| *m != top) {
            match layer_of(&used) {
                Some(to) if to < from => {}
                _ => wrong.push(format!("{} uses crate::{used}", relative.display())),
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    let listed: BTreeSet<String> = LAYERS
        .iter()
        .flat_map(|l| l.iter().map(|m| m.to_string()))
        .collect();
    assert_eq!(seen, listed, "LAYERS names a module that does not exist");
}

#[test]
fn a_use_of_a_higher_layer_is_found() {
    let code = non_test_code(
        "use crate::server::Server;\n// crate::control in a comment\n#[cfg(test)]\nmod tests {\n    use crate::swap;\n}\n",
    );
    assert_eq!(uses(&code), BTreeSet::from(["server".to_string()]));
}

/// A grouped import names each of its modules: no rustfmt setting that
/// merges imports can hide one.
#[test]
fn a_grouped_use_names_each_module() {
    let code = "use crate::{\n    server::Server,\n    swap::{self, Doors},\n    tasks,\n};\nuse crate::{};\n";
    let expected = ["server", "swap", "tasks"].map(String::from);
    assert_eq!(uses(code), BTreeSet::from(expected));
}
