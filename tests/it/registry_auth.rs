//! Registry credentials (issue 27, item 4) against a real private registry (`docker-registry`
//! with htpasswd auth) and real dockerd: a pull without credentials, and one with wrong ones, end
//! the job `failed` with a plain `unauthorized` reason naming the image, holding no card; with the
//! right ones stored through the REST API (or `gpuq registry login`) the job runs, its card held
//! only once the image was on the node. And the password is then nowhere to be read: not in any
//! answer, the live events, the server's log, `/metrics`, or any table but sealed in its row.

use crate::cli::gpuq_env;
use crate::support::registry::Registry;
use crate::support::{
    api_as_admin, post_job, wait_status, Node, Serve, TestApp, PASSWORD as USER_PASSWORD,
};
use gpuq::model::Role;
use gpuq::server::registries::{self, SecretsKey};
use gpuq::server::runtime::{ensure_sim_devices, LaunchMode};
use serde_json::{json, Value};
use sqlx::PgPool;
use std::time::{Duration, Instant};

/// The private registry's account.
const USER: &str = "ci-bot";
/// Its password: long and odd enough that finding it anywhere is no accident.
const RIGHT: &str = "Rg-5ecret-Zq81-never-shown";
/// A password the registry does not take.
const WRONG: &str = "not-the-registry-password";

fn job(image: &str) -> Value {
    json!({ "image": image, "command": ["sh", "-c", "echo from a private registry"],
            "min_vram_mb": 1000 })
}

fn repo() -> String {
    format!("gpuq-test/private-{}", uuid::Uuid::new_v4().simple())
}

fn route(host: &str) -> String {
    format!("/api/v1/registries/{host}")
}

async fn reservations_of(app: &TestApp, id: uuid::Uuid) -> i64 {
    app.scalar_of("SELECT count(*) FROM reservations WHERE job_id = $1", id)
        .await
}

/// The job failed, saying `unauthorized`, naming the image, and `how` credentials were sent.
fn assert_unauthorized(v: &Value, image: &str, how: &str) {
    assert_eq!(v["status"], "failed", "{v}");
    let reason = v["status_reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("unauthorized"), "{reason}");
    assert!(reason.contains(image), "{reason}");
    assert!(reason.contains(how), "{reason}");
    assert!(
        !reason.contains(RIGHT) && !reason.contains(WRONG),
        "{reason}"
    );
}

#[sqlx::test(migrations = false)]
async fn a_private_image_runs_only_with_the_right_stored_credentials(pool: PgPool) {
    let registry = Registry::start_with_auth(USER, RIGHT).await;
    let image = registry.push_test_image(&repo(), "t1");
    registry.forget_later(&image);
    let app = TestApp::new(pool).await;
    ensure_sim_devices(1).unwrap();
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", "ra1")
        .await;
    let (admin, member) = app.admin_and_member("alice").await;
    let node = Node::start(&app, "ra1", LaunchMode::Fenced).await;

    // No credentials stored: dockerd asks without any, and the registry says no.
    let none = app.submit_ok(&member, job(&image)).await;
    let v = wait_status(&app, &member, none, &["failed", "succeeded"], 60).await;
    assert_unauthorized(&v, &image, "no credentials are stored for registry");
    assert_eq!(reservations_of(&app, none).await, 0, "no card was held");

    // Wrong ones: sent, and refused the same way.
    let host = registry.host();
    let body = json!({ "username": USER, "password": WRONG });
    let r = app.put(&route(&host), &admin, body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["host"], host.as_str());
    assert_eq!(r.json()["username"], USER);
    assert!(r.json().get("password").is_none(), "{}", r.text);
    let wrong = app.submit_ok(&member, job(&image)).await;
    let v = wait_status(&app, &member, wrong, &["failed", "succeeded"], 60).await;
    assert_unauthorized(
        &v,
        &image,
        &format!("sent the stored credentials of registry {host}, user {USER}"),
    );
    assert_eq!(reservations_of(&app, wrong).await, 0, "no card was held");

    // The right ones replace them; the job runs, its card reserved only once the image was here.
    let body = json!({ "username": USER, "password": RIGHT });
    let r = app.put(&route(&host), &admin, body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let right = app.submit_ok(&member, job(&image)).await;
    let v = wait_status(&app, &member, right, &["failed", "succeeded"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    let present_at: chrono::DateTime<chrono::Utc> = app
        .scalar_of(
            "SELECT updated_at FROM node_images WHERE node = 'ra1' AND image_ref = $1 \
             AND state = 'present'",
            image.clone(),
        )
        .await;
    let admitted_at: chrono::DateTime<chrono::Utc> = app
        .scalar_of("SELECT admitted_at FROM jobs WHERE id = $1", right)
        .await;
    assert!(
        admitted_at >= present_at,
        "admitted {admitted_at} before the image was present at {present_at}"
    );
    assert!(
        v["image_digest"]
            .as_str()
            .is_some_and(|d| d.contains("@sha256:")),
        "{v}"
    );
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn bad_hosts_and_empty_credentials_are_refused_naming_the_field(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let admin = app.bearer("root", Role::Admin).await;
    let ok = json!({ "username": "u", "password": "p" });
    for bad in [
        "https:%2F%2Fr.io",
        "r.io:99999",
        "-r.io",
        "r%20io",
        "%5B::1",
    ] {
        let r = app.put(&route(bad), &admin, ok.clone()).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
        assert_eq!(r.json()["field"], "host", "{bad}: {}", r.text);
    }
    for (body, field) in [
        (json!({ "username": "", "password": "p" }), "username"),
        (json!({ "username": "  ", "password": "p" }), "username"),
        (json!({ "username": "u", "password": "" }), "password"),
    ] {
        let r = app.put(&route("r.io"), &admin, body).await;
        assert_eq!(r.status, 400, "{}", r.text);
        assert_eq!(r.json()["field"], field, "{}", r.text);
    }
    let r = app
        .put(
            &route("r.io"),
            &admin,
            json!({ "username": "u", "password": "p", "email": "x" }),
        )
        .await;
    assert_eq!(r.status, 400, "unknown fields are refused: {}", r.text);
    let r = app.delete(&route("nothing.example"), &admin).await;
    assert_eq!(r.status, 404, "{}", r.text);
    // Docker Hub under any of its names is `docker.io`; hosts are stored lower-case.
    let r = app.put(&route("index.docker.io"), &admin, ok.clone()).await;
    assert_eq!(r.json()["host"], "docker.io", "{}", r.text);
    let r = app
        .put(&route("Registry.Example.com:5000"), &admin, ok)
        .await;
    assert_eq!(r.json()["host"], "registry.example.com:5000", "{}", r.text);
    let list = app.get("/api/v1/registries", &admin).await.json();
    let hosts: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["docker.io", "registry.example.com:5000"]);
    let r = app
        .delete(&route("registry.example.com:5000"), &admin)
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    let audit: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT kind, subject, detail->>'summary' FROM audit_events \
         WHERE kind LIKE 'registry.%' ORDER BY id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        audit.last().unwrap(),
        &(
            "registry.remove".to_owned(),
            "registry.example.com:5000".to_owned(),
            "registry credentials for registry.example.com:5000 removed by root".to_owned()
        )
    );
    assert!(audit.contains(&(
        "registry.set".to_owned(),
        "docker.io".to_owned(),
        "registry credentials for docker.io set by root".to_owned()
    )));
}

fn said(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every row of every table of the public schema, as text.
async fn whole_database(pool: &PgPool) -> String {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT quote_ident(table_name) FROM information_schema.tables \
         WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(tables.len() > 10, "{tables:?}");
    let mut all = String::new();
    for t in tables {
        let text: Option<String> =
            sqlx::query_scalar(&format!("SELECT string_agg(t::text, E'\\n') FROM {t} t"))
                .fetch_one(pool)
                .await
                .unwrap();
        all.push_str(&text.unwrap_or_default());
    }
    all
}

/// The whole path through a served node: `gpuq registry login` (the password on stdin), a job
/// that pulls with the stored credentials and runs, `gpuq registry list`; then the password is
/// searched for in every answer, the live events, the server's log, `/metrics` and every table,
/// and found only sealed, under a key file of mode 0600 in the data folder.
#[sqlx::test(migrations = false)]
async fn the_password_is_used_for_the_pull_and_is_nowhere_to_be_read(pool: PgPool) {
    let registry = Registry::start_with_auth(USER, RIGHT).await;
    let image = registry.push_test_image(&repo(), "served");
    registry.forget_later(&image);
    let host = registry.host();
    let app = TestApp::with_sim_devices(pool, 1).await;
    let mut listener = sqlx::postgres::PgListener::connect_with(&app.pool)
        .await
        .unwrap();
    listener
        .listen(gpuq::server::db::events::EVENTS_CHANNEL)
        .await
        .unwrap();
    let serve = Serve::runner(
        &app.pool,
        "served-ra",
        &[
            "--gpu-source",
            "sim",
            "--sim-gpus",
            "1x24576:NVIDIA GeForce RTX 3090",
        ],
    );
    let _server = serve.start("serve.log").await;
    let (client, admin) = api_as_admin(serve.port).await;
    let base = serve.base();
    let config = serve.dir.path().join("cli-config");
    let env = [
        ("GPUQ_URL", base.as_str()),
        ("GPUQ_CONFIG_DIR", config.to_str().unwrap()),
    ];
    let login = gpuq_env(&["login", "admin"], &format!("{USER_PASSWORD}\n"), &env);
    assert!(login.status.success(), "{}", said(&login));
    let stored = gpuq_env(
        &["registry", "login", &host, "--username", USER],
        &format!("{RIGHT}\n"),
        &env,
    );
    assert!(stored.status.success(), "{}", said(&stored));
    assert!(said(&stored).contains(&host), "{}", said(&stored));

    let id = post_job(&client, serve.port, &admin, &job(&image)).await;
    let job_url = format!("{base}/api/v1/jobs/{id}");
    let deadline = Instant::now() + Duration::from_secs(90);
    let view = loop {
        let r = client
            .get(&job_url)
            .header("authorization", &admin)
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        if v["status"] == "succeeded" || v["status"] == "failed" {
            break v;
        }
        assert!(Instant::now() < deadline, "never ended: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(view["status"], "succeeded", "{view}");

    let list = gpuq_env(&["registry", "list"], "", &env);
    assert!(list.status.success(), "{}", said(&list));
    assert!(said(&list).contains(&host) && said(&list).contains(USER));

    // Everything a person or a program can read.
    let mut seen = vec![said(&stored), said(&list)];
    for path in [
        "/api/v1/registries",
        "/api/v1/jobs",
        &format!("/api/v1/jobs/{id}"),
        &format!("/api/v1/jobs/{id}/logs"),
        "/api/v1/settings/launch-policy",
        "/metrics",
    ] {
        let r = client
            .get(format!("{base}{path}"))
            .header("authorization", &admin)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
        seen.push(r.text().await.unwrap());
    }
    assert!(
        seen.last().is_some_and(|m| m.contains("gpuq_")),
        "metrics read"
    );
    // The live events every process told the others (what SSE streams carry), as they came.
    let mut events = Vec::new();
    while let Ok(Ok(note)) = tokio::time::timeout(Duration::from_millis(300), listener.recv()).await
    {
        events.push(note.payload().to_owned());
    }
    assert!(
        events.iter().any(|e| e.contains("registry.set")),
        "the change was announced: {events:?}"
    );
    seen.extend(events);
    let log = std::fs::read_to_string(serve.dir.path().join("serve.log")).unwrap();
    assert!(
        log.contains(&format!("registry credentials for {host} set by admin")),
        "the change is in the log: {log}"
    );
    seen.push(log);
    seen.push(std::fs::read_to_string(serve.dir.path().join("serve.out")).unwrap_or_default());
    let database = whole_database(&app.pool).await;
    assert!(database.contains(&host) && database.contains(USER));
    seen.push(database);
    for text in &seen {
        assert!(!text.contains(RIGHT), "the password was readable: {text}");
    }

    // Stored only sealed, under a key file of the data folder that only its owner reads.
    let sealed: Vec<u8> = sqlx::query_scalar("SELECT sealed FROM registry_credentials")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert!(!sealed.windows(RIGHT.len()).any(|w| w == RIGHT.as_bytes()));
    let key_file = serve.dir.path().join("secrets.key");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let opened = registries::for_image(
        &app.pool,
        &SecretsKey::in_data_dir(serve.dir.path()),
        &image,
    )
    .await
    .unwrap()
    .expect("credentials for the image's registry");
    assert_eq!(opened.password.expose(), RIGHT);
    drop(listener);
}
