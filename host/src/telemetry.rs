//! Traces over OTLP/HTTP, off unless the OpenTelemetry variables name a
//! collector, and the log's subscriber either way.
//!
//! On, the host's `tracing` spans become OpenTelemetry spans (a request's
//! span the server span, a child of the caller's `traceparent`), batched
//! off the request path and sent as protobuf over HTTP. A collector that
//! is slow, dead or refusing costs no request anything: a span past the
//! queue's bound is dropped and counted ([`dropped`]), and an export that
//! fails is counted ([`export_failures`]) and logged once a minute at most.
//! Off, the log is the plain one it always was, and no request pays for a
//! span it would not send.

use std::future::Future;
use std::io::IsTerminal;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Status, TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanProcessor,
};
use tracing::{Event, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::{FmtContext, format::Format};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, filter};

/// The service name when neither `OTEL_SERVICE_NAME` nor a `service.name`
/// in `OTEL_RESOURCE_ATTRIBUTES` gives one.
pub const SERVICE_NAME: &str = "murmur-door";
/// Spans waiting to be sent when `OTEL_BSP_MAX_QUEUE_SIZE` says nothing
/// (the SDK's own default), and the most it may say.
const QUEUE: usize = 2048;
const MAX_QUEUE: usize = 65_536;
/// How long an export may take when `OTEL_EXPORTER_OTLP_TIMEOUT` says
/// nothing (the specification's default), in milliseconds.
const EXPORT_TIMEOUT_MS: u64 = 10_000;
/// What the spans still queued get to reach the collector at exit.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(2);
/// A failing export is logged once in this long at most.
const FAILURE_LOG_EVERY_MS: i64 = 60_000;

static ON: AtomicBool = AtomicBool::new(false);
static DROPPED: AtomicU64 = AtomicU64::new(0);
static EXPORT_FAILURES: AtomicU64 = AtomicU64::new(0);
static LAST_FAILURE_LOG_MS: AtomicI64 = AtomicI64::new(i64::MIN);

/// Whether spans are traced and sent: what a request checks before it
/// makes a span richer than the log needs.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Spans dropped because the queue to the collector was full.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Spans whose export failed (the collector refused them, or could not be
/// reached in time).
pub fn export_failures() -> u64 {
    EXPORT_FAILURES.load(Ordering::Relaxed)
}

/// Where and how spans are sent, from the environment.
#[derive(Debug, PartialEq)]
pub struct Settings {
    /// The resolved endpoint, for the log; the exporter reads it again.
    pub endpoint: String,
    pub service_name: String,
    pub queue: usize,
    pub timeout: Duration,
}

/// Reads the OpenTelemetry variables through `var`: None when tracing is
/// off (no endpoint, `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`),
/// an error saying why when they ask for what this host cannot send.
pub fn settings(var: impl Fn(&str) -> Option<String>) -> Result<Option<Settings>, String> {
    let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    match set("OTEL_TRACES_EXPORTER").as_deref().map(str::trim) {
        None | Some("otlp") => {}
        Some("none") => return Ok(None),
        Some(other) => {
            return Err(format!(
                "OTEL_TRACES_EXPORTER={other}: only otlp (or none) is supported"
            ));
        }
    }
    let endpoint = match (
        set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        set("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ) {
        (Some(traces), _) => traces.trim().to_string(),
        (None, Some(base)) => format!("{}/v1/traces", base.trim().trim_end_matches('/')),
        (None, None) => return Ok(None),
    };
    let protocol = set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or(set("OTEL_EXPORTER_OTLP_PROTOCOL"));
    if let Some(protocol) = protocol.filter(|p| p.trim() != "http/protobuf") {
        return Err(format!(
            "OTEL_EXPORTER_OTLP_PROTOCOL={}: only http/protobuf is supported",
            protocol.trim()
        ));
    }
    if !endpoint.starts_with("http://") {
        return Err(format!(
            "the OTLP endpoint {endpoint} is not http://: TLS to a collector is not supported (run one beside the door)"
        ));
    }
    let timeout_ms = set("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
        .or(set("OTEL_EXPORTER_OTLP_TIMEOUT"))
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .unwrap_or(EXPORT_TIMEOUT_MS);
    let queue = set("OTEL_BSP_MAX_QUEUE_SIZE")
        .and_then(|n| n.trim().parse::<usize>().ok())
        .unwrap_or(QUEUE)
        .clamp(1, MAX_QUEUE);
    let service_name = set("OTEL_SERVICE_NAME")
        .map(|name| name.trim().to_string())
        .or_else(|| {
            set("OTEL_RESOURCE_ATTRIBUTES")?
                .split(',')
                .filter_map(|pair| pair.split_once('='))
                .find(|(key, _)| key.trim() == "service.name")
                .map(|(_, value)| value.trim().to_string())
        })
        .unwrap_or_else(|| SERVICE_NAME.to_string());
    Ok(Some(Settings {
        endpoint,
        service_name,
        queue,
        timeout: Duration::from_millis(timeout_ms),
    }))
}

/// What the binary keeps while it runs: the provider, to send what is
/// still queued at exit.
pub struct Tracing(SdkTracerProvider);

impl Tracing {
    /// Sends what is queued, within [`FLUSH_AT_EXIT`]: a dead collector
    /// does not hold the exit up. Needs the runtime the exports run on.
    pub fn shutdown(self) {
        let _ = self.0.shutdown_with_timeout(FLUSH_AT_EXIT);
        let (dropped, failed) = (dropped(), export_failures());
        if dropped + failed > 0 {
            tracing::warn!(
                dropped,
                failed,
                "spans lost since launch: dropped with the queue full, or not taken by the collector"
            );
        }
    }
}

/// Installs the process's subscriber: the log on stderr, filtered by
/// `RUST_LOG` (info by default), and, when the OpenTelemetry variables
/// name a collector, the layer that sends spans to it over `runtime`, with
/// `trace_id` and `span_id` on every log line written inside a traced
/// span. Answers the tracing to shut down at exit, when it is on.
pub fn install(runtime: tokio::runtime::Handle) -> Option<Tracing> {
    let filter = || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::stderr().is_terminal();
    let settings = match settings(|name| std::env::var(name).ok()) {
        Ok(Some(settings)) => settings,
        Ok(None) => return plain(filter(), ansi, None),
        Err(why) => return plain(filter(), ansi, Some(why)),
    };
    let provider = match provider(&settings, runtime) {
        Ok(provider) => provider,
        Err(why) => return plain(filter(), ansi, Some(why)),
    };
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .log_internal_errors(false)
        .event_format(TraceIds(format::format()))
        .with_filter(filter());
    // The host's own spans, and its warnings and errors as their events.
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(SERVICE_NAME))
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(filter::filter_fn(|meta| {
            meta.target().starts_with("murmur_door_host")
                && (meta.is_span() || *meta.level() <= tracing::Level::WARN)
        }));
    tracing_subscriber::registry().with(log).with(spans).init();
    ON.store(true, Ordering::Relaxed);
    tracing::info!(
        endpoint = %settings.endpoint,
        service = %settings.service_name,
        queue = settings.queue,
        "traces are sent over OTLP/HTTP"
    );
    Some(Tracing(provider))
}

/// The log alone, as the door writes it untraced; `why` says why tracing
/// was asked for and is off.
fn plain(filter: EnvFilter, ansi: bool, why: Option<String>) -> Option<Tracing> {
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        // A log line that cannot be written (its reader has gone) is lost;
        // reporting that with eprintln! would panic and end every capsule.
        .log_internal_errors(false)
        .init();
    if let Some(why) = why {
        tracing::warn!("traces are not sent: {why}");
    }
    None
}

fn provider(
    settings: &Settings,
    runtime: tokio::runtime::Handle,
) -> Result<SdkTracerProvider, String> {
    let client = OnRuntime {
        client: opentelemetry_http::hyper::HyperClient::with_default_connector(
            settings.timeout,
            None,
        ),
        runtime,
    };
    // The exporter reads the endpoint, headers and timeout itself.
    let exporter = SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_timeout(settings.timeout)
        .build()
        .map_err(|e| format!("the OTLP exporter: {e}"))?;
    let pending = Arc::new(AtomicUsize::new(0));
    let batches = BatchSpanProcessor::builder(Counted {
        exporter,
        pending: pending.clone(),
    })
    .with_batch_config(
        BatchConfigBuilder::default()
            .with_max_queue_size(settings.queue)
            .build(),
    )
    .build();
    let resource = Resource::builder()
        .with_service_name(settings.service_name.clone())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    // The sampler is the SDK's: OTEL_TRACES_SAMPLER and its argument, else
    // parent-based, always on.
    Ok(SdkTracerProvider::builder()
        .with_span_processor(Gate {
            inner: batches,
            pending,
            bound: settings.queue,
        })
        .with_resource(resource)
        .build())
}

/// The batch processor behind a bound: a span ended while `bound` spans
/// wait to be sent is dropped and counted, so the queue never holds more
/// and the count is exact.
#[derive(Debug)]
struct Gate {
    inner: BatchSpanProcessor,
    /// Ended and not yet handed to the exporter.
    pending: Arc<AtomicUsize>,
    bound: usize,
}

impl SpanProcessor for Gate {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.pending.fetch_add(1, Ordering::AcqRel) >= self.bound {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The exporter, counting what leaves the queue and what fails.
#[derive(Debug)]
struct Counted {
    exporter: SpanExporter,
    pending: Arc<AtomicUsize>,
}

impl opentelemetry_sdk::trace::SpanExporter for Counted {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        self.pending.fetch_sub(spans, Ordering::AcqRel);
        let sent = self.exporter.export(batch).await;
        if let Err(e) = &sent {
            EXPORT_FAILURES.fetch_add(spans as u64, Ordering::Relaxed);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            let last = LAST_FAILURE_LOG_MS.load(Ordering::Relaxed);
            if now.saturating_sub(last) >= FAILURE_LOG_EVERY_MS
                && LAST_FAILURE_LOG_MS
                    .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                tracing::warn!(spans, error = %e, "sending spans to the collector failed");
            }
        }
        sent
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.exporter.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.exporter.set_resource(resource);
    }
}

/// The hyper client, run on the host's runtime: the batch processor
/// exports from a thread of its own, where hyper finds no reactor.
#[derive(Debug, Clone)]
struct OnRuntime {
    client: opentelemetry_http::hyper::HyperClient,
    runtime: tokio::runtime::Handle,
}

impl HttpClient for OnRuntime {
    fn send_bytes<'life0, 'async_trait>(
        &'life0 self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        let client = self.client.clone();
        let sent = self
            .runtime
            .spawn(async move { client.send_bytes(request).await });
        Box::pin(async move { sent.await.map_err(|e| Box::new(e) as HttpError)? })
    }
}

/// The log's format, with the ids of the trace span a line was written in.
struct TraceIds(Format);

impl<S, N> FormatEvent<S, N> for TraceIds
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        // The span the line was written in, whether the log shows it or not.
        let context = tracing::Span::current().context();
        let span = context.span();
        let ids = span.span_context();
        if !ids.is_valid() {
            return self.0.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        writeln!(
            writer,
            "{} trace_id={} span_id={}",
            line.trim_end_matches('\n'),
            ids.trace_id(),
            ids.span_id()
        )
    }
}

/// Makes `span` a child of the trace the request's `traceparent` and
/// `tracestate` name (W3C Trace Context); a request without them starts a
/// trace. Before the span is first entered.
pub fn continue_trace(span: &tracing::Span, headers: &hyper::HeaderMap) {
    let parent =
        TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers));
    let _ = span.set_parent(parent);
}

/// Sets an attribute of the current span, when tracing is on.
pub fn attribute(key: &'static str, value: impl Into<opentelemetry::Value>) {
    if on() {
        tracing::Span::current().set_attribute(key, value);
    }
}

/// A server span for a request to a control surface on `route` (None: a
/// path no route serves), in its caller's trace.
pub fn control_span(
    method: &hyper::Method,
    route: Option<&str>,
    headers: &hyper::HeaderMap,
) -> tracing::Span {
    let name = match route {
        Some(route) => format!("{method} {route}"),
        None => method.to_string(),
    };
    let span = tracing::debug_span!(
        "control",
        otel.kind = "server",
        otel.name = name,
        "http.request.method" = %method,
        "http.route" = route,
    );
    continue_trace(&span, headers);
    span
}

/// What a request's head says of it, on its server span: the status, the
/// JSON-RPC method (which names the span), whether a kept answer was sent
/// again; a status of 500 or more marks it failed. Nothing when tracing is
/// off.
pub fn served(span: &tracing::Span, status: u16, rpc: Option<&str>, reused: bool) {
    if !on() {
        return;
    }
    span.set_attribute("http.response.status_code", i64::from(status));
    span.set_attribute("murmur.reused", reused);
    if let Some(rpc) = rpc {
        span.set_attribute("rpc.system", "jsonrpc");
        span.set_attribute("rpc.method", rpc.to_string());
        span.context().span().update_name(rpc.to_string());
    }
    if status >= 500 {
        span.set_status(Status::error(format!("HTTP {status}")));
    }
}

/// The door version serving a request, on its span: its number since
/// launch and its component's digest.
pub fn door(span: &tracing::Span, version: u64, digest: &str) {
    span.set_attribute("murmur.door.version", version as i64);
    span.set_attribute("murmur.door.digest", digest.to_string());
}

/// How long the current request waited for an instance of its door.
pub fn waited(wait: Duration) {
    tracing::Span::current().set_attribute("murmur.instance_wait_ms", wait.as_secs_f64() * 1e3);
}

/// The trace context handed to what runs on a span's behalf: the W3C
/// `traceparent` and `tracestate` headers' values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

/// The span of the current request, to parent what it starts; None when
/// tracing is off, outside a request, or for a trace the sampler does not
/// keep (what would run in it is not kept either).
pub fn request_span() -> Option<tracing::Span> {
    if !on() {
        return None;
    }
    let span = tracing::Span::current();
    let kept = span.context().span().span_context().is_sampled();
    kept.then_some(span)
}

/// A task's span, from its acceptance to its end: a child of the span of
/// the request that started it, so the task and what its agent does are in
/// the caller's trace.
pub fn task_span(request: &tracing::Span, task_id: &str, context_id: &str) -> tracing::Span {
    tracing::debug_span!(
        parent: request,
        "task",
        otel.kind = "internal",
        "a2a.task.id" = task_id,
        "a2a.context.id" = context_id,
    )
}

/// A task ended in `state` (murmur's word: `completed`, `failed`, ...);
/// `failed` marks its span failed.
pub fn task_ended(span: &tracing::Span, state: &'static str, failed: bool) {
    span.set_attribute("a2a.task.state", state);
    if failed {
        span.set_status(Status::error(state));
    }
}

/// Something that happened to a task (`input-required`, `delegated`, ...),
/// on its span.
pub fn task_event(span: &tracing::Span, name: &'static str, attributes: Vec<KeyValue>) {
    span.add_event(name, attributes);
}

/// The trace context of `span`, to hand on; None for a span not traced.
pub fn trace_of(span: &tracing::Span) -> Option<Trace> {
    let mut carrier = std::collections::HashMap::new();
    TraceContextPropagator::new().inject_context(&span.context(), &mut carrier);
    Some(Trace {
        traceparent: carrier.remove("traceparent")?,
        tracestate: carrier.remove("tracestate").filter(|s| !s.is_empty()),
    })
}

/// The JSON-RPC error a response body starts with, on its request's span.
pub fn rpc_error(span: &tracing::Span, code: i64) {
    span.set_attribute("rpc.jsonrpc.error_code", code);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{QUEUE, SERVICE_NAME, Settings, settings};

    fn read(vars: &[(&str, &str)]) -> Result<Option<Settings>, String> {
        settings(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn tracing_is_off_without_an_endpoint_or_when_disabled() {
        assert_eq!(read(&[]), Ok(None));
        assert_eq!(read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]), Ok(None));
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        assert_eq!(read(&[endpoint, ("OTEL_SDK_DISABLED", "true")]), Ok(None));
        assert_eq!(
            read(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]),
            Ok(None)
        );
    }

    #[test]
    fn the_standard_variables_are_read() {
        assert_eq!(
            read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")]),
            Ok(Some(Settings {
                endpoint: "http://c:4318/v1/traces".into(),
                service_name: SERVICE_NAME.into(),
                queue: QUEUE,
                timeout: Duration::from_secs(10),
            }))
        );
        let read = read(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9/x"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "250"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "8"),
            ("OTEL_RESOURCE_ATTRIBUTES", "a=b, service.name=door-a"),
        ]);
        assert_eq!(
            read,
            Ok(Some(Settings {
                endpoint: "http://t:9/x".into(),
                service_name: "door-a".into(),
                queue: 8,
                timeout: Duration::from_millis(250),
            }))
        );
    }

    #[test]
    fn the_service_name_variable_wins_over_the_resource_attribute() {
        let read = read(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_SERVICE_NAME", "door-b"),
            ("OTEL_RESOURCE_ATTRIBUTES", "service.name=door-a"),
        ]);
        assert_eq!(read.unwrap().unwrap().service_name, "door-b");
    }

    #[test]
    fn what_cannot_be_sent_is_refused_with_the_reason() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        assert_eq!(
            read(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]),
            Err("OTEL_EXPORTER_OTLP_PROTOCOL=grpc: only http/protobuf is supported".into())
        );
        assert_eq!(
            read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318")]),
            Err("the OTLP endpoint https://c:4318/v1/traces is not http://: TLS to a collector is not supported (run one beside the door)".into())
        );
        assert_eq!(
            read(&[endpoint, ("OTEL_TRACES_EXPORTER", "zipkin")]),
            Err("OTEL_TRACES_EXPORTER=zipkin: only otlp (or none) is supported".into())
        );
    }
}
