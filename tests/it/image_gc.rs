//! The node's image collector (issue 27, "Disk"): images gpuq pulled that no job used for
//! `image_keep_days` go, oldest first, and past `image_disk_max_gib` the least recently used go
//! until the rest fit; an image an admin loaded by hand, one a queued job names and one a
//! container is made from stay; a job naming a removed image has it pulled again and runs. Time
//! is moved by writing `last_used_at` in the past, never by sleeping.

use crate::support::docker::{docker, docker_cli};
use crate::support::registry::{unique_image, Registry};
use crate::support::{wait_status, Node, TestApp};
use gpuq::model::Role;
use gpuq::server::runner::image_gc::{self, Keeper, Removed, Why};
use gpuq::server::runtime::LaunchMode;
use serde_json::{json, Value};
use sqlx::PgPool;
use std::time::{Duration, Instant};

const GIB: f64 = (1u64 << 30) as f64;

use crate::pull::setup;

fn job(image: &str) -> Value {
    json!({ "image": image, "command": ["true"], "min_vram_mb": 1000 })
}

/// A repository name no other test uses.
fn repo() -> String {
    format!("gpuq-test/gc-{}", uuid::Uuid::new_v4().simple())
}

/// Runs one job of each image on a node of its own, to its end.
async fn run_each(app: &TestApp, member: &str, node: &str, images: &[&String]) {
    let n = Node::start(app, node, LaunchMode::Fenced).await;
    for image in images {
        let id = app.submit_ok(member, job(image)).await;
        let v = wait_status(app, member, id, &["succeeded", "failed"], 90).await;
        assert_eq!(v["status"], "succeeded", "{image}: {v}");
        // The runner removes the container after recording the end: stopping the node before
        // that would leave a container using the image, which no collector may remove.
        crate::support::isolation::wait_container_removed(app, id).await;
    }
    n.stop().await;
}

/// Whether the host's dockerd has `reference`.
fn on_host(reference: &str) -> bool {
    std::process::Command::new("docker")
        .args(["image", "inspect", reference])
        .output()
        .expect("the docker CLI")
        .status
        .success()
}

async fn row_of(app: &TestApp, node: &str, image: &str) -> Option<bool> {
    sqlx::query_scalar(
        "SELECT pulled_by_gpuq FROM node_images WHERE node = $1 AND image_ref = $2 \
         AND state = 'present'",
    )
    .bind(node)
    .bind(image)
    .fetch_optional(&app.pool)
    .await
    .unwrap()
}

/// Sets when a job last used `image` on `node` to `days` ago.
async fn last_used(app: &TestApp, node: &str, image: &str, days: i32) {
    let r = sqlx::query(
        "UPDATE node_images SET last_used_at = now() - make_interval(days => $3) \
         WHERE node = $1 AND image_ref = $2",
    )
    .bind(node)
    .bind(image)
    .bind(days)
    .execute(&app.pool)
    .await
    .unwrap();
    assert_eq!(r.rows_affected(), 1, "{image} has a row on {node}");
}

fn size_of(reference: &str) -> f64 {
    docker_cli(&["image", "inspect", "-f", "{{.Size}}", reference])
        .parse()
        .expect("an image size")
}

async fn collect(app: &TestApp, node: &str) -> Vec<(String, Why)> {
    let removed = image_gc::collect(
        &app.pool,
        &docker().await,
        node,
        &Keeper::default(),
        chrono::Utc::now(),
    )
    .await
    .expect("a collection");
    removed
        .into_iter()
        .map(|Removed { image_ref, why, .. }| (image_ref, why))
        .collect()
}

#[sqlx::test(migrations = false)]
async fn the_collector_removes_an_old_image_gpuq_pulled_and_nothing_else(pool: PgPool) {
    let registry = Registry::start().await;
    let (app, member, admin) = setup(pool, "g1").await;
    let old = registry.push_unique_image(&repo(), "old", 4096);
    let older = registry.push_unique_image(&repo(), "older", 4096);
    let recent = registry.push_unique_image(&repo(), "recent", 4096);
    let wanted = registry.push_unique_image(&repo(), "wanted", 4096);
    let made = registry.push_unique_image(&repo(), "made", 4096);
    // Loaded by hand under a registry's name: gpuq finds it on the node and never pulls it.
    let hand = format!("{}/{}:hand", registry.host(), repo());
    registry.forget_later(&hand);
    unique_image(&hand, 4096);
    run_each(
        &app,
        &member,
        "g1",
        &[&old, &older, &recent, &wanted, &made, &hand],
    )
    .await;
    assert_eq!(
        row_of(&app, "g1", &hand).await,
        Some(false),
        "not pulled by gpuq"
    );
    for image in [&old, &older, &recent, &wanted, &made] {
        assert_eq!(row_of(&app, "g1", image).await, Some(true), "{image}");
    }
    // A month without use for all but `recent`; `older` longer still.
    for image in [&old, &wanted, &made, &hand] {
        last_used(&app, "g1", image, 30).await;
    }
    last_used(&app, "g1", &older, 40).await;
    last_used(&app, "g1", &recent, 1).await;
    // A job waiting in the queue names `wanted` (no node runs: it stays queued); a stopped
    // container is made from `made`.
    app.submit_ok(&member, job(&wanted)).await;
    let container = docker_cli(&["create", &made, "true"]);

    // Kept for good (0): nothing goes, however old.
    app.set_policy(&admin, json!({ "image_keep_days": 0 }))
        .await;
    assert_eq!(collect(&app, "g1").await, vec![]);

    app.set_policy(&admin, json!({ "image_keep_days": 14 }))
        .await;
    let counted = || {
        gpuq::server::metrics::IMAGES_REMOVED
            .with_label_values(&["unused"])
            .get()
    };
    let before = counted();
    let removed = collect(&app, "g1").await;
    docker_cli(&["rm", &container]);
    assert_eq!(
        removed,
        vec![(older.clone(), Why::Unused), (old.clone(), Why::Unused)],
        "the oldest first, and nothing else"
    );
    assert!(counted() >= before + 2, "each removal is counted");
    for gone in [&old, &older] {
        assert!(!on_host(gone), "{gone} is still on the node");
        assert_eq!(row_of(&app, "g1", gone).await, None, "{gone}'s row");
    }
    for kept in [&recent, &wanted, &made, &hand] {
        assert!(on_host(kept), "{kept} was removed");
        assert!(row_of(&app, "g1", kept).await.is_some(), "{kept}'s row");
    }
}

#[sqlx::test(migrations = false)]
async fn past_the_disk_bound_the_least_recently_used_images_go_first(pool: PgPool) {
    let registry = Registry::start().await;
    let (app, member, admin) = setup(pool, "g2").await;
    let a = registry.push_unique_image(&repo(), "a", 200_000);
    let b = registry.push_unique_image(&repo(), "b", 200_000);
    let c = registry.push_unique_image(&repo(), "c", 200_000);
    run_each(&app, &member, "g2", &[&c, &a, &b]).await;
    last_used(&app, "g2", &a, 3).await;
    last_used(&app, "g2", &b, 2).await;
    last_used(&app, "g2", &c, 1).await;
    let (sa, sb, sc) = (size_of(&a), size_of(&b), size_of(&c));
    // Room for b and c and half of a: a goes (its keep of 14 days is far off).
    let bound = (sb + sc + sa / 2.0) / GIB;
    app.set_policy(&admin, json!({ "image_disk_max_gib": bound }))
        .await;
    assert_eq!(collect(&app, "g2").await, vec![(a.clone(), Why::Disk)]);
    assert!(!on_host(&a) && on_host(&b) && on_host(&c));
    // Under the bound now: nothing more.
    assert_eq!(collect(&app, "g2").await, vec![]);
    // Room for c and half of b: b goes, then c alone fits.
    let bound = (sc + sb / 2.0) / GIB;
    app.set_policy(&admin, json!({ "image_disk_max_gib": bound }))
        .await;
    assert_eq!(collect(&app, "g2").await, vec![(b.clone(), Why::Disk)]);
    assert!(!on_host(&b) && on_host(&c));
    assert_eq!(row_of(&app, "g2", &c).await, Some(true));
}

/// The collector `node::start` runs removes an image past its keep when the node starts; a job
/// naming it later has it pulled again, waiting unplaced meanwhile, and runs.
#[sqlx::test(migrations = false)]
async fn a_removed_image_is_pulled_again_by_the_next_job_naming_it(pool: PgPool) {
    let registry = Registry::start().await;
    let (app, member, _) = setup(pool, "g3").await;
    let repo = repo();
    let image = registry.push_unique_image(&repo, "t", 4096);
    run_each(&app, &member, "g3", &[&image]).await;
    assert_eq!(registry.pulls(&repo), 1, "{}", registry.log());
    last_used(&app, "g3", &image, 15).await;
    let node = Node::start(&app, "g3", LaunchMode::Fenced).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while row_of(&app, "g3", &image).await.is_some() || on_host(&image) {
        assert!(
            Instant::now() < deadline,
            "the node's collector never removed {image}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let id = app.submit_ok(&member, job(&image)).await;
    let v = wait_status(&app, &member, id, &["succeeded", "failed"], 90).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    assert_eq!(registry.pulls(&repo), 2, "pulled again: {}", registry.log());
    assert_eq!(row_of(&app, "g3", &image).await, Some(true));
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn bad_image_disk_settings_are_refused_naming_the_field(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let admin = app.bearer("root", Role::Admin).await;
    for (body, field) in [
        (json!({ "image_disk_max_gib": -1 }), "image_disk_max_gib"),
        (json!({ "image_disk_max_gib": 1e12 }), "image_disk_max_gib"),
        (json!({ "image_keep_days": -1 }), "image_keep_days"),
        (json!({ "image_keep_days": 100000 }), "image_keep_days"),
    ] {
        let r = app
            .put("/api/v1/settings/launch-policy", &admin, body.clone())
            .await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert_eq!(r.json()["field"], field, "{body}: {}", r.text);
    }
    let r = app.get("/api/v1/settings/launch-policy", &admin).await;
    assert_eq!(r.json()["image_keep_days"], 14, "{}", r.text);
    assert_eq!(r.json()["image_disk_max_gib"], 0.0, "{}", r.text);
}
