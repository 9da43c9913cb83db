//! Budgets: a used-up hard budget holds its owner's jobs (naming the budget and its reset) until
//! it is raised or its period ends; a used-up soft budget puts them after the others of their
//! priority; a team's budget is used up by its members together; `GET /api/v1/me/budget` and
//! `gpuq budget` show the caller's own standing, and nobody else's.

use crate::cli::gpuq_env;
use crate::support::{one_card_job, true_job, TestApp};
use gpuq::model::{Budget, BudgetKind, BudgetPeriod, Role};
use gpuq::model::{TeamPatch, UserShare};
use gpuq::server::db::teams;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

const CARD: &str = "1x24576:NVIDIA GeForce RTX 3090";

fn budget(gpu_hours: f64, kind: BudgetKind) -> Option<Budget> {
    Some(Budget {
        gpu_hours,
        period: BudgetPeriod::Week,
        kind,
    })
}

/// Sets `user`'s own budget as `PATCH /api/v1/users/{id}` does.
async fn set_user_budget(pool: &PgPool, user: Uuid, budget: Option<Budget>) {
    let share = UserShare {
        budget: Some(budget),
        ..UserShare::default()
    };
    assert!(teams::place_user(pool, user, &share).await.unwrap());
}

/// Charges `user` `hours` GPU-hours `days_ago` days before today (UTC).
async fn charge(pool: &PgPool, user: Uuid, hours: f64, days_ago: i32) {
    sqlx::query(
        "INSERT INTO gpu_hours_daily (user_id, day, gpu_hours, hour_epoch) \
         VALUES ($1, (now() AT TIME ZONE 'UTC')::date - $3, $2, $2 * extract(epoch FROM now()))",
    )
    .bind(user)
    .bind(hours)
    .bind(days_ago)
    .execute(pool)
    .await
    .unwrap();
}

async fn user_id(app: &TestApp, bearer: &str) -> Uuid {
    app.get("/api/v1/me", bearer).await.json()["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[sqlx::test(migrations = false)]
async fn a_used_up_hard_budget_holds_every_new_job_until_it_is_raised(pool: PgPool) {
    let (app, _) = TestApp::with_cards(pool, CARD, "budgets").await;
    // A manager, who may raise a job's priority (a member may only lower it).
    let alice = app.bearer("alice", Role::Manager).await;
    let alice_id = user_id(&app, &alice).await;
    set_user_budget(&app.pool, alice_id, budget(1.0, BudgetKind::Hard)).await;
    charge(&app.pool, alice_id, 2.0, 0).await;

    // Neither a higher priority, nor an array, nor a dependency gets past it.
    let plain = app.submit_ok(&alice, true_job(1000)).await;
    let mut urgent = true_job(1000);
    urgent["priority"] = json!(100);
    let urgent = app.submit_ok(&alice, urgent).await;
    let mut array = true_job(1000);
    array["array"] = json!("0-1");
    let array_ids: Vec<Uuid> = app.submit(&alice, array).await.json()["job_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().parse().unwrap())
        .collect();
    let mut child = true_job(1000);
    child["after_any"] = json!([plain.to_string()]);
    let child_reply = app.submit(&alice, child).await;
    assert_eq!(child_reply.status, 201, "{}", child_reply.text);
    app.pass().await;
    let mut held = vec![plain, urgent];
    held.extend(&array_ids);
    for id in &held {
        let j = app.job(&alice, *id).await;
        assert_eq!(j["status"], "queued", "{j}");
        let why = j["wait_reason"].as_str().unwrap();
        assert!(
            why.starts_with(
                "user alice's hard budget of 1 GPU-h per week is used up (2.0 GPU-h); it resets "
            ) && why.ends_with("00:00 UTC"),
            "{why}"
        );
    }
    // The submit page's preview says so before she submits anything more.
    let cookie = app.login("alice", crate::support::PASSWORD).await;
    let spec = true_job(1000).to_string();
    let form = format!(
        "spec={}",
        percent_encoding::utf8_percent_encode(&spec, percent_encoding::NON_ALPHANUMERIC)
    );
    let preview = app
        .server_fn("preview_job", &form, Some(&cookie), &[])
        .await;
    assert_eq!(preview.status, 200, "{}", preview.text);
    let preview = preview.json();
    let why = preview["WouldWait"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("user alice's hard budget of 1 GPU-h per week is used up"),
        "{preview}"
    );
    // Another member is not held by alice's budget.
    let bob = app.bearer("bob", Role::Member).await;
    let bobs = app.submit_ok(&bob, true_job(1000)).await;
    app.pass().await;
    assert_eq!(app.job(&bob, bobs).await["status"], "admitted");

    // Her standing, and only hers: a `user` parameter changes nothing.
    let mine = app.get("/api/v1/me/budget", &alice).await;
    assert_eq!(mine.status, 200, "{}", mine.text);
    let mine = mine.json();
    assert_eq!(mine[0]["scope"], "user");
    assert_eq!(mine[0]["name"], "alice");
    assert_eq!(mine[0]["used_gpu_hours"], 2.0);
    assert_eq!(mine[0]["left_gpu_hours"], 0.0);
    assert_eq!(mine[0]["exhausted"], true);
    assert_eq!(mine[0]["budget"]["kind"], "hard");
    let bobs_view = app.get("/api/v1/me/budget?user=alice", &bob).await;
    assert_eq!(bobs_view.status, 200);
    assert_eq!(bobs_view.json(), json!([]), "bob reads his own (none)");
    // The member-facing route is read-only.
    for method in ["PUT", "POST", "PATCH", "DELETE"] {
        let r = app
            .api(
                method,
                "/api/v1/me/budget",
                Some(&alice),
                Some(json!({ "gpu_hours": 1000, "period": "week", "kind": "soft" })),
            )
            .await;
        assert_eq!(r.status, 405, "{method}: {}", r.text);
    }

    // Raised, the held jobs start at the next pass.
    set_user_budget(&app.pool, alice_id, budget(100.0, BudgetKind::Hard)).await;
    app.pass().await;
    assert_eq!(app.job(&alice, urgent).await["status"], "admitted");
}

#[sqlx::test(migrations = false)]
async fn a_new_period_releases_a_hard_budget(pool: PgPool) {
    let (app, _) = TestApp::with_cards(pool, CARD, "budgets").await;
    let alice = app.bearer("alice", Role::Member).await;
    let alice_id = user_id(&app, &alice).await;
    set_user_budget(&app.pool, alice_id, budget(1.0, BudgetKind::Hard)).await;
    // Used up, but a week ago: last period's.
    charge(&app.pool, alice_id, 5.0, 7).await;
    let id = app.submit_ok(&alice, true_job(1000)).await;
    app.pass().await;
    assert_eq!(app.job(&alice, id).await["status"], "admitted");
    let mine = app.get("/api/v1/me/budget", &alice).await.json();
    assert_eq!(mine[0]["used_gpu_hours"], 0.0);
    assert_eq!(mine[0]["exhausted"], false);
}

#[sqlx::test(migrations = false)]
async fn a_used_up_soft_budget_puts_its_owner_after_a_later_job_of_the_same_priority(pool: PgPool) {
    let (app, _) = TestApp::with_cards(pool, CARD, "budgets").await;
    let alice = app.bearer("alice", Role::Member).await;
    let bob = app.bearer("bob", Role::Member).await;
    let alice_id = user_id(&app, &alice).await;
    set_user_budget(&app.pool, alice_id, budget(1.0, BudgetKind::Soft)).await;
    charge(&app.pool, alice_id, 1.5, 0).await;
    // One card holds one of the two: alice's came first, bob's goes first.
    let first = app.submit_ok(&alice, one_card_job("alice-first")).await;
    let later = app.submit_ok(&bob, one_card_job("bob-later")).await;
    let waiting = app.job(&alice, first).await;
    assert!(
        waiting["wait_reason"]
            .as_str()
            .unwrap()
            .contains("its owner is past a soft budget"),
        "{waiting}"
    );
    app.pass().await;
    assert_eq!(app.job(&bob, later).await["status"], "admitted");
    assert_eq!(app.job(&alice, first).await["status"], "queued");
}

#[sqlx::test(migrations = false)]
async fn a_team_budget_is_used_up_by_its_members_together(pool: PgPool) {
    let (app, _) = TestApp::with_cards(pool, CARD, "budgets").await;
    let alice = app.bearer("alice", Role::Member).await;
    let carol = app.bearer("carol", Role::Member).await;
    let (alice_id, carol_id) = (user_id(&app, &alice).await, user_id(&app, &carol).await);
    sqlx::query("INSERT INTO teams (name) VALUES ('ml')")
        .execute(&app.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE users SET team = 'ml' WHERE id = ANY($1)")
        .bind(vec![alice_id, carol_id])
        .execute(&app.pool)
        .await
        .unwrap();
    let patch = TeamPatch {
        budget: Some(budget(3.0, BudgetKind::Hard)),
        ..TeamPatch::default()
    };
    assert!(teams::update(&app.pool, "ml", &patch).await.unwrap());
    // Each below the budget; together past it.
    charge(&app.pool, alice_id, 1.5, 0).await;
    charge(&app.pool, carol_id, 1.7, 0).await;
    let id = app.submit_ok(&alice, true_job(1000)).await;
    app.pass().await;
    let j = app.job(&alice, id).await;
    assert_eq!(j["status"], "queued");
    assert!(
        j["wait_reason"]
            .as_str()
            .unwrap()
            .starts_with("team ml's hard budget of 3 GPU-h per week is used up (3.2 GPU-h)"),
        "{j}"
    );
    let mine = app.get("/api/v1/me/budget", &carol).await.json();
    assert_eq!(mine[0]["scope"], "team");
    assert_eq!(mine[0]["name"], "ml");
    assert!((mine[0]["used_gpu_hours"].as_f64().unwrap() - 3.2).abs() < 1e-9);

    // `gpuq budget` prints the same standing.
    let url = app.listen().await;
    let token = carol.trim_start_matches("Bearer ");
    let config = tempfile::tempdir().unwrap();
    let (token, dir) = (token.to_owned(), config.path().to_str().unwrap().to_owned());
    // The server answers on this test's runtime: the CLI waits on another thread.
    let out = tokio::task::spawn_blocking(move || {
        gpuq_env(
            &["budget"],
            "",
            &[
                ("GPUQ_URL", url.as_str()),
                ("GPUQ_TOKEN", token.as_str()),
                ("GPUQ_CONFIG_DIR", dir.as_str()),
            ],
        )
    })
    .await
    .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.starts_with(
            "your usage this week: 3.2 GPU-h of a 3 GPU-h budget (team ml, hard; resets "
        ) && said.contains("used up: new jobs wait until it resets"),
        "{said}"
    );
}
