//! Who may call which server function: every server function the app registers × anonymous, the
//! owning member, another member, a manager and an admin. The table must name every registered
//! server function, so a new one without an entry fails this test. (REST routes have the same
//! table in `tests/auth.rs`.)

use crate::support::{true_job, Reply, TestApp};
use axum::body::Body;
use axum::http::{header, Request};
use gpuq::model::Role;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::{json, Value};
use sqlx::PgPool;
use std::collections::BTreeSet;

/// How a server function takes its arguments.
enum Args {
    Form(String),
    Json(Value),
}

async fn call(app: &TestApp, endpoint: &str, args: &Args, cookie: Option<&str>) -> Reply {
    let (kind, body) = match args {
        Args::Form(f) => ("application/x-www-form-urlencoded", f.clone()),
        Args::Json(v) => ("application/json", v.to_string()),
    };
    let mut req = Request::builder()
        .method("POST")
        .uri(format!("/api/{endpoint}"))
        .header(header::CONTENT_TYPE, kind)
        .header(header::ACCEPT, "application/json")
        .header(header::HOST, "127.0.0.1:3000")
        .header("sec-fetch-site", "same-origin");
    if let Some(c) = cookie {
        req = req.header(header::COOKIE, c);
    }
    app.send(req.body(Body::from(body)).expect("request")).await
}

/// `Some(kind)` when the reply is an `AppError`.
fn error_kind(reply: &Reply) -> Option<String> {
    serde_json::from_str::<Value>(&reply.text)
        .ok()
        .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_owned))
}

#[sqlx::test(migrations = false)]
async fn every_server_function_allows_exactly_the_roles_it_should(pool: PgPool) {
    let (app, cards) = TestApp::with_cards(pool, "2x24576:NVIDIA GeForce RTX 3090", "roles").await;
    let owner_bearer = app.bearer("alice", Role::Member).await;
    app.add_user("bob", Role::Member).await;
    app.add_user("mia", Role::Manager).await;
    let admin_bearer = app.bearer("root", Role::Admin).await;
    let job = app.submit_ok(&owner_bearer, true_job(1000)).await;
    let card = gpuq::model::gpu_id(&cards[0]);
    let bob_id = app
        .get("/api/v1/users", &admin_bearer)
        .await
        .json()
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["username"] == "bob")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let policy = app
        .get("/api/v1/settings/launch-policy", &admin_bearer)
        .await
        .json();
    let cookies = [
        None,
        Some(app.login("alice", crate::support::PASSWORD).await),
        Some(app.login("bob", crate::support::PASSWORD).await),
        Some(app.login("mia", crate::support::PASSWORD).await),
        Some(app.login("root", crate::support::PASSWORD).await),
    ];

    // Who is allowed: [anonymous, owner, other member, manager, admin].
    const ANYONE: [bool; 5] = [true; 5];
    const ALL: [bool; 5] = [false, true, true, true, true];
    const MANAGER: [bool; 5] = [false, false, false, true, true];
    const ADMIN: [bool; 5] = [false, false, false, false, true];
    const OWNER: [bool; 5] = [false, true, false, false, false];
    const OWNER_ADMIN: [bool; 5] = [false, true, false, false, true];
    const OWNER_MANAGER: [bool; 5] = [false, true, false, true, true];
    let spec = true_job(1000).to_string();
    let spec_form = format!("spec={}", utf8_percent_encode(&spec, NON_ALPHANUMERIC));
    let form = |s: &str| Args::Form(s.to_owned());
    let table: Vec<(&str, Args, [bool; 5])> = vec![
        (
            "login",
            form("username=nobody&password=wrong-password"),
            ANYONE,
        ),
        ("whoami", form(""), ANYONE),
        ("server_status", form(""), ALL),
        ("list_users", form(""), ADMIN),
        ("dashboard", form(""), ALL),
        ("preview_job", form(&spec_form), ALL),
        ("submit_job", form(&spec_form), ALL),
        ("job_detail", form(&format!("id={job}")), ALL),
        ("job_log", form(&format!("id={job}&tail=10")), OWNER_MANAGER),
        ("resubmit_job", form(&format!("id={job}")), OWNER),
        ("cancel_job", form(&format!("id={job}")), OWNER_ADMIN),
        ("get_manifest", form(""), ALL),
        ("list_jobs", form("status=&owner=&mine=false&page=1"), ALL),
        ("manifest_state", form(""), ALL),
        (
            "save_workload",
            Args::Json(json!({
                "name": "w", "description": "", "vram_mib": { "NVIDIA GeForce RTX 3090": 1000 }
            })),
            ADMIN,
        ),
        ("rename_workload", form("from=nope&to=nope2"), ADMIN),
        ("delete_workload", form("name=nope"), ADMIN),
        (
            "set_gpu_state",
            form(&format!("uuid={card}&state=online")),
            ADMIN,
        ),
        ("list_nodes", form(""), ADMIN),
        ("set_node_state", form("name=nope&state=drained"), ADMIN),
        ("forget_node", form("name=nope"), ADMIN),
        (
            "create_user",
            form("username=x&role=member&password=short"),
            ADMIN,
        ),
        (
            "update_user",
            form(&format!("id={bob_id}&disabled=false")),
            ADMIN,
        ),
        ("launch_policy", form(""), ALL),
        ("manifest_suggestions", form(""), ALL),
        (
            "apply_manifest_suggestion",
            form("workload=w&gpu_model=none"),
            ADMIN,
        ),
        (
            "save_launch_policy",
            Args::Json(json!({ "policy": policy })),
            ADMIN,
        ),
        (
            "change_password",
            form("current_password=wrong-password&new_password=long-enough-1"),
            ALL,
        ),
        ("my_tokens", form(""), ALL),
        ("create_token", form("name=from-test"), ALL),
        (
            "revoke_token",
            form(&format!("id={}", uuid::Uuid::new_v4())),
            ALL,
        ),
        ("usage_report", form("from=&to="), MANAGER),
        ("fair_share_report", form(""), ALL),
        ("my_notifications", form(""), ALL),
        (
            "save_notifications",
            Args::Json(json!({ "settings": { "on": ["failed"] } })),
            ALL,
        ),
        ("my_deliveries", form(""), ALL),
        ("my_budget", form(""), ALL),
        ("registries", form(""), ADMIN),
        (
            "set_registry",
            form("host=r.example&username=u&password=p"),
            ADMIN,
        ),
        ("remove_registry", form("host=r.example"), ADMIN),
        (
            "cancel_array",
            form(&format!("id={}", uuid::Uuid::new_v4())),
            ALL,
        ),
        (
            "resubmit_array",
            form(&format!("id={}", uuid::Uuid::new_v4())),
            ALL,
        ),
        ("list_teams", form(""), MANAGER),
        (
            "create_team",
            Args::Json(json!({ "team": { "name": "roles-team" } })),
            ADMIN,
        ),
        (
            "update_team",
            Args::Json(json!({ "name": "default", "patch": {} })),
            ADMIN,
        ),
        (
            "place_user",
            Args::Json(json!({ "id": bob_id, "share": {} })),
            ADMIN,
        ),
        // Last: it ends the session.
        ("logout", form(""), ANYONE),
    ];
    let names = ["anonymous", "owner", "other member", "manager", "admin"];
    for (endpoint, args, allowed) in &table {
        for (i, cookie) in cookies.iter().enumerate() {
            let reply = call(&app, endpoint, args, cookie.as_deref()).await;
            let kind = error_kind(&reply);
            let refused = matches!(kind.as_deref(), Some("unauthorized" | "forbidden"));
            assert_eq!(
                !refused, allowed[i],
                "{endpoint} as {}: {} {}",
                names[i], reply.status, reply.text
            );
            if refused {
                let expected = if cookie.is_none() {
                    "unauthorized"
                } else {
                    "forbidden"
                };
                assert_eq!(
                    kind.as_deref(),
                    Some(expected),
                    "{endpoint} as {}",
                    names[i]
                );
                assert!(
                    reply.status.is_client_error(),
                    "{endpoint}: {}",
                    reply.status
                );
            }
            // An allowed call either works or fails for a reason other than who is asking.
            if !refused && allowed[i] {
                assert_ne!(
                    kind.as_deref(),
                    Some("internal"),
                    "{endpoint}: {}",
                    reply.text
                );
                assert_ne!(
                    kind.as_deref(),
                    Some("transport"),
                    "{endpoint}: {}",
                    reply.text
                );
            }
        }
    }

    // Every registered server function has a row above.
    let covered: BTreeSet<String> = table.iter().map(|(e, ..)| format!("/api/{e}")).collect();
    let registered: BTreeSet<String> = leptos::server_fn::axum::server_fn_paths()
        .map(|(path, _)| path.to_owned())
        .collect();
    assert!(registered.len() >= 20, "{registered:?}");
    let missing: Vec<_> = registered.difference(&covered).collect();
    assert!(
        missing.is_empty(),
        "server functions without a row: {missing:?}"
    );
    let stale: Vec<_> = covered.difference(&registered).collect();
    assert!(stale.is_empty(), "rows for no server function: {stale:?}");
}

/// What each role reads of one member's job, through the job page's server function and the REST
/// API alike: [command and volumes, env, event trail] for [owner, other member, manager, admin].
/// The rules live in `gpuq::server::jobs::access`; this table is their test.
#[sqlx::test(migrations = false)]
async fn what_each_role_reads_of_a_members_job(pool: PgPool) {
    let app = TestApp::with_one_card(pool, "roles").await;
    let bearers = [
        app.bearer("alice", Role::Member).await,
        app.bearer("bob", Role::Member).await,
        app.bearer("mia", Role::Manager).await,
        app.bearer("root", Role::Admin).await,
    ];
    let job = app
        .submit_ok(
            &bearers[0],
            json!({ "image": "gpuq-test/busybox:latest", "command": ["echo", "cmd-marker"],
                    "env": { "KEY": "env-marker" }, "min_vram_mb": 1000 }),
        )
        .await;
    let expected = [
        ("owner", [true, true, true]),
        ("other member", [false, false, false]),
        ("manager", [true, false, true]),
        ("admin", [true, true, true]),
    ];
    let names = ["alice", "bob", "mia", "root"];
    for (i, (who, [command, env, trail])) in expected.into_iter().enumerate() {
        let rest = app.job(&bearers[i], job).await;
        assert_eq!(
            rest.to_string().contains("cmd-marker"),
            command,
            "{who}: {rest}"
        );
        assert_eq!(rest["env"]["KEY"] == "env-marker", env, "{who}: {rest}");
        assert_eq!(rest["details_hidden"], !command, "{who}");
        let cookie = app.login(names[i], crate::support::PASSWORD).await;
        let detail = call(
            &app,
            "job_detail",
            &Args::Form(format!("id={job}")),
            Some(&cookie),
        )
        .await;
        assert_eq!(detail.status, 200, "{who}: {}", detail.text);
        let detail = detail.json();
        assert_eq!(detail.to_string().contains("cmd-marker"), command, "{who}");
        assert_eq!(detail.to_string().contains("env-marker"), env, "{who}");
        let events = detail["events"].as_array().unwrap();
        assert_eq!(!events.is_empty(), trail, "{who}: {detail}");
    }
}
