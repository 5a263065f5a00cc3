//! What a door on a network exposes (issue 47): nothing a caller sends
//! reaches a shell, a door without authentication listens past loopback
//! only when told to, the door's own state is never served, and a writer
//! racing in an exported folder reaches no file outside the exports and
//! blocks no thread.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::tempdir::TempDir;
use crate::common::{Door, binary, root, stderr_lines};

const NOT_FOUND: &str =
    r#"{"error":"file_not_found","message":"nothing this plane serves is at this path"}"#;

/// Issue 47, item 1 ("Residue items"): the default agent runs no process
/// for a caller's `detach`, however the command is written; it records a
/// detached_shell item naming the command's first word as written.
#[test]
fn a_callers_detach_runs_nothing() {
    let door = Door::start("name: open\nversion: 0.1.0\n");
    let marks = TempDir::new("marks");
    let mark = |n: u32| marks.path().join(format!("ran-{n}"));
    let commands = [
        format!("touch {}", mark(1).display()),
        format!("sh -c 'touch {}'", mark(2).display()),
        format!("/usr/bin/touch {}", mark(3).display()),
        format!("id > {}", mark(4).display()),
        format!(
            "$(touch {}) ; touch {}",
            mark(5).display(),
            mark(6).display()
        ),
    ];
    for command in &commands {
        let task = door.send_task(None, &format!("detach {command}\nreply ok"), json!({}));
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    }
    std::thread::sleep(Duration::from_millis(500));
    for n in 1..=6 {
        assert!(
            !mark(n).exists(),
            "a caller's command ran: {}",
            mark(n).display()
        );
    }
    let stopped = door.result(None, "murmur.StopSession", json!({}));
    let residue: Vec<(&str, &str, &str)> = stopped["residue"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            (
                item["kind"].as_str().unwrap(),
                item["binary"].as_str().unwrap(),
                item["command"].as_str().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(&str, &str, &str)> = commands
        .iter()
        .zip(["touch", "sh", "/usr/bin/touch", "id", "$(touch"])
        .map(|(command, binary)| ("detached_shell", binary, command.as_str()))
        .collect();
    assert_eq!(residue, expected);
}

/// `murmur-door ARGS` run from `dir`, with the tests' compile cache: its
/// process, and the lines it logs.
fn murmur_door(args: &[String], dir: &Path) -> (std::process::Child, Receiver<String>) {
    let mut child = Command::new(binary())
        .args(args)
        .current_dir(dir)
        .env("XDG_CACHE_HOME", root().join("target/e2e-cache"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut child);
    (child, lines)
}

/// `serve` of `manifest` on `listen` with `flags`: the url it announced,
/// or its exit status and what it logged.
fn launch(manifest: &Path, listen: &str, flags: &[&str]) -> Result<String, String> {
    let state = TempDir::new("exposed-state");
    let mut args = vec!["serve".to_string(), manifest.display().to_string()];
    args.extend(["--listen", listen, "--state"].map(String::from));
    args.push(state.path().display().to_string());
    args.extend(flags.iter().map(|f| f.to_string()));
    let (mut child, lines) = murmur_door(&args, state.path());
    let mut logged = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let outcome = loop {
        match lines.recv_timeout(Duration::from_millis(100)) {
            Ok(line) if line.contains("url=") => break Ok(line),
            Ok(line) => logged.push(line),
            Err(_) => {
                if let Some(status) = child.try_wait().unwrap() {
                    logged.extend(lines.try_iter());
                    break Err(format!("{status}: {}", logged.join("\n")));
                }
                assert!(Instant::now() < deadline, "neither listening nor exited");
            }
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    outcome
}

/// Issue 47, item 1: a door that declares no `network.authentication`
/// listens past loopback only with `--public`; one that declares it, or
/// listens on loopback, needs no flag.
#[test]
fn a_public_door_listens_past_loopback_only_when_told() {
    let dir = TempDir::new("exposed");
    let open = dir.path().join("open.yaml");
    std::fs::write(&open, "name: open\nversion: 0.1.0\n").unwrap();
    let guarded = dir.path().join("guarded.yaml");
    std::fs::write(
        &guarded,
        "name: guarded\nversion: 0.1.0\nnetwork:\n  authentication:\n    scheme: bearer\n",
    )
    .unwrap();
    let refused = launch(&open, "0.0.0.0:0", &[]).unwrap_err();
    assert!(refused.starts_with("exit status: 1"), "{refused}");
    assert!(
        refused.contains(
            "murmur-door: capsule open declares no network.authentication and would listen on \
             0.0.0.0:0, which is not loopback: anyone reaching it could call its task methods \
             and read its operator plane. Declare network.authentication, listen on loopback, \
             or pass --public"
        ),
        "{refused}"
    );
    launch(&open, "0.0.0.0:0", &["--public"]).unwrap();
    launch(&guarded, "0.0.0.0:0", &[]).unwrap();
    launch(&open, "127.0.0.1:0", &[]).unwrap();
}

/// A raw GET of `path` with its own timeout: the status, the body, and how
/// long it took; None when no whole answer came within `wait`.
fn get_within(addr: &str, path: &str, wait: Duration) -> Option<(u16, Vec<u8>, Duration)> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(wait)).ok()?;
    let head = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    let reply = crate::common::Reply::parse(&raw);
    Some((reply.status, reply.body, started.elapsed()))
}

/// A workdir holding `files`, a manifest exporting `exports`, and its door
/// launched from the workdir with the default state directory, as
/// `cd capsule && murmur-door serve murmur.yaml` does.
struct Workdir {
    dir: TempDir,
    child: std::process::Child,
    addr: String,
}

impl Workdir {
    fn serve(exports: &str, files: &[(&str, &[u8])], flags: &[&str]) -> Workdir {
        Workdir::serve_planes(&format!("  files: {exports}\n"), files, flags)
    }

    /// [`Workdir::serve`], `planes` the lines under `exports:`.
    fn serve_planes(planes: &str, files: &[(&str, &[u8])], flags: &[&str]) -> Workdir {
        let dir = TempDir::new("exposed-work");
        for (path, bytes) in files {
            let at = dir.path().join(path);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, bytes).unwrap();
        }
        std::fs::write(
            dir.path().join("murmur.yaml"),
            format!("name: exposed\nversion: 0.1.0\nexports:\n{planes}"),
        )
        .unwrap();
        let mut args = ["serve", "murmur.yaml", "--listen", "127.0.0.1:0"]
            .map(String::from)
            .to_vec();
        args.extend(flags.iter().map(|f| f.to_string()));
        let (child, lines) = murmur_door(&args, dir.path());
        let addr = loop {
            let line = lines
                .recv_timeout(Duration::from_secs(60))
                .expect("the door announces its url");
            if let Some(at) = line.find("url=http://") {
                break line[at + 11..].trim().to_string();
            }
        };
        Workdir { dir, child, addr }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn get(&self, path: &str) -> (u16, Vec<u8>) {
        let (status, body, _) =
            get_within(&self.addr, path, Duration::from_secs(30)).expect("an answer");
        (status, body)
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Issue 47, item 2: with the state directory inside the workdir (the
/// default when the door is started there), no glob serves or lists it
/// or anything in it: each answers exactly as a missing file.
#[test]
fn the_doors_own_state_is_never_served() {
    for (exports, flags) in [
        (r#"["*"]"#, &[][..]),
        (r#"["**"]"#, &[]),
        (r#"[".murmur-door/**", "murmur.yaml"]"#, &[]),
        (r#"["*"]"#, &["--state", "."]),
    ] {
        let work = Workdir::serve(exports, &[("notes.txt", b"mine\n")], flags);
        let state = if flags.is_empty() {
            ".murmur-door/"
        } else {
            ""
        };
        for hidden in ["tokens.json", "control-token", "session.db", "lock", ""] {
            if state.is_empty() && hidden.is_empty() {
                continue;
            }
            let path = format!("/resources/files/{state}{hidden}");
            let (status, body) = work.get(&path);
            assert_eq!(
                (status, String::from_utf8_lossy(&body).into_owned()),
                (404, NOT_FOUND.to_string()),
                "{exports} {path}"
            );
        }
        let (status, listing) = work.get("/resources/files/");
        assert_eq!(status, 200);
        let names: Vec<String> = serde_json::from_slice::<Value>(&listing).unwrap()["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect();
        for hidden in [
            ".murmur-door",
            "tokens.json",
            "control-token",
            "session.db",
            "lock",
        ] {
            assert!(!names.iter().any(|n| n == hidden), "{exports} {names:?}");
        }
        assert!(
            names.iter().any(|n| n == "murmur.yaml"),
            "{exports} {names:?}"
        );
        if exports != r#"[".murmur-door/**", "murmur.yaml"]"# {
            assert_eq!(
                work.get("/resources/files/notes.txt"),
                (200, b"mine\n".to_vec())
            );
        }
        assert!(work.path().join(format!("{state}control-token")).is_file());
    }
}

/// Swaps `a` and `b` atomically (`renameat2` with `RENAME_EXCHANGE`).
fn exchange(a: &Path, b: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let a = std::ffi::CString::new(a.as_os_str().as_bytes()).unwrap();
    let b = std::ffi::CString::new(b.as_os_str().as_bytes()).unwrap();
    // SAFETY: two NUL-terminated paths, both relative to the cwd.
    let done = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(done, 0, "{}", std::io::Error::last_os_error());
}

/// Exchanges `a` and `b` in a loop until dropped.
struct Swapper {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Swapper {
    fn start(a: &Path, b: &Path) -> Swapper {
        Swapper::paced(a, b, Duration::ZERO)
    }

    /// [`Swapper::start`], waiting `pause` after each exchange.
    fn paced(a: &Path, b: &Path, pause: Duration) -> Swapper {
        let stop = Arc::new(AtomicBool::new(false));
        let (a, b, stopped) = (a.to_path_buf(), b.to_path_buf(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut swaps = 0;
            while !stopped.load(Ordering::Relaxed) {
                exchange(&a, &b);
                swaps += 1;
                if !pause.is_zero() {
                    std::thread::sleep(pause);
                }
            }
            swaps
        });
        Swapper {
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// How long the races run.
const RACE: Duration = Duration::from_secs(3);

/// Issue 47, item 3: a writer exchanging an exported directory with a
/// link to the workdir while its file and its listing are asked for: no
/// answer carries a byte of a file outside the exports, and the exported
/// file is still served.
#[test]
fn a_directory_swapped_for_a_link_serves_nothing_outside_the_exports() {
    let work = Workdir::serve(
        "[out/**, report.md]",
        &[
            ("out/d/x", b"exported\n"),
            ("x", b"SECRET, not exported\n"),
            ("secret-dir/only-here", b"SECRET\n"),
            ("report.md", b"# r\n"),
        ],
        &["--reuse-bytes", "0"],
    );
    std::os::unix::fs::symlink("..", work.path().join("out/e")).unwrap();
    let swapper = Swapper::start(&work.path().join("out/d"), &work.path().join("out/e"));
    let (mut served, mut missing, mut listed) = (0, 0, 0);
    let deadline = Instant::now() + RACE;
    while Instant::now() < deadline {
        match work.get("/resources/files/out/d/x") {
            (200, body) => {
                assert_eq!(body, b"exported\n", "a byte from outside the exports");
                served += 1;
            }
            (404, body) => {
                assert_eq!(body, NOT_FOUND.as_bytes());
                missing += 1;
            }
            (status, body) => panic!("{status} {}", String::from_utf8_lossy(&body)),
        }
        let (status, body) = work.get("/resources/files/out/d/");
        if status == 200 {
            let text = String::from_utf8_lossy(&body);
            // Through the link the workdir itself may be listed, with
            // what it exports; never with what it does not.
            for outside in ["secret-dir", "murmur.yaml", ".murmur-door"] {
                assert!(!text.contains(outside), "listed from outside: {text}");
            }
            listed += 1;
        }
    }
    let swaps = swapper.stop();
    eprintln!("{swaps} swaps: file served {served}, missing {missing}; listings {listed}");
    assert!(swaps > 1000, "{swaps}");
    assert!(served > 10 && missing > 10, "{served} {missing}");
    assert!(listed > 10, "{listed}");
}

/// Issue 47, item 4: a writer exchanging an exported file with a FIFO
/// while six clients ask for it: nothing blocks. Every request is
/// answered (the file, or the one 404) promptly, and the card at once.
#[test]
fn a_fifo_swapped_in_blocks_nothing() {
    let work = Workdir::serve(
        "[out/**]",
        &[("out/f", b"a regular file\n")],
        &["--reuse-bytes", "0"],
    );
    let fifo = work.path().join("out/fifo");
    let made = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(made.as_ptr(), 0o644) }, 0);
    let swapper = Swapper::start(&work.path().join("out/f"), &fifo);
    let deadline = Instant::now() + RACE;
    let clients: Vec<_> = (0..6)
        .map(|_| {
            let addr = work.addr.clone();
            std::thread::spawn(move || {
                let (mut answered, mut slowest) = (0, Duration::ZERO);
                while Instant::now() < deadline {
                    let (status, body, took) =
                        get_within(&addr, "/resources/files/out/f", Duration::from_secs(5))
                            .expect("a request on the file hung");
                    match status {
                        200 => assert_eq!(body, b"a regular file\n"),
                        404 => assert_eq!(body, NOT_FOUND.as_bytes()),
                        other => panic!("{other}"),
                    }
                    answered += 1;
                    slowest = slowest.max(took);
                }
                (answered, slowest)
            })
        })
        .collect();
    std::thread::sleep(RACE / 2);
    let (status, _, took) = get_within(
        &work.addr,
        "/.well-known/agent-card.json",
        Duration::from_secs(5),
    )
    .expect("the card during the race");
    assert_eq!(status, 200);
    let mut slowest = took;
    let mut answered = 0;
    for client in clients {
        let (count, slow) = client.join().unwrap();
        answered += count;
        slowest = slowest.max(slow);
    }
    swapper.stop();
    eprintln!("{answered} answered, the slowest in {slowest:?}");
    assert!(answered > 60, "{answered}");
    assert!(slowest < Duration::from_secs(2), "{slowest:?}");
}

/// Issue 47, item 6: on the peer plane, a file that is gone or is no
/// longer a regular file by the time it is opened answers the plane's one
/// `handle_not_found`, never the operator plane's `file_not_found`.
#[test]
fn a_peer_file_swapped_away_answers_handle_not_found() {
    let work = Workdir::serve_planes(
        "  peer_files: [shared/**]\n",
        &[("shared/a.csv", b"a,b\n")],
        &["--reuse-bytes", "0"],
    );
    let token = std::fs::read_to_string(work.path().join(".murmur-door/control-token")).unwrap();
    let minted = crate::common::request(
        &work.addr,
        "POST",
        "/.well-known/murmur/control/handles",
        &[
            ("authorization", &format!("Bearer {}", token.trim())),
            ("content-type", "application/json"),
        ],
        json!({"path": "shared/a.csv", "audience": "beta", "maxUses": 1_000_000})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(minted.status, 201, "{}", minted.text());
    let handle = minted.json()["handle"].as_str().unwrap().to_string();
    let fifo = work.path().join("shared/fifo");
    let made = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(made.as_ptr(), 0o644) }, 0);
    // Paced, so that both answers come before the failed redeems reach
    // their limit (30 from one address).
    let swapper = Swapper::paced(
        &work.path().join("shared/a.csv"),
        &fifo,
        Duration::from_micros(500),
    );
    let gone = r#"{"error":"handle_not_found","message":"this plane serves no file for that handle and audience"}"#;
    let (mut served, mut refused) = (0, 0);
    let deadline = Instant::now() + RACE;
    while Instant::now() < deadline && refused < 25 {
        let reply = crate::common::request(
            &work.addr,
            "GET",
            &format!("/resources/peer/{handle}"),
            &[("x-murmur-audience", "beta")],
            b"",
        );
        match reply.status {
            200 => {
                assert_eq!(reply.body, b"a,b\n");
                served += 1;
            }
            _ => {
                assert_eq!((reply.status, reply.text()), (404, gone.to_string()));
                refused += 1;
            }
        }
    }
    swapper.stop();
    eprintln!("served {served}, refused {refused}");
    assert!(served > 0 && refused == 25, "{served} {refused}");
}
