//! Admission through the REST API and real passes: submission checks, admission, wait reasons,
//! hybrid accounting, cancellation, the read side and the manifest.

use crate::support::{ledger_violations, read_stream_until, TestApp};
use gpuq::model::Role;
use serde_json::{json, Value};
use sqlx::PgPool;

const RTX: &str = "NVIDIA GeForce RTX 3090";
const A100: &str = "NVIDIA A100 80GB";
const CARDS: &str = "3x24576:NVIDIA GeForce RTX 3090,1x81920:NVIDIA A100 80GB";

fn job(extra: Value) -> Value {
    let mut spec = json!({ "image": "gpuq-test/busybox:latest", "command": ["sleep", "1"] });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

async fn setup(pool: PgPool) -> (TestApp, String, String) {
    let app = TestApp::new(pool).await;
    app.sim_cards(CARDS, "node-a").await;
    let (admin, member) = app.admin_and_member("alice").await;
    (app, admin, member)
}

/// A job that needs `count` cards with `mib` MiB free on each.
fn cards(count: u32, mib: u32) -> Value {
    job(json!({ "gpu_count": count, "min_vram_mb": mib }))
}

#[sqlx::test(migrations = false)]
async fn every_bad_spec_is_refused_naming_its_field(pool: PgPool) {
    let (app, admin, member) = setup(pool).await;
    app.workload(&admin, "a100-only", json!({ A100: 40000 }))
        .await;
    app.workload(&admin, "nowhere", json!({ "NVIDIA H100": 40000 }))
        .await;
    let big = "x".repeat(300 * 1024);
    let cases: Vec<(Value, &str)> = vec![
        (
            job(json!({ "min_vram_mb": 1000, "colour": "red" })),
            "colour",
        ),
        (
            job(json!({ "gpu_count": -1, "min_vram_mb": 1000 })),
            "gpu_count",
        ),
        (
            job(json!({ "gpu_count": 1.5, "min_vram_mb": 1000 })),
            "gpu_count",
        ),
        (
            job(json!({ "gpu_count": "two", "min_vram_mb": 1000 })),
            "gpu_count",
        ),
        (
            job(json!({ "gpu_count": 0, "workload": "a100-only" })),
            "workload",
        ),
        (
            job(json!({ "gpu_count": 5, "min_vram_mb": 1000 })),
            "gpu_count",
        ),
        (job(json!({ "gpu_count": 1 })), "workload"),
        (
            job(json!({ "min_vram_mb": 1000, "workload": "a100-only" })),
            "min_vram_mb",
        ),
        (job(json!({ "workload": "no-such-type" })), "workload"),
        (job(json!({ "workload": "nowhere" })), "workload"),
        (job(json!({ "min_vram_mb": 90000 })), "min_vram_mb"),
        (
            job(json!({ "gpu_count": 2, "workload": "a100-only" })),
            "workload",
        ),
        (job(json!({ "min_vram_mb": 0 })), "min_vram_mb"),
        (
            job(json!({ "min_vram_mb": 1000, "timeout_s": 0 })),
            "timeout_s",
        ),
        (
            job(json!({ "min_vram_mb": 1000, "priority": 1000 })),
            "priority",
        ),
        (
            job(json!({ "min_vram_mb": 1000, "env": { "NVIDIA_VISIBLE_DEVICES": "all" } })),
            "env.NVIDIA_VISIBLE_DEVICES",
        ),
        (
            job(json!({ "min_vram_mb": 1000, "env": { "LD_PRELOAD": "/x.so" } })),
            "env.LD_PRELOAD",
        ),
        (
            job(json!({ "min_vram_mb": 1000, "env": { "CUDA_MPS_PIPE_DIRECTORY": "/x" } })),
            "env.CUDA_MPS_PIPE_DIRECTORY",
        ),
        (
            job(json!({ "min_vram_mb": 1000, "env": { "DOCKER_HOST": "tcp://x" } })),
            "env.DOCKER_HOST",
        ),
        (
            job(json!({ "min_vram_mb": 1000, "volumes": ["/:/host"] })),
            "volumes[0]",
        ),
        (
            job(json!({ "min_vram_mb": 1000, "volumes": ["/etc:/etc2"] })),
            "volumes[0]",
        ),
        (
            job(json!({ "min_vram_mb": 1000, "volumes": ["/var/run/docker.sock:/d.sock"] })),
            "volumes[0]",
        ),
        (
            job(json!({ "min_vram_mb": 1000, "volumes": ["/tmp:/data"] })),
            "volumes[0]",
        ),
        (
            job(json!({ "min_vram_mb": 1000, "image": "Not An Image" })),
            "image",
        ),
        (
            job(json!({ "min_vram_mb": 1000, "command": [] })),
            "command",
        ),
        (
            job(json!({ "min_vram_mb": 1000, "command": "echo 'unbalanced" })),
            "command",
        ),
        (job(json!({ "min_vram_mb": 1000, "name": big })), "body"),
    ];
    for (spec, field) in cases {
        let reply = app.submit(&member, spec.clone()).await;
        assert_eq!(reply.status, 400, "{spec}: {}", reply.text);
        assert_eq!(reply.json()["field"], field, "{spec}: {}", reply.text);
        assert!(!reply.json()["error"].as_str().unwrap().is_empty());
    }
    let not_json = app
        .send(
            axum::http::Request::post("/api/v1/jobs")
                .header("authorization", &member)
                .header("content-type", "application/json")
                .body(axum::body::Body::from("{not json"))
                .unwrap(),
        )
        .await;
    assert_eq!(not_json.status, 400);
    assert_eq!(not_json.json()["field"], "body");
    // Refused submissions, jobs that can never fit included, store nothing and leave no event.
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored, 0, "refused submissions were stored");
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM job_events")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(events, 0, "refused submissions left events");
    assert!(app.pass().await.admitted == 0);
}

#[sqlx::test(migrations = false)]
async fn volumes_follow_the_allowlist_through_symlinks(pool: PgPool) {
    let (app, admin, member) = setup(pool).await;
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let shared = root.path().join("shared");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&shared).unwrap();
    std::os::unix::fs::symlink("/etc", data.join("sneaky")).unwrap();
    std::os::unix::fs::symlink(root.path().join("elsewhere"), data.join("dangling")).unwrap();
    std::fs::create_dir_all(root.path().join("outside")).unwrap();
    std::os::unix::fs::symlink(root.path().join("outside"), data.join("out")).unwrap();
    let policy = json!({
        "volume_allowlist": [
            { "path": data.to_str().unwrap() },
            { "path": shared.to_str().unwrap(), "read_only": true }
        ]
    });
    let put = app
        .put("/api/v1/settings/launch-policy", &admin, policy)
        .await;
    assert_eq!(put.status, 200, "{}", put.text);
    let member_put = app
        .put("/api/v1/settings/launch-policy", &member, json!({}))
        .await;
    assert_eq!(member_put.status, 403);

    let vol = |v: String| job(json!({ "min_vram_mb": 1000, "volumes": [v] }));
    let d = data.to_str().unwrap();
    let s = shared.to_str().unwrap();
    assert_eq!(
        app.submit(&member, vol(format!("{d}:/data"))).await.status,
        201
    );
    assert_eq!(
        app.submit(&member, vol(format!("{s}:/shared:ro")))
            .await
            .status,
        201
    );
    for bad in [
        format!("{s}:/shared"),
        format!("{d}/sneaky:/x"),
        format!("{d}/dangling:/x"),
        format!("{d}/out:/x"),
        format!("{d}/../outside:/x"),
        "/tmp:/x".to_owned(),
    ] {
        let reply = app.submit(&member, vol(bad.clone())).await;
        assert_eq!(reply.status, 400, "{bad}: {}", reply.text);
        assert_eq!(reply.json()["field"], "volumes[0]", "{bad}");
    }
}

#[sqlx::test(migrations = false)]
async fn admission_fills_cards_best_fit_and_explains_the_wait(pool: PgPool) {
    let (app, admin, member) = setup(pool).await;
    app.workload(&admin, "llm", json!({ RTX: 20480, A100: 30000 }))
        .await;
    let llm = |name: &str| job(json!({ "workload": "llm", "name": name }));
    // Two llm jobs fit on two RTX cards (best fit keeps the A100 free), the third takes the last RTX.
    let a = app.submit_ok(&member, llm("a")).await;
    let b = app.submit_ok(&member, llm("b")).await;
    let c = app.submit_ok(&member, llm("c")).await;
    // Two more: one lands on the A100 (30000 of 81920), then a 2-card job cannot fit.
    let d = app.submit_ok(&member, llm("d")).await;
    let e = app
        .submit_ok(
            &member,
            job(json!({ "gpu_count": 2, "min_vram_mb": 20000, "name": "e" })),
        )
        .await;
    let out = app.pass().await;
    assert_eq!(out.admitted, 4, "{out:?}");
    for (id, model) in [(a, RTX), (b, RTX), (c, RTX), (d, A100)] {
        let v = app.job(&member, id).await;
        assert_eq!(v["status"], "admitted", "{v}");
        assert_eq!(v["assigned_gpus"].as_array().unwrap().len(), 1);
        assert_eq!(v["assigned_gpus"][0]["model"], model, "{v}");
        assert!(v["assigned_gpus"][0]["uuid"]
            .as_str()
            .unwrap()
            .starts_with("GPU-"));
        assert!(v["admitted_at"].is_string());
    }
    let waiting = app.job(&member, e).await;
    assert_eq!(waiting["status"], "queued");
    assert_eq!(waiting["queue_position"], 1);
    let reason = waiting["wait_reason"].as_str().unwrap();
    assert!(
        reason.contains("2 cards") && reason.contains("20000"),
        "{reason}"
    );

    let gpus = app.get("/api/v1/gpus", &member).await.json();
    let cards = gpus["gpus"].as_array().unwrap();
    assert_eq!(cards.len(), 4);
    let rtx0 = &cards[0];
    assert_eq!(rtx0["reserved_mib"], 20480);
    assert_eq!(rtx0["free_mib"], 24576 - 20480);
    assert_eq!(rtx0["jobs"][0]["owner"], "alice");
    assert_eq!(cards[3]["free_mib"], 81920 - 30000);
    assert!(ledger_violations(&app.pool).await.is_empty());
}

#[sqlx::test(migrations = false)]
async fn multi_gpu_jobs_take_distinct_cards_of_one_node(pool: PgPool) {
    let (app, _admin, member) = setup(pool).await;
    app.sim_cards("2x24576:NVIDIA GeForce RTX 3090", "node-b")
        .await;
    let id = app.submit_ok(&member, cards(3, 10000)).await;
    assert_eq!(app.pass().await.admitted, 1);
    let v = app.job(&member, id).await;
    let cards = v["assigned_gpus"].as_array().unwrap();
    assert_eq!(cards.len(), 3);
    assert_eq!(v["node"], "node-a", "only node-a has 3 cards");
    let mut ids: Vec<&str> = cards.iter().map(|c| c["uuid"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3);
}

#[sqlx::test(migrations = false)]
async fn foreign_memory_lowers_what_is_admitted(pool: PgPool) {
    let (app, admin, member) = setup(pool).await;
    let gpus = app.get("/api/v1/gpus", &admin).await.json();
    let a100 = gpus["gpus"][3]["uuid"].as_str().unwrap().to_owned();
    let sim = format!("/api/v1/gpus/{a100}/sim");
    // Foreign processes use 70000 MiB of the A100: a 20000 MiB job no longer fits anywhere.
    let set = app
        .put(&sim, &admin, json!({ "external_mib": 70000 }))
        .await;
    assert_eq!(set.status, 204, "{}", set.text);
    assert_eq!(
        app.put(&sim, &member, json!({ "external_mib": 0 }))
            .await
            .status,
        403
    );
    let too_much = app
        .put(&sim, &admin, json!({ "external_mib": 90000 }))
        .await;
    assert_eq!(too_much.status, 400);
    let id = app
        .submit_ok(&member, job(json!({ "min_vram_mb": 30000 })))
        .await;
    assert_eq!(app.pass().await.admitted, 0);
    let v = app.job(&member, id).await;
    let reason = v["wait_reason"].as_str().unwrap();
    assert!(
        reason.contains("needs 30000 MiB") && reason.contains("best free: 24576"),
        "{reason}"
    );
    let view = app.get("/api/v1/gpus", &member).await.json();
    assert_eq!(view["gpus"][3]["external_mib"], 70000);
    assert_eq!(view["gpus"][3]["free_mib"], 81920 - 70000);
    // The foreign process exits: the job is admitted on the next pass.
    app.put(
        &format!("/api/v1/gpus/{a100}/sim"),
        &admin,
        json!({ "external_mib": 0 }),
    )
    .await;
    assert_eq!(app.pass().await.admitted, 1);
    assert_eq!(
        app.job(&member, id).await["assigned_gpus"][0]["model"],
        A100
    );
}

#[sqlx::test(migrations = false)]
async fn cancel_frees_cards_and_respects_ownership(pool: PgPool) {
    let (app, admin, member) = setup(pool).await;
    let other = app.bearer("bob", Role::Member).await;
    let queued = app.submit_ok(&member, cards(3, 24576)).await;
    let waiting = app.submit_ok(&member, cards(3, 24576)).await;
    assert_eq!(app.pass().await.admitted, 1);
    let forbidden = app
        .post(&format!("/api/v1/jobs/{queued}/cancel"), &other)
        .await;
    assert_eq!(forbidden.status, 403);
    let c = app
        .post(&format!("/api/v1/jobs/{waiting}/cancel"), &member)
        .await;
    assert_eq!(c.status, 200, "{}", c.text);
    assert_eq!(c.json()["status"], "cancelled");
    // An admitted job cancelled by an admin: the next pass gives its cards back.
    let c = app
        .post(&format!("/api/v1/jobs/{queued}/cancel"), &admin)
        .await;
    assert_eq!(c.json()["status"], "cancelled");
    let again = app
        .post(&format!("/api/v1/jobs/{queued}/cancel"), &admin)
        .await;
    assert_eq!(again.status, 409);
    let out = app.pass().await;
    assert_eq!(out.reclaimed, 1);
    let gpus = app.get("/api/v1/gpus", &member).await.json();
    assert!(gpus["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .all(|g| g["reserved_mib"] == 0));
    let v = app.job(&member, queued).await;
    assert!(v["released_at"].is_string());
    assert_eq!(
        v["assigned_gpus"].as_array().unwrap().len(),
        3,
        "history keeps the cards"
    );
    assert!(ledger_violations(&app.pool).await.is_empty());
    let missing = app
        .post(
            &format!("/api/v1/jobs/{}/cancel", uuid::Uuid::new_v4()),
            &admin,
        )
        .await;
    assert_eq!(missing.status, 404);
    let not_an_id = app.get("/api/v1/jobs/xyz", &admin).await;
    assert_eq!(not_an_id.json()["field"], "id");
}

#[sqlx::test(migrations = false)]
async fn the_list_filters_pages_and_hides_other_peoples_env(pool: PgPool) {
    let (app, admin, member) = setup(pool).await;
    let bob = app.bearer("bob", Role::Member).await;
    let manager = app.bearer("mia", Role::Manager).await;
    for i in 0..5 {
        app.submit_ok(
            &member,
            job(json!({ "min_vram_mb": 30000, "name": format!("a{i}"), "env": { "SECRET": "x" } })),
        )
        .await;
    }
    for i in 0..3 {
        app.submit_ok(
            &bob,
            job(json!({ "min_vram_mb": 1000, "name": format!("b{i}") })),
        )
        .await;
    }
    app.pass().await;
    let all = app.get("/api/v1/jobs?per_page=3", &bob).await.json();
    assert_eq!(all["total"], 8);
    assert_eq!(all["jobs"].as_array().unwrap().len(), 3);
    assert_eq!(all["jobs"][0]["name"], "b2", "newest first");
    let page3 = app.get("/api/v1/jobs?per_page=3&page=3", &bob).await.json();
    assert_eq!(page3["jobs"].as_array().unwrap().len(), 2);
    let mine = app.get("/api/v1/jobs?mine=true", &bob).await.json();
    assert_eq!(mine["total"], 3);
    let alices = app.get("/api/v1/jobs?owner=alice", &bob).await.json();
    assert_eq!(alices["total"], 5);
    assert!(alices["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|j| j["env"].is_null()));
    let as_manager = app.get("/api/v1/jobs?owner=alice", &manager).await.json();
    // The env is the owner's and admins': managers read command lines, not secrets.
    assert!(as_manager["jobs"][0]["env"].is_null(), "{as_manager}");
    assert_eq!(as_manager["jobs"][0]["details_hidden"], false);
    let as_admin = app.get("/api/v1/jobs?owner=alice", &admin).await.json();
    assert_eq!(as_admin["jobs"][0]["env"]["SECRET"], "x");
    let own = app.get("/api/v1/jobs?owner=alice", &member).await.json();
    assert_eq!(own["jobs"][0]["env"]["SECRET"], "x");
    let queued = app.get("/api/v1/jobs?status=queued", &admin).await.json();
    // 4 cards: 1 of alice's 30000 MiB jobs fits (A100, twice: 81920 ≥ 60000) … the rest wait.
    for j in queued["jobs"].as_array().unwrap() {
        assert!(j["queue_position"].as_i64().unwrap() >= 1);
        assert!(j["wait_reason"].is_string());
    }
    let two = app
        .get("/api/v1/jobs?status=admitted,queued", &admin)
        .await
        .json();
    assert_eq!(two["total"], 8);
    for (q, field) in [
        ("status=done", "status"),
        ("page=0", "page"),
        ("per_page=501", "per_page"),
        ("bogus=1", "query"),
    ] {
        let r = app.get(&format!("/api/v1/jobs?{q}"), &admin).await;
        assert_eq!(r.status, 400, "{q}");
        assert_eq!(r.json()["field"], field, "{q}");
    }
    assert_eq!(app.api("GET", "/api/v1/jobs", None, None).await.status, 401);
}

#[sqlx::test(migrations = false)]
async fn manifest_edits_are_admin_only_audited_and_decide_the_next_pass(pool: PgPool) {
    let (app, admin, member) = setup(pool).await;
    let one_mib = || json!({ "vram_mib": { RTX: 1 } });
    let refused = app.put("/api/v1/manifest/llm", &member, one_mib()).await;
    assert_eq!(refused.status, 403);
    app.workload(&admin, "llm", json!({ A100: 50000 })).await;
    let id = app
        .submit_ok(&member, job(json!({ "workload": "llm" })))
        .await;
    let first = app
        .submit_ok(&member, job(json!({ "workload": "llm" })))
        .await;
    assert_eq!(
        app.pass().await.admitted,
        1,
        "only one 50000 job fits the A100"
    );
    let _ = first;
    // The admin learns llm also runs on an RTX: the next pass places the waiting job there.
    app.workload(&admin, "llm", json!({ A100: 50000, RTX: 20000 }))
        .await;
    assert_eq!(app.pass().await.admitted, 1);
    let v = app.job(&member, id).await;
    assert_eq!(v["status"], "admitted");
    let m = app.get("/api/v1/manifest", &member).await.json();
    assert_eq!(m["workloads"][0]["vram_mib"][RTX], 20000);
    assert_eq!(m["models_present"].as_array().unwrap().len(), 2);
    for (body, field) in [
        (json!({ "vram_mib": {} }), "vram_mib"),
        (
            json!({ "vram_mib": { RTX: 0 } }),
            &*format!("vram_mib.{RTX}"),
        ),
        (json!({ "vram_mib": { RTX: 1 }, "x": 1 }), "x"),
    ] {
        let r = app.put("/api/v1/manifest/llm", &admin, body).await;
        assert_eq!(r.status, 400, "{}", r.text);
        assert_eq!(r.json()["field"], field);
    }
    let bad_name = app
        .put("/api/v1/manifest/Bad%20Name", &admin, one_mib())
        .await;
    assert_eq!(bad_name.json()["field"], "workload");
    assert_eq!(app.delete("/api/v1/manifest/llm", &admin).await.status, 204);
    assert_eq!(app.delete("/api/v1/manifest/llm", &admin).await.status, 404);
    let audited: i64 = app
        .scalar("SELECT count(*) FROM audit_events WHERE kind LIKE 'manifest.%'")
        .await;
    assert_eq!(audited, 3);
    // The audit trails cannot be rewritten.
    let tamper = sqlx::query("UPDATE job_events SET actor = 'nobody'")
        .execute(&app.pool)
        .await;
    assert!(tamper.unwrap_err().to_string().contains("append-only"));
    let delete = sqlx::query("DELETE FROM audit_events")
        .execute(&app.pool)
        .await;
    assert!(delete.is_err());
}

#[sqlx::test(migrations = false)]
async fn a_vanished_card_goes_missing_and_is_not_used(pool: PgPool) {
    let (app, _admin, member) = setup(pool).await;
    // The node now reports only its RTX cards: the A100 goes missing, never deleted, and its
    // admin state is left alone.
    app.sim_cards("3x24576:NVIDIA GeForce RTX 3090", "node-a")
        .await;
    let states: Vec<(String, String, bool)> =
        sqlx::query_as("SELECT model, state, present FROM gpus ORDER BY idx, model")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(states.len(), 4);
    assert!(states
        .iter()
        .any(|(m, s, present)| m == A100 && s == "online" && !present));
    let gpus = app.get("/api/v1/gpus", &member).await.json();
    let a100 = gpus["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["model"] == A100)
        .unwrap()
        .clone();
    assert_eq!(a100["state"], "missing", "{a100}");
    // A job needing an A100-sized card can now never run here.
    let r = app
        .submit(&member, job(json!({ "min_vram_mb": 40000 })))
        .await;
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"].as_str().unwrap().contains("never run"),
        "{}",
        r.text
    );
}

#[sqlx::test(migrations = false)]
async fn live_events_carry_changes_made_by_any_process(pool: PgPool) {
    let (app, admin, member) = setup(pool).await;
    let (status, _) = app.stream("/api/v1/events", "Bearer gpuq_nope").await;
    assert_eq!(status, 401);
    let (stop, forwarder) = app.start_notifier();
    // An admin's stream: it carries every job's changes (a member's carries only their own, see
    // `attacks::visibility`).
    let mut body = app.live_stream(&admin).await;
    let id = app
        .submit_ok(&member, job(json!({ "min_vram_mb": 1000 })))
        .await;
    let seen = read_stream_until(&mut body, &id.to_string(), 10).await;
    assert!(seen.contains("event: job"), "{seen}");
    assert!(seen.contains("\"status\":\"queued\""), "{seen}");
    app.pass().await;
    read_stream_until(&mut body, "event: pass", 10).await;
    // Another gpuq process on the same database: its NOTIFY reaches this process's streams.
    let other = sqlx::PgPool::connect_with((*app.pool.connect_options()).clone())
        .await
        .unwrap();
    let elsewhere = uuid::Uuid::new_v4();
    sqlx::query("SELECT pg_notify('gpuq_events', $1)")
        .bind(format!(
            r#"{{"kind":"job","job_id":"{elsewhere}","status":"running"}}"#
        ))
        .execute(&other)
        .await
        .unwrap();
    read_stream_until(&mut body, &elsewhere.to_string(), 10).await;
    // A payload this process does not understand (a newer gpuq's, say) is never passed on as it
    // is: the pages are told to refetch instead.
    sqlx::query("SELECT pg_notify('gpuq_events', '{\"kind\":\"job\",\"job_id\":\"<script>\"}')")
        .execute(&other)
        .await
        .unwrap();
    let seen = read_stream_until(&mut body, "event: resync", 10).await;
    assert!(!seen.contains("<script>"), "{seen}");
    let gpus = app.get("/api/v1/gpus", &admin).await.json();
    let card = gpus["gpus"][0]["uuid"].as_str().unwrap().to_owned();
    app.patch(
        &format!("/api/v1/gpus/{card}"),
        &admin,
        json!({ "state": "draining" }),
    )
    .await;
    let seen = read_stream_until(&mut body, "gpu.state", 10).await;
    assert!(seen.contains("event: changed"), "{seen}");
    stop.send(true).unwrap();
    forwarder.await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn the_queue_order_is_one_definition_that_sql_and_rust_agree_on(pool: PgPool) {
    let (app, admin, _) = setup(pool).await;
    let mut submitted = Vec::new();
    for priority in [0, 5, -3, 5, 0, 10, -3, 7] {
        // No pass runs here: every one of them stays queued.
        let spec = job(json!({ "min_vram_mb": 1000, "priority": priority }));
        let id = app.submit_ok(&admin, spec).await;
        let v = app.job(&admin, id).await;
        submitted.push((
            gpuq::model::queue_key(
                priority,
                false,
                gpuq::model::Standing::EVEN,
                v["seq"].as_i64().unwrap(),
            ),
            id,
        ));
    }
    submitted.sort();
    let by_rust: Vec<uuid::Uuid> = submitted.into_iter().map(|(_, id)| id).collect();
    let by_sql: Vec<uuid::Uuid> = sqlx::query_scalar(&format!(
        // One owner: everyone's standing is the same.
        "SELECT id, 0::float8 AS standing, false AS past_soft_budget FROM jobs WHERE status = 'queued' ORDER BY {}",
        gpuq::model::QUEUE_ORDER_SQL
    ))
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(by_sql, by_rust);
    let listed = app.get("/api/v1/jobs?sort=queue", &admin).await.json();
    let by_api: Vec<uuid::Uuid> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(by_api, by_rust);
    let positions: Vec<i64> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["queue_position"].as_i64().unwrap())
        .collect();
    assert_eq!(positions, (1..=8).collect::<Vec<i64>>());
}
