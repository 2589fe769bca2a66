//! The package of tower-autothrottle's crawl demo (`examples/crawl.rs`).
//!
//! It has no code of its own: it exists so that
//! `cargo run --release --example crawl` builds the library and the few
//! crates the demo uses, and not every dev-dependency of the crate's tests
//! and benchmarks (criterion, proptest, redis, reqwest, ...).
#![forbid(unsafe_code)]
