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

/// The app's own log (its scheduler, runner, collector…), captured with each test's output, which
/// the harness prints only for a test that fails: a failure in CI then says what the server did.
/// Its tasks run on the test's own thread (each test has a current-thread runtime), so each line
/// lands in its own test's output. `GPUQ_TEST_LOG` sets the filter (default `warn,gpuq=info`).
pub fn capture_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_env("GPUQ_TEST_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,gpuq=info"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_test_writer()
            .try_init();
    });
}

pub use app::{pass_config, read_stream_until, Reply, TestApp, ORIGIN, PASSWORD};
pub use json::{rows, text, text_pairs};
pub use ledger::ledger_violations;
pub use node::{cancel_and_wait, failure_reason, wait_status, FencedCard, Node};
pub use server::{
    api_as_admin, database_url, free_port, get_with, json_of, post_job, start_server, Serve,
};
pub use specs::{one_card_job, true_job, two_jobs_for_one_free_card};
