//! Arrays and sweeps: one request and one transaction for up to 1,000 elements, each a job with
//! its index in `GPUQ_ARRAY_INDEX`; a running limit never exceeded on a real node with more free
//! cards than the limit; cancel and resubmit (its failed elements) as one. Attacks: another
//! member cannot cancel or resubmit an array, and absurd arrays are refused naming the field.

use crate::support::{wait_status, Node, TestApp};
use gpuq::model::Role;
use gpuq::server::runtime::{ensure_sim_devices, LaunchMode};
use serde_json::{json, Value};
use sqlx::PgPool;
use std::time::{Duration, Instant};
use uuid::Uuid;

fn sh(script: &str) -> Value {
    json!({ "image": "gpuq-test/busybox:latest", "command": ["sh", "-c", script],
            "min_vram_mb": 1000, "timeout_s": 60, "name": "arr" })
}

fn ids(ack: &Value) -> Vec<Uuid> {
    ack["job_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().parse().unwrap())
        .collect()
}

#[sqlx::test(migrations = false)]
async fn an_arrays_running_limit_is_never_exceeded_and_its_failures_resubmit_as_one(pool: PgPool) {
    let app = TestApp::new(pool).await;
    ensure_sim_devices(4).unwrap();
    app.sim_cards("4x24576:NVIDIA GeForce RTX 3090", "arr-node")
        .await;
    let member = app.bearer("alice", Role::Member).await;
    let mallory = app.bearer("mallory", Role::Member).await;
    // Four free cards, a limit of 2: only the limit holds the elements back.
    let mut spec = sh("echo index=$GPUQ_ARRAY_INDEX; sleep 1; test $GPUQ_ARRAY_INDEX -ne 4");
    spec["array"] = json!("0-5%2");
    let r = app.submit(&member, spec).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let ack = r.json();
    let array: Uuid = ack["array_id"].as_str().unwrap().parse().unwrap();
    let elements = ids(&ack);
    assert_eq!(elements.len(), 6);
    let node = Node::start(&app, "arr-node", LaunchMode::Fenced).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut most = 0;
    loop {
        let (active, open): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status IN ('admitted', 'starting', 'running')), \
                    count(*) FILTER (WHERE status IN ('queued', 'admitted', 'starting', 'running')) \
             FROM jobs WHERE array_id = $1",
        )
        .bind(array)
        .fetch_one(&app.pool)
        .await
        .unwrap();
        assert!(
            active <= 2,
            "{active} elements at once, past the limit of 2"
        );
        most = most.max(active);
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the array never finished");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        most, 2,
        "the limit was reached, so the check above could fail"
    );
    // Each element saw its own index.
    for (i, id) in elements.iter().enumerate() {
        let v = app.job(&member, *id).await;
        assert_eq!(v["array_index"], i as i64, "{v}");
        assert_eq!(v["array_id"], array.to_string());
        assert_eq!(v["name"], format!("arr-{i}"));
        let log = app.get(&format!("/api/v1/jobs/{id}/logs"), &member).await;
        assert!(log.text.contains(&format!("index={i}")), "{}", log.text);
        let want = if i == 4 { "failed" } else { "succeeded" };
        assert_eq!(v["status"], want, "{v}");
    }
    let summary = app.get(&format!("/api/v1/arrays/{array}"), &member).await;
    assert_eq!(summary.status, 200, "{}", summary.text);
    let s = summary.json();
    assert_eq!(s["counts"], json!({ "succeeded": 5, "failed": 1 }), "{s}");
    assert_eq!(s["running_limit"], 2);
    // Another member may neither resubmit nor cancel it.
    let path = format!("/api/v1/arrays/{array}/resubmit");
    assert_eq!(app.post(&path, &mallory).await.status, 403);
    let r = app
        .post(&format!("/api/v1/arrays/{array}/cancel"), &mallory)
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    // Its owner resubmits the failed element only, as a new array with the same limit.
    let r = app.post(&path, &member).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let again = r.json();
    let new = ids(&again);
    assert_eq!(new.len(), 1);
    let v = app.job(&member, new[0]).await;
    assert_eq!(v["array_index"], 4, "{v}");
    assert_ne!(v["array_id"], array.to_string());
    let v = wait_status(&app, &member, new[0], &["failed", "succeeded"], 60).await;
    assert_eq!(v["status"], "failed", "index 4 fails again: {v}");
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn a_sweep_is_a_cartesian_product_and_an_array_cancels_as_one(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", "sweep-node")
        .await;
    let member = app.bearer("alice", Role::Member).await;
    let mallory = app.bearer("mallory", Role::Member).await;
    let mut spec = sh("true");
    spec["env"] = json!({ "KEEP": "x" });
    spec["sweep"] = json!({ "lr": ["1e-3", "3e-4"], "bs": [32, 64] });
    spec["array"] = json!("%1");
    let r = app.submit(&member, spec).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let ack = r.json();
    let elements = ids(&ack);
    assert_eq!(elements.len(), 4);
    let mut seen = Vec::new();
    for id in &elements {
        let v = app.job(&member, *id).await;
        assert_eq!(v["env"]["KEEP"], "x", "{v}");
        seen.push((
            v["env"]["LR"].as_str().unwrap().to_owned(),
            v["env"]["BS"].as_str().unwrap().to_owned(),
        ));
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            ("1e-3", "32"),
            ("1e-3", "64"),
            ("3e-4", "32"),
            ("3e-4", "64")
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
    let array = ack["array_id"].as_str().unwrap();
    // The limit of 1 holds the rest back even though the card has room for all four.
    app.pass().await;
    let admitted: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE status = 'admitted'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(admitted, 1);
    let waiting = app.job(&member, elements[3]).await;
    assert!(
        waiting["wait_reason"]
            .as_str()
            .unwrap_or_default()
            .contains("running limit"),
        "{waiting}"
    );
    let r = app
        .post(&format!("/api/v1/arrays/{array}/cancel"), &mallory)
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    let r = app
        .post(&format!("/api/v1/arrays/{array}/cancel"), &member)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["cancelled"], 4, "{}", r.text);
    for id in &elements {
        assert_eq!(app.job(&member, *id).await["status"], "cancelled");
    }
    // Nothing failed: nothing to resubmit.
    let r = app
        .post(&format!("/api/v1/arrays/{array}/resubmit"), &member)
        .await;
    assert_eq!(r.status, 409, "{}", r.text);
}

#[sqlx::test(migrations = false)]
async fn absurd_arrays_and_sweeps_are_refused_naming_the_field(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", "absurd")
        .await;
    let member = app.bearer("alice", Role::Member).await;
    for (array, sweep, field) in [
        (json!("0-999999999"), Value::Null, "array"),
        (json!("0-1000"), Value::Null, "array"),
        (json!("-1"), Value::Null, "array"),
        (json!("-5-3"), Value::Null, "array"),
        (json!("a-b"), Value::Null, "array"),
        (json!("0-9%0"), Value::Null, "array"),
        (json!("1e9"), Value::Null, "array"),
        (json!(1000000000), Value::Null, "array"),
        (
            Value::Null,
            json!({ "ld_preload": ["x"] }),
            "sweep.ld_preload",
        ),
        (Value::Null, json!({ "gpuq_x": ["1"] }), "sweep.gpuq_x"),
        (Value::Null, json!({ "1lr": ["1"] }), "sweep.1lr"),
        (Value::Null, json!({ "lr": [] }), "sweep.lr"),
        (Value::Null, json!({ "keep": ["1"] }), "sweep.keep"),
        (Value::Null, json!(["lr"]), "sweep"),
    ] {
        let mut spec = sh("true");
        spec["env"] = json!({ "KEEP": "x" });
        spec["array"] = array.clone();
        spec["sweep"] = sweep.clone();
        let r = app.submit(&member, spec).await;
        assert_eq!(r.status, 400, "{array} {sweep}: {}", r.text);
        assert_eq!(r.json()["field"], field, "{array} {sweep}: {}", r.text);
    }
    let none: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(none, 0);
}

#[sqlx::test(migrations = false)]
async fn a_thousand_elements_take_one_request_and_a_member_stays_under_the_queue_cap(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", "big")
        .await;
    let admin = app.bearer("boss", Role::Admin).await;
    let member = app.bearer("alice", Role::Member).await;
    let mut spec = sh("true");
    spec["array"] = json!("0-999%8");
    let r = app.submit(&admin, spec.clone()).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let ack = r.json();
    assert_eq!(ids(&ack).len(), 1000);
    let (n, arrays): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT array_id) FROM jobs WHERE array_id IS NOT NULL",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((n, arrays), (1000, 1));
    // One transaction: every element has the same transaction id as the array's row.
    let xids: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT xmin::text) FROM (SELECT xmin FROM jobs WHERE array_id IS NOT NULL \
         UNION ALL SELECT xmin FROM job_arrays) t",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(xids, 1);
    // A member's array counts against max_queued_per_user (100 by default) as a whole.
    spec["array"] = json!("0-100");
    let r = app.submit(&member, spec).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert!(r.text.contains("max_queued_per_user"), "{}", r.text);
    let mine: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs j JOIN users u ON u.id = j.owner_id WHERE u.username = 'alice'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(mine, 0);
}

/// The queue page counts an array whole though its elements span pages, and its "Cancel array"
/// and "Resubmit failed" buttons (server functions) are its owner's: another member's calls are
/// refused and change nothing; the owner's cancel every element, and resubmit the failed ones
/// only, as a new array.
#[sqlx::test(migrations = false)]
async fn a_page_counts_an_array_whole_and_only_its_owner_cancels_or_resubmits_it_there(
    pool: PgPool,
) {
    let app = TestApp::new(pool).await;
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", "page-node")
        .await;
    let member = app.bearer("alice", Role::Member).await;
    app.add_user("mallory", Role::Member).await;
    let mut spec = sh("true");
    spec["array"] = json!("0-4");
    let r = app.submit(&member, spec).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let ack = r.json();
    let array = ack["array_id"].as_str().unwrap().to_owned();
    let page = app
        .get("/api/v1/jobs?mine=true&per_page=2", &member)
        .await
        .json();
    assert_eq!(page["jobs"].as_array().unwrap().len(), 2, "{page}");
    let whole = page["arrays"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["array_id"] == array.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("the page counts the array: {page}"));
    assert_eq!(whole["size"], 5, "{whole}");
    assert_eq!(
        whole["counts"]["queued"], 5,
        "all five, not the two on the page: {whole}"
    );

    let mallory = app.login("mallory", crate::support::PASSWORD).await;
    let r = app
        .signed_in_call(&mallory, "cancel_array", &format!("id={array}"))
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    for id in ids(&ack) {
        assert_eq!(app.job(&member, id).await["status"], "queued");
    }
    let alice = app.login("alice", crate::support::PASSWORD).await;
    let r = app
        .signed_in_call(&alice, "cancel_array", &format!("id={array}"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    for id in ids(&ack) {
        assert_eq!(app.job(&member, id).await["status"], "cancelled");
    }

    // Two elements failed (as if they had run): the page's "Resubmit failed" is its owner's too.
    let elements = ids(&ack);
    sqlx::query("UPDATE jobs SET status = 'failed' WHERE id = ANY($1)")
        .bind(&elements[..2])
        .execute(&app.pool)
        .await
        .unwrap();
    let r = app
        .signed_in_call(&mallory, "resubmit_array", &format!("id={array}"))
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    let r = app
        .signed_in_call(&alice, "resubmit_array", &format!("id={array}"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let again = r.json();
    assert_eq!(
        ids(&again).len(),
        2,
        "the two failed elements only: {again}"
    );
    assert_ne!(again["array_id"], array.as_str());
}
