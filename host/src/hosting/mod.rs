//! Capsules hosted: the capsules file, one capsule's door opened and closed,
//! a host of capsules on one engine, and the host's control surface.

pub mod capsule;
pub mod host;
pub mod host_control;
pub mod roster;
