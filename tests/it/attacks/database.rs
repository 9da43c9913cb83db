//! The embedded Postgres as a way around gpuq: whoever reaches its socket would be its superuser,
//! able to make themselves admin, rewrite the ledger or read every job's spec.
//!
//! The attacker is a process that reaches the cluster's socket without being gpuq: the cluster's
//! own system account (`postgres` by default, often shared with the host's own Postgres), root
//! in a container given the folder, or any other local user. Before, the cluster trusted its
//! socket: every one of them got in as `gpuq`, without a password.

use crate::support::db::{cluster_folder, start_cluster};
use gpuq::server::db::embedded::{find_program, PASSWORD_FILE};
use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

/// The cluster's socket under `data`, as `role`, without a password.
fn without_password(data: &Path, role: &str) -> PgConnectOptions {
    PgConnectOptions::new()
        .socket(data.join("pg/run"))
        .port(5432)
        .username(role)
        .database("gpuq")
}

/// Connecting with `opts` must be refused for want of the password.
async fn refused(opts: PgConnectOptions, who: &str) {
    match PgPool::connect_with(opts).await {
        Ok(_) => panic!("{who} got into the embedded cluster without its password"),
        Err(e) => assert!(
            e.to_string().contains("password"),
            "{who} was refused, but not for the password: {e}"
        ),
    }
}

/// `psql` run as the system user `user` (no password given): its combined output, and whether it
/// got in.
fn psql_as(user: &str, data: &Path, sql: &str) -> (bool, String) {
    let psql = find_program("psql").unwrap();
    let out = Command::new("runuser")
        .args(["-u", user, "--"])
        .arg(psql)
        .args(["-X", "-w", "-t", "-A", "-h"])
        .arg(data.join("pg/run"))
        .args(["-p", "5432", "-U", "gpuq", "-d", "gpuq", "-c", sql])
        .env_remove("PGPASSWORD")
        .current_dir("/")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Every way in without the password is refused, while gpuq (and its application role) gets in;
/// the password is gpuq's user's alone.
#[tokio::test]
async fn the_embedded_clusters_socket_wants_a_password_from_everyone() {
    let dir = cluster_folder("gpuq-pgauth");
    let data = dir.path().to_owned();
    let pg = start_cluster(&data).await;

    // gpuq itself: migrated and opened as `gpuq serve` does, as its application role.
    let db = gpuq::server::db::open(&gpuq::server::db::DbOptions {
        database_url: None,
        app_database_url: None,
        data_dir: data.clone(),
        pg_user: "postgres".into(),
        max_connections: 2,
    })
    .await
    .expect("gpuq opens its own cluster");
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(one, 1);

    // Root past the socket folder's 0700 (as in a container given the folder): no password, a
    // wrong one, the owner role and the application's.
    refused(without_password(&data, "gpuq"), "root as `gpuq`").await;
    refused(without_password(&data, "gpuq_app"), "root as `gpuq_app`").await;
    refused(
        without_password(&data, "gpuq").password("guessed"),
        "a guessed password",
    )
    .await;

    // The cluster's own system account, which reaches the socket.
    let (got_in, said) = psql_as("postgres", &data, "SELECT rolname FROM pg_roles LIMIT 1");
    assert!(
        !got_in,
        "the `postgres` account got in without the password: {said}"
    );
    assert!(said.contains("password"), "{said}");
    // Any other local user.
    let (got_in, said) = psql_as("nobody", &data, "SELECT 1");
    assert!(!got_in, "`nobody` got in: {said}");

    // The password: gpuq's user's, 0600, out of the cluster owner's reach.
    let file = data.join(PASSWORD_FILE);
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.uid(), nix::unistd::Uid::effective().as_raw());
    let read = Command::new("runuser")
        .args(["-u", "postgres", "--", "cat"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        !read.status.success(),
        "the cluster's owner read the password"
    );
    assert!(!std::fs::read_to_string(data.join("pg/data/pg_hba.conf"))
        .unwrap()
        .contains("trust"));

    db.close().await.unwrap();
    drop(pg);
}

/// A cluster made by an earlier gpuq trusted its socket: its next start gives it the password
/// and closes the trusted way in, and keeps its data.
#[tokio::test]
async fn a_cluster_that_trusted_its_socket_wants_a_password_after_its_next_start() {
    let dir = cluster_folder("gpuq-pgtrust");
    let data = dir.path().to_owned();
    // The cluster as gpuq made it before: owned by `postgres`, socket trusted.
    let cluster = data.join("pg/data");
    for d in [data.join("pg"), data.join("pg/run")] {
        std::fs::create_dir_all(&d).unwrap();
        let chown = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&d)
            .status()
            .unwrap();
        assert!(chown.success());
    }
    std::fs::set_permissions(data.join("pg/run"), PermissionsExt::from_mode(0o700)).unwrap();
    let initdb = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(find_program("initdb").unwrap())
        .arg("-D")
        .arg(&cluster)
        .args(["-U", "gpuq", "--auth-local=trust", "--auth-host=reject"])
        .args(["-E", "UTF8", "--no-instructions"])
        .current_dir("/")
        .output()
        .unwrap();
    assert!(
        initdb.status.success(),
        "{}",
        String::from_utf8_lossy(&initdb.stderr)
    );
    assert!(std::fs::read_to_string(cluster.join("pg_hba.conf"))
        .unwrap()
        .contains("trust"));

    let pg = start_cluster(&data).await;
    let pool = PgPool::connect_with(pg.connect_options("gpuq"))
        .await
        .expect("gpuq gets in with its new password");
    sqlx::query("CREATE TABLE kept (x int)")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    refused(without_password(&data, "gpuq"), "root as `gpuq`").await;
    let (got_in, said) = psql_as("postgres", &data, "SELECT 1");
    assert!(
        !got_in,
        "the `postgres` account got in without the password: {said}"
    );
    drop(pg);

    // Started again from cold, the same password opens it, and the data is there.
    let again = start_cluster(&data).await;
    assert!(again.started_here());
    let pool = PgPool::connect_with(again.connect_options("gpuq"))
        .await
        .unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM kept")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
    pool.close().await;
    refused(without_password(&data, "gpuq"), "root as `gpuq`").await;
}
