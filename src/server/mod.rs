//! Everything that only the server runs: configuration, database, authentication, HTTP.
//! This module is the one `ssr` wall; nothing below it is compiled into the browser bundle.

pub mod auth;
pub mod config;
pub mod db;
pub mod http;
pub mod serve;
pub mod state;

pub use state::AppState;
