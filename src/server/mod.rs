//! Everything that only the server runs: configuration, database, authentication, HTTP.
//! This module is the one `ssr` wall; nothing below it is compiled into the browser bundle.
//!
//! Imports go one way (docs/architecture.md; `scripts/check-layers.py` fails `make lint`
//! otherwise):
//!
//! ```text
//! model  <-  domain  <-  edges  <-  top
//! ```
//!
//! - **model** (`crate::model`): wire types and vocabularies; imports nothing of the crate.
//! - **domain** (every module here except those below): `db`, `admission`, `runner`, `runtime`,
//!   `gpu`, `jobs`, `usage`, `auth`, `admin`, `manifest`, `metrics`, `doctor`, `notifier`, `peers`, `error`, `bench`. They
//!   return [`crate::model::AppError`] and never see HTTP.
//! - **edges**: `http` (REST, SSE, pages), `crate::api` (server functions), `crate::app` (pages),
//!   `crate::client` (the CLI). Only `http` itself and the top import `http`.
//! - **top**: `serve`, `cli` and `config` (the flags: a leaf that imports nothing of the crate).

pub mod admin;
pub mod admission;
pub mod auth;
pub mod bench;
pub mod budgets;
pub mod cards;
pub mod cli;
pub mod commands;
pub mod config;
pub mod context;
pub mod db;
pub mod doctor;
pub mod error;
pub mod fairness;
pub mod firewall;
pub mod gpu;
pub mod http;
pub mod idle;
pub mod jobs;
pub mod limits;
pub mod manifest;
pub mod metrics;
pub mod node;
pub mod nodes;
pub mod notifier;
pub mod notify;
pub mod peers;
pub mod periodic;
pub mod registries;
pub mod runner;
pub mod runtime;
pub mod serve;
pub mod sessions;
pub mod state;
pub mod usage;
pub mod vram;

pub use context::Ctx;
pub use state::AppState;
