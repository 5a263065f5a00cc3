//! Builds the door component (`guest/`) for wasm32-wasip2 and places it in
//! OUT_DIR, so the host embeds it as its default door.
//!
//! The nested cargo uses its own target dir (`target/wasm`), so it never waits
//! on the lock of the build that runs this script.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().to_path_buf();
    for watched in [
        "guest/src",
        "guest/Cargo.toml",
        "wit",
        "Cargo.lock",
        "Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=MURMUR_DOOR_WASM");

    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("door.wasm");
    // A prebuilt component may be supplied instead (packaging, offline builds).
    if let Ok(prebuilt) = env::var("MURMUR_DOOR_WASM") {
        std::fs::copy(&prebuilt, &out).unwrap_or_else(|e| panic!("copying {prebuilt}: {e}"));
        return;
    }

    let target_dir = root.join("target").join("wasm");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(&root)
        .args([
            "build",
            "--package",
            "murmur-door-guest",
            "--target",
            "wasm32-wasip2",
            "--profile",
            "wasm",
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer build's settings describe the host, not the guest.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
    ] {
        build.env_remove(var);
    }
    let status = build
        .status()
        .expect("running cargo for the door component");
    assert!(
        status.success(),
        "building the door component failed; is the target installed? `rustup target add wasm32-wasip2`"
    );
    let built = target_dir
        .join("wasm32-wasip2")
        .join("wasm")
        .join("murmur_door_guest.wasm");
    std::fs::copy(&built, &out).unwrap_or_else(|e| panic!("copying {}: {e}", built.display()));
}
