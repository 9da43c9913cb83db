//! The original REST design's clients: a script that knows only the first API's routes and field
//! names submits, polls and reads the log of a job that succeeds, one that fails and one that
//! times out, against a real node, and finishes each time; a job the kernel kills for memory says
//! so.

use crate::support::{wait_status, Node, TestApp};
use gpuq::model::Role;
use gpuq::server::runtime::{ensure_sim_devices, LaunchMode};
use serde_json::{json, Value};
use sqlx::PgPool;

const IMAGE: &str = "gpuq-test/busybox:latest";

async fn node_with_cards(pool: PgPool, node: &str) -> (TestApp, String, String, Node) {
    let app = TestApp::new(pool).await;
    ensure_sim_devices(2).unwrap();
    app.sim_cards("2x24576:NVIDIA GeForce RTX 3090", node).await;
    let (admin, member) = app.admin_and_member("orla").await;
    let node = Node::start(&app, node, LaunchMode::Fenced).await;
    (app, admin, member, node)
}

#[sqlx::test(migrations = false)]
async fn a_client_of_the_original_api_runs_succeeding_failing_and_timed_out_jobs_to_their_end(
    pool: PgPool,
) {
    let (app, admin, member, _node) = node_with_cards(pool, "compat1").await;
    // The original client sends no timeout: the policy's default is what ends the sleeper. Its
    // deadline counts from the claim, so it leaves a loaded machine's launch time to the others.
    app.set_policy(&admin, json!({ "default_timeout_s": 15 }))
        .await;
    let base = format!("{}/api/v1", app.listen().await);
    let token = member.trim_start_matches("Bearer ").to_owned();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/original-client/client.py"
    );
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(200),
        tokio::process::Command::new("python3")
            .arg(script)
            .arg(IMAGE)
            .args([
                "echo hello from the original client",
                "sh -c 'echo failing; exit 3'",
                "sleep 60",
            ])
            .env("GPUQ_BASE", &base)
            .env("GPUQ_TOKEN", &token)
            .output(),
    )
    .await
    .expect("the client finished")
    .expect("python3 ran");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the client failed: {stderr}");
    let jobs: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(jobs.len(), 3, "{jobs:?}");
    let (ok, bad, slow) = (&jobs[0], &jobs[1], &jobs[2]);
    assert_eq!(
        (ok["status"].as_str(), ok["exit_code"].as_i64()),
        (Some("succeeded"), Some(0)),
        "{ok}"
    );
    assert!(
        ok["log"]
            .as_str()
            .unwrap()
            .contains("hello from the original client"),
        "{ok}"
    );
    assert_eq!(
        (bad["status"].as_str(), bad["exit_code"].as_i64()),
        (Some("failed"), Some(3)),
        "{bad}"
    );
    assert!(bad["log"].as_str().unwrap().contains("failing"), "{bad}");
    // Not `succeeded` or `failed`, yet its wait ended: `terminal` said so.
    assert_eq!(slow["status"], "timed_out", "{slow}");
    for j in &jobs {
        assert_eq!(j["terminal"], true, "{j}");
        assert_eq!(j["gpu_count"], 1, "{j}");
        assert_eq!(j["min_vram_mb"], 1000, "{j}");
        assert_eq!(j["image"], IMAGE, "{j}");
        let indices = j["assigned_gpu_indices"].as_array().expect("indices");
        assert_eq!(indices.len(), 1, "{j}");
        assert!(indices[0].as_u64().unwrap() < 2, "{j}");
        assert!(
            j["created_at"].is_string() && j["started_at"].is_string(),
            "{j}"
        );
        assert!(j["finished_at"].is_string(), "{j}");
        let log_path = j["log_path"].as_str().expect("a log path");
        assert!(
            log_path.ends_with(&format!("{}.log", j["job_id"].as_str().unwrap())),
            "{j}"
        );
        assert!(
            std::path::Path::new(log_path).is_file(),
            "{log_path} is where the log is"
        );
    }
    // While it runs, and while it waits behind another for both cards, a job is not terminal.
    // 20000 of 24576 MiB on each card: the second cannot share them.
    let both =
        json!({ "image": IMAGE, "command": "sleep 30", "gpu_count": 2, "min_vram_mb": 20000 });
    let blocker = app.submit_ok(&member, both.clone()).await;
    let v = wait_status(&app, &member, blocker, &["running"], 60).await;
    assert_eq!(v["terminal"], false, "{v}");
    let waiting = app.submit_ok(&member, both).await;
    let v = app.job(&member, waiting).await;
    assert_eq!(
        (v["status"].as_str(), v["terminal"].as_bool()),
        (Some("queued"), Some(false)),
        "{v}"
    );
    assert_eq!(v["job_id"], v["id"], "{v}");
    // Another member sees the job, not where its log lives on the host.
    let other = app.bearer("otis", Role::Member).await;
    let v = app
        .job(&other, jobs[0]["job_id"].as_str().unwrap().parse().unwrap())
        .await;
    assert!(v["log_path"].is_null(), "{v}");
    assert_eq!(v["terminal"], true);
    // Leave the host as it was: the blocker's container goes with its cancel.
    for id in [waiting, blocker] {
        let r = app
            .post(&format!("/api/v1/jobs/{id}/cancel"), &member)
            .await;
        assert!(r.status.is_success(), "{}", r.text);
    }
    wait_status(&app, &member, blocker, &["cancelled"], 60).await;
    crate::support::isolation::wait_container_removed(&app, blocker).await;
}

#[sqlx::test(migrations = false)]
async fn a_job_the_kernel_kills_for_memory_ends_saying_out_of_memory_with_its_limit(pool: PgPool) {
    let (app, admin, member, _node) = node_with_cards(pool, "compat2").await;
    let policy = json!({ "memory_limit_mib": 32, "shm_mib": 8, "tmp_mib": 8 });
    app.set_policy(&admin, policy).await;
    // `tail` keeps its last line whole in memory: 256 MiB of zeros without a newline outgrow 32 MiB.
    let spec = json!({
        "image": IMAGE,
        "command": ["sh", "-c", "head -c 268435456 /dev/zero | tail"],
        "min_vram_mb": 1000,
    });
    let id = app.submit_ok(&member, spec).await;
    let v = wait_status(&app, &member, id, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["status_reason"], "out of memory (limit 32 MiB)", "{v}");
    assert_eq!(v["exit_code"], 137, "{v}");
}
