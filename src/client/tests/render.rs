use chrono::{Duration, TimeZone, Utc};
use serde_json::json;

use super::now;
use crate::client::render::{
    format_age, gpus_table, job_details, jobs_table, nodes_table, page_footer, suggestions_table,
    table, truncate, MAX_WIDTH,
};
use crate::model::{GpuList, JobPage, JobStatus, JobView, NodeView};

fn jobs_fixture() -> JobPage {
    serde_json::from_str(include_str!("fixtures/jobs.json")).expect("fixture parses")
}

/// The first page (of 50) of `total` jobs, holding `jobs`.
fn first_page(jobs: Vec<JobView>, total: i64) -> JobPage {
    JobPage {
        arrays: Vec::new(),
        jobs,
        page: 1,
        per_page: 50,
        total,
    }
}

fn queued(id: &str, name: &str, position: i64, reason: &str) -> JobView {
    serde_json::from_value(json!({
        "id": id, "seq": 1, "name": name, "owner": "dave", "status": "queued",
        "image": "x", "command": ["y"], "gpu_count": 4, "created_at": "2025-01-01T11:59:55Z",
        "exclusive": false, "priority": 0, "timeout_s": 3600, "volumes": [], "assigned_gpus": [],
        "queue_position": position, "wait_reason": reason
    }))
    .expect("job parses")
}

#[test]
fn age_formatting() {
    let now = now();
    assert_eq!(format_age(now, now), "0s");
    assert_eq!(format_age(now - Duration::seconds(5), now), "5s");
    assert_eq!(format_age(now - Duration::seconds(59), now), "59s");
    assert_eq!(format_age(now - Duration::seconds(60), now), "1m");
    assert_eq!(format_age(now - Duration::seconds(3 * 60 + 59), now), "3m");
    assert_eq!(format_age(now - Duration::hours(2), now), "2h");
    assert_eq!(format_age(now - Duration::seconds(86_399), now), "23h");
    assert_eq!(format_age(now - Duration::days(4), now), "4d");
    assert_eq!(format_age(now - Duration::days(400), now), "400d");
    // Clock skew: a time in the future is "0s", not negative.
    assert_eq!(format_age(now + Duration::seconds(30), now), "0s");
}

#[test]
fn truncation_counts_characters() {
    assert_eq!(truncate("short", 10), "short");
    assert_eq!(truncate("exactly10!", 10), "exactly10!");
    assert_eq!(truncate("abcdefghijk", 5), "abcd…");
    assert_eq!(truncate("ééééé", 3), "éé…");
}

#[test]
fn generic_table_alignment() {
    let rows = vec![
        vec!["a".to_owned(), "1".to_owned(), "".to_owned()],
        vec!["long".to_owned(), "1000".to_owned(), "x".to_owned()],
    ];
    let text = table(&["K", "N", "LAST"], &rows, &[1]);
    assert_eq!(text, "K        N  LAST\na        1\nlong  1000  x\n");
}

/// The fixture's jobs and footer as `jobs_table` prints them, with or without a WAIT column: a job
/// that is not queued leaves that column empty, so its row is the same either way.
const FIXTURE_ROWS: &str = "\
3f2b9c1e  train-llama  alice  running    2 [0,3]  3m
a1b2c3d4  eval         bob    succeeded  1        4d
page 1 of 3 (5 jobs)
";

#[test]
fn jobs_table_exact() {
    let text = jobs_table(&jobs_fixture(), now());
    let expected = format!(
        "ID        NAME         OWNER  STATUS     GPUS     AGE\n\
         {FIXTURE_ROWS}"
    );
    assert_eq!(text, expected);
}

#[test]
fn jobs_table_wait_column_for_queued_jobs() {
    let mut list = jobs_fixture();
    list.jobs.insert(
        0,
        queued(
            "0badc0de-0000-4000-8000-000000000003",
            "sweep",
            3,
            "needs 4 GPUs",
        ),
    );
    let text = jobs_table(&list, now());
    let expected = format!(
        "ID        NAME         OWNER  STATUS     GPUS     AGE  START  WAIT\n\
         0badc0de  sweep        dave   queued     4        5s   -      #3 needs 4 GPUs\n\
         {FIXTURE_ROWS}"
    );
    assert_eq!(text, expected);
}

#[test]
fn jobs_table_truncates_long_wait_reasons_to_fit() {
    let reason = "waiting for 4 GPUs with at least 40000 MiB free each on one node; \
                  node-a has 2 such GPUs, node-b is draining, node-c is offline";
    let list = first_page(
        vec![queued(
            "0badc0de-0000-4000-8000-000000000003",
            "sweep",
            12,
            reason,
        )],
        1,
    );
    let text = jobs_table(&list, now());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    for line in &lines {
        assert!(line.chars().count() <= MAX_WIDTH, "too wide: {line:?}");
    }
    assert_eq!(lines[1].chars().count(), MAX_WIDTH);
    assert!(lines[1].contains("#12 waiting for 4 GPUs"));
    assert!(lines[1].ends_with('…'));
    assert_eq!(lines[2], "page 1 of 1 (1 job)");
}

#[test]
fn jobs_table_long_names_are_cut() {
    let name = "a-very-long-job-name-that-goes-on-and-on-and-on";
    let list = first_page(
        vec![queued("0badc0de-0000-4000-8000-000000000003", name, 1, "x")],
        1,
    );
    let text = jobs_table(&list, now());
    assert!(text.contains("a-very-long-job-name-that-goes-…"));
}

#[test]
fn empty_job_list() {
    let list = first_page(vec![], 0);
    assert_eq!(jobs_table(&list, now()), "no jobs\npage 1 of 1 (0 jobs)\n");
}

#[test]
fn footer_page_count() {
    let mut list = first_page(vec![], 123);
    assert_eq!(page_footer(&list), "page 1 of 3 (123 jobs)");
    list.total = 100;
    list.page = 2;
    assert_eq!(page_footer(&list), "page 2 of 2 (100 jobs)");
    list.per_page = 0;
    assert_eq!(page_footer(&list), "page 2 of 1 (100 jobs)");
}

#[test]
fn gpus_table_exact() {
    let list: GpuList =
        serde_json::from_str(include_str!("fixtures/gpus.json")).expect("fixture parses");
    let expected = "\
NODE    IDX  MODEL      STATE     TOTAL  RESERVED  EXTERNAL   FREE  JOBS
node-a  0    H100       online    81559     80000         0   1559  train-llama, deadbeef
node-a  3    H100       online    81559     40000         0  41559  train-llama
node-b  0    A100-80GB  draining  81920         0       512  81408  -
";
    assert_eq!(gpus_table(&list), expected);
    assert_eq!(gpus_table(&GpuList::default()), "no GPUs\n");
}

#[test]
fn show_lists_everything() {
    let mut job = jobs_fixture().jobs.remove(0);
    job.env = Some(
        [
            ("A".to_owned(), "1".to_owned()),
            ("B".to_owned(), "x y".to_owned()),
        ]
        .into(),
    );
    job.volumes = vec!["/data:/data:ro".to_owned()];
    job.command = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        "echo 'hi' there".to_owned(),
    ];
    job.exit_code = Some(137);
    job.finished_at = Some(Utc.with_ymd_and_hms(2025, 1, 1, 11, 59, 0).unwrap());
    let text = job_details(&job, now());
    let expected = "\
ID:              3f2b9c1e-8d4a-4b6f-9a01-2c3d4e5f6a7b
Seq:             42
Name:            train-llama
Owner:           alice
Status:          running
Image:           pytorch:2.4
Command:         sh -c 'echo '\\''hi'\\'' there'
GPUs:            2
Workload:        llm-7b
Min VRAM:        -
Exclusive:       no
Priority:        0
Timeout:         3600s
Env:             A=1
                 B=x y
Volumes:         /data:/data:ro
Node:            node-a
Assigned GPUs:   #0 GPU-aaaa H100 (40000 MiB)
                 #3 GPU-bbbb H100 (40000 MiB)
Exit code:       137
Created:         2025-01-01T11:57:00Z (3m ago)
Admitted:        2025-01-01T11:57:01Z (2m ago)
Started:         2025-01-01T11:57:05Z (2m ago)
Finished:        2025-01-01T11:59:00Z (1m ago)
Released:        -
Queue position:  -
Wait reason:     -
";
    assert_eq!(text, expected);
}

#[test]
fn show_queued_job_wait_reason_and_status_reason() {
    let mut job = queued("0badc0de-0000-4000-8000-000000000003", "s", 2, "no room");
    job.status_reason = Some("held by admin".to_owned());
    let text = job_details(&job, now());
    assert!(text.contains("\nStatus:          queued (held by admin)\n"));
    assert!(text.contains("\nQueue position:  2\n"));
    assert!(text.contains("\nWait reason:     no room\n"));
    assert!(text.contains("\nAssigned GPUs:   -\n"));
    assert!(text.contains("\nEnv:             -\n"));
}

#[test]
fn queued_jobs_show_their_start_estimate_or_why_they_never_start() {
    let mut job = queued("0badc0de-0000-4000-8000-000000000003", "s", 2, "no room");
    job.estimated_start_at = Some(now() + Duration::minutes(12));
    job.latest_start_at = Some(now() + Duration::hours(2));
    let text = jobs_table(&first_page(vec![job.clone()], 1), now());
    assert!(text.contains(" START "), "{text}");
    assert!(text.contains("in 12m (by 2h)"), "{text}");
    let show = job_details(&job, now());
    assert!(show.contains("\nExpected start:  "), "{show}");
    assert!(show.contains(" (in 12m)\nLatest start:    "), "{show}");
    assert!(show.contains(" (in 2h)\n"), "{show}");
    job.cannot_start = Some("needs 90000 MiB per card; the largest card offers 81920 MiB".into());
    let text = jobs_table(&first_page(vec![job.clone()], 1), now());
    assert!(text.contains(" never "), "{text}");
    let show = job_details(&job, now());
    assert!(
        show.contains("\nExpected start:  never: needs 90000 MiB per card"),
        "{show}"
    );
    assert!(!show.contains("Latest start"), "{show}");
}

#[test]
fn show_says_when_someone_elses_details_were_left_out() {
    let mut job = queued(
        "0badc0de-0000-4000-8000-000000000004",
        "theirs",
        1,
        "no room",
    );
    job.command = Vec::new();
    job.details_hidden = true;
    let text = job_details(&job, now());
    assert!(
        text.contains("\nCommand:         (hidden: someone else's job)\n"),
        "{text}"
    );
    job.details_hidden = false;
    job.command = vec!["echo".into(), "a b".into()];
    assert!(job_details(&job, now()).contains("\nCommand:         echo 'a b'\n"));
}

#[test]
fn suggestions_table_exact() {
    let s: crate::model::ManifestSuggestions = serde_json::from_value(json!({
        "margin_percent": 10, "round_mib": 256, "min_samples": 3,
        "workloads": [
            { "workload": "llm-7b", "gpu_model": "A100", "declared_mib": 20480,
              "stats": { "n": 20, "p50_mib": 10000, "p95_mib": 19000, "max_mib": 30000 },
              "suggested_mib": 20992, "note": null },
            { "workload": "sd", "gpu_model": "H100", "declared_mib": null,
              "stats": { "n": 2, "p50_mib": 900, "p95_mib": 1000, "max_mib": 1000 },
              "suggested_mib": null, "note": "only 2" }
        ],
        "images": [
            { "image": "me/train:1", "gpu_model": "A100", "declared_max_mib": 5000,
              "stats": { "n": 3, "p50_mib": 3500, "p95_mib": 4000, "max_mib": 4000 },
              "suggested_mib": 4608, "note": null }
        ]
    }))
    .expect("parses");
    let expected = "\
suggested = p95 + 10 %, rounded up to 256 MiB, from at least 3 finished (job, card) records

WORKLOAD  MODEL  DECLARED   N    P50    P95    MAX  SUGGESTED
llm-7b    A100      20480  20  10000  19000  30000      20992
sd        H100          -   2    900   1000   1000          -

jobs without a workload type, per image (a hint to create one):
IMAGE       MODEL  DECLARED  N   P50   P95   MAX  SUGGESTED
me/train:1  A100       5000  3  3500  4000  4000       4608
";
    assert_eq!(suggestions_table(&s), expected);
    let mut empty = s.clone();
    empty.workloads.clear();
    empty.images.clear();
    assert!(suggestions_table(&empty)
        .ends_with("no finished job of a workload type has an observed peak yet\n"));
}

#[test]
fn nodes_list_their_state_heartbeat_and_work() {
    let nodes: Vec<NodeView> = serde_json::from_value(json!([
        { "name": "gpu-a", "state": "up", "heartbeat_age_s": 1, "version": "0.1.0",
          "advertise_url": "http://gpu-a:3000", "runs_jobs": true, "cards": 8, "running_jobs": 3,
          "lost_after_s": 15 },
        { "name": "gpu-b", "state": "lost", "heartbeat_age_s": 3600, "version": "0.1.0",
          "advertise_url": "http://gpu-b:3000", "runs_jobs": false, "cards": 4, "running_jobs": 0,
          "lost_after_s": 15 }
    ]))
    .expect("nodes parse");
    let text = nodes_table(&nodes);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("NODE"), "{text}");
    let a: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        a,
        [
            "gpu-a",
            "up",
            "1",
            "s",
            "0.1.0",
            "yes",
            "8",
            "3",
            "http://gpu-a:3000"
        ]
    );
    let b: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        b,
        [
            "gpu-b",
            "lost",
            "3600",
            "s",
            "0.1.0",
            "no",
            "4",
            "0",
            "http://gpu-b:3000"
        ]
    );
    assert_eq!(nodes_table(&[]), "no nodes\n");
}

#[test]
fn show_says_when_a_jobs_node_is_lost() {
    let mut job = queued("0badc0de-0000-4000-8000-000000000005", "stuck", 1, "");
    job.status = JobStatus::Running;
    assert!(!job_details(&job, now()).contains("node lost"));
    job.node_lost = true;
    let text = job_details(&job, now());
    assert!(
        text.contains("\nStatus:          running; node lost: not started elsewhere"),
        "{text}"
    );
}

#[test]
fn show_gives_each_cards_observed_use_when_known() {
    let mut job = jobs_fixture().jobs.remove(0);
    job.assigned_gpus[0].used_mib = Some(39000);
    job.assigned_gpus[0].peak_mib = Some(41000);
    job.assigned_gpus[0].over_commitment = true;
    let text = job_details(&job, now());
    assert!(
        text.contains(
            "\nAssigned GPUs:   #0 GPU-aaaa H100 (40000 MiB); uses 39000 MiB; peak 41000 MiB; \
             went over its reservation\n                 #3 GPU-bbbb H100 (40000 MiB)\n"
        ),
        "{text}"
    );
}
