//! `cargo run --release -p murmur-door-compose`: builds
//! `target/standalone/door-standalone.wasm` (see the library) and prints
//! its path and imports.

use std::path::Path;

use anyhow::{Context, Result};

fn main() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().context("finding the repository")?;
    let (out, imports) = murmur_door_compose::standalone(&root)?;
    let bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or_default();
    println!("{} ({bytes} bytes)", out.display());
    for name in &imports {
        println!("  imports {name}");
    }
    Ok(())
}
