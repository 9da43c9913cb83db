//! Real images (issue 27): a queued job's image is pulled from a real registry onto its node
//! before any card is held, once however many jobs name it; the exact digest is recorded; an
//! unknown tag, a stopped registry and `pull: never` each end the job with its reason; and a member
//! cannot make a node pull an image the allowlist refuses.

use crate::support::registry::Registry;
use crate::support::{wait_status, Node, TestApp};
use gpuq::model::Role;
use gpuq::server::runtime::{ensure_sim_devices, LaunchMode};
use serde_json::{json, Value};
use sqlx::PgPool;
use std::time::{Duration, Instant};

/// An app with one simulated card on `node`, a member and an admin.
pub(crate) async fn setup(pool: PgPool, node: &str) -> (TestApp, String, String) {
    let app = TestApp::new(pool).await;
    ensure_sim_devices(1).unwrap();
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", node).await;
    let member = app.bearer("alice", Role::Member).await;
    let admin = app.bearer("root", Role::Admin).await;
    (app, member, admin)
}

fn job(image: &str, script: &str) -> Value {
    json!({ "image": image, "command": ["sh", "-c", script], "min_vram_mb": 1000 })
}

/// A repository name no other test uses.
fn repo() -> String {
    format!("gpuq-test/pull-{}", uuid::Uuid::new_v4().simple())
}

async fn reservations_of(app: &TestApp, id: uuid::Uuid) -> i64 {
    app.scalar_of("SELECT count(*) FROM reservations WHERE job_id = $1", id)
        .await
}

/// Polls a queued job until its wait reason contains `words` (or panics after `secs`).
async fn wait_reason_with(
    app: &TestApp,
    bearer: &str,
    id: uuid::Uuid,
    words: &str,
    secs: u64,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = app.job(bearer, id).await;
        if v["status"] == "queued" && v["wait_reason"].as_str().is_some_and(|r| r.contains(words)) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} never waited with {words:?}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[sqlx::test(migrations = false)]
async fn a_registry_image_is_pulled_before_its_cards_are_held_and_its_digest_recorded(
    pool: PgPool,
) {
    let registry = Registry::start().await;
    let repo = repo();
    let image = registry.push_test_image(&repo, "t1");
    let (app, member, _) = setup(pool, "p1").await;
    let id = app.submit_ok(&member, job(&image, "echo pulled")).await;
    assert_eq!(reservations_of(&app, id).await, 0);
    let node = Node::start(&app, "p1", LaunchMode::Fenced).await;
    let v = wait_status(&app, &member, id, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    // The card was reserved only once the image was on the node.
    let present_at: chrono::DateTime<chrono::Utc> = app
        .scalar_of(
            "SELECT updated_at FROM node_images WHERE node = 'p1' AND image_ref = $1 AND state = 'present'",
            image.clone(),
        )
        .await;
    let admitted_at: chrono::DateTime<chrono::Utc> = app
        .scalar_of("SELECT admitted_at FROM jobs WHERE id = $1", id)
        .await;
    assert!(
        admitted_at >= present_at,
        "admitted {admitted_at} before the image was present at {present_at}"
    );
    // The exact image it ran: the registry's digest of that repository, on the job and the node.
    let digest = v["image_digest"].as_str().expect("a digest").to_owned();
    assert!(
        digest.starts_with(&format!(
            "{image_repo}@sha256:",
            image_repo = image.trim_end_matches(":t1")
        )),
        "{digest}"
    );
    let on_node: String = app
        .scalar_of(
            "SELECT digest FROM node_images WHERE node = 'p1' AND image_ref = $1",
            image.clone(),
        )
        .await;
    assert_eq!(digest, on_node);
    assert_eq!(registry.pulls(&repo), 1, "{}", registry.log());
    // A resubmit pinned to that digest names it, and runs it.
    let r = app
        .post(&format!("/api/v1/jobs/{id}/resubmit?pin=digest"), &member)
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let again: uuid::Uuid = r.json()["job_id"].as_str().unwrap().parse().unwrap();
    let v = wait_status(&app, &member, again, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    assert_eq!(v["image"], digest.as_str());
    assert_eq!(v["image_digest"], digest.as_str());
    registry.forget_later(&image);
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn ten_jobs_naming_one_image_cause_one_pull(pool: PgPool) {
    let registry = Registry::start().await;
    let repo = repo();
    let image = registry.push_test_image(&repo, "shared");
    registry.forget_later(&image);
    let (app, member, _) = setup(pool, "p2").await;
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(
            app.submit_ok(&member, job(&image, &format!("echo {i}")))
                .await,
        );
    }
    let node = Node::start(&app, "p2", LaunchMode::Fenced).await;
    for id in ids {
        let v = wait_status(&app, &member, id, &["succeeded", "failed"], 90).await;
        assert_eq!(v["status"], "succeeded", "{v}");
    }
    assert_eq!(
        registry.pulls(&repo),
        1,
        "one pull for ten jobs: {}",
        registry.log()
    );
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn an_unknown_tag_fails_the_job_naming_the_image(pool: PgPool) {
    let registry = Registry::start().await;
    let repo = repo();
    registry.push_test_image(&repo, "there");
    let missing = format!("{}/{repo}:not-there", registry.host());
    let (app, member, _) = setup(pool, "p3").await;
    let node = Node::start(&app, "p3", LaunchMode::Fenced).await;
    let id = app.submit_ok(&member, job(&missing, "true")).await;
    let v = wait_status(&app, &member, id, &["failed", "succeeded"], 60).await;
    assert_eq!(v["status"], "failed", "{v}");
    let reason = v["status_reason"].as_str().unwrap();
    assert!(
        reason.contains(&missing) && reason.contains("not found"),
        "{reason}"
    );
    assert_eq!(
        reservations_of(&app, id).await,
        0,
        "no card was ever held for it"
    );
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn a_stopped_registry_is_retried_with_a_pause_then_fails_the_job(pool: PgPool) {
    let mut registry = Registry::start().await;
    let image = format!("{}/{}:gone", registry.host(), repo());
    registry.stop();
    let (app, member, _) = setup(pool, "p4").await;
    let node = Node::start(&app, "p4", LaunchMode::Fenced).await;
    let id = app.submit_ok(&member, job(&image, "true")).await;
    // While it is retried the job waits, saying so, and holds nothing.
    let v = wait_reason_with(&app, &member, id, "pulling", 30).await;
    assert!(v["wait_reason"].as_str().unwrap().contains(&image), "{v}");
    assert_eq!(reservations_of(&app, id).await, 0);
    let v = wait_status(&app, &member, id, &["failed", "succeeded"], 60).await;
    assert_eq!(v["status"], "failed", "{v}");
    let reason = v["status_reason"].as_str().unwrap();
    assert!(
        reason.contains(&image) && reason.contains("unreachable"),
        "{reason}"
    );
    // A bounded number of tries, not a tight loop.
    let attempts: i32 = app
        .scalar_of(
            "SELECT attempts FROM node_images WHERE image_ref = $1",
            image.clone(),
        )
        .await;
    assert_eq!(attempts, gpuq::server::runner::pull::RETRIES);
    assert_eq!(reservations_of(&app, id).await, 0);
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn never_refuses_an_image_the_node_lacks_before_cards_are_held(pool: PgPool) {
    let registry = Registry::start().await;
    let repo = repo();
    let image = registry.push_test_image(&repo, "local-only");
    let (app, member, admin) = setup(pool, "p5").await;
    app.set_policy(&admin, json!({ "pull": "never" })).await;
    let node = Node::start(&app, "p5", LaunchMode::Fenced).await;
    let id = app.submit_ok(&member, job(&image, "true")).await;
    let v = wait_status(&app, &member, id, &["failed", "succeeded"], 30).await;
    assert_eq!(v["status"], "failed", "{v}");
    let reason = v["status_reason"].as_str().unwrap();
    assert!(
        reason.contains(&image) && reason.contains("pull: never"),
        "{reason}"
    );
    assert_eq!(reservations_of(&app, id).await, 0);
    assert_eq!(registry.pulls(&repo), 0, "nothing was pulled");
    // A local image still runs under `never`.
    let local = app
        .submit_ok(&member, job("gpuq-test/busybox:latest", "true"))
        .await;
    let v = wait_status(&app, &member, local, &["failed", "succeeded"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    assert!(
        v["image_digest"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:")),
        "{v}"
    );
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn a_bad_pull_policy_is_refused_naming_the_field(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let admin = app.bearer("root", Role::Admin).await;
    let r = app
        .put(
            "/api/v1/settings/launch-policy",
            &admin,
            json!({ "pull": "sometimes" }),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["field"], "pull", "{}", r.text);
}

/// The attack: a member names an image the allowlist refuses, directly or dressed up as an
/// allowed one (another registry in front of an allowed path), or one the policy stopped allowing
/// while it waited. Nothing is pulled, from any registry.
#[sqlx::test(migrations = false)]
async fn a_member_cannot_make_a_node_pull_an_image_the_allowlist_refuses(pool: PgPool) {
    let registry = Registry::start().await;
    let repo = repo();
    let image = registry.push_test_image(&repo, "t");
    let (app, member, admin) = setup(pool, "p6").await;
    app.set_policy(&admin, json!({ "image_allowlist": ["gpuq-test/*"] }))
        .await;
    for refused in [
        "docker.io/library/busybox".to_string(),
        "busybox".to_string(),
        "evil.example/gpuq-test/x".to_string(),
        image.clone(),
    ] {
        let r = app.submit(&member, job(&refused, "true")).await;
        assert_eq!(r.status, 400, "{refused}: {}", r.text);
        assert_eq!(r.json()["field"], "image", "{refused}: {}", r.text);
    }
    // Allowed when queued, refused by the time a node would pull it.
    app.set_policy(&admin, json!({ "image_allowlist": ["*"] }))
        .await;
    let id = app.submit_ok(&member, job(&image, "true")).await;
    app.set_policy(&admin, json!({ "image_allowlist": ["gpuq-test/*"] }))
        .await;
    let node = Node::start(&app, "p6", LaunchMode::Fenced).await;
    let v = wait_status(&app, &member, id, &["failed", "succeeded"], 30).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert!(
        v["status_reason"]
            .as_str()
            .unwrap()
            .contains("no longer allowed"),
        "{v}"
    );
    assert_eq!(
        registry.pulls(&repo),
        0,
        "the refused image was never pulled"
    );
    assert_eq!(reservations_of(&app, id).await, 0);
    node.stop().await;
}

/// At most a few (`n`) in `secs` seconds: three a second, and two for the edges.
fn few_a_second(n: usize, secs: f64, what: &str) {
    assert!(
        (n as f64) <= 3.0 * secs + 2.0,
        "{n} {what} in {secs:.1} s: more than a few a second"
    );
}

/// Progress people can see: while a slow pull runs (6 MB of random bytes through a proxy that
/// passes 2 MB/s), the job's wait reason shows its bytes rising, and the node writes that
/// progress at most a few times a second.
#[sqlx::test(migrations = false)]
async fn a_pulls_bytes_move_in_the_wait_reason_a_few_times_a_second(pool: PgPool) {
    let registry = Registry::start().await;
    let repo = repo();
    registry.push_unique_image(&repo, "big", 6 << 20);
    let slow = registry.throttled(2 << 20).await;
    let image = format!("{}/{repo}:big", slow.host());
    registry.forget_later(&image);
    let (app, member, _) = setup(pool, "p7").await;
    let node = Node::start(&app, "p7", LaunchMode::Fenced).await;
    // What every process's live streams hear (Postgres NOTIFY on the events channel).
    let mut listener = sqlx::postgres::PgListener::connect_with(&app.pool)
        .await
        .unwrap();
    listener.listen("gpuq_events").await.unwrap();
    let id = app.submit_ok(&member, job(&image, "true")).await;
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let hearing = {
        let heard = heard.clone();
        tokio::spawn(async move {
            while let Ok(n) = listener.recv().await {
                let v: Value = serde_json::from_str(n.payload()).unwrap();
                if v["job_id"] == id.to_string() && v["status"] == "pulling" {
                    heard.lock().unwrap().push(Instant::now());
                }
            }
        })
    };
    let mut reasons: Vec<String> = Vec::new();
    let mut writes = std::collections::HashSet::new();
    let mut pulling: Option<(Instant, Instant)> = None;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let v = app.job(&member, id).await;
        if v["status"] != "queued" {
            break;
        }
        if let Some(r) = v["wait_reason"].as_str() {
            if r.contains("pulling")
                && r.contains(" of ")
                && reasons.last().map(String::as_str) != Some(r)
            {
                reasons.push(r.to_owned());
            }
        }
        let row: Option<(String, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
            "SELECT state, updated_at FROM node_images WHERE node = 'p7' AND image_ref = $1",
        )
        .bind(&image)
        .fetch_optional(&app.pool)
        .await
        .unwrap();
        if let Some((_, at)) = row.filter(|r| r.0 == "pulling") {
            let now = Instant::now();
            pulling = Some(pulling.map_or((now, now), |(from, _)| (from, now)));
            writes.insert(at);
        }
        assert!(Instant::now() < deadline, "the pull never ended: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let v = wait_status(&app, &member, id, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    assert!(reasons.len() >= 2, "the bytes never moved: {reasons:?}");
    let done = |r: &str| -> f64 {
        let (_, tail) = r.rsplit_once(": ").expect("bytes after the node");
        tail.split(" of ")
            .next()
            .unwrap()
            .parse()
            .expect("a figure")
    };
    for r in &reasons {
        assert!(r.contains(&image) && r.contains("on node p7"), "{r}");
    }
    assert!(
        reasons.windows(2).all(|w| done(&w[0]) <= done(&w[1])),
        "the bytes only rise: {reasons:?}"
    );
    assert!(
        done(&reasons[0]) < done(reasons.last().unwrap()),
        "{reasons:?}"
    );
    let (from, until) = pulling.expect("the pull was seen");
    let secs = (until - from).as_secs_f64();
    few_a_second(writes.len(), secs, "progress writes");
    // The live streams heard the bytes move, a few times a second at most.
    hearing.abort();
    let heard = heard.lock().unwrap().clone();
    assert!(heard.len() >= 2, "{} progress events", heard.len());
    let span = (*heard.last().unwrap() - heard[0]).as_secs_f64();
    few_a_second(heard.len(), span, "progress events");
    node.stop().await;
}

/// The exact image: the digest a job ran is recorded, and a resubmit pinned to it runs that very
/// image after its tag was moved to another one in the registry.
#[sqlx::test(migrations = false)]
async fn a_pinned_resubmit_runs_the_recorded_digest_after_the_tag_moved(pool: PgPool) {
    use crate::support::isolation::log;
    let registry = Registry::start().await;
    let repo = repo();
    let (image, first) = registry.push_unique_image_token(&repo, "moving", 4096);
    let (app, member, admin) = setup(pool, "p8").await;
    let node = Node::start(&app, "p8", LaunchMode::Fenced).await;
    let id = app.submit_ok(&member, job(&image, "cat /etc/unique")).await;
    let v = wait_status(&app, &member, id, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    let digest = v["image_digest"].as_str().expect("a digest").to_owned();
    assert!(log(&app, &member, id).await.contains(&first));
    // The tag moves to another image; the node resolves tags again for every job.
    let (_, second) = registry.push_unique_image_token(&repo, "moving", 4096);
    app.set_policy(&admin, json!({ "pull": "always" })).await;
    let moved = app.submit_ok(&member, job(&image, "cat /etc/unique")).await;
    let v = wait_status(&app, &member, moved, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    assert_ne!(v["image_digest"], digest.as_str(), "the tag moved: {v}");
    assert!(log(&app, &member, moved).await.contains(&second));
    // Pinned to the first job's digest: the first image, not the tag's new one.
    let r = app
        .post(&format!("/api/v1/jobs/{id}/resubmit?pin=digest"), &member)
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let again: uuid::Uuid = r.json()["job_id"].as_str().unwrap().parse().unwrap();
    let v = wait_status(&app, &member, again, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    assert_eq!(v["image"], digest.as_str());
    assert_eq!(v["image_digest"], digest.as_str());
    let ran = log(&app, &member, again).await;
    assert!(ran.contains(&first) && !ran.contains(&second), "{ran}");
    registry.forget_later(&digest);
    node.stop().await;
}
