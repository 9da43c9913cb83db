//! The learning manifest: succeeded jobs' observed peaks per workload type × GPU model (and per
//! image for raw-declared jobs), one figure per user, the suggested need, and applying it as an
//! audited manifest edit.
//! Jobs are submitted through the API, then finished and given `job_vram` records in SQL (what
//! the runner and the sampler would have written).

use crate::support::{Reply, TestApp, PASSWORD};
use gpuq::model::Role;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

const IMAGE: &str = "gpuq-test/busybox:latest";
const RTX: &str = "NVIDIA GeForce RTX 3090";
const A100: &str = "NVIDIA A100 80GB";

struct Learn {
    app: TestApp,
    admin: String,
    member: String,
    rtx: Uuid,
    a100: Uuid,
}

async fn setup(pool: PgPool) -> Learn {
    let app = TestApp::new(pool).await;
    let cards = app
        .sim_cards(&format!("1x24576:{RTX},1x81920:{A100}"), "learn")
        .await;
    let (admin, member) = app.admin_and_member("alice").await;
    app.workload(&admin, "llm", json!({ RTX: 8000, A100: 9000 }))
        .await;
    Learn {
        app,
        admin,
        member,
        rtx: cards[0],
        a100: cards[1],
    }
}

impl Learn {
    /// A job submitted by `by` with `spec`, then recorded as ended with `status` and one
    /// `job_vram` record on `card`: the sampler's `peak` and NVML accounting's `accounting` peak.
    async fn observed(
        &self,
        by: &str,
        spec: Value,
        status: &str,
        card: Uuid,
        peak: i64,
        accounting: Option<i64>,
    ) -> Uuid {
        let id = self.app.submit_ok(by, spec).await;
        let finished = status != "running";
        sqlx::query(
            "UPDATE jobs SET status = $2, \
             finished_at = CASE WHEN $3 THEN now() END WHERE id = $1",
        )
        .bind(id)
        .bind(status)
        .bind(finished)
        .execute(&self.app.pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO job_vram (job_id, gpu_uuid, committed_mib, used_mib, peak_mib, \
             accounting_peak_mib, sampled_at) VALUES ($1, $2, 8000, 0, $3, $4, now())",
        )
        .bind(id)
        .bind(card)
        .bind(peak)
        .bind(accounting)
        .execute(&self.app.pool)
        .await
        .unwrap();
        id
    }

    /// `POST /api/v1/manifest/suggestions/apply` as `bearer`: `workload`'s need on `model`
    /// becomes the suggestion.
    async fn apply(&self, bearer: &str, workload: &str, model: &str) -> Reply {
        let body = json!({ "workload": workload, "gpu_model": model });
        self.app
            .post_json("/api/v1/manifest/suggestions/apply", bearer, body)
            .await
    }

    async fn suggestions(&self, bearer: &str) -> Value {
        let r = self.app.get("/api/v1/manifest/suggestions", bearer).await;
        assert_eq!(r.status, 200, "{}", r.text);
        r.json()
    }
}

fn llm() -> Value {
    json!({ "image": IMAGE, "command": ["true"], "workload": "llm" })
}

fn raw(mib: i64) -> Value {
    json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": mib })
}

/// Members `name0`, `name1`, … (`count` of them).
async fn members(l: &Learn, name: &str, count: usize) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..count {
        out.push(l.app.bearer(&format!("{name}{i}"), Role::Member).await);
    }
    out
}

/// 20 succeeded llm jobs on the RTX, one each of 20 members, peaking at 1000, 2000, … 20000 MiB,
/// the last one's NVML accounting peak (30000) above the sampler's.
async fn twenty_llm_runs(l: &Learn) -> Vec<String> {
    let users = members(l, "u", 20).await;
    for (i, by) in (1..=20i64).zip(&users) {
        let accounting = (i == 20).then_some(30000);
        l.observed(by, llm(), "succeeded", l.rtx, i * 1000, accounting)
            .await;
    }
    users
}

fn pair<'a>(s: &'a Value, workload: &str, model: &str) -> &'a Value {
    s["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["workload"] == workload && w["gpu_model"] == model)
        .unwrap_or_else(|| panic!("no {workload} × {model} in {s}"))
}

#[sqlx::test(migrations = false)]
async fn figures_and_the_rounded_suggestion_per_workload_and_model(pool: PgPool) {
    let l = setup(pool).await;
    let users = twenty_llm_runs(&l).await;
    // Not finished: a running job's peak so far does not count; nor do jobs that did not succeed
    // (cancelled early, failed, timed out: they say little of what the work needs).
    l.observed(&users[0], llm(), "running", l.rtx, 60000, None)
        .await;
    for status in ["failed", "timed_out", "cancelled"] {
        l.observed(&users[1], llm(), status, l.rtx, 50000, None)
            .await;
        l.observed(&users[2], llm(), status, l.rtx, 10, None).await;
    }
    // One member runs 30 tiny jobs of the type: they count as jobs, but as one figure (her
    // highest), so she cannot drag the percentiles down.
    for _ in 0..30 {
        l.observed(&l.member, llm(), "succeeded", l.rtx, 100, None)
            .await;
    }
    // Two finished runs on the A100: too few for a suggestion.
    l.observed(&l.admin, llm(), "succeeded", l.a100, 9000, None)
        .await;
    l.observed(&l.admin, llm(), "succeeded", l.a100, 12000, Some(11000))
        .await;

    // Members read it like the manifest.
    let s = l.suggestions(&l.member).await;
    assert_eq!(s["margin_percent"], 10);
    assert_eq!(s["round_mib"], 256);
    assert_eq!(s["min_samples"], 3);
    assert_eq!(s["workloads"].as_array().unwrap().len(), 2, "{s}");
    let rtx = pair(&s, "llm", RTX);
    assert_eq!(rtx["declared_mib"], 8000);
    assert_eq!(
        rtx["stats"],
        json!({ "n": 50, "p50_mib": 10000, "p95_mib": 19000, "max_mib": 30000 }),
        "n counts the 50 succeeded jobs; p50 and p95 are observed peaks (percentile_disc) over \
         one figure per user; max takes NVML accounting's peak"
    );
    // 19000 × 1.10 = 20900 → rounded up to 82 × 256 = 20992.
    assert_eq!(rtx["suggested_mib"], 20992);
    assert_eq!(rtx["note"], Value::Null);

    let a100 = pair(&s, "llm", A100);
    assert_eq!(a100["declared_mib"], 9000);
    assert_eq!(a100["stats"]["n"], 2);
    assert_eq!(a100["stats"]["max_mib"], 12000);
    assert_eq!(a100["suggested_mib"], Value::Null);
    let note = a100["note"].as_str().unwrap();
    assert!(
        note.contains("only 2") && note.contains("at least 3"),
        "{note}"
    );
    assert_eq!(s["images"], json!([]), "no raw-declared job ran");
}

#[sqlx::test(migrations = false)]
async fn raw_declared_jobs_are_grouped_per_image(pool: PgPool) {
    let l = setup(pool).await;
    let r = members(&l, "r", 3).await;
    l.observed(&r[0], raw(5000), "succeeded", l.rtx, 3000, None)
        .await;
    l.observed(&r[1], raw(6000), "failed", l.rtx, 9000, None)
        .await;
    l.observed(&r[1], raw(4500), "succeeded", l.rtx, 2000, Some(4000))
        .await;
    l.observed(&r[2], raw(4000), "succeeded", l.rtx, 3500, None)
        .await;
    l.observed(&r[0], raw(4500), "succeeded", l.a100, 2000, None)
        .await;
    let s = l.suggestions(&l.admin).await;
    assert_eq!(s["workloads"], json!([]), "{s}");
    let images = s["images"].as_array().unwrap();
    assert_eq!(images.len(), 2, "{s}");
    // Ordered by image, then model: the A100 ("NVIDIA A…") before the RTX ("NVIDIA G…").
    assert_eq!(images[0]["gpu_model"], A100);
    assert_eq!(images[0]["stats"]["n"], 1);
    assert_eq!(images[0]["suggested_mib"], Value::Null);
    let rtx = &images[1];
    assert_eq!(rtx["image"], IMAGE);
    assert_eq!(rtx["gpu_model"], RTX);
    assert_eq!(rtx["declared_max_mib"], 5000);
    assert_eq!(
        rtx["stats"],
        json!({ "n": 3, "p50_mib": 3500, "p95_mib": 4000, "max_mib": 4000 })
    );
    // 4000 × 1.10 = 4400 → 18 × 256 = 4608.
    assert_eq!(rtx["suggested_mib"], 4608);
}

#[sqlx::test(migrations = false)]
async fn an_applied_suggestion_is_an_audited_manifest_edit_and_members_cannot_apply(pool: PgPool) {
    let l = setup(pool).await;
    twenty_llm_runs(&l).await;

    // A member is refused, through the REST API and through the editor's server function.
    let r = l.apply(&l.member, "llm", RTX).await;
    assert_eq!(r.status, 403, "{}", r.text);
    let cookie = l.app.login("alice", PASSWORD).await;
    let form = "workload=llm&gpu_model=NVIDIA+GeForce+RTX+3090";
    let r = l
        .app
        .signed_in_call(&cookie, "apply_manifest_suggestion", form)
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    let audited = "SELECT count(*) FROM audit_events WHERE kind = 'manifest.put'";
    assert_eq!(
        l.app.scalar::<i64>(audited).await,
        1,
        "only the setup's edit"
    );

    // No suggestion from two records, and none for a pair never observed: 400 naming the field.
    l.observed(&l.admin, llm(), "succeeded", l.a100, 9000, None)
        .await;
    for model in [A100, "NVIDIA H100"] {
        let r = l.apply(&l.admin, "llm", model).await;
        assert_eq!(r.status, 400, "{}", r.text);
        assert_eq!(r.json()["field"], "gpu_model", "{}", r.text);
    }
    let r = l.apply(&l.admin, "nope", RTX).await;
    assert_eq!(r.status, 404, "{}", r.text);

    // The admin applies it: the RTX need becomes the suggestion, the A100's stays.
    let r = l.apply(&l.admin, "llm", RTX).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["vram_mib"], json!({ RTX: 20992, A100: 9000 }));
    let manifest = l.app.get("/api/v1/manifest", &l.member).await.json();
    assert_eq!(manifest["workloads"][0]["vram_mib"][RTX], 20992);
    let s = l.suggestions(&l.member).await;
    assert_eq!(pair(&s, "llm", RTX)["declared_mib"], 20992);

    // Audited like any edit: a manifest.put by the admin, in the history everyone reads.
    assert_eq!(l.app.scalar::<i64>(audited).await, 2);
    let history = l
        .app
        .get("/api/v1/manifest/history", &l.member)
        .await
        .json();
    let newest = &history["history"][0];
    assert_eq!(newest["kind"], "manifest.put", "{history}");
    assert_eq!(newest["subject"], "llm");
    let (actor, detail): (String, Value) = sqlx::query_as(
        "SELECT actor, detail FROM audit_events WHERE kind = 'manifest.put' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&l.app.pool)
    .await
    .unwrap();
    assert_eq!(actor, "root");
    assert_eq!(detail["vram_mib"][RTX], 20992);
}

#[sqlx::test(migrations = false)]
async fn gpuq_manifest_suggest_prints_the_table(pool: PgPool) {
    let l = setup(pool).await;
    twenty_llm_runs(&l).await;
    let r = members(&l, "r", 3).await;
    for (peak, by) in [3000, 3500, 4000].into_iter().zip(&r) {
        l.observed(by, raw(5000), "succeeded", l.rtx, peak, None)
            .await;
    }
    let serve = crate::support::Serve::new(&l.app.pool, &[]);
    let _server = serve.start("server.log").await;
    let token = l.member.trim_start_matches("Bearer ").to_owned();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuq"))
        .args(["manifest", "suggest"])
        .env("GPUQ_URL", serve.base())
        .env("GPUQ_TOKEN", &token)
        .env("GPUQ_CONFIG_DIR", serve.dir.path().join("config"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |start: &str| {
        text.lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no line starting {start:?}:\n{text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(text.contains("p95 + 10 %, rounded up to 256 MiB"), "{text}");
    assert_eq!(
        line("WORKLOAD"),
        "WORKLOAD MODEL DECLARED N P50 P95 MAX SUGGESTED"
    );
    assert_eq!(
        line("llm"),
        format!("llm {RTX} 8000 20 10000 19000 30000 20992")
    );
    assert_eq!(
        line(IMAGE),
        format!("{IMAGE} {RTX} 5000 3 3500 4000 4000 4608")
    );
}
