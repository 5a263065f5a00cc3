//! The operator plane, end to end (reference "Planes" and "What the door
//! answers" step 4; issue 33): the files `exports.files` names in the
//! capsule's workdir, served by the door through read-only preopens, and one
//! 404 for everything else.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::common::tempdir::TempDir;
use crate::common::{Door, Reply};

/// A capsule whose workdir (apart from its state) holds `out/a.txt`,
/// `out/deep/b.bin`, `report.md`, `logs/x.txt`, `logs/y.log` and a secret,
/// and exports `[out/**, report.md, logs/*.txt]` beside `extra` manifest
/// lines.
struct Capsule {
    door: Door,
    work: TempDir,
}

impl Capsule {
    fn start(exports: &str, extra: &str, flags: &[&str]) -> Capsule {
        let work = TempDir::new("work");
        let dir = work.path();
        for (path, bytes) in [
            ("out/a.txt", &b"hello, plane\n"[..]),
            ("out/deep/b.bin", &[0u8, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
            ("report.md", b"# Report\n"),
            ("logs/x.txt", b"x\n"),
            ("logs/y.log", b"y\n"),
            ("secret.txt", b"not exported\n"),
        ] {
            std::fs::create_dir_all(dir.join(path).parent().unwrap()).unwrap();
            std::fs::write(dir.join(path), bytes).unwrap();
        }
        let manifest = dir.join("murmur.yaml");
        std::fs::write(
            &manifest,
            format!("name: planes\nversion: 0.1.0\nexports:\n  files: {exports}\n{extra}"),
        )
        .unwrap();
        let door = Door::start_with(&manifest, TempDir::new("state"), flags);
        Capsule { door, work }
    }

    fn exported() -> Capsule {
        Capsule::start("[out/**, report.md, logs/*.txt]", "", &[])
    }

    fn dir(&self) -> &Path {
        self.work.path()
    }

    fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.door.request("GET", path, headers, b"")
    }
}

/// A reply without its `date`, for comparing two byte for byte.
fn undated(reply: &Reply) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let headers = reply
        .headers
        .iter()
        .filter(|(name, _)| name != "date")
        .cloned()
        .collect();
    (reply.status, headers, reply.body.clone())
}

const NOT_FOUND: &str =
    r#"{"error":"file_not_found","message":"nothing this plane serves is at this path"}"#;

/// Issue 33, "A file": its bytes, with Content-Type from its extension,
/// Content-Length, a strong ETag, Last-Modified and Accept-Ranges.
#[test]
fn a_file_is_served_with_its_validators() {
    let capsule = Capsule::exported();
    let reply = capsule.get("/resources/files/report.md", &[]);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, b"# Report\n");
    assert_eq!(reply.header("content-type"), Some("text/markdown"));
    assert_eq!(reply.header("content-length"), Some("9"));
    assert_eq!(reply.header("accept-ranges"), Some("bytes"));
    assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
    let etag = reply.header("etag").unwrap();
    assert!(etag.starts_with("\"9-") && etag.ends_with('"'), "{etag}");
    let modified = std::fs::metadata(capsule.dir().join("report.md"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(
        reply.header("last-modified"),
        Some(httpdate(modified).as_str())
    );
    let deep = capsule.get("/resources/files/out/deep/b.bin", &[]);
    assert_eq!(deep.body, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(
        deep.header("content-type"),
        Some("application/octet-stream")
    );

    // HEAD: the same head, no body.
    let head = capsule
        .door
        .request("HEAD", "/resources/files/report.md", &[], b"");
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("9"));
    assert_eq!(head.header("etag"), Some(etag));
    assert!(head.body.is_empty());
}

/// An HTTP-date, as RFC 9110 5.6.7 writes one.
fn httpdate(at: std::time::SystemTime) -> String {
    let since = at.duration_since(std::time::UNIX_EPOCH).unwrap();
    murmur_door_guest::timestamp::http_date(since.as_millis() as i64)
}

/// Issue 33, "Conditional and range requests".
#[test]
fn a_current_copy_is_not_sent_and_one_range_is() {
    let capsule = Capsule::exported();
    let path = "/resources/files/out/a.txt";
    let first = capsule.get(path, &[]);
    let etag = first.header("etag").unwrap().to_string();
    let modified = first.header("last-modified").unwrap().to_string();
    for condition in [
        ("if-none-match", etag.as_str()),
        ("if-modified-since", &modified),
    ] {
        let reply = capsule.get(path, &[condition]);
        assert_eq!(reply.status, 304, "{condition:?}");
        assert_eq!(reply.header("etag"), Some(etag.as_str()));
        assert!(reply.body.is_empty());
    }

    let part = capsule.get(path, &[("range", "bytes=7-11")]);
    assert_eq!(part.status, 206);
    assert_eq!(part.body, b"plane");
    assert_eq!(part.header("content-range"), Some("bytes 7-11/13"));
    assert_eq!(part.header("content-length"), Some("5"));
    let tail = capsule.get(path, &[("range", "bytes=-6")]);
    assert_eq!((tail.status, tail.body.as_slice()), (206, &b"plane\n"[..]));

    let past = capsule.get(path, &[("range", "bytes=13-")]);
    assert_eq!(past.status, 416);
    assert_eq!(past.header("content-range"), Some("bytes */13"));
    assert_eq!(
        past.text(),
        r#"{"error":"range_not_satisfiable","message":"the range starts past the end of the file's 13 bytes"}"#
    );

    let several = capsule.get(path, &[("range", "bytes=0-1,3-4")]);
    assert_eq!(
        (several.status, several.body.as_slice()),
        (200, &b"hello, plane\n"[..])
    );
}

/// docs/planes.md, "A directory": a trailing `/` names a directory, as
/// every file server reads it. `out/` lists; `out` answers 301 to `out/`
/// (its query kept), for a directory the plane serves only; `report.md/`
/// and a directory nothing exports stay the one 404.
#[test]
fn a_directory_is_named_with_its_trailing_slash() {
    let capsule = Capsule::exported();
    for (path, location) in [
        ("/resources/files/out", "/resources/files/out/"),
        ("/resources/files/logs", "/resources/files/logs/"),
        (
            "/resources/files/logs?pageSize=1",
            "/resources/files/logs/?pageSize=1",
        ),
    ] {
        for method in ["GET", "HEAD"] {
            let moved = capsule.door.request(method, path, &[], b"");
            assert_eq!(moved.status, 301, "{method} {path}");
            assert_eq!(moved.header("location"), Some(location), "{path}");
            assert_eq!(moved.header("content-length"), Some("0"), "{path}");
            assert!(moved.body.is_empty());
        }
        let listed = capsule.get(location, &[]);
        assert_eq!(listed.status, 200, "{location}");
        assert!(listed.json()["entries"].is_array());
    }
    for refused in [
        "/resources/files/report.md/",
        "/resources/files/nowhere",
        "/resources/files/nowhere/",
        "/resources/files/out//",
    ] {
        let reply = capsule.get(refused, &[]);
        assert_eq!(
            (reply.status, reply.text()),
            (404, NOT_FOUND.to_string()),
            "{refused}"
        );
    }
    // A directory nothing exports below is not served: no 301 tells it
    // from a missing one.
    std::fs::create_dir_all(capsule.dir().join("private")).unwrap();
    assert_eq!(capsule.get("/resources/files/private", &[]).status, 404);
}

/// Issue 33, "A directory": its exported entries only, sorted by name,
/// paged the way ListTasks is.
#[test]
fn a_directory_lists_what_is_served_in_it() {
    let capsule = Capsule::exported();
    for root in ["/resources/files", "/resources/files/"] {
        let listing = capsule.get(root, &[]);
        assert_eq!(listing.status, 200, "{root}");
        assert_eq!(listing.header("content-type"), Some("application/json"));
        let names: Vec<(String, String)> = listing.json()["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().into(),
                    e["kind"].as_str().unwrap().into(),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("logs", "directory"),
                ("out", "directory"),
                ("report.md", "file")
            ]
            .map(|(n, k)| (n.to_string(), k.to_string()))
        );
        assert_eq!(listing.json()["nextPageToken"], "");
    }
    let logs = capsule.get("/resources/files/logs/", &[]).json();
    let entry = &logs["entries"][0];
    assert_eq!(logs["entries"].as_array().unwrap().len(), 1, "{logs}");
    assert_eq!(
        (entry["name"].as_str(), entry["size"].as_u64()),
        (Some("x.txt"), Some(2))
    );
    assert!(
        entry["modified"].as_str().unwrap().ends_with('Z'),
        "{entry}"
    );

    // Paged: one entry at a time, until nextPageToken is "".
    let mut names = Vec::new();
    let mut token = String::new();
    loop {
        let page = capsule
            .get(
                &format!("/resources/files?pageSize=1&pageToken={token}"),
                &[],
            )
            .json();
        assert_eq!(page["entries"].as_array().unwrap().len(), 1, "{page}");
        names.push(page["entries"][0]["name"].as_str().unwrap().to_string());
        token = page["nextPageToken"].as_str().unwrap().to_string();
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(names, ["logs", "out", "report.md"]);

    // A page the plane cannot read is refused before the path is read.
    for (query, message) in [
        (
            "pageSize=0",
            "pageSize must be an integer from 1, given once",
        ),
        (
            "pageToken=%21",
            "pageToken must be a nextPageToken this plane answered, given once",
        ),
    ] {
        for path in ["/resources/files/logs", "/resources/files/nowhere"] {
            let reply = capsule.get(&format!("{path}?{query}"), &[]);
            assert_eq!(reply.status, 400, "{path}?{query}");
            assert_eq!(
                reply.json(),
                json!({"error": "invalid_page", "message": message})
            );
        }
    }
}

/// Issue 33, "One refusal for everything that is not served": the same 404,
/// headers and body, whatever the cause, and nothing that tells a file
/// that is not exported from one that is missing.
#[test]
fn everything_not_served_is_one_404() {
    let capsule = Capsule::exported();
    let dir = capsule.dir();
    // Links: out of the exports, out of the workdir, in a loop; a FIFO.
    symlink("../secret.txt", dir.join("out/to-secret")).unwrap();
    symlink("/etc/passwd", dir.join("out/to-etc")).unwrap();
    symlink("../../..", dir.join("out/up")).unwrap();
    symlink("loop2", dir.join("out/loop1")).unwrap();
    symlink("loop1", dir.join("out/loop2")).unwrap();
    symlink("../logs", dir.join("out/logs")).unwrap();
    let fifo = std::ffi::CString::new(dir.join("out/fifo").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);

    let missing = capsule.get("/resources/files/out/missing.txt", &[]);
    assert_eq!(missing.status, 404);
    assert_eq!(missing.text(), NOT_FOUND);
    assert_eq!(missing.header("content-type"), Some("application/json"));
    let refused = [
        // Not exported, or missing.
        "/resources/files/secret.txt",
        "/resources/files/murmur.yaml",
        "/resources/files/logs/y.log",
        "/resources/files/nowhere",
        "/resources/files/out/a.txt/more",
        // Dots and slashes, plain, encoded, double-encoded, overlong.
        "/resources/files/out/../secret.txt",
        "/resources/files/out/%2e%2e/secret.txt",
        "/resources/files/out/%2E%2E/secret.txt",
        "/resources/files/out/%252e%252e/secret.txt",
        "/resources/files/out%2f..%2fsecret.txt",
        "/resources/files/out%2Fa.txt",
        "/resources/files/out/%c0%ae%c0%ae/secret.txt",
        "/resources/files/out/%e0%80%ae%e0%80%ae/secret.txt",
        "/resources/files/out/./a.txt",
        "/resources/files/./report.md",
        "/resources/files//report.md",
        "/resources/files/out//a.txt",
        "/resources/files/report.md/",
        "/resources/files/report.md.",
        "/resources/files/out%5ca.txt",
        "/resources/files/report.md%00",
        "/resources/files/report.md%00.txt",
        "/resources/files/%",
        // Look-alikes of `.` and `/` (U+2024, U+FF0E, U+2215, U+FF0F).
        "/resources/files/out/%e2%80%a4%e2%80%a4/secret.txt",
        "/resources/files/out/%ef%bc%8e%ef%bc%8e/secret.txt",
        "/resources/files/out%e2%88%95a.txt",
        "/resources/files/out%ef%bc%8fa.txt",
        // Case variants.
        "/resources/files/OUT/a.txt",
        "/resources/files/Report.md",
        "/resources/files/report.MD",
        // Links that leave the exports or the workdir, loops, a FIFO.
        "/resources/files/out/to-secret",
        "/resources/files/out/to-etc",
        "/resources/files/out/up",
        "/resources/files/out/up/etc/passwd",
        "/resources/files/out/loop1",
        "/resources/files/out/logs/y.log",
        "/resources/files/out/fifo",
    ];
    for path in refused {
        let reply = capsule.get(path, &[]);
        assert_eq!(undated(&reply), undated(&missing), "{path}");
    }
    // A link whose target is exported is served as that target.
    let through = capsule.get("/resources/files/out/logs/x.txt", &[]);
    assert_eq!(
        (through.status, through.body.as_slice()),
        (200, &b"x\n"[..])
    );
    // The listing shows neither what is refused nor the links out.
    let out = capsule.get("/resources/files/out/", &[]).json();
    let names: Vec<&str> = out["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.txt", "deep", "logs"], "{out}");
}

/// Issue 33: "Other methods: 405 with Allow: GET, HEAD".
#[test]
fn other_methods_are_not_allowed() {
    let capsule = Capsule::exported();
    for method in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"] {
        for path in ["/resources/files/report.md", "/resources/files/nowhere"] {
            let reply = capsule.door.request(method, path, &[], b"x");
            assert_eq!(reply.status, 405, "{method} {path}");
            assert_eq!(reply.header("allow"), Some("GET, HEAD"));
            assert_eq!(
                reply.text(),
                r#"{"error":"method_not_allowed","message":"a plane answers GET and HEAD"}"#
            );
        }
    }
}

/// Reference, "What the door answers", step 4: on an authenticated door
/// the operator plane takes the `resources/files` scope.
#[test]
fn an_authenticated_door_asks_for_the_scope() {
    let capsule = Capsule::start(
        "[report.md]",
        "network:\n  authentication:\n    scheme: bearer\n    credentials:\n      \
         reader: {scopes: [resources/files]}\n      watcher: {scopes: [GetTask]}\n",
        &[],
    );
    let bearer = |credential: &str| format!("Bearer {}", capsule.door.token(credential));
    let path = "/resources/files/report.md";
    assert_eq!(capsule.get(path, &[]).status, 401);
    let refused = capsule.get(path, &[("authorization", &bearer("watcher"))]);
    assert_eq!(refused.status, 403);
    assert_eq!(
        refused.text(),
        r#"{"error":"insufficient_scope","message":"credential 'watcher' does not reach resources/files"}"#
    );
    for credential in ["reader", "operator"] {
        let reply = capsule.get(path, &[("authorization", &bearer(credential))]);
        assert_eq!(
            (reply.status, reply.body.as_slice()),
            (200, &b"# Report\n"[..])
        );
    }
}

/// Issue 33: "The export set is applied at request time", and the mapping
/// forms of today's manifests keep their meaning.
#[test]
fn exports_are_read_at_request_time_in_either_form() {
    let capsule = Capsule::exported();
    assert_eq!(
        capsule.get("/resources/files/out/new/c.txt", &[]).status,
        404
    );
    std::fs::create_dir_all(capsule.dir().join("out/new")).unwrap();
    std::fs::write(capsule.dir().join("out/new/c.txt"), b"later").unwrap();
    let later = capsule.get("/resources/files/out/new/c.txt", &[]);
    assert_eq!((later.status, later.body.as_slice()), (200, &b"later"[..]));
    std::fs::write(capsule.dir().join("logs/z.txt"), b"z").unwrap();
    assert_eq!(capsule.get("/resources/files/logs/z.txt", &[]).status, 200);

    let rooted = Capsule::start("{root: out}", "", &[]);
    assert_eq!(rooted.get("/resources/files/out/a.txt", &[]).status, 200);
    assert_eq!(
        rooted.get("/resources/files/report.md", &[]).text(),
        NOT_FOUND
    );

    let empty = Capsule::start("{}", "", &[]);
    let listing = empty.get("/resources/files/", &[]);
    assert_eq!(listing.json(), json!({"entries": [], "nextPageToken": ""}));
    assert_eq!(
        empty.get("/resources/files/report.md", &[]).text(),
        NOT_FOUND
    );
    let card = empty.door.get("/.well-known/agent-card.json").json();
    let capsule_extension = card["capabilities"]["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["params"]["planes"].is_array())
        .unwrap()
        .clone();
    assert_eq!(capsule_extension["params"]["planes"], json!(["files"]));
}

/// `--workdir` moves the exports away from the manifest's directory.
#[test]
fn the_workdir_can_be_named() {
    let elsewhere = TempDir::new("elsewhere");
    std::fs::write(elsewhere.path().join("report.md"), b"elsewhere").unwrap();
    let workdir = elsewhere.path().to_str().unwrap().to_string();
    let capsule = Capsule::start("[report.md]", "", &["--workdir", &workdir]);
    let reply = capsule.get("/resources/files/report.md", &[]);
    assert_eq!(reply.body, b"elsewhere");
}

/// Issue 33, "Memory stays bounded": a 1 GiB file is streamed in bounded
/// chunks, and a client that stops reading holds at most hyper's queue and
/// one read (docs/planes.md: about 0.6 MiB), where an unbounded queue would
/// hold the whole gigabyte.
#[test]
fn a_large_file_streams_in_bounded_memory() {
    let capsule = Capsule::start("[big.bin]", "", &[]);
    let big: PathBuf = capsule.dir().join("big.bin");
    let size: u64 = 1 << 30;
    // Sparse: no disk is used, and every byte reads as zero.
    std::fs::File::create(&big).unwrap().set_len(size).unwrap();
    let before = capsule.door.rss_kib();

    let mut stream = TcpStream::connect(&capsule.door.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "GET /resources/files/big.bin HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut total = 0u64;
    let mut peak = before;
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = stream.read(&mut buffer).unwrap();
        if read == 0 {
            break;
        }
        total += read as u64;
        if total % (64 << 20) < read as u64 {
            peak = peak.max(capsule.door.rss_kib());
        }
    }
    let head = total - size;
    assert!(
        head > 0 && head < 1024,
        "{total} bytes for a {size}-byte file"
    );
    assert!(
        peak - before < 16 << 10,
        "RSS grew {} KiB serving 1 GiB",
        peak - before
    );

    // Twenty clients that ask and never read.
    let idle: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut stream = TcpStream::connect(&capsule.door.addr).unwrap();
            write!(
                stream,
                "GET /resources/files/big.bin HTTP/1.1\r\nhost: x\r\n\r\n"
            )
            .unwrap();
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let held = capsule.door.rss_kib().saturating_sub(before);
    assert!(held < 32 << 10, "20 unread files hold {held} KiB");
    drop(idle);
}

/// A capsule exporting `shared/**` to its peers, on an authenticated door
/// that takes no peer tasks, and the control surface's token.
fn peer_capsule() -> (Capsule, String) {
    let capsule = Capsule::start(
        "[out/**]",
        "  peer_files: [shared/**]\nnetwork:\n  authentication:\n    scheme: bearer\n",
        &[],
    );
    std::fs::create_dir_all(capsule.dir().join("shared")).unwrap();
    std::fs::write(capsule.dir().join("shared/data.csv"), b"a,b\n1,2\n").unwrap();
    let token = std::fs::read_to_string(capsule.door.state.path().join("control-token"))
        .unwrap()
        .trim()
        .to_string();
    (capsule, token)
}

const CONTROL: &str = "/.well-known/murmur/control/handles";

fn control(capsule: &Capsule, token: &str, method: &str, path: &str, body: &str) -> Reply {
    let bearer = format!("Bearer {token}");
    let mut headers = vec![("authorization", bearer.as_str())];
    if !body.is_empty() {
        headers.push(("content-type", "application/json"));
    }
    capsule
        .door
        .request(method, path, &headers, body.as_bytes())
}

fn mint(capsule: &Capsule, token: &str, body: serde_json::Value) -> serde_json::Value {
    let reply = control(capsule, token, "POST", CONTROL, &body.to_string());
    assert_eq!(reply.status, 201, "{}", reply.text());
    reply.json()
}

fn redeem(capsule: &Capsule, handle: &str, headers: &[(&str, &str)]) -> Reply {
    capsule.get(&format!("/resources/peer/{handle}"), headers)
}

/// Issue 33, "The peer plane: handles": minted through the control
/// surface, redeemed without a door token by the audience it names, the
/// answer naming the handle's id; listed without values; revoked.
#[test]
fn a_peer_redeems_the_handle_minted_for_it() {
    let (capsule, token) = peer_capsule();
    let minted = mint(
        &capsule,
        &token,
        json!({"path": "shared/data.csv", "audience": "beta", "ttlSeconds": 60}),
    );
    let keys: Vec<&str> = minted
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["handle", "handleId", "url", "expiresAt"]);
    let handle = minted["handle"].as_str().unwrap();
    let id = minted["handleId"].as_str().unwrap();
    assert!(handle.len() >= 22, "{handle}");
    assert_eq!(
        minted["url"],
        format!("{}/resources/peer/{handle}", capsule.door.url)
    );

    // No door token, and the peer consent the door refuses tasks with does
    // not apply (reference, step 1).
    let headers = [
        ("x-murmur-audience", "beta"),
        ("x-murmur-task-origin", "peer"),
    ];
    let reply = redeem(&capsule, handle, &headers);
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.body, b"a,b\n1,2\n");
    assert_eq!(reply.header("x-murmur-handle-id"), Some(id));
    assert_eq!(reply.header("content-type"), Some("text/csv"));
    let part = redeem(
        &capsule,
        handle,
        &[("x-murmur-audience", "beta"), ("range", "bytes=4-")],
    );
    assert_eq!((part.status, part.body.as_slice()), (206, &b"1,2\n"[..]));
    let etag = reply.header("etag").unwrap();
    let current = redeem(
        &capsule,
        handle,
        &[("x-murmur-audience", "beta"), ("if-none-match", etag)],
    );
    assert_eq!(current.status, 304);
    assert_eq!(current.header("x-murmur-handle-id"), Some(id));

    let listed = control(&capsule, &token, "GET", CONTROL, "");
    assert!(!listed.text().contains(handle), "{}", listed.text());
    let entry = &listed.json()["handles"][0];
    assert_eq!(entry["handleId"], id);
    assert_eq!(entry["path"], "shared/data.csv");
    assert_eq!(entry["audience"], "beta");
    assert_eq!(entry["uses"], 3);

    let revoked = control(&capsule, &token, "DELETE", &format!("{CONTROL}/{id}"), "");
    assert_eq!(revoked.json(), json!({"revoked": id}));
    assert_eq!(redeem(&capsule, handle, &headers).status, 404);
    let again = control(&capsule, &token, "DELETE", &format!("{CONTROL}/{id}"), "");
    assert_eq!(again.status, 404);
    // The session answers its handles; the surface, what no route matched.
    let path = format!("{CONTROL}/{id}");
    let wrong = control(&capsule, &token, "GET", &path, "");
    assert_eq!(wrong.status, 405);
    assert_eq!(
        wrong.json(),
        json!({"error": "method_not_allowed", "message": format!("GET is not served on {path}")})
    );

    // The log names the handle's id and audience, never the handle.
    let logged = capsule.door.stop();
    assert!(
        logged.iter().any(|l| l.contains(id) && l.contains("beta")),
        "{logged:?}"
    );
    assert!(!logged.iter().any(|l| l.contains(handle)), "{logged:?}");
}

/// Issue 33, "One refusal": unknown, expired, revoked, used up, the wrong
/// or no audience, the file gone: one byte-identical 404.
#[test]
fn every_refused_redeem_is_one_404() {
    let (capsule, token) = peer_capsule();
    let once = mint(
        &capsule,
        &token,
        json!({"path": "shared/data.csv", "audience": "beta", "maxUses": 1}),
    );
    let once = once["handle"].as_str().unwrap();
    let gone = mint(
        &capsule,
        &token,
        json!({"path": "shared/gone.txt", "audience": "beta"}),
    );
    let gone = gone["handle"].as_str().unwrap();
    let live = mint(
        &capsule,
        &token,
        json!({"path": "shared/data.csv", "audience": "beta"}),
    );
    let live = live["handle"].as_str().unwrap();
    assert_eq!(
        redeem(&capsule, once, &[("x-murmur-audience", "beta")]).status,
        200
    );

    let unknown = redeem(
        &capsule,
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        &[("x-murmur-audience", "beta")],
    );
    assert_eq!(unknown.status, 404);
    assert_eq!(
        unknown.text(),
        r#"{"error":"handle_not_found","message":"this plane serves no file for that handle and audience"}"#
    );
    let cases: Vec<(String, Vec<(&str, &str)>)> = vec![
        (once.into(), vec![("x-murmur-audience", "beta")]),
        (gone.into(), vec![("x-murmur-audience", "beta")]),
        (live.into(), vec![("x-murmur-audience", "gamma")]),
        (live.into(), vec![("x-murmur-audience", "BETA")]),
        (live.into(), vec![]),
        (live.into(), vec![("x-murmur-audience", "")]),
        (
            live.into(),
            vec![("x-murmur-audience", "beta"), ("x-murmur-audience", "beta")],
        ),
        (format!("{live}/more"), vec![("x-murmur-audience", "beta")]),
        (format!("{live}/"), vec![("x-murmur-audience", "beta")]),
        (String::new(), vec![("x-murmur-audience", "beta")]),
    ];
    for (handle, headers) in cases {
        let reply = redeem(&capsule, &handle, &headers);
        assert_eq!(undated(&reply), undated(&unknown), "{handle} {headers:?}");
    }
    // The file gone, or no longer exported (moved out of shared/).
    std::fs::rename(
        capsule.dir().join("shared/data.csv"),
        capsule.dir().join("data.csv"),
    )
    .unwrap();
    let moved = redeem(&capsule, live, &[("x-murmur-audience", "beta")]);
    assert_eq!(undated(&moved), undated(&unknown));
}

/// Issue 33, "Minting": a path outside `exports.peer_files` is refused 422
/// with the reason; the control surface needs its token.
#[test]
fn a_handle_is_minted_only_for_a_peer_export() {
    let (capsule, token) = peer_capsule();
    for (body, status, message) in [
        (
            json!({"path": "out/a.txt", "audience": "beta"}),
            422,
            "path \"out/a.txt\" is not under exports.peer_files",
        ),
        (
            json!({"path": "shared/../out/a.txt", "audience": "beta"}),
            422,
            "path \"shared/../out/a.txt\" must be workdir-relative, with no empty, '.' or '..' segment",
        ),
        (
            json!({"path": "shared/x", "audience": "beta", "ttlSeconds": 0}),
            422,
            "ttlSeconds must be from 1 to 604800",
        ),
        (
            json!({"path": "shared/x"}),
            400,
            "path and audience must be strings: {\"path\", \"audience\", \"ttlSeconds\"?, \"maxUses\"?}",
        ),
        (
            json!([1]),
            400,
            "the body must be a JSON object: {\"path\", \"audience\", \"ttlSeconds\"?, \"maxUses\"?}",
        ),
    ] {
        let reply = control(&capsule, &token, "POST", CONTROL, &body.to_string());
        assert_eq!(reply.status, status, "{body}");
        assert_eq!(reply.json()["message"], message, "{body}");
    }
    let stranger = control(
        &capsule,
        "not-the-token",
        "POST",
        CONTROL,
        r#"{"path":"shared/data.csv","audience":"b"}"#,
    );
    assert_eq!(stranger.status, 401);
    let files_only = Capsule::exported();
    let token =
        std::fs::read_to_string(files_only.door.state.path().join("control-token")).unwrap();
    let refused = control(
        &files_only,
        token.trim(),
        "POST",
        CONTROL,
        r#"{"path":"out/a.txt","audience":"b"}"#,
    );
    assert_eq!(refused.status, 422);
    assert_eq!(
        refused.json()["message"],
        "this capsule declares no peer_files plane"
    );
}

/// Issue 33, "Guessing": past its budget of failed redeems an address is
/// answered 429 with retry-after, before a door runs.
#[test]
fn guessing_handles_is_limited() {
    let (capsule, token) = peer_capsule();
    let live = mint(
        &capsule,
        &token,
        json!({"path": "shared/data.csv", "audience": "beta"}),
    );
    let live = live["handle"].as_str().unwrap();
    for guess in 0..30 {
        let reply = redeem(
            &capsule,
            &format!("guess{guess}"),
            &[("x-murmur-audience", "beta")],
        );
        assert_eq!(reply.status, 404);
    }
    let limited = redeem(&capsule, live, &[("x-murmur-audience", "beta")]);
    assert_eq!(limited.status, 429);
    let wait: u64 = limited.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    assert_eq!(limited.json()["error"], "too_many_redeems");
    // The operator plane is not limited by it.
    assert_eq!(
        capsule
            .get(
                "/resources/files/out/a.txt",
                &[(
                    "authorization",
                    &format!("Bearer {}", capsule.door.token("operator"))
                )]
            )
            .status,
        200
    );
}

/// Issue 47 ("Percent-decoding accepts `%+1`"): a `%` decodes only with two
/// hex digits after it. `%+1` once read as the byte 1 and served a file of
/// that name; now it, and a `%2` before a non-hex byte, are refused like any
/// bad encoding, with the plane's one 404.
#[test]
fn only_two_hex_digits_are_percent_decoded() {
    let capsule = Capsule::exported();
    std::fs::write(capsule.dir().join("out/\u{1}"), b"byte one\n").unwrap();
    std::fs::write(capsule.dir().join("out/\u{2}g"), b"byte two, g\n").unwrap();
    let named = capsule.get("/resources/files/out/%01", &[]);
    assert_eq!(
        (named.status, named.body.as_slice()),
        (200, &b"byte one\n"[..])
    );
    for path in [
        "/resources/files/out/%+1",
        "/resources/files/out/%2g",
        "/resources/files/out/%+2g",
        "/resources/files/%+1",
    ] {
        let refused = capsule.get(path, &[]);
        assert_eq!(
            (refused.status, refused.text()),
            (404, NOT_FOUND.into()),
            "{path}"
        );
    }
}
