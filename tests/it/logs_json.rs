//! `--log-format json` (`GPUQ_LOG_FORMAT=json`): every line the real binary writes to standard
//! error is one JSON object.

use crate::support::{database_url, free_port, start_server, TestApp};
use serde_json::Value;
use sqlx::PgPool;

/// Parses every line of `text` as a JSON object with a level; panics naming the first that is not.
fn json_lines(text: &str) -> Vec<Value> {
    let lines: Vec<Value> = text
        .lines()
        .map(|l| {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            assert!(v.is_object(), "not an object: {l}");
            assert!(v["level"].is_string(), "no level: {l}");
            assert!(v["timestamp"].is_string(), "no timestamp: {l}");
            v
        })
        .collect();
    assert!(!lines.is_empty(), "nothing was logged");
    lines
}

#[sqlx::test(migrations = false)]
async fn a_server_with_json_logs_writes_only_json_lines(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log = dir.path().join("s.log");
    let server = start_server(
        &database_url(&app.pool),
        port,
        &log,
        &["--log-format", "json"],
    )
    .await;
    // A few requests, one of them refused, so the server has something to say.
    let client = reqwest::Client::new();
    for path in ["/healthz", "/api/v1/jobs", "/nowhere"] {
        let _ = client
            .get(format!("http://127.0.0.1:{port}{path}"))
            .send()
            .await;
    }
    drop(server);
    let lines = json_lines(&std::fs::read_to_string(&log).unwrap());
    assert!(
        lines.iter().any(|l| l["message"]
            .as_str()
            .is_some_and(|m| m.contains("gpuq listening"))),
        "{lines:?}"
    );
}

#[test]
fn the_environment_variable_selects_json_and_errors_are_json_too() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuq"))
        .args(["serve", "--listen", "127.0.0.1:1", "--database-url"])
        .arg("postgres://nobody@127.0.0.1:1/none")
        .env("GPUQ_LOG_FORMAT", "json")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let lines = json_lines(&String::from_utf8_lossy(&out.stderr));
    let last = lines.last().unwrap();
    assert_eq!(last["level"], "ERROR", "{last}");
    assert!(
        last["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{last}"
    );
}

#[test]
fn an_unknown_log_format_is_refused_naming_the_choices() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuq"))
        .args(["--log-format", "xml", "serve"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("text") && err.contains("json"), "{err}");
}
