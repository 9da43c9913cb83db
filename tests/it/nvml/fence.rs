//! A job on NVML cards runs in a container whose NVIDIA DeviceRequest names exactly its cards, on
//! a throw-away dockerd with the stub NVIDIA hook.

use super::{two_cards, A100, C, L4};
use crate::support::nvml::{FakeNvml, NvidiaDocker};
use crate::support::{
    api_as_admin, database_url, free_port, json_of, post_job, start_server, TestApp,
};
use serde_json::Value;
use sqlx::PgPool;
use std::time::{Duration, Instant};

#[sqlx::test(migrations = false)]
async fn a_job_on_nvml_cards_starts_fenced_to_exactly_its_assigned_uuids(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let url = database_url(&app.pool);
    let docker = NvidiaDocker::start();
    let fake = FakeNvml::new(&format!(
        "{}gpu GPU-{C} \"{L4}\" total_mib=23034\n",
        two_cards().replace(A100, L4).replace("81920", "23034")
    ));
    let port = free_port();
    let lib = fake.lib().display().to_string();
    let socket = docker.socket().display().to_string();
    let data = fake.dir().join("data").display().to_string();
    let _server = start_server(
        &url,
        port,
        &fake.dir().join("server.log"),
        &[
            "--gpu-source",
            "nvml",
            "--nvml-lib",
            &lib,
            "--runner",
            "true",
            "--docker-socket",
            &socket,
            "--data-dir",
            &data,
        ],
    )
    .await;
    let (client, bearer) = api_as_admin(port).await;
    // No bridge in the throw-away dockerd: jobs run without a network.
    let r = client
        .put(format!(
            "http://127.0.0.1:{port}/api/v1/settings/launch-policy"
        ))
        .header("authorization", &bearer)
        .json(&serde_json::json!({ "network": "none" }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let spec = serde_json::json!({
        "image": "gpuq-test/busybox:latest", "name": "fenced", "gpu_count": 2, "min_vram_mb": 20000,
        "command": ["sh", "-c", "echo visible=$NVIDIA_VISIBLE_DEVICES; sleep 3"],
    });
    let id = post_job(&client, port, &bearer, &spec).await;
    let job = wait_for_job(&client, port, &bearer, id, "running").await;
    let mut assigned: Vec<String> = job["assigned_gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["uuid"].as_str().unwrap().to_owned())
        .collect();
    assigned.sort();
    assert_eq!(assigned.len(), 2, "{job}");

    let label = format!("label=org.gpuq.job-id={id}");
    let ps = docker.cli(&["ps", "-aq", "--filter", &label]);
    let container = String::from_utf8(ps.stdout).unwrap().trim().to_owned();
    assert!(!container.is_empty(), "no container for job {id}");
    let inspect = docker.cli(&["inspect", &container]);
    let spec: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    let requests = &spec[0]["HostConfig"]["DeviceRequests"];
    let requests = requests.as_array().unwrap_or_else(|| panic!("{requests}"));
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0]["Driver"], "nvidia");
    let mut ids: Vec<String> = requests[0]["DeviceIDs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    assert_eq!(ids, assigned, "exactly the assigned cards, by UUID");
    assert_eq!(
        requests[0]["Count"], 0,
        "no 'any N cards' request beside the ids"
    );
    assert_eq!(requests[0]["Capabilities"], serde_json::json!([["gpu"]]));
    assert_eq!(spec[0]["HostConfig"]["Privileged"], false);

    // The driver's hook ran for it, and the container saw exactly its cards.
    let job = wait_for_job(&client, port, &bearer, id, "succeeded").await;
    assert_eq!(job["exit_code"], 0, "{job}");
    assert!(
        docker.hook_log().contains("args: prestart"),
        "{}",
        docker.hook_log()
    );
    let log = client
        .get(format!("http://127.0.0.1:{port}/api/v1/jobs/{id}/logs"))
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let visible = log
        .lines()
        .find_map(|l| l.strip_prefix("visible="))
        .unwrap_or_else(|| panic!("{log}"));
    let mut visible: Vec<&str> = visible.split(',').collect();
    visible.sort();
    assert_eq!(visible, assigned, "{log}");
}

/// Polls the job over HTTP until it has `status` (60 s at most).
async fn wait_for_job(
    client: &reqwest::Client,
    port: u16,
    bearer: &str,
    id: uuid::Uuid,
    status: &str,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let url = format!("http://127.0.0.1:{port}/api/v1/jobs/{id}");
        let job = json_of(client.get(url).header("authorization", bearer)).await;
        if job["status"] == status {
            return job;
        }
        assert!(
            !["failed", "cancelled", "succeeded"].contains(&job["status"].as_str().unwrap_or("")),
            "job ended before {status}: {job}"
        );
        assert!(Instant::now() < deadline, "job never {status}: {job}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
