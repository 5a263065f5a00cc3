//! The misbehaving `wasi:http/incoming-handler`.

use wasip2::http::types::{
    ErrorCode, Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

struct Faults;

wasip2::http::proxy::export!(Faults);

impl wasip2::exports::http::incoming_handler::Guest for Faults {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        match request.path_with_query().as_deref() {
            Some("/error-code") => {
                let message = "x".repeat(1 << 20);
                ResponseOutparam::set(out, Err(ErrorCode::InternalError(Some(message))));
            }
            Some("/short-body") => {
                let headers = Fields::from_list(&[("content-length".into(), b"100".to_vec())])
                    .expect("a valid content-length");
                let body = respond(out, headers);
                write(&body, b"only this");
                pause();
                let _ = OutgoingBody::finish(body, None);
            }
            Some("/cut-stream") => {
                let headers =
                    Fields::from_list(&[("content-type".into(), b"text/event-stream".to_vec())])
                        .expect("a valid content-type");
                let body = respond(out, headers);
                write(&body, b"data: one\n\n");
                pause();
                core::arch::wasm32::unreachable();
            }
            Some("/pile-resources") => loop {
                std::mem::forget(Fields::new());
            },
            Some("/sticky") => sticky(&request, out),
            Some("/preopens") => {
                let names = preopens();
                let body = respond(out, Fields::new());
                write(&body, names.join(",").as_bytes());
                let _ = OutgoingBody::finish(body, None);
            }
            Some(path) if path.starts_with("/resources/") => escape(out),
            Some(path) if path.starts_with("/.well-known/agent-card.json") => card(path, out),
            Some("/huge-head") => {
                // Pad one header until the host stops the door.
                let headers = Fields::new();
                let pad = vec![b'p'; 4096];
                while headers.append("x-pad", &pad).is_ok() {}
                ResponseOutparam::set(out, Ok(OutgoingResponse::new(headers)));
            }
            _ => garbage_head(out),
        }
    }
}

/// The names of the directories this request finds preopened.
fn preopens() -> Vec<String> {
    wasip2::filesystem::preopens::get_directories()
        .into_iter()
        .map(|(_, name)| name)
        .collect()
}

/// Ignores every rule of the planes and tries, through each preopen, to
/// read outside it and to change anything inside it: one line a try,
/// `name: ok` or `name: refused`. Only the sandbox stands in the way.
fn escape(out: ResponseOutparam) {
    use wasip2::filesystem::types::{DescriptorFlags as D, OpenFlags as O, PathFlags as P};
    let mut lines = vec![format!("preopens: {}", preopens().join(","))];
    for (dir, _) in wasip2::filesystem::preopens::get_directories() {
        let read = |path: &str, follow: P| {
            dir.open_at(follow, path, O::empty(), D::READ)
                .and_then(|file| file.read(64, 0))
                .map(|_| ())
        };
        let tries: Vec<(&str, Result<(), wasip2::filesystem::types::ErrorCode>)> = vec![
            ("read inside", read("a.txt", P::empty())),
            ("read ..", read("../secret.txt", P::empty())),
            ("read absolute", read("/etc/passwd", P::empty())),
            ("read a link out", read("to-secret", P::SYMLINK_FOLLOW)),
            (
                "read a link to /",
                read("to-root/etc/passwd", P::SYMLINK_FOLLOW),
            ),
            (
                "create",
                dir.open_at(P::empty(), "new.txt", O::CREATE, D::READ | D::WRITE)
                    .map(|_| ()),
            ),
            (
                "open to write",
                dir.open_at(P::empty(), "a.txt", O::empty(), D::WRITE)
                    .map(|_| ()),
            ),
            (
                "truncate",
                dir.open_at(P::empty(), "a.txt", O::TRUNCATE, D::READ)
                    .map(|_| ()),
            ),
            ("mkdir", dir.create_directory_at("made")),
            ("rename", dir.rename_at("a.txt", &dir, "moved.txt")),
            ("delete", dir.unlink_file_at("a.txt")),
            ("rmdir", dir.remove_directory_at("deep")),
            ("symlink", dir.symlink_at("a.txt", "linked")),
            (
                "set times",
                dir.set_times_at(
                    P::empty(),
                    "a.txt",
                    wasip2::filesystem::types::NewTimestamp::Now,
                    wasip2::filesystem::types::NewTimestamp::Now,
                ),
            ),
            (
                "set size",
                dir.open_at(P::empty(), "a.txt", O::empty(), D::READ)
                    .and_then(|file| file.set_size(0)),
            ),
        ];
        for (name, result) in tries {
            let verdict = if result.is_ok() { "ok" } else { "refused" };
            lines.push(format!("{name}: {verdict}"));
        }
    }
    let body = respond(out, Fields::new());
    write(&body, lines.join("\n").as_bytes());
    let _ = OutgoingBody::finish(body, None);
}

/// Waits 100 ms, so what was written reaches the client first.
fn pause() {
    wasip2::clocks::monotonic_clock::subscribe_duration(100_000_000).block();
}

/// Sets a 200 response with `headers` and returns its body.
fn respond(out: ResponseOutparam, headers: Fields) -> OutgoingBody {
    let response = OutgoingResponse::new(headers);
    let body = response.body().expect("the response body");
    ResponseOutparam::set(out, Ok(response));
    body
}

/// Writes `bytes` to `body` and flushes them.
fn write(body: &OutgoingBody, bytes: &[u8]) {
    let stream = body.write().expect("the body stream");
    stream
        .blocking_write_and_flush(bytes)
        .expect("writing the body");
}

/// Answers what the first request this instance served said (its
/// `Authorization` and the authority it was sent to), kept in a static: a
/// door that keeps state between requests, which the host's reuse of
/// instances must never show to another caller or capsule.
fn sticky(request: &IncomingRequest, out: ResponseOutparam) {
    static FIRST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let first = FIRST.get_or_init(|| {
        let authorization: Vec<String> = request
            .headers()
            .get("authorization")
            .iter()
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        let authority = request.authority().unwrap_or_default();
        format!("{} at {authority}", authorization.join(","))
    });
    let body = respond(out, Fields::new());
    write(&body, first.as_bytes());
    let _ = OutgoingBody::finish(body, None);
}

/// A card that differs at every answer (a random number), `private` when
/// the query says so, else public.
fn card(path: &str, out: ResponseOutparam) {
    let control: &[u8] = if path.ends_with("?private") {
        b"private"
    } else {
        b"public, max-age=60"
    };
    let headers = Fields::from_list(&[("cache-control".into(), control.to_vec())])
        .expect("a valid cache-control");
    let body = respond(out, headers);
    let random = wasip2::random::random::get_random_u64().to_string();
    write(&body, random.as_bytes());
    let _ = OutgoingBody::finish(body, None);
}

/// Tries what a response head may not hold, and answers what was refused.
fn garbage_head(out: ResponseOutparam) {
    let headers = Fields::new();
    let mut refused = Vec::new();
    let tries: [(&str, &[u8]); 4] = [
        ("bad name", b"v"),
        ("x-split", b"a\r\nx-injected: 1"),
        ("connection", b"close"),
        ("transfer-encoding", b"gzip"),
    ];
    for (name, value) in tries {
        if let Err(e) = headers.append(name, value) {
            refused.push(format!("{name}: {e:?}"));
        }
    }
    let response = OutgoingResponse::new(headers);
    if response.set_status_code(1000).is_err() {
        refused.push("status 1000".into());
    }
    let body = response.body().expect("the response body");
    ResponseOutparam::set(out, Ok(response));
    write(&body, refused.join("\n").as_bytes());
    let _ = OutgoingBody::finish(body, None);
}
