//! The door's rules tested natively, one binary: each module drives
//! `murmur_door_guest::handle` with requests and a fake of its imports
//! (`common::FakeHost`), one family of rules a module.
//! `cargo test -p murmur-door-guest --test door fuzz::` runs one.

mod common;

mod check_order;
mod fuzz;
mod refusals_front_door;
mod refusals_messages;
mod refusals_tasks;
mod streams;
