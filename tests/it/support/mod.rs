//! Helpers shared by the integration tests, by topic.

pub mod app;
pub mod calls;
pub mod db;
pub mod docker;
pub mod isolation;
pub mod json;
pub mod ledger;
pub mod node;
pub mod nvml;
pub mod registry;
pub mod server;
pub mod specs;

pub use app::{pass_config, read_stream_until, Reply, TestApp, ORIGIN, PASSWORD};
pub use json::{rows, text, text_pairs};
pub use ledger::ledger_violations;
pub use node::{cancel_and_wait, failure_reason, wait_status, FencedCard, Node};
pub use server::{
    api_as_admin, database_url, free_port, get_with, json_of, post_job, start_server, Serve,
};
pub use specs::{one_card_job, true_job, two_jobs_for_one_free_card};
