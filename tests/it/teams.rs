//! Teams and shares: admins create teams, set weights and budgets and move users; managers read
//! them; members and managers change nothing (attacks included). Real router, real Postgres.

use crate::support::{TestApp, PASSWORD};
use axum::body::Body;
use axum::http::{header, Request};
use serde_json::{json, Value};
use sqlx::PgPool;

fn team<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no team {name} in {list}"))
}

#[sqlx::test(migrations = false)]
async fn admins_create_teams_set_weights_and_budgets_and_move_users(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let (member, manager, admin) = app.member_manager_admin("bob").await;
    let bob = app.get("/api/v1/me", &member).await.json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let budget = json!({ "gpu_hours": 50.0, "period": "week", "kind": "hard" });
    let r = app
        .post_json(
            "/api/v1/teams",
            &admin,
            json!({ "name": "ml", "weight": 2.0, "budget": budget }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["weight"], 2.0);
    assert_eq!(r.json()["budget"], budget);
    let again = app
        .post_json("/api/v1/teams", &admin, json!({ "name": "ml" }))
        .await;
    assert_eq!(again.status, 409, "{}", again.text);
    let plain = app
        .post_json("/api/v1/teams", &admin, json!({ "name": "infra" }))
        .await;
    assert_eq!(plain.json()["weight"], 1.0, "{}", plain.text);
    assert_eq!(plain.json()["budget"], Value::Null);

    // A user moves with a weight and a budget; the list, the user list and /me say so.
    let r = app
        .update_user(
            &admin,
            &bob,
            json!({ "team": "ml", "weight": 0.5, "budget": budget }),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    let me = app.get("/api/v1/me", &member).await.json();
    assert_eq!(
        (me["team"].as_str(), me["weight"].as_f64()),
        (Some("ml"), Some(0.5))
    );
    assert_eq!(me["budget"], budget);
    let teams = app.get("/api/v1/teams", &manager).await;
    assert_eq!(teams.status, 200, "{}", teams.text);
    let teams = teams.json();
    assert_eq!(team(&teams, "ml")["members"], json!(["bob"]));
    assert_eq!(team(&teams, "ml")["member_count"], 1);
    assert_eq!(team(&teams, "default")["members"], json!(["mia", "root"]));
    let users = app.get("/api/v1/users", &admin).await.json();
    let listed = users
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["username"] == "bob")
        .unwrap();
    assert_eq!(listed["team"], "ml");

    // A patch changes what it names; `null` removes a budget; an unknown team is a 404.
    let r = app
        .patch("/api/v1/teams/ml", &admin, json!({ "weight": 3.0 }))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        (r.json()["weight"].as_f64(), &r.json()["budget"]),
        (Some(3.0), &budget)
    );
    let r = app
        .patch("/api/v1/teams/ml", &admin, json!({ "budget": null }))
        .await;
    assert_eq!(
        (r.json()["weight"].as_f64(), &r.json()["budget"]),
        (Some(3.0), &Value::Null)
    );
    let r = app
        .patch("/api/v1/teams/nope", &admin, json!({ "weight": 3.0 }))
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
    let r = app
        .update_user(&admin, &bob, json!({ "budget": null }))
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(
        app.get("/api/v1/me", &member).await.json()["budget"],
        Value::Null
    );

    // Moving a user to a team that does not exist is refused naming `team`, and the weight sent
    // with it is not applied either.
    let r = app
        .update_user(&admin, &bob, json!({ "team": "ghosts", "weight": 9.0 }))
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["field"], "team");
    let me = app.get("/api/v1/me", &member).await.json();
    assert_eq!(
        (me["team"].as_str(), me["weight"].as_f64()),
        (Some("ml"), Some(0.5))
    );

    // Every change is in the audit trail (a refused one is not).
    let kinds: Vec<String> = sqlx::query_scalar(
        "SELECT kind || ':' || subject FROM audit_events \
         WHERE kind IN ('team.create', 'team.update') \
            OR (kind = 'user.update' AND detail ?| array['team', 'weight', 'budget']) \
         ORDER BY id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        kinds,
        [
            "team.create:ml",
            "team.create:infra",
            "user.update:bob",
            "team.update:ml",
            "team.update:ml",
            "user.update:bob",
        ],
    );
}

#[sqlx::test(migrations = false)]
async fn bad_team_input_is_refused_naming_the_field(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let (member, _, admin) = app.member_manager_admin("bob").await;
    let bob = app.get("/api/v1/me", &member).await.json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let cases = [
        (json!({ "name": "x'; DROP TABLE teams; --" }), "name"),
        (json!({ "name": "<script>alert(1)</script>" }), "name"),
        (json!({ "name": "Team" }), "name"),
        (json!({ "name": "ok", "weight": -1 }), "weight"),
        (json!({ "name": "ok", "weight": 0 }), "weight"),
        (json!({ "name": "ok", "weight": 1e300 }), "weight"),
        (json!({ "name": "ok", "weight": "NaN" }), "weight"),
        (
            json!({ "name": "ok", "budget": { "gpu_hours": 5, "period": "day", "kind": "soft" } }),
            "budget.period",
        ),
        (
            json!({ "name": "ok", "budget": { "gpu_hours": 5, "period": "week", "kind": "firm" } }),
            "budget.kind",
        ),
        (
            json!({ "name": "ok", "budget": { "gpu_hours": -5, "period": "week", "kind": "soft" } }),
            "budget.gpu_hours",
        ),
        (json!({ "name": "ok", "colour": "red" }), "colour"),
    ];
    for (body, field) in cases {
        let r = app.post_json("/api/v1/teams", &admin, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert_eq!(r.json()["field"], field, "{body}: {}", r.text);
    }
    for (body, field) in [
        (json!({ "weight": -3 }), "weight"),
        (json!({ "weight": "NaN" }), "weight"),
        (json!({ "members": ["bob"] }), "members"),
    ] {
        let r = app
            .patch("/api/v1/teams/default", &admin, body.clone())
            .await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert_eq!(r.json()["field"], field, "{body}: {}", r.text);
    }
    for (body, field) in [
        (json!({ "weight": 0 }), "weight"),
        (json!({ "weight": 2e6 }), "weight"),
        (json!({ "team": "Bad Team" }), "team"),
        (
            json!({ "budget": { "gpu_hours": 1, "period": "year", "kind": "soft" } }),
            "budget.period",
        ),
    ] {
        let r = app.update_user(&admin, &bob, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert_eq!(r.json()["field"], field, "{body}: {}", r.text);
    }
    let teams: i64 = app.scalar("SELECT count(*) FROM teams").await;
    assert_eq!(teams, 1, "only `default`");
    let weight: f64 = app
        .scalar("SELECT weight FROM teams WHERE name = 'default'")
        .await;
    assert_eq!(weight, 1.0);
}

/// A member or a manager cannot create or change teams, nor move anyone (themselves included)
/// or set a weight or budget, through the REST API or the server functions; the role is refused
/// before the body is read.
#[sqlx::test(migrations = false)]
async fn members_and_managers_cannot_change_teams_or_their_own_share(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let (member, manager, admin) = app.member_manager_admin("bob").await;
    let r = app
        .post_json(
            "/api/v1/teams",
            &admin,
            json!({ "name": "elite", "weight": 1.0 }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let id_of = |bearer: String| {
        let app = &app;
        async move {
            app.get("/api/v1/me", &bearer).await.json()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let bob = id_of(member.clone()).await;
    let mia = id_of(manager.clone()).await;
    assert_eq!(app.get("/api/v1/teams", &member).await.status, 403);
    for (caller, own) in [(&member, &bob), (&manager, &mia)] {
        let attempts = [
            (
                "POST",
                "/api/v1/teams".to_owned(),
                json!({ "name": "mine", "weight": 1000 }),
            ),
            (
                "PATCH",
                "/api/v1/teams/elite".to_owned(),
                json!({ "weight": 1000000 }),
            ),
            (
                "PATCH",
                "/api/v1/teams/default".to_owned(),
                json!({ "budget": null }),
            ),
            (
                "PATCH",
                format!("/api/v1/users/{own}"),
                json!({ "team": "elite" }),
            ),
            (
                "PATCH",
                format!("/api/v1/users/{own}"),
                json!({ "weight": 1000000 }),
            ),
            (
                "PATCH",
                format!("/api/v1/users/{own}"),
                json!({ "budget": null }),
            ),
            (
                "PATCH",
                format!("/api/v1/users/{bob}"),
                json!({ "team": "elite" }),
            ),
            // Malformed: still 403, not a 400 that would teach the body's rules.
            ("POST", "/api/v1/teams".to_owned(), json!({ "bogus": true })),
        ];
        for (method, path, body) in attempts {
            let r = app
                .api(method, &path, Some(caller), Some(body.clone()))
                .await;
            assert_eq!(r.status, 403, "{method} {path} {body}: {}", r.text);
        }
    }
    // The pages' server functions refuse them too.
    for name in ["bob", "mia"] {
        let cookie = app.login(name, PASSWORD).await;
        let own = if name == "bob" { &bob } else { &mia };
        for (endpoint, body) in [
            (
                "create_team",
                json!({ "team": { "name": "mine", "weight": 5 } }),
            ),
            (
                "update_team",
                json!({ "name": "elite", "patch": { "weight": 5 } }),
            ),
            (
                "place_user",
                json!({ "id": own, "share": { "team": "elite", "weight": 5 } }),
            ),
        ] {
            let req = Request::builder()
                .method("POST")
                .uri(format!("/api/{endpoint}"))
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ACCEPT, "application/json")
                .header(header::HOST, "127.0.0.1:3000")
                .header("sec-fetch-site", "same-origin")
                .header(header::COOKIE, &cookie)
                .body(Body::from(body.to_string()))
                .unwrap();
            let r = app.send(req).await;
            let kind = serde_json::from_str::<Value>(&r.text)
                .ok()
                .map(|v| v["kind"].clone());
            assert_eq!(
                kind,
                Some(json!("forbidden")),
                "{endpoint} as {name}: {} {}",
                r.status,
                r.text
            );
        }
    }
    let teams: Vec<(String, f64)> = sqlx::query_as("SELECT name, weight FROM teams ORDER BY name")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(
        teams,
        [("default".to_owned(), 1.0), ("elite".to_owned(), 1.0)]
    );
    let shares: Vec<(String, String, f64)> =
        sqlx::query_as("SELECT username, team, weight FROM users ORDER BY username")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    for (user, team, weight) in shares {
        assert_eq!((team.as_str(), weight), ("default", 1.0), "{user}");
    }
}
