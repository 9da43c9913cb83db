//! Framework memory hints end to end: a real container started by the runner on a simulated card
//! carries the JAX/XLA and TensorFlow keys computed from its commitment when the launch policy's
//! `framework_memory_hints` is on, and none of them when it is off.

use crate::support::isolation::log;
use crate::support::{wait_status, Node, TestApp};
use gpuq::model::Role;
use gpuq::server::runtime::{ensure_sim_devices, LaunchMode};
use serde_json::{json, Value};
use sqlx::PgPool;

const IMAGE: &str = "gpuq-test/busybox:latest";
const HINTS: [&str; 3] = [
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "TF_FORCE_GPU_ALLOW_GROWTH",
];

/// A job that prints its environment, on one card with `mib` MiB committed.
fn env_job(mib: i64) -> Value {
    json!({ "image": IMAGE, "command": ["env"], "min_vram_mb": mib })
}

/// The job's environment as its container printed it: `KEY=value` lines.
async fn run_env(app: &TestApp, bearer: &str, spec: Value) -> Vec<String> {
    let id = app.submit_ok(bearer, spec).await;
    let v = wait_status(app, bearer, id, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    log(app, bearer, id)
        .await
        .lines()
        .map(str::to_owned)
        .collect()
}

fn hint_lines(env: &[String]) -> Vec<&str> {
    env.iter()
        .map(String::as_str)
        .filter(|l| HINTS.iter().any(|k| l.starts_with(&format!("{k}="))))
        .collect()
}

#[sqlx::test(migrations = false)]
async fn containers_get_the_hints_with_the_policy_on_and_not_with_it_off(pool: PgPool) {
    let app = TestApp::new(pool).await;
    ensure_sim_devices(1).unwrap();
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", "hints")
        .await;
    let admin = app.bearer("root", Role::Admin).await;
    let member = app.bearer("alice", Role::Member).await;
    let node = Node::start(&app, "hints", LaunchMode::Fenced).await;

    // On by default: 8000 / 24576 = 0.3255… → 0.32 (rounded down, never above the commitment).
    let env = run_env(&app, &member, env_job(8000)).await;
    let mut hints = hint_lines(&env);
    hints.sort_unstable();
    assert_eq!(
        hints,
        [
            "TF_FORCE_GPU_ALLOW_GROWTH=true",
            "XLA_PYTHON_CLIENT_MEM_FRACTION=0.32",
            "XLA_PYTHON_CLIENT_PREALLOCATE=false",
        ],
        "{env:?}"
    );
    // (A job without cards gets none: `hints::framework_env`'s unit tests; CPU jobs run on the
    // pass's CPU node, not on this one.)

    // Off: none, for the very same job.
    app.set_policy(&admin, json!({ "framework_memory_hints": false }))
        .await;
    let env = run_env(&app, &member, env_job(8000)).await;
    assert!(hint_lines(&env).is_empty(), "{env:?}");
    assert!(
        env.iter().any(|l| l.starts_with("GPUQ_GPUS=GPU-")),
        "the job ran on its card: {env:?}"
    );
    node.stop().await;
}
