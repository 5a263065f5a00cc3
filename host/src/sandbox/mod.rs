//! The sandbox: the wasmtime engine and a door loaded on it, one request's
//! store with its CPU and memory meters, compiled doors kept on disk, the
//! one-call answer, events framed once for every stream, and instances kept
//! between one caller's requests.

pub mod cache;
pub mod cpu;
pub mod engine;
pub mod framing;
pub mod idle;
pub mod memory;
pub mod one_call;
pub mod request;
