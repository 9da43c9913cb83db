//! `gpuq user add` and the embedded Postgres, as a script or an operator uses them.

use crate::support::db::{cluster_folder, start_cluster};
use crate::support::{database_url, Serve, TestApp, PASSWORD};
use sqlx::PgPool;
use std::io::Write;
use std::process::{Command, Stdio};

fn gpuq(args: &[&str], stdin: &str) -> std::process::Output {
    gpuq_env(args, stdin, &[])
}

/// `gpuq <args>` with `stdin` and `env`.
pub(crate) fn gpuq_env(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuq"))
        .args(args)
        .envs(env.iter().copied())
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
    let url = database_url(&app.pool);
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
    let dir = cluster_folder("gpuq-emb");
    let data = dir.path().to_owned();

    let pg = start_cluster(&data).await;
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
    let attached = start_cluster(&data).await;
    assert!(!attached.started_here());
    drop(attached);
    drop(pg); // stops it
    let socket = data.join("pg/run/.s.PGSQL.5432");
    assert!(!socket.exists(), "the cluster was stopped");

    // Started again, the data is still there.
    let data_dir = data.clone();
    let again = start_cluster(&data).await;
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

    // `gpuq serve`'s way in: it migrates as the cluster's owner, then runs as `gpuq_app`, which
    // can neither silence nor rewrite the audit trail.
    let db = gpuq::server::db::open(&gpuq::server::db::DbOptions {
        database_url: None,
        app_database_url: None,
        data_dir,
        pg_user: "postgres".into(),
        max_connections: 2,
    })
    .await
    .expect("open as gpuq serve does");
    let who: String = sqlx::query_scalar("SELECT current_user")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(who, gpuq::server::db::APP_ROLE);
    for attack in [
        "ALTER TABLE audit_events DISABLE TRIGGER ALL",
        "DELETE FROM audit_events",
    ] {
        let err = sqlx::query(attack).execute(&db.pool).await.unwrap_err();
        assert!(
            err.to_string().contains("must be owner")
                || err.to_string().contains("permission denied"),
            "{attack}: {err}"
        );
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM users WHERE username = 'olga'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 1, "the application's role reads gpuq's tables");
    drop(db);
    drop(again);
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[sqlx::test(migrations = false)]
async fn the_cli_submits_lists_shows_and_cancels_against_a_real_server(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let serve = Serve::new(&app.pool, &[]);
    let _server = serve.start("server.log").await;
    let server = serve.base();
    let config = serve.dir.path().join("config");
    let env = [
        ("GPUQ_URL", server.as_str()),
        ("GPUQ_CONFIG_DIR", config.to_str().unwrap()),
    ];

    let unauthenticated = gpuq_env(&["jobs"], "", &env);
    assert!(!unauthenticated.status.success());
    assert!(
        text(&unauthenticated).contains("gpuq login"),
        "{}",
        text(&unauthenticated)
    );

    let wrong = gpuq_env(&["login", "admin"], "not the password\n", &env);
    assert!(!wrong.status.success());
    assert!(
        text(&wrong).contains("wrong username or password"),
        "{}",
        text(&wrong)
    );
    let login = gpuq_env(&["login", "admin"], &format!("{PASSWORD}\n"), &env);
    assert!(login.status.success(), "{}", text(&login));
    let saved = config.join("credentials.json");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&saved).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);

    let filler = gpuq_env(
        &[
            "submit",
            "--image",
            "gpuq-test/busybox:latest",
            "--gpus",
            "4",
            "--vram-mib",
            "20000",
            "--",
            "true",
        ],
        "",
        &env,
    );
    assert!(filler.status.success(), "{}", text(&filler));
    let submit = gpuq_env(
        &[
            "submit",
            "--image",
            "gpuq-test/busybox:latest",
            "--vram-mib",
            "10000",
            "--name",
            "big",
            "--",
            "echo",
            "a b",
        ],
        "",
        &env,
    );
    assert!(submit.status.success(), "{}", text(&submit));
    let out = text(&submit);
    assert!(out.starts_with("submitted "), "{out}");
    let id = out.split_whitespace().nth(1).unwrap().to_owned();

    let refused = gpuq_env(
        &[
            "submit",
            "--image",
            "gpuq-test/busybox:latest",
            "--vram-mib",
            "100",
            "--env",
            "LD_PRELOAD=x",
            "--",
            "true",
        ],
        "",
        &env,
    );
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("env.LD_PRELOAD"),
        "{}",
        text(&refused)
    );

    // The filler holds 20000 of every 24576 MiB card: the 10000 MiB job waits and says why.
    let show = gpuq_env(&["show", &id[..8]], "", &env);
    assert!(show.status.success(), "{}", text(&show));
    let shown = text(&show);
    assert!(shown.contains("big") && shown.contains("queued"), "{shown}");
    assert!(shown.contains("needs 10000 MiB"), "{shown}");
    let jobs = gpuq_env(&["jobs"], "", &env);
    assert!(text(&jobs).contains(&id[..8]), "{}", text(&jobs));
    let json_jobs = gpuq_env(&["jobs", "--json"], "", &env);
    let parsed: serde_json::Value = serde_json::from_slice(&json_jobs.stdout).unwrap();
    assert_eq!(parsed["total"], 2);
    let gpus = gpuq_env(&["gpus"], "", &env);
    let table = text(&gpus);
    assert_eq!(
        table.matches("NVIDIA GeForce RTX 3090").count(),
        4,
        "{table}"
    );
    // The CLI reads the server's own wire types, so every table here is the server's answer read
    // by the same structs that wrote it.
    let nodes = gpuq_env(&["nodes"], "", &env);
    assert!(nodes.status.success(), "{}", text(&nodes));
    let listed = text(&nodes);
    assert!(
        listed.starts_with("NODE") && listed.contains("  up  "),
        "{listed}"
    );
    let cancel = gpuq_env(&["cancel", &id], "", &env);
    assert!(cancel.status.success(), "{}", text(&cancel));
    assert!(text(&cancel).contains("cancelled"), "{}", text(&cancel));
    let again = gpuq_env(&["cancel", &id], "", &env);
    assert!(!again.status.success());
    assert!(text(&again).contains("already ended"), "{}", text(&again));
}

#[test]
fn serve_refuses_a_short_cluster_secret_before_touching_anything() {
    // From the environment, as a systemd EnvironmentFile gives it; the value is never echoed.
    let out = gpuq_env(
        &["serve", "--database-url", "postgres://nowhere.invalid/gpuq"],
        "",
        &[("GPUQ_CLUSTER_SECRET", "hunter2-guessable")],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--cluster-secret (GPUQ_CLUSTER_SECRET) is 17 bytes long; give at least 32"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "the secret was echoed: {err}");
}

/// `gpuq wait`, `gpuq submit --wait [--follow]`, `gpuq events` and the array and dependency flags,
/// as a script uses them: the real binary against a real `gpuq serve` with its runner.
#[sqlx::test(migrations = false)]
async fn the_cli_waits_for_jobs_and_exits_with_their_codes(pool: PgPool) {
    let app = TestApp::with_sim_devices(pool, 4).await;
    let serve = Serve::runner(&app.pool, "cli-wait", &[]);
    let _server = serve.start("server.log").await;
    let server = serve.base();
    let config = serve.dir.path().join("config");
    let env = [
        ("GPUQ_URL", server.as_str()),
        ("GPUQ_CONFIG_DIR", config.to_str().unwrap()),
    ];
    let login = gpuq_env(&["login", "admin"], &format!("{PASSWORD}\n"), &env);
    assert!(login.status.success(), "{}", text(&login));
    let job = |extra: &[&str], script: &str| {
        let mut args = vec![
            "submit",
            "--image",
            "gpuq-test/busybox:latest",
            "--vram-mib",
            "1000",
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sh", "-c"]);
        args.push(script);
        args.iter().map(|s| s.to_string()).collect::<Vec<String>>()
    };
    let run = |args: &[String]| {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        gpuq_env(&a, "", &env)
    };
    let id_of = |out: &std::process::Output| {
        let t = text(out);
        t.split_whitespace().nth(1).unwrap().to_owned()
    };

    // submit --wait --follow: the log as it runs, then the job's own exit code.
    let out = run(&job(&["--wait", "--follow"], "echo from the job; exit 3"));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let shown = text(&out);
    assert!(shown.contains("from the job"), "{shown}");
    assert!(shown.contains("failed (exit 3"), "{shown}");

    let ok = run(&job(&[], "sleep 1"));
    assert!(ok.status.success(), "{}", text(&ok));
    let ok_id = id_of(&ok);
    // A job that never fits (it waits behind 4 exclusive fillers of every card).
    let filler = run(&job(&["--gpus", "4", "--exclusive"], "sleep 30"));
    assert!(filler.status.success(), "{}", text(&filler));
    let filler_id = id_of(&filler);
    let stuck = run(&job(&["--after-ok", &filler_id], "true"));
    assert!(stuck.status.success(), "{}", text(&stuck));
    let stuck_id = id_of(&stuck);

    let out = gpuq_env(&["wait", &ok_id[..8]], "", &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("succeeded (exit 0)"), "{}", text(&out));
    // --timeout: 124 while the job still waits; --any returns with the first end.
    let out = gpuq_env(&["wait", "--timeout", "1", &stuck_id], "", &env);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out));
    let out = gpuq_env(&["wait", "--any", &stuck_id, &ok_id], "", &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // A cancelled job: 130; its dependent, cancelled because its parent was: 130 as well.
    let cancel = gpuq_env(&["cancel", &filler_id], "", &env);
    assert!(cancel.status.success(), "{}", text(&cancel));
    let out = gpuq_env(&["wait", &filler_id, &stuck_id], "", &env);
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));
    assert!(
        text(&out).contains("its dependency can no longer hold"),
        "{}",
        text(&out)
    );

    // The trail.
    let out = gpuq_env(&["events", &ok_id], "", &env);
    assert!(out.status.success(), "{}", text(&out));
    let trail = text(&out);
    for kind in ["submitted", "admitted", "started", "succeeded"] {
        assert!(trail.contains(kind), "{kind}: {trail}");
    }

    // An array waited for as a whole: the failing element decides the code.
    let out = run(&job(
        &["--array", "0-2%1", "--wait"],
        "exit $((GPUQ_ARRAY_INDEX * 2))",
    ));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("submitted array"), "{}", text(&out));
    let out = run(&job(&["--array", "0-9999"], "true"));
    assert!(!out.status.success());
    assert!(text(&out).contains("field: array"), "{}", text(&out));
}
