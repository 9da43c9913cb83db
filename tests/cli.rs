//! `gpuq user add` and the embedded Postgres, as a script or an operator uses them.

mod common;

use common::TestApp;
use gpuq::server::db::embedded::EmbeddedPg;
use sqlx::PgPool;
use std::io::Write;
use std::process::{Command, Stdio};

fn url_of(pool: &PgPool) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let db = pool.connect_options().get_database().unwrap().to_owned();
    let (prefix, _) = base.rsplit_once('/').unwrap();
    format!("{prefix}/{db}")
}

fn gpuq(args: &[&str], stdin: &str) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuq"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gpuq");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[sqlx::test(migrations = false)]
async fn user_add_reads_the_password_from_stdin(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let url = url_of(&app.pool);
    let out = gpuq(
        &[
            "user",
            "add",
            "mona",
            "--role",
            "manager",
            "--database-url",
            &url,
        ],
        "long enough pw\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("created user `mona` with role manager"));
    let token = app.token("mona", "long enough pw").await;
    assert_eq!(token.status, 201, "{}", token.text);

    let dup = gpuq(
        &["user", "add", "mona", "--database-url", &url],
        "long enough pw\n",
    );
    assert!(!dup.status.success());
    assert!(String::from_utf8_lossy(&dup.stderr).contains("already exists"));
    let bad_role = gpuq(
        &[
            "user",
            "add",
            "nina",
            "--role",
            "boss",
            "--database-url",
            &url,
        ],
        "long enough pw\n",
    );
    assert!(String::from_utf8_lossy(&bad_role.stderr).contains("unknown role `boss`"));
    let short = gpuq(&["user", "add", "nina", "--database-url", &url], "short\n");
    assert!(String::from_utf8_lossy(&short.stderr).contains("at least 8 characters"));
}

#[tokio::test]
async fn embedded_postgres_is_created_reused_and_stopped() {
    let dir = tempfile::Builder::new()
        .prefix("gpuq-emb")
        .tempdir_in("/tmp")
        .unwrap();
    // Postgres refuses root; as root the cluster belongs to `postgres` and it must reach the folder.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let data = dir.path().to_owned();

    let pg = tokio::task::spawn_blocking({
        let data = data.clone();
        move || EmbeddedPg::start(&data, "postgres")
    })
    .await
    .unwrap()
    .expect("embedded start");
    assert!(pg.started_here());
    let pool = PgPool::connect_with(pg.connect_options("gpuq"))
        .await
        .unwrap();
    gpuq::server::db::migrate(&pool).await.unwrap();
    gpuq::server::auth::service::add_user(&pool, "olga", gpuq::model::Role::Member, "persisted pw")
        .await
        .unwrap();
    pool.close().await;

    // A second start on the same folder attaches instead of starting another server.
    let attached = tokio::task::spawn_blocking({
        let data = data.clone();
        move || EmbeddedPg::start(&data, "postgres")
    })
    .await
    .unwrap()
    .unwrap();
    assert!(!attached.started_here());
    drop(attached);
    drop(pg); // stops it
    let socket = data.join("pg/run/.s.PGSQL.5432");
    assert!(!socket.exists(), "the cluster was stopped");

    // Started again, the data is still there.
    let again = tokio::task::spawn_blocking(move || EmbeddedPg::start(&data, "postgres"))
        .await
        .unwrap()
        .unwrap();
    assert!(again.started_here());
    let pool = PgPool::connect_with(again.connect_options("gpuq"))
        .await
        .unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM users WHERE username = 'olga'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
    pool.close().await;
}
