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
