//! Registry credentials as a prize: a member (or a manager) setting, reading or removing them
//! through the REST API or the admin page's server functions; reading a password back from the
//! admin page; a stored row copied to another registry so its credentials go where they were not
//! meant to; a key file others may read; a bad key given to `gpuq serve`.

use crate::support::{wait_status, Node, TestApp};
use axum::body::Body;
use axum::http::{header, Request};
use gpuq::model::Role;
use gpuq::server::http::HttpOptions;
use gpuq::server::registries::{self, KeyError, OpenError, SecretsKey};
use gpuq::server::runtime::{ensure_sim_devices, LaunchMode};
use serde_json::json;
use sqlx::PgPool;
use std::os::unix::fs::PermissionsExt;

const SECRET: &str = "Zx-registry-pw-41-do-not-leak";

#[sqlx::test(migrations = false)]
async fn members_and_managers_cannot_set_read_or_remove_registry_credentials(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let (member, manager, admin) = app.member_manager_admin("mallory").await;
    let body = json!({ "username": "bot", "password": SECRET });
    let r = app.put("/api/v1/registries/r.example", &admin, body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    for who in [&member, &manager] {
        // Refused before the body is read: a body that is not even JSON gets the same 403.
        let req = Request::builder()
            .method("PUT")
            .uri("/api/v1/registries/r.example")
            .header(header::AUTHORIZATION, who.as_str())
            .header(header::CONTENT_TYPE, "text/plain")
            .body(Body::from("not json at all"))
            .unwrap();
        let r = app.send(req).await;
        assert_eq!(r.status, 403, "{}", r.text);
        let r = app
            .put(
                "/api/v1/registries/r.example",
                who,
                json!({ "username": "mallory", "password": "mine" }),
            )
            .await;
        assert_eq!(r.status, 403, "{}", r.text);
        let r = app.get("/api/v1/registries", who).await;
        assert_eq!(r.status, 403, "{}", r.text);
        assert!(!r.text.contains("bot"), "{}", r.text);
        let r = app.delete("/api/v1/registries/r.example", who).await;
        assert_eq!(r.status, 403, "{}", r.text);
    }
    let r = app.api("GET", "/api/v1/registries", None, None).await;
    assert_eq!(r.status, 401, "{}", r.text);
    // The admin page's server functions refuse a member's session the same way.
    app.add_user("eve", Role::Member).await;
    let cookie = app.login("eve", crate::support::PASSWORD).await;
    for (endpoint, form) in [
        ("registries", ""),
        ("set_registry", "host=r.example&username=eve&password=mine"),
        ("remove_registry", "host=r.example"),
    ] {
        let r = app.signed_in_call(&cookie, endpoint, form).await;
        assert_eq!(r.status, 403, "{endpoint}: {}", r.text);
        assert!(!r.text.contains("bot"), "{endpoint}: {}", r.text);
    }
    // Nothing changed: still the admin's account, still opening to the admin's password.
    let list = app.get("/api/v1/registries", &admin).await.json();
    assert_eq!(list[0]["username"], "bot", "{list}");
    let auth = registries::for_image(&app.pool, &app.secrets, "r.example/team/x:1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(auth.password.expose(), SECRET);
}

#[sqlx::test(migrations = false)]
async fn the_admin_page_shows_registries_but_never_a_password(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.add_user("ada", Role::Admin).await;
    let cookie = app.login("ada", crate::support::PASSWORD).await;
    let r = app
        .signed_in_call(
            &cookie,
            "set_registry",
            &format!("host=ghcr.io&username=team-bot&password={SECRET}"),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains(SECRET), "{}", r.text);
    let r = app.signed_in_call(&cookie, "registries", "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.text.contains("team-bot") && !r.text.contains(SECRET),
        "{}",
        r.text
    );
    let page = app.page("/admin", Some(&cookie)).await;
    assert_eq!(page.status, 200);
    assert!(page.text.contains("Registry credentials"), "{}", page.text);
    assert!(!page.text.contains(SECRET), "the page showed the password");
    let r = app
        .signed_in_call(&cookie, "remove_registry", "host=ghcr.io")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let left: i64 = app
        .scalar("SELECT count(*) FROM registry_credentials")
        .await;
    assert_eq!(left, 0);
}

/// The attack: someone who can write the database (not read the key) copies a registry's row to
/// a host they control, hoping the nodes hand its password there. The seal is bound to its host
/// and username: it does not open, and the pull fails saying so, sending nothing.
#[sqlx::test(migrations = false)]
async fn a_row_copied_to_another_registry_does_not_open(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let admin = app.bearer("root", Role::Admin).await;
    let body = json!({ "username": "bot", "password": SECRET });
    let r = app
        .put("/api/v1/registries/trusted.example", &admin, body)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let evil = "127.0.0.1:9";
    sqlx::query("UPDATE registry_credentials SET host = $1")
        .bind(evil)
        .execute(&app.pool)
        .await
        .unwrap();
    let image = format!("{evil}/team/x:1");
    let refused = registries::for_image(&app.pool, &app.secrets, &image)
        .await
        .unwrap_err();
    assert_eq!(refused, OpenError::Sealed(evil.to_owned()));
    assert!(refused.to_string().contains(evil), "{refused}");
    // Nor with the username changed back on the right host.
    sqlx::query("UPDATE registry_credentials SET host = 'trusted.example', username = 'admin'")
        .execute(&app.pool)
        .await
        .unwrap();
    assert!(matches!(
        registries::for_image(&app.pool, &app.secrets, "trusted.example/x").await,
        Err(OpenError::Sealed(_))
    ));
    // Through a node: the job naming the image fails with the reason, holding no card.
    ensure_sim_devices(1).unwrap();
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", "moved")
        .await;
    sqlx::query("UPDATE registry_credentials SET host = $1, username = 'bot'")
        .bind(evil)
        .execute(&app.pool)
        .await
        .unwrap();
    let node = Node::start(&app, "moved", LaunchMode::Fenced).await;
    let spec = json!({ "image": image, "command": ["true"], "min_vram_mb": 1000 });
    let id = app.submit_ok(&admin, spec).await;
    let v = wait_status(&app, &admin, id, &["failed", "succeeded"], 60).await;
    assert_eq!(v["status"], "failed", "{v}");
    let reason = v["status_reason"].as_str().unwrap();
    assert!(
        reason.contains(&image) && reason.contains("do not open") && reason.contains(evil),
        "{reason}"
    );
    assert!(!reason.contains(SECRET), "{reason}");
    node.stop().await;
}

/// A key file its group or others may read is refused, for storing and for pulling alike, with
/// an error that says what to do; nothing is stored meanwhile.
#[sqlx::test(migrations = false)]
async fn a_key_file_others_may_read_is_refused(pool: PgPool) {
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("secrets.key");
    std::fs::write(&key_path, format!("{}\n", "A".repeat(43) + "=")).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let secrets = SecretsKey::File(key_path.clone());
    let app = TestApp::custom(pool, HttpOptions::default(), |ctx| {
        ctx.secrets = secrets.clone();
    })
    .await;
    let admin = app.bearer("root", Role::Admin).await;
    let body = json!({ "username": "bot", "password": SECRET });
    let r = app
        .put("/api/v1/registries/r.example", &admin, body.clone())
        .await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(
        r.text.contains("chmod 600") && r.text.contains(&key_path.display().to_string()),
        "{}",
        r.text
    );
    let stored: i64 = app
        .scalar("SELECT count(*) FROM registry_credentials")
        .await;
    assert_eq!(stored, 0);
    // Made private, it is used; made readable again, the puller refuses it too.
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = app.put("/api/v1/registries/r.example", &admin, body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let refused = registries::for_image(&app.pool, &secrets, "r.example/x:1")
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, OpenError::Key { host, error: KeyError::Exposed { mode: 0o640, .. } } if host == "r.example"),
        "{refused:?}"
    );
    // Another key (a node given the wrong GPUQ_SECRETS_KEY) opens nothing, and says which
    // registry.
    let other = SecretsKey::from_base64(&format!("{}A=", "B".repeat(42))).unwrap();
    let refused = registries::for_image(&app.pool, &other, "r.example/x:1")
        .await
        .unwrap_err();
    assert_eq!(refused, OpenError::Sealed("r.example".into()));
}

/// `gpuq serve` given a `GPUQ_SECRETS_KEY` that is not a key stops before touching anything,
/// naming the variable (and never printing its value).
#[test]
fn serve_refuses_a_bad_secrets_key_before_starting() {
    let bad = "short-and-not-a-key";
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuq"))
        .args([
            "serve",
            "--database-url",
            "postgres://nobody@127.0.0.1:1/none",
            "--listen",
            "127.0.0.1:0",
        ])
        .env("GPUQ_SECRETS_KEY", bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("GPUQ_SECRETS_KEY"), "{err}");
    assert!(err.contains("base64 of 32 bytes"), "{err}");
    assert!(!err.contains(bad), "{err}");
}
