//! Job specs that many tests submit, and the scenario several make of them.

use super::TestApp;
use serde_json::{json, Value};
use uuid::Uuid;

/// A GPU job of the test image that runs `true` and needs `min_vram_mb` MiB on one card.
pub fn true_job(min_vram_mb: u32) -> Value {
    json!({ "image": "gpuq-test/busybox:latest", "command": ["true"], "min_vram_mb": min_vram_mb })
}

/// A GPU job of the test image named `name` that sleeps a second and needs 20000 MiB on one card:
/// more than half of a 24 GiB card, so two never share one.
pub fn one_card_job(name: &str) -> Value {
    json!({ "image": "gpuq-test/busybox:latest", "command": ["sleep", "1"], "name": name,
            "min_vram_mb": 20000 })
}

/// With the cards at `withdrawn` (indices in `GET /api/v1/gpus`) taking no work and one other
/// card free: each withdrawn card offers nothing (`state` says how it is withdrawn), and of two
/// one-card jobs `first` and `second` that `member` submits, one admission pass leaves the second
/// queued. Returns both ids; the caller checks where the first went.
pub async fn two_jobs_for_one_free_card(
    app: &TestApp,
    member: &str,
    withdrawn: &[usize],
    state: &str,
) -> (Uuid, Uuid) {
    let gpus = app.get("/api/v1/gpus", member).await.json();
    for &i in withdrawn {
        assert_eq!(
            gpus["gpus"][i]["free_mib"], 0,
            "card {i} is {state}: it offers nothing"
        );
    }
    let first = app.submit_ok(member, one_card_job("first")).await;
    let second = app.submit_ok(member, one_card_job("second")).await;
    app.pass().await;
    assert_eq!(
        app.job(member, second).await["status"],
        "queued",
        "the only free card took the first job: the second waits"
    );
    (first, second)
}
