//! The role the server connects as: it runs the whole application, and cannot change, empty or
//! silence the append-only audit trails (`job_events`, `audit_events`).

use crate::support::app::TestApp;
use crate::support::true_job;
use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

/// A fresh login role granted as `gpuq serve` grants its own, and a pool connected as it.
async fn app_role_pool(owner: &PgPool) -> (String, PgPool) {
    gpuq::server::db::migrate(owner).await.expect("migrations");
    let role = format!(
        "gpuq_app_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    sqlx::query(&format!("CREATE ROLE \"{role}\" LOGIN"))
        .execute(owner)
        .await
        .unwrap();
    gpuq::server::db::grant_app_role(owner, &role)
        .await
        .expect("grants");
    let opts = owner.connect_options().as_ref().clone().username(&role);
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(opts)
        .await
        .expect("connect as the application's role");
    (role, pool)
}

#[sqlx::test]
async fn the_app_role_runs_the_application_but_cannot_touch_the_audit_trail(owner: PgPool) {
    let (role, pool) = app_role_pool(&owner).await;
    let app = TestApp::migrated(pool.clone());
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", "db").await;

    // The application works as this role: users, tokens, sign-in, policy, manifest, submit,
    // cancel; each writes to the audit trails.
    let (admin, member) = app.admin_and_member("ann").await;
    app.login("ann", crate::support::app::PASSWORD).await;
    let r = app
        .put(
            "/api/v1/settings/launch-policy",
            &admin,
            json!({ "pids_limit": 512 }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let job = app.submit_ok(&member, true_job(1000)).await;
    let r = app
        .post(&format!("/api/v1/jobs/{job}/cancel"), &member)
        .await;
    assert!(r.status.is_success(), "{}", r.text);
    let (job_events, audit_events): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM job_events), (SELECT count(*) FROM audit_events)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(job_events >= 2, "submit and cancel are on the job's trail");
    assert!(audit_events >= 1, "the policy edit is audited");

    // And it cannot rewrite, delete, empty or silence them.
    for attack in [
        "UPDATE audit_events SET actor = 'someone else'",
        "DELETE FROM audit_events",
        "UPDATE job_events SET detail = '{}'",
        "DELETE FROM job_events",
        "TRUNCATE audit_events",
        "TRUNCATE job_events",
        "ALTER TABLE audit_events DISABLE TRIGGER audit_events_append_only",
        "ALTER TABLE job_events DISABLE TRIGGER ALL",
        "DROP TRIGGER audit_events_append_only ON audit_events",
        "SET session_replication_role = replica",
        "DROP TABLE audit_events",
        "DELETE FROM _sqlx_migrations",
        "CREATE TABLE my_table (x int)",
    ] {
        let err = sqlx::query(attack)
            .execute(&pool)
            .await
            .expect_err(&format!("`{attack}` must be refused to {role}"));
        let msg = err.to_string();
        assert!(
            msg.contains("permission denied")
                || msg.contains("must be owner")
                || msg.contains("append-only"),
            "`{attack}`: {msg}"
        );
    }
    let after: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM job_events), (SELECT count(*) FROM audit_events)",
    )
    .fetch_one(&owner)
    .await
    .unwrap();
    assert_eq!(after, (job_events, audit_events));
    pool.close().await;
    for stmt in [
        format!("DROP OWNED BY \"{role}\""),
        format!("DROP ROLE \"{role}\""),
    ] {
        sqlx::query(&stmt).execute(&owner).await.unwrap();
    }
}

#[sqlx::test]
async fn role_names_that_are_not_plain_are_refused(owner: PgPool) {
    gpuq::server::db::migrate(&owner).await.expect("migrations");
    for bad in ["", "Robert\"; DROP TABLE users; --", "9lives", "a b"] {
        let err = gpuq::server::db::grant_app_role(&owner, bad)
            .await
            .expect_err(bad);
        assert!(err.to_string().contains("database role"), "{err}");
    }
}
