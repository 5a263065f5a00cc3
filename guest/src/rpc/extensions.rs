//! The three extensions murmur declares ("Extensions") and the
//! `A2A-Extensions` echo of what a served answer used.

/// What POST / answers, peer tasks, and the forgetSession field.
pub const DOOR: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1";
/// The session id and what the capsule may do.
pub const CAPSULE: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1";
/// Murmur's frames on a stream.
pub const STREAM: &str = "https://docs.murmur.nexus/reference/streaming-protocol/#murmur-stream-v1";

/// The response header naming the extensions a served answer used.
pub const HEADER: &str = "A2A-Extensions";
