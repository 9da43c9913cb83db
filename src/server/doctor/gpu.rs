//! The GPU side: the cards (NVML or the simulation), Docker, the NVIDIA runtime as Docker sees it,
//! and a fenced smoke container that must see exactly the card it was given.

use super::{Check, DoctorOptions};
use crate::model::JobNetwork;
use crate::server::gpu::{self, GpuMode, OurProcesses};
use crate::server::runtime::docker::DockerHostFacts;
use crate::server::runtime::simdev::sim_device_path;
use crate::server::runtime::{
    ensure_sim_devices, Docker, GrantedGpu, LaunchMode, LaunchRequest, RunAs,
};
use futures_util::StreamExt;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// The library NVML is loaded from by default (what nvml-wrapper's `Nvml::init` opens).
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// One card as the doctor saw it.
#[derive(Debug, Clone)]
pub(super) struct SeenCard {
    index: u32,
    uuid: String,
    /// Model name, as the manifest keys it.
    model: String,
    /// VRAM, MiB; `None` where NVML did not say.
    total_mib: Option<u64>,
}

/// The cards check and what it found.
#[derive(Debug, Clone)]
pub(super) struct Cards {
    pub check: Check,
    cards: Vec<SeenCard>,
    simulated: bool,
}

impl Cards {
    /// Each card's model and VRAM (MiB, where known), for counting the jobs that can run at once.
    pub(super) fn vram(&self) -> Vec<(String, Option<u64>)> {
        self.cards
            .iter()
            .map(|c| (c.model.clone(), c.total_mib))
            .collect()
    }
}

/// Which source `--gpu-source` (and `--sim-gpus`) select: simulated or NVML.
fn simulated(opts: &DoctorOptions) -> Result<bool, String> {
    let mode: GpuMode = opts.gpu_source.parse().map_err(|e| format!("{e}"))?;
    let sim_given = opts
        .sim_gpus
        .as_deref()
        .is_some_and(|s| !s.trim().is_empty());
    Ok(match mode {
        GpuMode::Nvml => false,
        GpuMode::Sim => true,
        GpuMode::Auto => sim_given,
    })
}

/// The NVIDIA driver and NVML (version, cards, MIG mode), or the simulated cards.
pub(super) fn cards(opts: &DoctorOptions) -> Cards {
    let fail = |check| Cards {
        check,
        cards: Vec::new(),
        simulated: false,
    };
    match simulated(opts) {
        Err(e) => fail(Check::fail(
            "gpus",
            format!("--gpu-source: {e}"),
            "use --gpu-source auto, nvml or sim",
        )),
        Ok(true) => sim_cards(opts),
        Ok(false) => match nvml_cards(
            &opts
                .nvml_lib
                .as_ref()
                .map_or_else(|| NVML_LIBRARY.to_owned(), |p| p.display().to_string()),
        ) {
            Ok(c) => c,
            Err(check) => fail(check),
        },
    }
}

fn sim_cards(opts: &DoctorOptions) -> Cards {
    let seen = gpu::from_config(GpuMode::Sim, opts.sim_gpus.as_deref(), &opts.node)
        .and_then(|inv| inv.snapshot(&OurProcesses::default()));
    match seen {
        Ok(list) => {
            let cards: Vec<SeenCard> = list
                .iter()
                .map(|g| SeenCard {
                    index: g.index,
                    uuid: crate::model::gpu_id(&g.uuid),
                    model: g.model.clone(),
                    total_mib: u64::try_from(g.total_mib).ok(),
                })
                .collect();
            let data = json!({
                "source": "sim",
                "cards": list.iter().map(|g| json!({
                    "index": g.index, "uuid": crate::model::gpu_id(&g.uuid),
                    "name": g.model, "memory_total_mib": g.total_mib,
                })).collect::<Vec<_>>(),
            });
            Cards {
                check: Check::warn(
                    "gpus",
                    format!("{} simulated cards (NVML not used)", cards.len()),
                    "simulated cards are for tests and demos: use --gpu-source nvml on a GPU host",
                )
                .with_data(data),
                cards,
                simulated: true,
            }
        }
        Err(e) => Cards {
            check: Check::fail(
                "gpus",
                e.to_string(),
                "--sim-gpus COUNTxMiB:MODEL[,...], e.g. \"2x24576:NVIDIA GeForce RTX 3090\"",
            ),
            cards: Vec::new(),
            simulated: true,
        },
    }
}

fn nvml_cards(library: &str) -> Result<Cards, Check> {
    use nvml_wrapper::error::NvmlError;
    use nvml_wrapper::Nvml;
    let nvml = Nvml::builder()
        .lib_path(std::ffi::OsStr::new(library))
        .init()
        .map_err(|e| {
            let why = match &e {
                NvmlError::LibloadingError(inner) => {
                    format!("NVML could not be loaded from {library}: {inner}")
                }
                other => format!("NVML ({library}) failed to initialise: {other}"),
            };
            Check::fail(
                "gpus",
                why,
                format!(
                    "install the NVIDIA driver (it provides {library}) and check `nvidia-smi`; \
                     without cards use --gpu-source sim --sim-gpus COUNTxMiB:MODEL"
                ),
            )
        })?;
    let nvml_err = |what: &str, e: NvmlError| {
        Check::fail(
            "gpus",
            format!("NVML ({library}): {what}: {e}"),
            "check the driver with `nvidia-smi`; reboot after a driver upgrade",
        )
    };
    let driver = nvml
        .sys_driver_version()
        .map_err(|e| nvml_err("driver version", e))?;
    let version = nvml.sys_nvml_version().unwrap_or_default();
    let count = nvml
        .device_count()
        .map_err(|e| nvml_err("counting cards", e))?;
    let mut cards = Vec::new();
    let mut listed = Vec::new();
    for index in 0..count {
        let dev = nvml
            .device_by_index(index)
            .map_err(|e| nvml_err("opening a card", e))?;
        let uuid = dev.uuid().map_err(|e| nvml_err("card UUID", e))?;
        let name = dev.name().unwrap_or_default();
        let total_mib = dev.memory_info().ok().map(|m| m.total / (1024 * 1024));
        let mig = match dev.mig_mode() {
            Ok(m) if m.current == 1 => "enabled",
            Ok(_) => "disabled",
            Err(_) => "not supported",
        };
        listed.push(json!({
            "index": index, "uuid": uuid, "name": name,
            "memory_total_mib": total_mib, "mig": mig,
        }));
        cards.push(SeenCard {
            index,
            uuid,
            model: name,
            total_mib,
        });
    }
    let data = json!({
        "source": "nvml", "library": library, "driver_version": driver,
        "nvml_version": version, "cards": listed,
    });
    let migs: Vec<String> = listed
        .iter()
        .map(|c| format!("{} MIG {}", c["index"], c["mig"].as_str().unwrap_or("?")))
        .collect();
    let detail = format!(
        "driver {driver}, NVML {version} ({library}), {count} cards [{}]",
        migs.join(", ")
    );
    let any_mig = listed.iter().any(|c| c["mig"] == "enabled");
    let check = if count == 0 {
        Check::fail(
            "gpus",
            detail,
            "NVML sees no cards: check `nvidia-smi -L` and the driver",
        )
    } else if any_mig {
        Check::warn(
            "gpus",
            detail,
            "gpuq places jobs on whole cards and does not schedule MIG instances: disable MIG with `nvidia-smi -mig 0`",
        )
    } else {
        Check::pass("gpus", detail)
    };
    Ok(Cards {
        check: check.with_data(data),
        cards,
        simulated: false,
    })
}

/// Docker's checks and what later checks need of them.
pub(super) struct DockerSide {
    pub checks: Vec<Check>,
    pub conn: Option<Docker>,
    pub root_dir: Option<String>,
    /// Whether dockerd remaps user namespaces; `None` when it did not answer.
    pub userns_remap: Option<bool>,
}

/// Docker reachable (version, cgroup driver and version) and the NVIDIA runtime as it sees it.
pub(super) async fn docker(opts: &DoctorOptions) -> DockerSide {
    let at = opts
        .docker_socket
        .as_deref()
        .unwrap_or("the default socket");
    let connect = async {
        let d = Docker::connect_to(opts.docker_socket.as_deref()).await?;
        let facts = d.host_facts().await?;
        Ok::<_, crate::server::runtime::RuntimeError>((d, facts))
    };
    let connected = tokio::time::timeout(Duration::from_secs(60), connect).await;
    let (conn, facts) = match connected {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => return docker_down(opts, format!("Docker unreachable at {at}: {e}")),
        Err(_) => return docker_down(opts, format!("Docker at {at} did not answer in 60 s")),
    };
    let cgroup = format!(
        "cgroup {} v{}",
        facts.cgroup_driver.as_deref().unwrap_or("?"),
        facts.cgroup_version.as_deref().unwrap_or("?")
    );
    let detail = format!(
        "Docker {} (API {}), {cgroup}, root {}",
        facts.server_version,
        facts.api_version,
        facts.root_dir.as_deref().unwrap_or("?")
    );
    let data = json!({
        "version": facts.server_version, "api_version": facts.api_version,
        "cgroup_driver": facts.cgroup_driver, "cgroup_version": facts.cgroup_version,
        "root_dir": facts.root_dir, "runtimes": facts.runtimes, "cdi_spec_dirs": facts.cdi_spec_dirs,
    });
    let reach = if facts.cgroup_version.as_deref() == Some("1") {
        Check::warn(
            "docker",
            detail,
            "cgroup v1: memory and pids limits work, but prefer a cgroup v2 host (systemd.unified_cgroup_hierarchy=1)",
        )
    } else {
        Check::pass("docker", detail)
    };
    let simulated = simulated(opts).unwrap_or(false);
    DockerSide {
        checks: vec![
            reach.with_data(data),
            nvidia_runtime(&facts, simulated),
            live_restore(&facts),
        ],
        root_dir: facts.root_dir.clone(),
        userns_remap: Some(facts.userns_remap),
        conn: Some(conn),
    }
}

/// Docker's `live-restore`: without it, every restart of dockerd (a package upgrade) kills every
/// running job.
fn live_restore(facts: &DockerHostFacts) -> Check {
    const NAME: &str = "live-restore";
    if facts.live_restore {
        Check::pass(NAME, "on: running jobs outlive a restart of dockerd")
    } else {
        Check::warn(
            NAME,
            "off: a restart of dockerd (a package upgrade) kills every running job",
            "set \"live-restore\": true in /etc/docker/daemon.json, then `systemctl reload docker` \
             (packaging/install.sh does this)",
        )
    }
}

fn docker_down(opts: &DoctorOptions, why: String) -> DockerSide {
    let check = if opts.runner {
        Check::fail(
            "docker",
            why,
            "start dockerd (`systemctl start docker`) and put gpuq's user in the `docker` group, or pass --docker-socket",
        )
    } else {
        Check::warn(
            "docker",
            why,
            "this node runs no jobs (--runner false): Docker is optional",
        )
    };
    DockerSide {
        checks: vec![check],
        conn: None,
        root_dir: None,
        userns_remap: None,
    }
}

/// The NVIDIA runtime, CDI specs or the legacy hook, which `--gpus device=…` requests need.
fn nvidia_runtime(facts: &DockerHostFacts, simulated: bool) -> Check {
    let mut found = Vec::new();
    if facts.runtimes.iter().any(|r| r == "nvidia") {
        found.push("the `nvidia` runtime".to_owned());
    }
    let cdi: Vec<String> = facts
        .cdi_spec_dirs
        .iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .map(|e| e.path().display().to_string())
        .filter(|p| p.contains("nvidia"))
        .collect();
    if !cdi.is_empty() {
        found.push(format!("CDI specs {}", cdi.join(", ")));
    }
    let hook = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join("nvidia-container-runtime-hook"))
        .find(|p| p.is_file());
    if let Some(h) = hook {
        found.push(format!("the hook {}", h.display()));
    }
    let runtimes = facts.runtimes.join(", ");
    if !found.is_empty() {
        return Check::pass(
            "nvidia-runtime",
            format!(
                "Docker can hand out cards: {} (runtimes: {runtimes})",
                found.join("; ")
            ),
        );
    }
    let detail = format!("no NVIDIA runtime, CDI spec or hook (Docker runtimes: {runtimes})");
    let fix = "install the NVIDIA Container Toolkit, run `nvidia-ctk runtime configure --runtime=docker`, restart dockerd";
    if simulated {
        Check::warn(
            "nvidia-runtime",
            format!("{detail}; simulated cards do not need one"),
            fix,
        )
    } else {
        Check::fail("nvidia-runtime", detail, fix)
    }
}

/// A fenced container given the first card must see that card and no other.
pub(super) async fn smoke(opts: &DoctorOptions, cards: &Cards, docker: Option<&Docker>) -> Check {
    const NAME: &str = "smoke";
    let Some(card) = cards.cards.first() else {
        return Check::warn(
            NAME,
            "not run: no cards (see gpus)",
            "fix the gpus check first",
        );
    };
    let Some(docker) = docker else {
        return Check::warn(
            NAME,
            "not run: Docker unreachable (see docker)",
            "fix the docker check first",
        );
    };
    let Some(image) = &opts.smoke_image else {
        let want = if cards.simulated {
            "any local image with sh and ls"
        } else {
            "a local CUDA image with nvidia-smi"
        };
        return Check::warn(
            NAME,
            "not run: no --smoke-image given",
            format!(
                "pass --smoke-image IMAGE ({want}) to run a fenced container on card {}",
                card.index
            ),
        );
    };
    match docker.image_exists(image).await {
        Ok(true) => {}
        Ok(false) => {
            return Check::fail(
                NAME,
                format!("image {image} is not present locally (the smoke test never pulls)"),
                format!("`docker pull {image}` or `docker load` it on this host"),
            )
        }
        Err(e) => return Check::fail(NAME, format!("Docker: {e}"), "fix the docker check first"),
    }
    let argv: Vec<String> = if cards.simulated {
        vec!["sh".into(), "-c".into(), "ls /dev".into()]
    } else {
        vec!["nvidia-smi".into(), "-L".into()]
    };
    let sim_device = cards
        .simulated
        .then(|| sim_device_path(card.index as usize));
    if cards.simulated {
        if let Err(e) = ensure_sim_devices(card.index as usize + 1) {
            return Check::fail(
                NAME,
                format!("simulated device nodes: {e}"),
                "run gpuq doctor as the user gpuq serve runs as",
            );
        }
    }
    let req = LaunchRequest {
        job_id: uuid::Uuid::new_v4(),
        attempt: 1,
        node: "gpuq-doctor".into(),
        installation: None,
        image: image.clone(),
        argv,
        env: BTreeMap::new(),
        framework_env: BTreeMap::new(),
        mounts: Vec::new(),
        gpus: vec![GrantedGpu {
            uuid: card.uuid.clone(),
            sim_device,
        }],
        memory_limit_mib: 256,
        pids_limit: 64,
        log_max_bytes: 1 << 20,
        run_as: RunAs::User {
            uid: 65534,
            gid: 65534,
        },
        nano_cpus: None,
        shm_mib: 64,
        tmp_mib: Some(64),
        network: JobNetwork::None,
        image_volumes: Vec::new(),
        array_index: None,
        session_port: None,
    };
    let run = tokio::time::timeout(Duration::from_secs(120), run_smoke(docker, &req)).await;
    let output = match run {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => {
            return Check::fail(
                NAME,
                format!("the fenced container on card {} ({}) did not run: {e}", card.index, card.uuid),
                "check the nvidia-runtime check and `docker run --gpus device=UUID IMAGE nvidia-smi -L`",
            )
        }
        Err(_) => return Check::fail(NAME, "the fenced container did not finish in 120 s", "check dockerd's log"),
    };
    judge(&output, card, &cards.cards, cards.simulated)
}

/// create + start + wait + logs, then remove whatever happened.
async fn run_smoke(docker: &Docker, req: &LaunchRequest) -> Result<String, String> {
    let id = docker
        .create(req, LaunchMode::Fenced)
        .await
        .map_err(|e| e.to_string())?;
    let result = async {
        docker.start(&id).await.map_err(|e| e.to_string())?;
        let code = docker.wait(&id).await.map_err(|e| e.to_string())?;
        let lines: Vec<String> = docker
            .logs(&id, None, false)
            .filter_map(|l| async move { l.ok().map(|l| l.text) })
            .collect()
            .await;
        let out = lines.join("\n");
        if code != 0 {
            return Err(format!("exit code {code}: {out}"));
        }
        Ok(out)
    }
    .await;
    if let Err(e) = docker.remove(&id).await {
        tracing::warn!(container = %id, error = %e, "could not remove the smoke container");
    }
    result
}

fn judge(output: &str, card: &SeenCard, all: &[SeenCard], simulated: bool) -> Check {
    const NAME: &str = "smoke";
    let fix = "the fence leaks: do not run gpuq here until `gpuq doctor` passes; report it with this output";
    if simulated {
        let seen: Vec<&str> = output
            .split_whitespace()
            .filter(|w| w.starts_with("gpuq-sim"))
            .collect();
        let want = sim_device_path(card.index as usize);
        let want = want
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        return if seen == [want] {
            Check::pass(
                NAME,
                format!("a fenced container sees only {want}, the simulated card it was given"),
            )
        } else {
            Check::fail(
                NAME,
                format!("a fenced container given {want} sees {seen:?}"),
                fix,
            )
        };
    }
    let gpus: Vec<&str> = output
        .lines()
        .filter(|l| l.trim_start().starts_with("GPU "))
        .collect();
    let others: Vec<&str> = all
        .iter()
        .filter(|c| c.uuid != card.uuid && output.contains(&c.uuid))
        .map(|c| c.uuid.as_str())
        .collect();
    if gpus.len() == 1 && gpus[0].contains(&card.uuid) && others.is_empty() {
        Check::pass(
            NAME,
            format!(
                "a fenced container sees only card {} ({})",
                card.index, card.uuid
            ),
        )
    } else {
        Check::fail(
            NAME,
            format!(
                "a fenced container given {} saw: {}",
                card.uuid,
                output.trim()
            ),
            fix,
        )
    }
}
