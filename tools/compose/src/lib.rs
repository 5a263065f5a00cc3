//! Builds `target/standalone/door-standalone.wasm`: the door component with
//! the fixture (`fixture/`) plugged into its `murmur:door` imports — `wac
//! plug` done with the `wac-graph` crate — so that what is left to import is
//! only `wasi:*` and `wasmtime serve -S cli` runs it.
//!
//! ```sh
//! cargo run --release -p murmur-door-compose
//! ```
//!
//! The end-to-end tests call [`standalone`] themselves, so the tool is
//! compiled once, with the tests.
//!
//! Both components are built first for wasm32-wasip2 with the `wasm` profile
//! in `target/wasm` (the target dir host/build.rs uses for the door), so a run
//! after a change rebuilds what changed and nothing else. The composition is
//! refused when it would import anything but `wasi:*`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use wac_graph::types::Package;
use wac_graph::{CompositionGraph, EncodeOptions};
use wasmparser::{Parser, Payload};

/// The standalone door built, composed, checked and written: its path, and
/// the names it imports (only `wasi:*`). `root` is the repository's.
pub fn standalone(root: &Path) -> Result<(PathBuf, Vec<String>)> {
    let built = build(root)?;
    let door = built.join("murmur_door_guest.wasm");
    let fixture = built.join("murmur_door_fixture.wasm");

    let bytes = compose(&door, &fixture)?;
    let imports = imports(&bytes)?;
    let foreign: Vec<&String> = imports
        .iter()
        .filter(|name| !name.starts_with("wasi:"))
        .collect();
    ensure!(
        foreign.is_empty(),
        "the composed door still imports {foreign:?}: only wasi:* may be left"
    );

    let out_dir = root.join("target/standalone");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let out = out_dir.join("door-standalone.wasm");
    // Written beside it and renamed, so a reader never sees half a component.
    let partial = out_dir.join("door-standalone.wasm.partial");
    std::fs::write(&partial, &bytes).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, &out).with_context(|| format!("writing {}", out.display()))?;
    Ok((out, imports))
}

/// Builds the door and the fixture; returns the folder holding both.
fn build(root: &Path) -> Result<PathBuf> {
    let target_dir = root.join("target/wasm");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(root)
        .args(["build", "--package", "murmur-door-guest"])
        .args(["--package", "murmur-door-fixture"])
        .args(["--target", "wasm32-wasip2", "--profile", "wasm"])
        .arg("--target-dir")
        .arg(&target_dir);
    // Settings of an outer cargo describe the native build, not this one.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
    ] {
        command.env_remove(var);
    }
    let status = command
        .status()
        .context("running cargo for the door and the fixture")?;
    if !status.success() {
        bail!(
            "building the door and the fixture failed; is the target installed? \
             `rustup target add wasm32-wasip2`"
        );
    }
    Ok(target_dir.join("wasm32-wasip2/wasm"))
}

/// `wac plug --plug fixture door`, but for the door's `framing` export:
/// its types are the `events` interface's, which the fixture now provides
/// inside the composition, and a host of its own is what calls it anyway.
fn compose(door: &Path, fixture: &Path) -> Result<Vec<u8>> {
    let mut graph = CompositionGraph::new();
    let socket = Package::from_file("murmur:door", None, door, graph.types_mut())
        .with_context(|| format!("reading {}", door.display()))?;
    let socket = graph.register_package(socket)?;
    let plug = Package::from_file("murmur:fixture", None, fixture, graph.types_mut())
        .with_context(|| format!("reading {}", fixture.display()))?;
    let plug = graph.register_package(plug)?;
    let door = graph.instantiate(socket);
    let provided: Vec<String> = graph.types()[graph[plug].ty()]
        .exports
        .keys()
        .filter(|name| {
            graph.types()[graph[socket].ty()]
                .imports
                .contains_key(*name)
        })
        .cloned()
        .collect();
    ensure!(
        !provided.is_empty(),
        "the fixture provides none of the door's imports"
    );
    let fixture = graph.instantiate(plug);
    for name in provided {
        let export = graph.alias_instance_export(fixture, &name)?;
        graph.set_instantiation_argument(door, &name, export)?;
    }
    let exports: Vec<String> = graph.types()[graph[socket].ty()]
        .exports
        .keys()
        .filter(|name| !name.starts_with("murmur:door/framing"))
        .cloned()
        .collect();
    for name in exports {
        let export = graph.alias_instance_export(door, &name)?;
        graph.export(export, &name)?;
    }
    graph
        .encode(EncodeOptions::default())
        .context("encoding the composition")
}

/// The names a component imports at its top level.
fn imports(bytes: &[u8]) -> Result<Vec<String>> {
    let mut names = Vec::new();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload? {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(section) if depth == 0 => {
                for import in section {
                    names.push(import?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Ok(names)
}
