//! The component's edge, built for wasm32 alone: the one-call `answer` the
//! host calls, with the `framing` export beside it ([`answer`]), and the
//! `wasi:http` handler any `wasi:http` host calls ([`http`]). Both run the
//! door against the host's imports, seen through
//! [`Imports`](crate::imports::Imports) in [`host`], and write a body through
//! [`body`]; [`files`] reads the planes' files through `wasi:filesystem`.

mod answer;
mod body;
mod files;
mod host;
mod http;
