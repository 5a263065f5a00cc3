//! `murmur-door`: runs a capsule's door standalone.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

use murmur_door_host::engine::{self, Door};
use murmur_door_host::manifest::Manifest;
use murmur_door_host::server::Server;
use murmur_door_host::session::Session;

#[derive(Parser)]
#[command(
    name = "murmur-door",
    version,
    about = "The HTTP door of a Murmur capsule, speaking A2A v1.0"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the door of the capsule a manifest describes.
    Serve {
        /// The capsule's manifest (murmur.yaml).
        manifest: PathBuf,
        /// The address to listen on; port 0 picks a free one.
        #[arg(long, default_value = "127.0.0.1:41873")]
        listen: SocketAddr,
        /// The session's state directory.
        #[arg(long, default_value = ".murmur-door")]
        state: PathBuf,
        /// Where the minted tokens are written (mode 0600); default
        /// STATE/tokens.json.
        #[arg(long)]
        tokens_file: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let Cli {
        command:
            Command::Serve {
                manifest,
                listen,
                state,
                tokens_file,
            },
    } = Cli::parse();
    let tokens_file = tokens_file.unwrap_or_else(|| state.join("tokens.json"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(serve(manifest, listen, tokens_file)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("murmur-door: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(
    manifest_path: PathBuf,
    listen: SocketAddr,
    tokens_file: PathBuf,
) -> anyhow::Result<()> {
    let manifest = Manifest::load(&manifest_path)
        .with_context(|| format!("manifest {}", manifest_path.display()))?;
    let engine = engine::engine()?;
    let door = Door::load(&engine, engine::EMBEDDED_DOOR)?;

    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    let url = listener_url(listener.local_addr()?);
    let session = Arc::new(Session::launch(&manifest, url.clone())?);
    // The tokens are on disk before the door answers anyone.
    session
        .tokens
        .write_file(&tokens_file)
        .with_context(|| format!("writing tokens to {}", tokens_file.display()))?;

    tracing::info!(capsule = %manifest.name, version = %manifest.version, session = %session.id(), "session started");
    tracing::info!(digest = %door.digest, "door component loaded");
    tracing::info!(path = %tokens_file.display(), "tokens written");
    tracing::info!(%url, "door listening");

    let server = Arc::new(Server::new(door, session));
    tokio::select! {
        () = server.serve(listener) => {}
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; closing the door"),
    }
    Ok(())
}

/// The address the listener answers on, for the card. An unspecified address
/// (0.0.0.0, ::) answers on every interface; the card then names localhost.
fn listener_url(addr: SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        format!("http://localhost:{}", addr.port())
    } else {
        format!("http://{addr}")
    }
}
