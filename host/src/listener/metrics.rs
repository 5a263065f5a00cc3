//! What a host of capsules counts, for Prometheus (the host's control
//! surface's `GET /metrics`): each capsule's requests by method, status and
//! JSON-RPC error code, and their latency to the response head. What is a
//! state rather than a count (instances, streams, tasks by state, swaps,
//! the pool, RSS) is read when scraped ([`crate::hosting::host::Host::metrics`]).
//!
//! Every label value is one of a fixed few: a method the door does not
//! serve is `other`, so no client can add series without end.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::versions::card::CARD_PATH;

/// The JSON-RPC methods the door serves, and the push config ones it
/// refuses by name.
const METHODS: [&str; 13] = [
    "SendMessage",
    "SendStreamingMessage",
    "murmur.WatchSession",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "murmur.StopSession",
    "GetExtendedAgentCard",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub capsule: String,
    /// A JSON-RPC method, `card`, `control`, or `other`.
    pub method: &'static str,
    /// The HTTP status.
    pub status: u16,
    /// The JSON-RPC error code, or `none` (a result, or no JSON-RPC).
    pub rpc_code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CapsuleLabel {
    pub capsule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlaneLabels {
    pub capsule: String,
    /// `files` or `peer`.
    pub plane: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RedeemLabels {
    pub capsule: String,
    /// `served` (a file, a part or a 304), `refused` (404) or `limited`
    /// (429: the address spent its budget of failures).
    pub outcome: &'static str,
}

/// The counts every capsule of a host adds to.
#[derive(Clone)]
pub struct Metrics {
    requests: Family<RequestLabels, Counter>,
    latency: Family<CapsuleLabel, Histogram, fn() -> Histogram>,
    plane_bytes: Family<PlaneLabels, Counter>,
    redeems: Family<RedeemLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(|| {
                // 100 µs to about 13 s.
                Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                    0.0001, 2.0, 18,
                ))
            }),
            plane_bytes: Family::default(),
            redeems: Family::default(),
        }
    }
}

impl Metrics {
    /// A request `capsule` answered.
    pub fn request(&self, capsule: &str, labels: Request, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                capsule: capsule.to_string(),
                method: labels.method,
                status: labels.status,
                rpc_code: labels.rpc_code,
            })
            .inc();
        self.latency
            .get_or_create(&CapsuleLabel {
                capsule: capsule.to_string(),
            })
            .observe(seconds);
    }

    /// What counts the body bytes `capsule` sends on `plane`.
    pub fn plane_bytes(&self, capsule: &str, plane: &'static str) -> Counter {
        let labels = PlaneLabels {
            capsule: capsule.to_string(),
            plane,
        };
        self.plane_bytes.get_or_create(&labels).clone()
    }

    /// A peer handle's redeem on `capsule` ended as `outcome`.
    pub fn redeem(&self, capsule: &str, outcome: &'static str) {
        let labels = RedeemLabels {
            capsule: capsule.to_string(),
            outcome,
        };
        self.redeems.get_or_create(&labels).inc();
    }

    /// Registers the counts in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "murmur_door_requests",
            "Requests answered, by capsule, method, HTTP status and JSON-RPC error code",
            self.requests.clone(),
        );
        registry.register(
            "murmur_door_request_duration_seconds",
            "Time from a request's head to its response's head, by capsule",
            self.latency.clone(),
        );
        registry.register(
            "murmur_door_plane_bytes",
            "Body bytes sent on the planes, by capsule and plane (files, peer)",
            self.plane_bytes.clone(),
        );
        registry.register(
            "murmur_door_peer_redeems",
            "Peer handle redeems, by capsule and outcome (served, refused, limited)",
            self.redeems.clone(),
        );
    }
}

/// One request's labels but its capsule's.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    pub method: &'static str,
    pub status: u16,
    pub rpc_code: &'static str,
}

/// The method label of a request: its JSON-RPC method when the door serves
/// it, `card` for the Agent Card, `files` and `peer` for the planes,
/// `other` for anything else.
pub fn method_label(rpc: Option<&str>, path: &str) -> &'static str {
    match rpc {
        Some(rpc) => METHODS.into_iter().find(|m| *m == rpc).unwrap_or("other"),
        None if path == CARD_PATH => "card",
        None => crate::manifest::planes::plane_of(path).unwrap_or("other"),
    }
}

/// The JSON-RPC error codes of the reference, as labels.
const CODES: [(i64, &str); 14] = [
    (-32700, "-32700"),
    (-32600, "-32600"),
    (-32601, "-32601"),
    (-32602, "-32602"),
    (-32603, "-32603"),
    (-32001, "-32001"),
    (-32002, "-32002"),
    (-32003, "-32003"),
    (-32004, "-32004"),
    (-32005, "-32005"),
    (-32006, "-32006"),
    (-32007, "-32007"),
    (-32008, "-32008"),
    (-32009, "-32009"),
];

/// The JSON-RPC error code a response body starts with, as the metrics
/// label it: `none` for a result or a body that is no JSON-RPC error;
/// `other` for a code not in the reference.
pub fn rpc_code(first: &[u8]) -> &'static str {
    match error_code(first) {
        Some(code) => CODES
            .iter()
            .find(|(c, _)| *c == code)
            .map_or("other", |(_, label)| label),
        None => "none",
    }
}

/// The JSON-RPC error code a response body starts with: the door writes
/// `{"jsonrpc":"2.0","id":...,"error":{"code":N,...`. None for a result or
/// a body that is no JSON-RPC error.
pub fn error_code(first: &[u8]) -> Option<i64> {
    const KEY: &[u8] = b"\"error\":{\"code\":";
    let head = &first[..first.len().min(512)];
    let at = head.windows(KEY.len()).position(|w| w == KEY)?;
    let digits: String = head[at + KEY.len()..]
        .iter()
        .take_while(|c| c.is_ascii_digit() || **c == b'-')
        .map(|c| *c as char)
        .collect();
    digits.parse::<i64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_one_of_a_fixed_few() {
        assert_eq!(method_label(Some("GetTask"), "/"), "GetTask");
        assert_eq!(method_label(Some("getTask"), "/"), "other");
        assert_eq!(method_label(None, "/.well-known/agent-card.json"), "card");
        assert_eq!(method_label(None, "/anything/at/all"), "other");
        assert_eq!(
            rpc_code(br#"{"jsonrpc":"2.0","id":"x","error":{"code":-32001,"message":"m"}}"#),
            "-32001"
        );
        assert_eq!(
            rpc_code(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"m"}}"#),
            "other"
        );
        assert_eq!(rpc_code(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#), "none");
        assert_eq!(rpc_code(b"event: x\n"), "none");
    }

    #[test]
    fn a_request_is_counted_and_timed() {
        let metrics = Metrics::default();
        let request = Request {
            method: "GetTask",
            status: 200,
            rpc_code: "-32001",
        };
        metrics.request("alpha", request, 0.0003);
        metrics.request("alpha", request, 0.0005);
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                r#"murmur_door_requests_total{capsule="alpha",method="GetTask",status="200",rpc_code="-32001"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"murmur_door_request_duration_seconds_count{capsule="alpha"} 2"#),
            "{text}"
        );
    }
}
