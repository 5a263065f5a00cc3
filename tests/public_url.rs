//! A door reached from outside the host (issue 37, "A public URL";
//! reference, "Plain HTTP"): `serve --public-url` sets the card's
//! `supportedInterfaces[0].url` and every absolute URL the door writes (a
//! peer handle's `url`), changes the card's ETag with it, and is refused at
//! launch unless it is an http or https URL without query or fragment.

use crate::common;

use std::process::Command;

use common::tempdir::TempDir;
use common::{Door, binary};
use serde_json::json;

const MANIFEST: &str = "name: alpha\nversion: 0.1.0\nexports:\n  peer_files: [shared/**]\n";

fn launch(extra: &[&str]) -> Door {
    let door = Door::start_flagged(MANIFEST, extra);
    std::fs::create_dir_all(door.state.path().join("shared")).unwrap();
    std::fs::write(door.state.path().join("shared/a.csv"), b"a\n").unwrap();
    door
}

#[test]
fn the_card_and_handles_name_the_public_url() {
    let public = launch(&["--public-url", "https://alpha.example.com/"]);
    let plain = launch(&[]);
    let card = public.get("/.well-known/agent-card.json");
    assert_eq!(
        card.json()["supportedInterfaces"][0]["url"],
        "https://alpha.example.com"
    );
    // Without it, the listener's own address, as the reference says.
    let plain_card = plain.get("/.well-known/agent-card.json");
    assert_eq!(
        plain_card.json()["supportedInterfaces"][0]["url"],
        plain.url
    );
    assert_ne!(card.header("etag"), plain_card.header("etag"));

    let token = std::fs::read_to_string(public.state.path().join("control-token")).unwrap();
    let bearer = format!("Bearer {}", token.trim());
    let body = json!({"path": "shared/a.csv", "audience": "beta"}).to_string();
    let minted = public.request(
        "POST",
        "/.well-known/murmur/control/handles",
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    );
    assert_eq!(minted.status, 201, "{}", minted.text());
    let minted = minted.json();
    assert_eq!(
        minted["url"],
        format!(
            "https://alpha.example.com/resources/peer/{}",
            minted["handle"].as_str().unwrap()
        )
    );
}

#[test]
fn a_url_the_card_cannot_name_stops_the_launch() {
    let dir = TempDir::new("public-url-bad");
    let manifest = dir.path().join("murmur.yaml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    for (url, why) in [
        ("ftp://alpha.example.com", "is not an http or https URL"),
        ("alpha.example.com", "is not an http or https URL"),
        (
            "https://alpha.example.com/?a=1",
            "must have no query or fragment",
        ),
        (
            "https://alpha.example.com/#top",
            "must have no query or fragment",
        ),
        (
            "https://me@alpha.example.com",
            "must name a host, and no credentials",
        ),
    ] {
        let output = Command::new(binary())
            .arg("serve")
            .arg(&manifest)
            .args(["--listen", "127.0.0.1:0", "--state"])
            .arg(dir.path().join("state"))
            .args(["--public-url", url])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{url} was accepted");
        assert!(stderr.contains("--public-url"), "{stderr}");
        assert!(stderr.contains(why), "{url}: {stderr}");
    }
}

/// Issue 37, "A public URL": an A2A client resolving the card through a
/// reverse proxy calls the proxy, not the listener. The door runs behind a
/// small proxy serving it under `/capsules/alpha` (the script's, answering
/// 404 to anything else); the PyPI a2a-sdk client is given only the proxy's
/// URL, resolves the card, and sends and reads a task through it.
#[test]
fn the_a2a_sdk_client_reaches_the_door_through_the_proxy_its_card_names() {
    let python = common::setup::python();
    // A free port for the proxy, named in the door's public URL.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let public = format!("http://127.0.0.1:{port}/capsules/alpha");
    let door = Door::start_flagged("name: alpha\nversion: 0.1.0\n", &["--public-url", &public]);
    let output = Command::new(python)
        .arg(common::setup::interop("a2a_python_proxied.py"))
        .arg(&door.url)
        .arg(&public)
        .output()
        .unwrap();
    let log = door.stop();
    assert!(
        output.status.success(),
        "a2a-sdk did not reach the door through the proxy\n{}\n--- door log\n{}",
        common::setup::show(&output),
        log.join("\n")
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.lines().last().is_some_and(|l| l.starts_with("ok: ")),
        "{stdout}"
    );
}
