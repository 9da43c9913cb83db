//! Fair share against real Postgres and real passes: at equal priority the job of the owner with
//! less recent use (for their share) goes first; priority still comes first; team and user
//! weights and decay change the order; the starvation guard still holds an old job's cards; the
//! policy's `fair_share: false` restores submit order; `GET /api/v1/fair-share` gives the figures,
//! and a member reads only their own row and their team's.

use crate::support::TestApp;
use gpuq::model::Role;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

const CARD: &str = "1x24576:NVIDIA GeForce RTX 3090";

/// A one-card job that takes most of the card (so one runs at a time).
fn big(extra: Value) -> Value {
    let mut spec = json!({
        "image": "gpuq-test/busybox:latest", "command": ["sleep", "1"], "min_vram_mb": 20000
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

struct Fixture {
    app: TestApp,
    admin: String,
    alice: String,
    bob: String,
}

async fn setup(pool: PgPool) -> Fixture {
    let app = TestApp::new(pool).await;
    app.sim_cards(CARD, "node-a").await;
    let (admin, alice) = app.admin_and_member("alice").await;
    let bob = app.bearer("bob", Role::Member).await;
    Fixture {
        app,
        admin,
        alice,
        bob,
    }
}

async fn user_id(pool: &PgPool, name: &str) -> Uuid {
    sqlx::query_scalar("SELECT id FROM users WHERE username = $1")
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Charges `name` `hours` GPU-hours centred `ago_h` hours ago (the day bucket the trigger writes
/// when a run ends; `tests/it/gpu_hours.rs` tests the charge itself).
async fn used(pool: &PgPool, name: &str, hours: f64, ago_h: f64) {
    let id = user_id(pool, name).await;
    sqlx::query(
        "INSERT INTO gpu_hours_daily AS x (user_id, day, gpu_hours, hour_epoch) \
         SELECT $1, (t AT TIME ZONE 'UTC')::date, $2, $2 * extract(epoch FROM t) \
         FROM (SELECT now() - make_interval(secs => $3 * 3600) AS t) s \
         ON CONFLICT (user_id, day) DO UPDATE \
           SET gpu_hours = x.gpu_hours + EXCLUDED.gpu_hours, \
               hour_epoch = x.hour_epoch + EXCLUDED.hour_epoch",
    )
    .bind(id)
    .bind(hours)
    .bind(ago_h)
    .execute(pool)
    .await
    .unwrap();
}

async fn status(app: &TestApp, admin: &str, id: Uuid) -> String {
    app.job(admin, id).await["status"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The queued jobs in the API's queue order, with their positions.
async fn queue(app: &TestApp, admin: &str) -> Vec<(Uuid, i64)> {
    let r = app
        .get("/api/v1/jobs?status=queued&sort=queue", admin)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap().parse().unwrap(),
                j["queue_position"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn ids(q: &[(Uuid, i64)]) -> Vec<Uuid> {
    q.iter().map(|(id, _)| *id).collect()
}

#[sqlx::test(migrations = false)]
async fn a_later_job_of_a_user_with_less_recent_use_goes_first(pool: PgPool) {
    let f = setup(pool).await;
    used(&f.app.pool, "alice", 50.0, 1.0).await;
    let a1 = f.app.submit_ok(&f.alice, big(json!({}))).await;
    let a2 = f.app.submit_ok(&f.alice, big(json!({}))).await;
    let b1 = f.app.submit_ok(&f.bob, big(json!({}))).await;

    // The queue page and the job page, before any pass: bob's job first, positions agreeing with
    // the listing, and alice's jobs saying why they are behind.
    let q = queue(&f.app, &f.admin).await;
    assert_eq!(ids(&q), vec![b1, a1, a2]);
    assert_eq!(q.iter().map(|p| p.1).collect::<Vec<_>>(), vec![1, 2, 3]);
    let a1_view = f.app.job(&f.alice, a1).await;
    let why = a1_view["wait_reason"].as_str().unwrap();
    assert!(
        why.starts_with("behind 1 job of users with less recent use"),
        "{why}"
    );
    let b1_view = f.app.job(&f.bob, b1).await;
    assert!(
        !b1_view["wait_reason"]
            .as_str()
            .unwrap()
            .contains("less recent use"),
        "{b1_view}"
    );

    f.app.pass().await;
    assert_eq!(status(&f.app, &f.admin, b1).await, "admitted");
    assert_eq!(status(&f.app, &f.admin, a1).await, "queued");
    assert_eq!(status(&f.app, &f.admin, a2).await, "queued");
}

#[sqlx::test(migrations = false)]
async fn a_running_job_counts_as_use_at_once(pool: PgPool) {
    // No day bucket at all: alice's job holding the card since two hours ago is her use, read
    // live at the pass, so bob's later job goes before her next one.
    let f = setup(pool).await;
    let running = f.app.submit_ok(&f.alice, big(json!({}))).await;
    f.app.pass().await;
    assert_eq!(status(&f.app, &f.admin, running).await, "admitted");
    sqlx::query(
        "UPDATE jobs SET status = 'running', started_at = now() - interval '2 hours' WHERE id = $1",
    )
    .bind(running)
    .execute(&f.app.pool)
    .await
    .unwrap();
    let a2 = f.app.submit_ok(&f.alice, big(json!({}))).await;
    let b1 = f.app.submit_ok(&f.bob, big(json!({}))).await;
    assert_eq!(ids(&queue(&f.app, &f.admin).await), vec![b1, a2]);
    // The card is taken: both wait, bob's first.
    f.app.pass().await;
    assert_eq!(ids(&queue(&f.app, &f.admin).await), vec![b1, a2]);
}

#[sqlx::test(migrations = false)]
async fn fair_share_off_restores_submit_order(pool: PgPool) {
    let f = setup(pool).await;
    f.app
        .set_policy(&f.admin, json!({ "fair_share": false }))
        .await;
    used(&f.app.pool, "alice", 50.0, 1.0).await;
    let a1 = f.app.submit_ok(&f.alice, big(json!({}))).await;
    let a2 = f.app.submit_ok(&f.alice, big(json!({}))).await;
    let b1 = f.app.submit_ok(&f.bob, big(json!({}))).await;
    assert_eq!(ids(&queue(&f.app, &f.admin).await), vec![a1, a2, b1]);
    let why = f.app.job(&f.alice, a2).await["wait_reason"].clone();
    assert!(!why.as_str().unwrap().contains("less recent use"), "{why}");
    f.app.pass().await;
    assert_eq!(status(&f.app, &f.admin, a1).await, "admitted");
    assert_eq!(status(&f.app, &f.admin, b1).await, "queued");
}

#[sqlx::test(migrations = false)]
async fn priority_still_beats_usage(pool: PgPool) {
    let f = setup(pool).await;
    used(&f.app.pool, "alice", 50.0, 1.0).await;
    let b1 = f
        .app
        .submit_ok(&f.bob, big(json!({ "priority": -1 })))
        .await;
    let a1 = f.app.submit_ok(&f.alice, big(json!({}))).await;
    assert_eq!(ids(&queue(&f.app, &f.admin).await), vec![a1, b1]);
    f.app.pass().await;
    assert_eq!(status(&f.app, &f.admin, a1).await, "admitted");
    assert_eq!(status(&f.app, &f.admin, b1).await, "queued");
}

#[sqlx::test(migrations = false)]
async fn user_and_team_weights_change_the_order(pool: PgPool) {
    let f = setup(pool).await;
    let db = &f.app.pool;
    // Equal use: submit order decides.
    used(db, "alice", 10.0, 1.0).await;
    used(db, "bob", 10.0, 1.0).await;
    let a1 = f.app.submit_ok(&f.alice, big(json!({}))).await;
    let b1 = f.app.submit_ok(&f.bob, big(json!({}))).await;
    assert_eq!(ids(&queue(&f.app, &f.admin).await), vec![a1, b1]);

    // Bob's weight 4 in the same team: he is owed 4/5 of it, so his 10 h stand lower.
    sqlx::query("UPDATE users SET weight = 4 WHERE username = 'bob'")
        .execute(db)
        .await
        .unwrap();
    assert_eq!(ids(&queue(&f.app, &f.admin).await), vec![b1, a1]);

    // Back to equal users, but alice's team weighs 3 against bob's 1.
    sqlx::query("UPDATE users SET weight = 1 WHERE username = 'bob'")
        .execute(db)
        .await
        .unwrap();
    sqlx::query("INSERT INTO teams (name, weight) VALUES ('vision', 3), ('speech', 1)")
        .execute(db)
        .await
        .unwrap();
    sqlx::query("UPDATE users SET team = 'vision' WHERE username = 'alice'")
        .execute(db)
        .await
        .unwrap();
    sqlx::query("UPDATE users SET team = 'speech' WHERE username = 'bob'")
        .execute(db)
        .await
        .unwrap();
    used(db, "alice", 10.0, 1.0).await; // alice 20 h over 3/4, bob 10 h over 1/4
    assert_eq!(ids(&queue(&f.app, &f.admin).await), vec![a1, b1]);
    f.app.pass().await;
    assert_eq!(status(&f.app, &f.admin, a1).await, "admitted");
}

#[sqlx::test(migrations = false)]
async fn old_use_counts_less_than_recent_use(pool: PgPool) {
    let f = setup(pool).await;
    f.app
        .set_policy(&f.admin, json!({ "fair_share_half_life_h": 24.0 }))
        .await;
    // Alice used 40 h three half-lives ago (5 h now), bob 10 h an hour ago.
    used(&f.app.pool, "alice", 40.0, 72.0).await;
    used(&f.app.pool, "bob", 10.0, 1.0).await;
    let b1 = f.app.submit_ok(&f.bob, big(json!({}))).await;
    let a1 = f.app.submit_ok(&f.alice, big(json!({}))).await;
    assert_eq!(ids(&queue(&f.app, &f.admin).await), vec![a1, b1]);
    // With a half-life of a week the same hours barely decayed: bob goes first again.
    f.app
        .set_policy(&f.admin, json!({ "fair_share_half_life_h": 168.0 }))
        .await;
    assert_eq!(ids(&queue(&f.app, &f.admin).await), vec![b1, a1]);
}

#[sqlx::test(migrations = false)]
async fn the_starvation_guard_still_holds_an_old_jobs_cards(pool: PgPool) {
    // Bob (less use) waits for the whole card past the starvation limit (the tests' 1 h) while a
    // job of carol's holds part of it; alice's small job, after his in the order, would fit beside
    // carol's, but bob's starving job holds the card against it.
    let f = setup(pool).await;
    let carol = f.app.bearer("carol", Role::Member).await;
    used(&f.app.pool, "alice", 50.0, 1.0).await;
    used(&f.app.pool, "bob", 5.0, 1.0).await;
    let c1 = f
        .app
        .submit_ok(&carol, big(json!({ "min_vram_mb": 8000 })))
        .await;
    f.app.pass().await;
    assert_eq!(status(&f.app, &f.admin, c1).await, "admitted");
    let a1 = f
        .app
        .submit_ok(&f.alice, big(json!({ "min_vram_mb": 4000 })))
        .await;
    let b1 = f.app.submit_ok(&f.bob, big(json!({}))).await;
    sqlx::query("UPDATE jobs SET created_at = now() - interval '2 hours' WHERE id = $1")
        .bind(b1)
        .execute(&f.app.pool)
        .await
        .unwrap();
    assert_eq!(ids(&queue(&f.app, &f.admin).await), vec![b1, a1]);
    f.app.pass().await;
    assert_eq!(status(&f.app, &f.admin, a1).await, "queued");
    let why = f.app.job(&f.alice, a1).await["wait_reason"].clone();
    assert!(why.as_str().unwrap().contains("held for an older"), "{why}");
    assert!(why.as_str().unwrap().starts_with("behind 1 job"), "{why}");

    // The same queue without the age: bob's job is skipped and alice's fits beside carol's.
    sqlx::query("UPDATE jobs SET created_at = now() WHERE id = $1")
        .bind(b1)
        .execute(&f.app.pool)
        .await
        .unwrap();
    f.app.pass().await;
    assert_eq!(status(&f.app, &f.admin, a1).await, "admitted");
}

#[sqlx::test(migrations = false)]
async fn the_fair_share_report_gives_each_users_and_teams_figures(pool: PgPool) {
    let f = setup(pool).await;
    let db = &f.app.pool;
    sqlx::query(
        "INSERT INTO teams (name, weight, budget_gpu_hours, budget_period, budget_kind) \
         VALUES ('vision', 3, 100, 'week', 'soft')",
    )
    .execute(db)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE users SET team = 'vision', weight = 2, budget_gpu_hours = 40, \
         budget_period = 'month', budget_kind = 'hard' WHERE username = 'alice'",
    )
    .execute(db)
    .await
    .unwrap();
    used(db, "alice", 30.0, 0.0).await;
    used(db, "bob", 10.0, 0.0).await;
    // Both have a job queued: both teams are active.
    f.app.submit_ok(&f.alice, big(json!({}))).await;
    f.app.submit_ok(&f.bob, big(json!({}))).await;

    let r = f.app.get("/api/v1/fair-share", &f.admin).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let report = r.json();
    assert_eq!(report["fair_share"], true);
    let row = |kind: &str, name: &str| -> Value {
        report[kind]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} row {name}: {report}"))
            .clone()
    };
    let close = |v: &Value, want: f64| (v.as_f64().unwrap() - want).abs() < 0.01;
    let alice = row("users", "alice");
    assert_eq!(alice["team"], "vision");
    assert!(close(&alice["weight"], 2.0), "{alice}");
    assert!(close(&alice["decayed_gpu_hours"], 30.0), "{alice}");
    assert!(close(&alice["share_of_recent"], 0.75), "{alice}");
    assert!(close(&alice["owed_share"], 0.75), "{alice}");
    assert_eq!(alice["budget"]["gpu_hours"], 40.0);
    assert!(close(&alice["budget_left_gpu_hours"], 10.0), "{alice}");
    let bob = row("users", "bob");
    assert!(close(&bob["owed_share"], 0.25), "{bob}");
    assert!(bob["budget"].is_null() && bob["budget_left_gpu_hours"].is_null());
    let vision = row("teams", "vision");
    assert!(close(&vision["weight"], 3.0), "{vision}");
    assert!(close(&vision["owed_share"], 0.75), "{vision}");
    assert!(close(&vision["budget_left_gpu_hours"], 70.0), "{vision}");
    let default = row("teams", "default");
    assert!(close(&default["decayed_gpu_hours"], 10.0), "{default}");
    // The admin (root) is in the default team too, with no use and no job: owed what it would be
    // with a job queued.
    let root = row("users", "root");
    assert!(close(&root["decayed_gpu_hours"], 0.0), "{root}");

    // The CLI's table prints the same rows.
    let table =
        gpuq::client::render::fair_share_table(&serde_json::from_value(report.clone()).unwrap());
    assert!(
        table.contains("alice") && table.contains("vision"),
        "{table}"
    );
}

#[sqlx::test(migrations = false)]
async fn a_member_reads_only_their_own_and_their_teams_fair_share(pool: PgPool) {
    let f = setup(pool).await;
    used(&f.app.pool, "alice", 30.0, 0.0).await;
    sqlx::query("INSERT INTO teams (name) VALUES ('speech')")
        .execute(&f.app.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE users SET team = 'speech' WHERE username = 'alice'")
        .execute(&f.app.pool)
        .await
        .unwrap();
    // Bob asks: he sees his own row and the default team's, never alice's or her team's.
    let r = f.app.get("/api/v1/fair-share", &f.bob).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let report = r.json();
    let names = |kind: &str| -> Vec<String> {
        report[kind]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names("users"), vec!["bob"]);
    assert_eq!(names("teams"), vec!["default"]);
    assert!(
        !r.text.contains("alice") && !r.text.contains("speech"),
        "{}",
        r.text
    );
    // Signed out: refused.
    let anon = f.app.api("GET", "/api/v1/fair-share", None, None).await;
    assert_eq!(anon.status, 401, "{}", anon.text);
    // A manager sees everyone.
    let mia = f.app.bearer("mia", Role::Manager).await;
    let all = f.app.get("/api/v1/fair-share", &mia).await.json();
    assert!(all["users"].as_array().unwrap().len() >= 3, "{all}");
}
