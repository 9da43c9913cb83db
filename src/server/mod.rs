//! Everything that only the server runs: configuration, database, authentication, HTTP.
//! This module is the one `ssr` wall; nothing below it is compiled into the browser bundle.

pub mod admin;
pub mod admission;
pub mod auth;
pub mod bench;
pub mod config;
pub mod db;
pub mod gpu;
pub mod http;
pub mod jobs;
pub mod live;
pub mod manifest;
pub mod runner;
pub mod runtime;
pub mod serve;
pub mod state;
pub mod usage;

pub use state::AppState;
