//! What the interop and card tests install for themselves: the Python
//! virtualenv with the pinned a2a-sdk (tests/proto/requirements.txt) and the
//! npm @a2a-js/sdk (tests/interop/package-lock.json), each under target/ and
//! redone only when its pins change.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Instant;

/// A file of the interop clients, `tests/interop/FILE`.
pub fn interop(file: &str) -> PathBuf {
    super::root().join("tests/interop").join(file)
}

pub fn show(output: &Output) -> String {
    format!(
        "status: {}\n--- stdout\n{}--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

pub fn run(command: &mut Command) -> Result<(), String> {
    let shown = format!("{command:?}");
    let output = command.output().map_err(|e| format!("{shown}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed\n{}", show(&output)))
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

/// Empties `dir`, or creates it.
fn fresh(dir: &Path) -> Result<(), String> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)
            .map_err(|e| format!("removing a stale {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))
}

/// Creates `<repo>/target/py-venv` with tests/proto/requirements.txt — the
/// same venv tests/card_proto.rs uses.
fn create_venv() -> Result<PathBuf, String> {
    let root = super::root();
    venv(
        &root.join("tests/proto/requirements.txt"),
        &root.join("target/py-venv"),
    )
}

/// Creates the virtualenv `venv` with the pinned `requirements`, unless its
/// `.installed` marker already holds exactly that file's text. Returns its
/// python.
pub fn venv(requirements: &Path, venv: &Path) -> Result<PathBuf, String> {
    let python = venv.join("bin/python");
    let marker = venv.join(".installed");
    let wanted = read(requirements)?;
    if python.exists() && std::fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str())
    {
        return Ok(python);
    }
    let started = Instant::now();
    fresh(venv)?;
    run(Command::new("python3").args(["-m", "venv"]).arg(venv))?;
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-q",
            "-r",
        ])
        .arg(requirements))?;
    std::fs::write(&marker, &wanted).map_err(|e| format!("writing {}: {e}", marker.display()))?;
    eprintln!("created {} in {:.1?}", venv.display(), started.elapsed());
    Ok(python)
}

/// `cargo` in the repository's root, without the settings of the `cargo
/// test` that runs it (they describe the host build, not this one).
pub fn cargo() -> Command {
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo.current_dir(super::root());
    for var in ["CARGO_TARGET_DIR", "CARGO_BUILD_TARGET", "RUSTFLAGS"] {
        cargo.env_remove(var);
    }
    cargo
}

/// Installs tests/interop/package.json and its package-lock.json with
/// `npm ci` in `<repo>/target/js-interop`, unless its `.installed` marker
/// already holds exactly both files' text. Returns its node_modules.
fn install_js() -> Result<PathBuf, String> {
    let dir = super::root().join("target/js-interop");
    let modules = dir.join("node_modules");
    let marker = dir.join(".installed");
    let manifest = read(&interop("package.json"))?;
    let lock = read(&interop("package-lock.json"))?;
    let wanted = format!("{manifest}{lock}");
    if modules.join("@a2a-js/sdk/package.json").exists()
        && std::fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str())
    {
        return Ok(modules);
    }
    let started = Instant::now();
    fresh(&dir)?;
    for (name, text) in [("package.json", &manifest), ("package-lock.json", &lock)] {
        std::fs::write(dir.join(name), text).map_err(|e| format!("writing {name}: {e}"))?;
    }
    run(Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(&dir))?;
    std::fs::write(&marker, &wanted).map_err(|e| format!("writing {}: {e}", marker.display()))?;
    eprintln!(
        "installed {} in {:.1?}",
        modules.display(),
        started.elapsed()
    );
    Ok(modules)
}

/// The venv's python; tests in this binary run on threads, so it is created
/// at most once.
pub fn python() -> &'static Path {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match VENV.get_or_init(create_venv) {
        Ok(python) => python,
        Err(e) => panic!("could not create the virtualenv for a2a-sdk: {e}"),
    }
}

/// The node_modules holding @a2a-js/sdk, installed at most once.
pub fn node_modules() -> &'static Path {
    static MODULES: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match MODULES.get_or_init(install_js) {
        Ok(modules) => modules,
        Err(e) => panic!("could not install @a2a-js/sdk: {e}"),
    }
}
