//! The HTTP listener and what it bounds: instances, bodies, connections,
//! failed redeems, trusted proxies; the metrics it counts; and the server
//! that answers each request with a door instance.

pub mod accept;
pub mod admission;
pub mod body;
pub mod connections;
pub mod failure;
pub mod hostnames;
pub mod metrics;
#[cfg(feature = "native-door")]
pub mod native;
pub mod proxies;
pub mod redeems;
pub mod response_body;
pub mod run;
pub mod server;
