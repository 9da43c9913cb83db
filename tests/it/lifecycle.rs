//! The job lifecycle against real Postgres: every statement of `server::db::lifecycle` run on a
//! job in every status makes exactly the changes the table allows it, and no other; a statement
//! asked by an actor the table does not name writes nothing; and the record (the job's view and
//! its trail) says who stopped a job.

use crate::support::TestApp;
use gpuq::model::{JobStatus, Role};
use gpuq::server::db::lifecycle::{self, allowed, Actor, Ending};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

const NODE: &str = "lc-node";

/// One statement of the lifecycle, run on one job, with the actor it acts for.
#[derive(Debug, Clone, Copy)]
enum Stmt {
    Admit,
    FailQueued(Actor),
    Claim,
    SetRunning,
    Unclaim,
    Finish(JobStatus),
    FinishStopped,
    Cancel(Actor),
    RequeueAdmittedOf,
    FailOnForgottenNode,
    RequeueLost,
    CancelDependent,
}

impl Stmt {
    fn actor(self) -> Actor {
        match self {
            Stmt::Admit | Stmt::RequeueLost | Stmt::CancelDependent => Actor::Scheduler,
            Stmt::Claim | Stmt::SetRunning | Stmt::Unclaim => Actor::Runner,
            Stmt::Finish(_) | Stmt::FinishStopped => Actor::Runner,
            Stmt::Cancel(by) | Stmt::FailQueued(by) => by,
            Stmt::RequeueAdmittedOf | Stmt::FailOnForgottenNode => Actor::Admin,
        }
    }

    async fn run(self, pool: &PgPool, job: Uuid, owner: Uuid) -> sqlx::Result<()> {
        let mut conn = pool.acquire().await?;
        match self {
            Stmt::Admit => drop(lifecycle::admit(&mut conn, &[job], &[NODE.into()]).await?),
            Stmt::FailQueued(by) => {
                lifecycle::fail_queued(&mut conn, job, by, "its image cannot be had").await?;
            }
            Stmt::Claim => drop(lifecycle::claim(pool, NODE, None, 10).await?),
            Stmt::SetRunning => drop(lifecycle::set_running(pool, job, NODE).await?),
            Stmt::Unclaim => lifecycle::unclaim(pool, job, NODE, "walk").await?,
            Stmt::Finish(status) => {
                let end = Ending {
                    status,
                    exit_code: Some(3),
                    reason: Some("walk".into()),
                    cause: None,
                };
                lifecycle::finish(pool, job, NODE, &end).await?;
            }
            Stmt::FinishStopped => {
                drop(lifecycle::finish_stopped(pool, job, NODE, Some(143)).await?)
            }
            Stmt::Cancel(by) => drop(lifecycle::cancel_unstarted(pool, job, by, "walk").await?),
            Stmt::RequeueAdmittedOf => {
                drop(lifecycle::requeue_admitted_of(&mut conn, owner).await?)
            }
            Stmt::FailOnForgottenNode => {
                drop(lifecycle::fail_on_forgotten_node(&mut conn, NODE, "node_lost").await?)
            }
            Stmt::RequeueLost => drop(lifecycle::requeue_lost_jobs(&mut conn, &[job]).await?),
            Stmt::CancelDependent => {
                drop(lifecycle::cancel_dependents(&mut conn, &[job], &["walk".to_owned()]).await?)
            }
        }
        Ok(())
    }
}

const STATEMENTS: &[Stmt] = &[
    Stmt::Admit,
    Stmt::FailQueued(Actor::Scheduler),
    Stmt::FailQueued(Actor::Runner),
    Stmt::Claim,
    Stmt::SetRunning,
    Stmt::Unclaim,
    Stmt::Finish(JobStatus::Succeeded),
    Stmt::Finish(JobStatus::Failed),
    Stmt::Finish(JobStatus::TimedOut),
    Stmt::Finish(JobStatus::Cancelled),
    Stmt::FinishStopped,
    Stmt::Cancel(Actor::Owner),
    Stmt::Cancel(Actor::Admin),
    Stmt::RequeueAdmittedOf,
    Stmt::FailOnForgottenNode,
    Stmt::RequeueLost,
    Stmt::CancelDependent,
];

/// A fresh job of `owner` put straight into `status` on [`NODE`] (test set-up, not a transition).
async fn job_in(pool: &PgPool, owner: Uuid, status: JobStatus) -> Uuid {
    let new = lifecycle::NewJob {
        owner_id: owner,
        name: "walk",
        spec: json!({}),
        image: "gpuq-test/busybox:latest",
        command: &[],
        gpu_count: 0,
        workload: None,
        min_vram_mib: None,
        exclusive: false,
        priority: 0,
        timeout_s: 60,
        status: JobStatus::Queued,
        status_reason: None,
    };
    let id = lifecycle::enter(pool, &new).await.expect("a new job");
    sqlx::query("UPDATE jobs SET status = $2, node = $3 WHERE id = $1")
        .bind(id)
        .bind(status)
        .bind(NODE)
        .execute(pool)
        .await
        .expect("putting a job in a status");
    id
}

async fn status_of(pool: &PgPool, job: Uuid) -> JobStatus {
    sqlx::query_scalar("SELECT status FROM jobs WHERE id = $1")
        .bind(job)
        .fetch_one(pool)
        .await
        .expect("a job's status")
}

#[sqlx::test(migrations = false)]
async fn every_statement_on_every_status_makes_exactly_the_tables_changes(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let pool = app.pool.clone();
    let owner = app.add_user("walker", Role::Member).await;
    let mut made = Vec::new();
    for &from in JobStatus::ALL {
        for &stmt in STATEMENTS {
            // The only live job, so a statement over many jobs touches only this one (the earlier
            // ones are put out of reach: their trails are append-only, so they stay).
            sqlx::query("UPDATE jobs SET status = 'succeeded', node = NULL")
                .execute(&pool)
                .await
                .unwrap();
            let job = job_in(&pool, owner, from).await;
            stmt.run(&pool, job, owner)
                .await
                .unwrap_or_else(|e| panic!("{stmt:?} on a {from} job: {e}"));
            let to = status_of(&pool, job).await;
            if to != from {
                assert!(
                    allowed(Some(from), to, stmt.actor()),
                    "{stmt:?} moved a job {from} → {to}, which the table does not allow {:?}",
                    stmt.actor()
                );
                made.push((Some(from), to, stmt.actor()));
            } else {
                // Nothing changed: then the table has no move this statement makes from here.
                // (A finish as `cancelled` of a cancelled-looking job, etc., is caught as well.)
                let would = lifecycle::TRANSITIONS.iter().any(|t| {
                    t.from == Some(from)
                        && t.by.contains(&stmt.actor())
                        && expects(stmt, from, t.to)
                });
                assert!(
                    !would,
                    "{stmt:?} left a {from} job as it was, though the table lets it move"
                );
            }
        }
    }
    // Every transition of the table (but a job's creation) was made by some statement.
    for t in lifecycle::TRANSITIONS.iter().filter(|t| t.from.is_some()) {
        for &by in t.by {
            assert!(
                made.contains(&(t.from, t.to, by)),
                "the walk never made {:?} → {} by {by:?}",
                t.from,
                t.to
            );
        }
    }
}

/// Whether `stmt` is the statement that makes `from` → `to`.
fn expects(stmt: Stmt, from: JobStatus, to: JobStatus) -> bool {
    use JobStatus::*;
    match stmt {
        Stmt::Admit => (from, to) == (Queued, Admitted),
        Stmt::FailQueued(_) => (from, to) == (Queued, Failed),
        Stmt::Claim => (from, to) == (Admitted, Starting),
        Stmt::SetRunning => (from, to) == (Starting, Running),
        Stmt::Unclaim => (from, to) == (Starting, Admitted),
        Stmt::Finish(s) => matches!(from, Starting | Running) && to == s,
        // A stop without a recorded cause is its owner's cancel.
        Stmt::FinishStopped => matches!(from, Starting | Running) && to == Cancelled,
        Stmt::Cancel(_) => matches!(from, Queued | Admitted) && to == Cancelled,
        Stmt::RequeueAdmittedOf => (from, to) == (Admitted, Queued),
        Stmt::FailOnForgottenNode => matches!(from, Admitted | Starting | Running) && to == Failed,
        Stmt::RequeueLost => matches!(from, Admitted | Starting | Running) && to == Queued,
        Stmt::CancelDependent => (from, to) == (Queued, Cancelled),
    }
}

#[sqlx::test(migrations = false)]
async fn an_actor_the_table_does_not_name_writes_nothing(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let pool = app.pool.clone();
    let owner = app.add_user("walker", Role::Member).await;
    let queued = job_in(&pool, owner, JobStatus::Queued).await;
    for by in [Actor::Runner, Actor::Scheduler] {
        let e = lifecycle::cancel_unstarted(&pool, queued, by, "x")
            .await
            .expect_err("only people cancel");
        assert!(e.to_string().contains("refuses"), "{e}");
        let e = lifecycle::request_cancel(&pool, queued, by)
            .await
            .expect_err("only people ask a stop");
        assert!(e.to_string().contains("refuses"), "{e}");
    }
    // Only the machines fail a queued job as unrunnable: not its owner, not an admin.
    for by in [Actor::Owner, Actor::Admin] {
        let mut conn = pool.acquire().await.unwrap();
        let e = lifecycle::fail_queued(&mut conn, queued, by, "x")
            .await
            .expect_err("people cancel, they do not fail");
        assert!(e.to_string().contains("refuses"), "{e}");
    }
    assert_eq!(status_of(&pool, queued).await, JobStatus::Queued);
    // A run cannot "end" as queued or running: the end is checked against the table too.
    let running = job_in(&pool, owner, JobStatus::Running).await;
    for status in [JobStatus::Queued, JobStatus::Running, JobStatus::Rejected] {
        let end = Ending {
            status,
            exit_code: None,
            reason: None,
            cause: None,
        };
        lifecycle::finish(&pool, running, NODE, &end)
            .await
            .expect_err("not an end");
    }
    assert_eq!(status_of(&pool, running).await, JobStatus::Running);
    // A job enters only queued or rejected.
    let mut new = lifecycle::NewJob {
        owner_id: owner,
        name: "x",
        spec: json!({}),
        image: "x",
        command: &[],
        gpu_count: 0,
        workload: None,
        min_vram_mib: None,
        exclusive: false,
        priority: 0,
        timeout_s: 60,
        status: JobStatus::Running,
        status_reason: None,
    };
    lifecycle::enter(&pool, &new)
        .await
        .expect_err("born running");
    new.status = JobStatus::Rejected;
    lifecycle::enter(&pool, &new).await.expect("born rejected");
}

#[sqlx::test(migrations = false)]
async fn a_stop_carries_its_cause_to_the_end_and_the_record(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let pool = app.pool.clone();
    let (admin, member) = app.admin_and_member("mira").await;
    let owner: Uuid = sqlx::query_scalar("SELECT id FROM users WHERE username = 'mira'")
        .fetch_one(&pool)
        .await
        .unwrap();
    let spec = json!({ "image": "gpuq-test/busybox:latest", "command": ["true"], "gpu_count": 0 });

    // A queued job cancelled by an admin: the admin's cause, in its view and its trail.
    let by_admin = app.submit_ok(&member, spec.clone()).await;
    let r = app
        .post(&format!("/api/v1/jobs/{by_admin}/cancel"), &admin)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = app.job(&member, by_admin).await;
    assert_eq!(
        (v["status"].as_str(), v["stop_cause"].as_str()),
        (Some("cancelled"), Some("admin")),
        "{v}"
    );
    let trail: Vec<(String, serde_json::Value)> =
        sqlx::query_as("SELECT kind, detail FROM job_events WHERE job_id = $1 ORDER BY id")
            .bind(by_admin)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(
        trail
            .iter()
            .any(|(k, d)| k == "cancelled" && d["cause"] == "admin"),
        "{trail:?}"
    );
    // Its owner's own cancel says so.
    let by_owner = app.submit_ok(&member, spec.clone()).await;
    let r = app
        .post(&format!("/api/v1/jobs/{by_owner}/cancel"), &member)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(app.job(&member, by_owner).await["stop_cause"], "owner");

    // A running job: an admin's stop request is recorded with its cause, and the runner's end of
    // the stopped run reads it in the same statement (no second look).
    let running = job_in(&pool, owner, JobStatus::Running).await;
    let r = app
        .post(&format!("/api/v1/jobs/{running}/cancel"), &admin)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(app.job(&member, running).await["stop_cause"], "admin");
    let (status, reason) = lifecycle::finish_stopped(&pool, running, NODE, Some(143))
        .await
        .unwrap()
        .expect("it was running");
    assert_eq!(status, JobStatus::Cancelled);
    assert_eq!(
        reason.as_deref(),
        Some("cancelled by an admin while running")
    );
    // gpuq's own stop ends failed, with the reason it was asked with.
    let overrun = job_in(&pool, owner, JobStatus::Running).await;
    let cause = gpuq::model::StopCause::VramOveruse;
    let mut conn = pool.acquire().await.unwrap();
    let kind = gpuq::model::JobEventKind::VramOveruse;
    assert!(lifecycle::request_stop(
        &mut conn,
        overrun,
        cause,
        "vram_overuse: test",
        kind,
        json!({})
    )
    .await
    .unwrap());
    drop(conn);
    let (status, reason) = lifecycle::finish_stopped(&pool, overrun, NODE, Some(137))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (status, reason.as_deref()),
        (JobStatus::Failed, Some("vram_overuse: test"))
    );
    let v = app.job(&member, overrun).await;
    assert_eq!(v["stop_cause"], "vram_overuse", "{v}");
    // Another member sees neither the reason nor the cause (the job's details are its owner's).
    let other = app.bearer("otto", Role::Member).await;
    let v = app.job(&other, overrun).await;
    assert!(
        v["stop_cause"].is_null() && v["status_reason"].is_null(),
        "{v}"
    );
}
