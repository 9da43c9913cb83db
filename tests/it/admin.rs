//! The admin and account rules behind the manifest editor, the admin page and the account page:
//! renaming workload types, roles, passwords, resubmission, sorting, and the "applied by a pass"
//! signal. Real router, real Postgres.

use crate::support::{true_job, TestApp, PASSWORD};
use gpuq::model::Role;
use serde_json::json;
use sqlx::PgPool;

const MODEL: &str = "NVIDIA GeForce RTX 3090";

#[sqlx::test(migrations = false)]
async fn renaming_a_workload_type_moves_its_queued_jobs_with_it(pool: PgPool) {
    let app = TestApp::with_one_card(pool, "n1").await;
    let (admin, member) = app.admin_and_member("alice").await;
    app.workload(&admin, "llm", json!({ MODEL: 30000 })).await;
    app.workload(&admin, "small", json!({ MODEL: 1000 })).await;
    // A holder takes the card; a job of type `small` waits behind it.
    let holder = app
        .submit_ok(
            &member,
            json!({ "image": "gpuq-test/busybox:latest", "command": ["sleep", "9"], "min_vram_mb": 24000 }),
        )
        .await;
    app.pass().await;
    let waiting = app
        .submit_ok(
            &member,
            json!({ "image": "gpuq-test/busybox:latest", "command": ["true"], "workload": "small" }),
        )
        .await;
    app.pass().await;
    assert_eq!(app.job(&member, waiting).await["status"], "queued");

    // Bad names and collisions are refused, naming what is wrong.
    let rename = |from: &str, to: &str| {
        let (app, admin) = (&app, admin.clone());
        let path = format!("/api/v1/manifest/{from}/rename");
        let body = json!({ "to": to });
        async move { app.post_json(&path, &admin, body).await }
    };
    let bad = rename("small", "Not OK").await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert_eq!(bad.json()["field"], "to");
    let taken = rename("small", "llm").await;
    assert_eq!(taken.status, 409, "{}", taken.text);
    let missing = rename("nope", "x").await;
    assert_eq!(missing.status, 404, "{}", missing.text);

    let ok = rename("small", "tiny").await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(ok.json()["vram_mib"][MODEL], 1000);
    let job = app.job(&member, waiting).await;
    assert_eq!(job["workload"], "tiny");
    let kinds: Vec<String> = sqlx::query_scalar("SELECT kind FROM job_events WHERE job_id = $1")
        .bind(waiting)
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert!(kinds.contains(&"workload_renamed".to_owned()), "{kinds:?}");

    // History says what happened, newest first; a pass after the edit marks it applied.
    let before = app.get("/api/v1/manifest/history", &member).await.json();
    assert_eq!(before["history"][0]["kind"], "manifest.rename");
    assert!(before["history"][0]["summary"]
        .as_str()
        .unwrap()
        .contains("renamed to tiny (1 queued job(s) moved)"));
    let state: gpuq::model::ManifestState = serde_json::from_value(before).unwrap();
    assert!(!state.applied(), "no pass has run since the rename");
    // The holder ends; the next pass applies the edit and admits the renamed job.
    app.exec_with(
        "UPDATE jobs SET status = 'succeeded', finished_at = now() WHERE id = $1",
        holder,
    )
    .await;
    app.pass().await;
    let after: gpuq::model::ManifestState =
        serde_json::from_value(app.get("/api/v1/manifest/history", &member).await.json()).unwrap();
    assert!(after.applied());
    assert_eq!(app.job(&member, waiting).await["status"], "admitted");
}

#[sqlx::test(migrations = false)]
async fn admins_change_roles_but_not_their_own(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let admin = app.bearer("root", Role::Admin).await;
    let bob = app.add_user("bob", Role::Member).await;
    let root_id = app.get("/api/v1/me", &admin).await.json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = app
        .update_user(&admin, bob, json!({ "role": "manager" }))
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    let token = app.token("bob", PASSWORD).await.json()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let me = app
        .get("/api/v1/me", &format!("Bearer {token}"))
        .await
        .json();
    assert_eq!(me["role"], "manager");

    let selfish = app
        .update_user(&admin, &root_id, json!({ "role": "member" }))
        .await;
    assert_eq!(selfish.status, 400, "{}", selfish.text);
    assert_eq!(selfish.json()["field"], "role");
    let bad = app
        .update_user(&admin, bob, json!({ "role": "root" }))
        .await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    let sql = "SELECT count(*) FROM audit_events WHERE kind = 'user.update' AND subject = 'bob'";
    let audited: i64 = app.scalar(sql).await;
    assert_eq!(audited, 1);
}

#[sqlx::test(migrations = false)]
async fn a_password_change_needs_the_current_one(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let carol = app.bearer("carol", Role::Member).await;
    let change =
        |current: &str, new: &str| json!({ "current_password": current, "new_password": new });
    let wrong = app
        .post_json(
            "/api/v1/me/password",
            &carol,
            change("nope-nope", "another-secret"),
        )
        .await;
    assert_eq!(wrong.status, 400, "{}", wrong.text);
    assert_eq!(wrong.json()["field"], "current_password");
    let short = app
        .post_json("/api/v1/me/password", &carol, change(PASSWORD, "short"))
        .await;
    assert_eq!(short.status, 400);
    assert_eq!(short.json()["field"], "new_password");
    let same = app
        .post_json("/api/v1/me/password", &carol, change(PASSWORD, PASSWORD))
        .await;
    assert_eq!(same.status, 400);
    let ok = app
        .post_json(
            "/api/v1/me/password",
            &carol,
            change(PASSWORD, "another-secret"),
        )
        .await;
    assert_eq!(ok.status, 204, "{}", ok.text);
    assert_eq!(app.token("carol", PASSWORD).await.status, 401);
    assert_eq!(app.token("carol", "another-secret").await.status, 201);
}

#[sqlx::test(migrations = false)]
async fn only_the_owner_resubmits_and_the_copy_is_a_new_job(pool: PgPool) {
    let app = TestApp::with_one_card(pool, "n1").await;
    let alice = app.bearer("alice", Role::Member).await;
    let admin = app.bearer("root", Role::Admin).await;
    let spec = json!({ "image": "gpuq-test/busybox:latest", "command": ["echo", "x"], "min_vram_mb": 500,
                       "env": { "SECRET": "alice-only" }, "name": "orig" });
    let first = app.submit_ok(&alice, spec).await;
    let resubmit = format!("/api/v1/jobs/{first}/resubmit");
    let by_admin = app.post(&resubmit, &admin).await;
    assert_eq!(by_admin.status, 403, "{}", by_admin.text);
    let copy = app.post(&resubmit, &alice).await;
    assert_eq!(copy.status, 201, "{}", copy.text);
    let id: uuid::Uuid = copy.json()["job_id"].as_str().unwrap().parse().unwrap();
    assert_ne!(id, first);
    let job = app.job(&alice, id).await;
    assert_eq!(job["name"], "orig");
    assert_eq!(job["command"], json!(["echo", "x"]));
    assert_eq!(job["env"]["SECRET"], "alice-only");
    assert_eq!(job["status"], "queued");

    // Today's policy decides: an image no longer allowed is refused, naming the field.
    let mut policy = app
        .get("/api/v1/settings/launch-policy", &admin)
        .await
        .json();
    policy["image_allowlist"] = json!(["registry.local/*"]);
    app.set_policy(&admin, policy).await;
    let refused = app.post(&resubmit, &alice).await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert_eq!(refused.json()["field"], "image");
}

#[sqlx::test(migrations = false)]
async fn job_lists_sort_as_asked(pool: PgPool) {
    let app = TestApp::new(pool).await;
    // A manager: members may not raise priorities.
    let alice = app.bearer("alice", Role::Manager).await;
    for (name, priority) in [("b-low", 0), ("a-high", 5), ("c-mid", 2)] {
        app.submit_ok(
            &alice,
            json!({ "image": "gpuq-test/busybox:latest", "command": ["true"], "gpu_count": 0, "name": name, "priority": priority }),
        )
        .await;
    }
    let names = |sort: &'static str| {
        let app = &app;
        let alice = alice.clone();
        async move {
            let page = app.get(&format!("/api/v1/jobs?sort={sort}"), &alice).await;
            assert_eq!(page.status, 200, "{}", page.text);
            page.json()["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["name"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(names("newest").await, ["c-mid", "a-high", "b-low"]);
    assert_eq!(names("oldest").await, ["b-low", "a-high", "c-mid"]);
    assert_eq!(names("queue").await, ["a-high", "c-mid", "b-low"]);
    assert_eq!(names("name").await, ["a-high", "b-low", "c-mid"]);
    let bad = app.get("/api/v1/jobs?sort=random", &alice).await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["field"], "sort");
}

#[sqlx::test(migrations = false)]
async fn cards_show_how_long_each_holder_has_been_running(pool: PgPool) {
    let app = TestApp::with_one_card(pool, "n1").await;
    let alice = app.bearer("alice", Role::Member).await;
    let job = app.submit_ok(&alice, true_job(3000)).await;
    app.pass().await;
    let holder = |gpus: serde_json::Value| gpus["gpus"][0]["jobs"][0].clone();
    let admitted = holder(app.get("/api/v1/gpus", &alice).await.json());
    assert_eq!(admitted["status"], "admitted");
    assert_eq!(admitted["running_s"], serde_json::Value::Null);
    app.exec_with("UPDATE jobs SET status = 'running', started_at = now() - interval '95 seconds' WHERE id = $1", job).await;
    let running = holder(app.get("/api/v1/gpus", &alice).await.json());
    assert_eq!(running["status"], "running");
    let secs = running["running_s"].as_i64().unwrap();
    assert!((95..100).contains(&secs), "{secs}");
    assert_eq!(running["vram_mib"], 3000);
}

#[sqlx::test(migrations = false)]
async fn a_password_change_ends_the_other_browser_sessions(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let token = app.bearer("dora", Role::Member).await;
    let here = app.login("dora", PASSWORD).await;
    let elsewhere = app.login("dora", PASSWORD).await;
    assert_ne!(here, elsewhere);
    let me = |cookie: &str| {
        let cookie = cookie.to_owned();
        let app = &app;
        async move { app.get("/api/v1/me", &cookie).await.status }
    };
    assert_eq!(me(&here).await, 200);
    assert_eq!(me(&elsewhere).await, 200);
    // Through the account page's server function, from the `here` session.
    let form = "current_password=correct+horse+battery&new_password=another-secret-1";
    let changed = app.signed_in_call(&here, "change_password", form).await;
    assert_eq!(changed.status, 200, "{}", changed.text);
    assert_eq!(
        me(&here).await,
        200,
        "the session that made the change stays"
    );
    assert_eq!(me(&elsewhere).await, 401, "other sessions end");
    assert_eq!(
        app.get("/api/v1/me", &token).await.status,
        200,
        "API tokens are not sessions"
    );
    // A fresh sign-in with the new password works; through REST with a token, every session ends.
    let fresh = app.login("dora", "another-secret-1").await;
    assert_eq!(me(&fresh).await, 200);
    let r = app
        .post_json(
            "/api/v1/me/password",
            &token,
            json!({ "current_password": "another-secret-1", "new_password": "third-secret-22" }),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(me(&fresh).await, 401);
    assert_eq!(me(&here).await, 401);
}
