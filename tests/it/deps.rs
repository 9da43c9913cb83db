//! Dependencies between jobs against a real node (scheduler, runner, dockerd): a dependent waits
//! naming its parent, starts once the parent ended as it asked (woken by the parent's end, not a
//! timer), and is cancelled with its whole chain the moment its condition can no longer hold.
//! Attacks: a member cannot depend on another member's job, and a job's trail is its owner's.

use crate::support::{wait_status, Node, TestApp};
use gpuq::model::Role;
use gpuq::server::runtime::{ensure_sim_devices, LaunchMode};
use serde_json::{json, Value};
use sqlx::PgPool;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Longer than any wait below: a dependent admitted within it was woken by its parent's end.
const SLOW_BACKSTOP: Duration = Duration::from_secs(120);

fn sh(script: &str) -> Value {
    json!({ "image": "gpuq-test/busybox:latest", "command": ["sh", "-c", script],
            "min_vram_mb": 1000, "timeout_s": 60 })
}

fn after(mut spec: Value, kind: &str, parents: &[Uuid]) -> Value {
    spec[kind] = json!(parents);
    spec
}

async fn node(pool: PgPool, name: &str) -> (TestApp, Node, String) {
    let app = TestApp::with_backstop(pool, SLOW_BACKSTOP).await;
    ensure_sim_devices(2).unwrap();
    app.sim_cards("2x24576:NVIDIA GeForce RTX 3090", name).await;
    let member = app.bearer("alice", Role::Member).await;
    let node = Node::start(&app, name, LaunchMode::Fenced).await;
    (app, node, member)
}

#[sqlx::test(migrations = false)]
async fn a_dependent_waits_naming_its_parent_then_runs_when_it_succeeded(pool: PgPool) {
    let (app, node, member) = node(pool, "deps-ok").await;
    let parent = app.submit_ok(&member, sh("echo parent; sleep 2")).await;
    let child = app
        .submit_ok(&member, after(sh("echo child"), "after_ok", &[parent]))
        .await;
    let v = app.job(&member, child).await;
    assert_eq!(v["status"], "queued", "{v}");
    wait_status(&app, &member, parent, &["running"], 30).await;
    // The read side's pass shows the reason in the parent's words.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = app.job(&member, child).await;
        let reason = v["wait_reason"].as_str().unwrap_or_default().to_owned();
        if reason == format!("waiting for job {parent} (running)") {
            break;
        }
        assert!(Instant::now() < deadline, "wait reason: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let v = wait_status(
        &app,
        &member,
        child,
        &["succeeded", "failed", "cancelled"],
        60,
    )
    .await;
    assert_eq!(v["status"], "succeeded", "{v}");
    // Admitted within a moment of its parent's end, with a backstop of 120 s: the end woke it.
    let gap: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM c.admitted_at - p.finished_at)::float8 \
         FROM jobs c, jobs p WHERE c.id = $1 AND p.id = $2",
    )
    .bind(child)
    .bind(parent)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert!(
        (0.0..10.0).contains(&gap),
        "parent end → child admitted took {gap} s"
    );
    node.stop().await;
}

/// The race CI met: a dependent's submission, still open, references its just-admitted parent
/// (its `job_deps` row holds `FOR KEY SHARE` on the parent's row until it commits). The runner's
/// claim, woken by the pass that admitted the parent, must still take the parent; had it passed
/// over the locked row, nothing would wake it again before the backstop (120 s here).
#[sqlx::test(migrations = false)]
async fn a_parent_is_claimed_while_a_dependents_submission_still_references_it(pool: PgPool) {
    let (app, node, member) = node(pool, "deps-claim").await;
    // The admission lock first, so the parent is queued, not admitted, when the reference begins.
    let mut admission = app.pool.begin().await.unwrap();
    gpuq::server::admission::pass::lock(&mut admission)
        .await
        .unwrap();
    let parent = app.submit_ok(&member, sh("echo parent")).await;
    // What the foreign key check of a row referencing the parent takes, in a transaction left open.
    let mut reference = app.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM jobs WHERE id = $1 FOR KEY SHARE")
        .bind(parent)
        .execute(&mut *reference)
        .await
        .unwrap();
    admission.commit().await.unwrap();
    let v = wait_status(
        &app,
        &member,
        parent,
        &["running", "succeeded", "failed"],
        20,
    )
    .await;
    assert_ne!(v["status"], "failed", "{v}");
    reference.commit().await.unwrap();
    wait_status(&app, &member, parent, &["succeeded"], 30).await;
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn a_failed_parent_cancels_its_chain_at_once_and_after_any_and_after_failed_run(
    pool: PgPool,
) {
    let (app, node, member) = node(pool, "deps-fail").await;
    let parent = app.submit_ok(&member, sh("sleep 1; exit 3")).await;
    let child = app
        .submit_ok(&member, after(sh("true"), "after_ok", &[parent]))
        .await;
    let grandchild = app
        .submit_ok(&member, after(sh("true"), "after_ok", &[child]))
        .await;
    let cleanup = app
        .submit_ok(&member, after(sh("true"), "after_failed", &[parent]))
        .await;
    let anyway = app
        .submit_ok(&member, after(sh("true"), "after_any", &[child]))
        .await;
    let on_success = app
        .submit_ok(&member, after(sh("true"), "after_failed", &[anyway]))
        .await;
    let v = wait_status(&app, &member, parent, &["failed"], 60).await;
    assert_eq!(v["exit_code"], 3);
    let c = wait_status(&app, &member, child, &["cancelled"], 10).await;
    let g = wait_status(&app, &member, grandchild, &["cancelled"], 10).await;
    assert_eq!(c["stop_cause"], "dependency", "{c}");
    let reason = c["status_reason"].as_str().unwrap();
    assert!(
        reason.contains(&parent.to_string()) && reason.contains("failed"),
        "{reason}"
    );
    assert!(
        g["status_reason"]
            .as_str()
            .unwrap()
            .contains(&child.to_string()),
        "{g}"
    );
    // Both were cancelled by the same pass: the chain does not trickle down one pass per link.
    let (first, last): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as("SELECT min(finished_at), max(finished_at) FROM jobs WHERE id = ANY($1)")
            .bind([child, grandchild])
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert!(last - first < chrono::TimeDelta::milliseconds(500));
    let v = wait_status(&app, &member, cleanup, &["succeeded", "cancelled"], 60).await;
    assert_eq!(
        v["status"], "succeeded",
        "after_failed runs after a failure: {v}"
    );
    let v = wait_status(&app, &member, anyway, &["succeeded", "cancelled"], 60).await;
    assert_eq!(
        v["status"], "succeeded",
        "after_any runs after a cancel: {v}"
    );
    let v = wait_status(&app, &member, on_success, &["succeeded", "cancelled"], 60).await;
    assert_eq!(v["status"], "cancelled", "after_failed of a success: {v}");
    // The trail says who and why.
    let r = app
        .get(&format!("/api/v1/jobs/{child}/events"), &member)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let trail = r.json();
    let kinds: Vec<&str> = trail
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"submitted"), "{trail}");
    assert!(kinds.contains(&"cancelled"), "{trail}");
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn a_member_cannot_depend_on_or_read_the_trail_of_another_members_job(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", "deps-attack")
        .await;
    let alice = app.bearer("alice", Role::Member).await;
    let mallory = app.bearer("mallory", Role::Member).await;
    let manager = app.bearer("mgr", Role::Manager).await;
    let theirs = app.submit_ok(&alice, sh("true")).await;
    let nobody = Uuid::new_v4();
    for (kind, parent) in [
        ("after_ok", theirs),
        ("after_any", theirs),
        ("after_failed", nobody),
    ] {
        let r = app
            .submit(&mallory, after(sh("true"), kind, &[parent]))
            .await;
        assert_eq!(r.status, 400, "{}", r.text);
        let body = r.json();
        assert_eq!(body["field"], kind, "{body}");
        let msg = body["error"].as_str().unwrap();
        assert!(msg.contains(&parent.to_string()), "{msg}");
        // Someone else's job and a job that does not exist read the same.
        assert!(
            msg.contains("does not exist or is not one you may depend on"),
            "{msg}"
        );
    }
    let r = app
        .submit(
            &mallory,
            json!({ "image": "gpuq-test/busybox:latest",
            "command": ["true"], "min_vram_mb": 1000, "after_ok": ["not-an-id"] }),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["field"], "after_ok[0]", "{}", r.text);
    let r = app
        .submit(
            &mallory,
            json!({ "image": "gpuq-test/busybox:latest",
            "command": ["true"], "min_vram_mb": 1000, "after_ok": "x" }),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["field"], "after_ok", "{}", r.text);
    let queued: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(queued, 1, "a refused submission stores nothing");
    // A manager reads everyone's details, so may wait for anyone's job.
    app.submit_ok(&manager, after(sh("true"), "after_ok", &[theirs]))
        .await;
    // The trail: its owner and managers, not another member; an unknown job is 404.
    let path = format!("/api/v1/jobs/{theirs}/events");
    assert_eq!(app.get(&path, &alice).await.status, 200);
    assert_eq!(app.get(&path, &manager).await.status, 200);
    let r = app.get(&path, &mallory).await;
    assert_eq!(r.status, 403, "{}", r.text);
    let r = app
        .get(&format!("/api/v1/jobs/{nobody}/events"), &alice)
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
}
