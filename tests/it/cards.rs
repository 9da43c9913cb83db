//! Card states: an admin's online / draining / offline holds until an admin changes it; a card the
//! inventory stops seeing is `missing`, a different state, and gets its admin's state back when
//! it is seen again.

use crate::support::{rows, text, two_jobs_for_one_free_card, TestApp};
use serde_json::json;
use sqlx::PgPool;

const RTX: &str = "NVIDIA GeForce RTX 3090";

/// Each card's state, by index.
async fn states(app: &TestApp, bearer: &str) -> Vec<String> {
    let gpus = app.get("/api/v1/gpus", bearer).await.json();
    rows(&gpus["gpus"], |g| text(g, "state"))
}

async fn set_state(app: &TestApp, admin: &str, card: uuid::Uuid, state: &str) -> u16 {
    let id = gpuq::model::gpu_id(&card);
    app.patch(
        &format!("/api/v1/gpus/{id}"),
        admin,
        json!({ "state": state }),
    )
    .await
    .status
    .as_u16()
}

/// The cards a job holds, by index.
async fn cards_of(app: &TestApp, bearer: &str, job: uuid::Uuid) -> Vec<u64> {
    let v = app.job(bearer, job).await;
    rows(&v["assigned_gpus"], |g| g["index"].as_u64().unwrap())
}

#[sqlx::test(migrations = false)]
async fn an_admins_offline_and_drain_hold_across_inventory_refreshes(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let spec = format!("3x24576:{RTX}");
    let cards = app.sim_cards(&spec, "node-a").await;
    let (admin, member) = app.admin_and_member("alice").await;
    assert_eq!(set_state(&app, &admin, cards[0], "offline").await, 204);
    assert_eq!(set_state(&app, &admin, cards[1], "draining").await, 204);
    // Several refreshes, as the inventory does every few seconds: the admin's decision stands.
    for _ in 0..3 {
        app.sim_cards(&spec, "node-a").await;
        assert_eq!(
            states(&app, &member).await,
            ["offline", "draining", "online"]
        );
    }
    let (first, second) =
        two_jobs_for_one_free_card(&app, &member, &[0, 1], "offline or draining").await;
    assert_eq!(cards_of(&app, &member, first).await, [2]);
    // Only an admin lifts it.
    assert_eq!(set_state(&app, &member, cards[0], "online").await, 403);
    assert_eq!(set_state(&app, &admin, cards[0], "online").await, 204);
    app.sim_cards(&spec, "node-a").await;
    app.pass().await;
    assert_eq!(cards_of(&app, &member, second).await, [0]);
    // `missing` is the inventory's word, not an admin's.
    let r = app
        .patch(
            &format!("/api/v1/gpus/{}", gpuq::model::gpu_id(&cards[2])),
            &admin,
            json!({ "state": "missing" }),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["field"], "state");
}

#[sqlx::test(migrations = false)]
async fn a_card_the_inventory_stops_seeing_is_missing_and_returns_to_its_admins_state(
    pool: PgPool,
) {
    let app = TestApp::new(pool).await;
    let three = format!("3x24576:{RTX}");
    let cards = app.sim_cards(&three, "node-a").await;
    let (admin, member) = app.admin_and_member("alice").await;
    assert_eq!(set_state(&app, &admin, cards[1], "draining").await, 204);
    // The node now sees only its first card.
    app.sim_cards(&format!("1x24576:{RTX}"), "node-a").await;
    assert_eq!(
        states(&app, &member).await,
        ["online", "missing", "missing"]
    );
    let (first, second) = two_jobs_for_one_free_card(&app, &member, &[1, 2], "missing").await;
    assert_eq!(cards_of(&app, &member, first).await, [0]);
    // Seen again: the drained card is still drained, the other one takes work again.
    app.sim_cards(&three, "node-a").await;
    assert_eq!(
        states(&app, &member).await,
        ["online", "draining", "online"]
    );
    app.pass().await;
    assert_eq!(cards_of(&app, &member, second).await, [2]);
    assert!(crate::support::ledger_violations(&app.pool)
        .await
        .is_empty());
}
