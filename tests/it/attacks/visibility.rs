//! Reading what is not one's own. Everyone sees the shared queue (name, owner, status, cards, VRAM,
//! position): that explains a wait. Another member's command line (tokens travel in them), volumes,
//! env, status details, event trail and log are not theirs to read; managers read all but the env.

use crate::support::{read_stream_until, true_job, TestApp};
use gpuq::model::Role;
use serde_json::{json, Value};
use sqlx::PgPool;

const SECRET: &str = "hf_SeCrEt_t0ken";

/// A job named `name` whose command line and env carry [`SECRET`].
fn secret_job(name: &str, vram_mb: u64) -> Value {
    json!({ "image": "gpuq-test/busybox:latest", "name": name,
            "command": ["sh", "-c", format!("echo --token={SECRET}")],
            "env": { "HF_TOKEN": SECRET }, "min_vram_mb": vram_mb })
}

#[sqlx::test(migrations = false)]
async fn a_member_cannot_read_another_members_command_env_trail_or_log(pool: PgPool) {
    let app = TestApp::with_one_card(pool, "vis").await;
    let (alice, manager, admin) = app.member_manager_admin("alice").await;
    let bob = app.bearer("bob", Role::Member).await;
    // 30000 MiB never fits a 24 GiB card: refused, and stored nowhere.
    let r = app.submit(&alice, secret_job("alice-big", 30000)).await;
    assert_eq!(r.status, 400, "{}", r.text);
    // A cancelled job's reason ("cancelled by alice") is a status detail.
    let cancelled = app.submit_ok(&alice, secret_job("alice-gone", 1000)).await;
    let c = app
        .post(&format!("/api/v1/jobs/{cancelled}/cancel"), &alice)
        .await;
    assert_eq!(c.status, 200, "{}", c.text);
    let waiting = app.submit_ok(&alice, secret_job("alice-wait", 1000)).await;

    // The job as each role sees it.
    let as_bob = app.job(&bob, waiting).await;
    assert_eq!(as_bob["name"], "alice-wait", "the queue is shared");
    assert_eq!(as_bob["owner"], "alice");
    assert_eq!(as_bob["status"], "queued");
    assert!(as_bob["queue_position"].is_number());
    assert_eq!(as_bob["details_hidden"], true);
    assert!(!as_bob.to_string().contains(SECRET), "{as_bob}");
    assert_eq!(as_bob["command"], json!([]));
    assert!(as_bob["env"].is_null());

    let as_manager = app.job(&manager, waiting).await;
    assert!(
        as_manager.to_string().contains(SECRET),
        "managers read command lines"
    );
    assert!(
        as_manager["env"].is_null(),
        "the env is the owner's and admins' only"
    );
    let as_alice = app.job(&alice, waiting).await;
    assert_eq!(as_alice["details_hidden"], false);
    assert!(as_alice.to_string().contains(SECRET));

    // The list, the job page's server function and the log say no more.
    let list = app.get("/api/v1/jobs", &bob).await;
    assert_eq!(list.status, 200);
    assert!(!list.text.contains(SECRET), "{}", list.text);
    assert!(list.text.contains("alice-wait"));
    let rejected = app.get("/api/v1/jobs?status=rejected", &alice).await;
    assert!(!rejected.text.contains("alice-big"), "{}", rejected.text);
    let ended = app.get("/api/v1/jobs?status=cancelled", &bob).await;
    assert!(ended.text.contains("alice-gone"), "{}", ended.text);
    assert!(
        !ended.text.contains("cancelled by alice"),
        "status details: {}",
        ended.text
    );
    let own = app.get("/api/v1/jobs?status=cancelled", &alice).await;
    assert!(own.text.contains("cancelled by alice"), "{}", own.text);
    let log = app.get(&format!("/api/v1/jobs/{waiting}/logs"), &bob).await;
    assert_eq!(log.status, 403, "{}", log.text);
    let cookie = app.login("bob", crate::support::PASSWORD).await;
    let detail = app
        .server_fn("job_detail", &format!("id={waiting}"), Some(&cookie), &[])
        .await;
    assert_eq!(detail.status, 200, "{}", detail.text);
    let detail: Value = detail.json();
    assert_eq!(
        detail["events"],
        json!([]),
        "the trail is the owner's: {detail}"
    );
    assert!(!detail.to_string().contains(SECRET));
    let env = app.get(&format!("/api/v1/jobs/{waiting}"), &admin).await;
    assert!(env.json()["env"].is_object(), "admins read the env");
}

#[sqlx::test(migrations = false)]
async fn a_members_live_stream_carries_only_their_own_jobs(pool: PgPool) {
    let app = TestApp::with_one_card(pool, "vis").await;
    let alice = app.bearer("alice", Role::Member).await;
    let bob = app.bearer("bob", Role::Member).await;
    let (stop, notifier) = app.start_notifier();
    let mut body = app.live_stream(&bob).await;
    let hers = app.submit_ok(&alice, true_job(1000)).await;
    let seen = read_stream_until(&mut body, "event: queue", 10).await;
    let his = app.submit_ok(&bob, true_job(1000)).await;
    let seen = seen + &read_stream_until(&mut body, &his.to_string(), 10).await;
    assert!(
        !seen.contains(&hers.to_string()),
        "another member's job id: {seen}"
    );
    stop.send(true).unwrap();
    notifier.await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn one_member_cannot_hold_open_unbounded_live_streams(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let bob = app.bearer("bob", Role::Member).await;
    let alice = app.bearer("alice", Role::Member).await;
    let mut open = Vec::new();
    for _ in 0..gpuq::server::limits::STREAMS_PER_USER {
        let (status, body) = app.stream("/api/v1/events", &bob).await;
        assert_eq!(status, 200);
        open.push(body);
    }
    let (status, _) = app.stream("/api/v1/events", &bob).await;
    assert_eq!(status, 429, "one stream past the bound");
    let (status, _) = app.stream("/api/v1/events", &alice).await;
    assert_eq!(status, 200, "the bound is per user");
    // Closing a stream frees its place.
    drop(open.pop());
    let (status, _) = app.stream("/api/v1/events", &bob).await;
    assert_eq!(status, 200);
}
