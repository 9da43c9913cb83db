//! The subcommands that run on the server side: `gpuq serve` and `gpuq user add`.

use crate::model::Role;
use crate::server::admission::{scheduler, PassConfig};
use crate::server::auth::service;
use crate::server::config::{DbArgs, ServeArgs, UserAddArgs};
use crate::server::db::job_uids::JobUidRange;
use crate::server::db::{self, session_store, Database, DbOptions};
use crate::server::gpu::{self, GpuInventory, GpuMode};
use crate::server::http::listen::{self, ListenLimits};
use crate::server::http::metrics::router as metrics_router;
use crate::server::http::{agent, app, HttpOptions};
use crate::server::metrics::Metrics;
use crate::server::notifier::Notifier;
use crate::server::peers::{ClusterSecret, Peers};
use crate::server::runner::{DockerHealth, Runner, RunnerConfig};
use crate::server::runtime::{ensure_sim_devices, Docker, LaunchMode};
use crate::server::AppState;
use anyhow::{anyhow, Context, Result};
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower_sessions::ExpiredDeletion;

/// Runs the server until SIGINT/SIGTERM, then stops what it started.
pub async fn serve(args: ServeArgs) -> Result<()> {
    if let Some(pw) = &args.bootstrap_admin_password {
        crate::server::auth::password::check_policy(pw)
            .map_err(|e| anyhow!("GPUQ_BOOTSTRAP_ADMIN_PASSWORD: {e}"))?;
    }
    job_uid_range(&args)?;
    if args
        .metrics_token
        .as_deref()
        .is_some_and(|t| t.trim().is_empty())
    {
        return Err(anyhow!(
            "--metrics-token (GPUQ_METRICS_TOKEN) is empty: give a token, or unset it to leave /metrics open"
        ));
    }
    let secret = args
        .cluster_secret
        .as_deref()
        .map(ClusterSecret::new)
        .transpose()
        .map_err(|e| anyhow!("--cluster-secret (GPUQ_CLUSTER_SECRET) {e}"))?;
    let database = db::open(&db_options(&args.db)).await?;
    let result = run(&args, &database, secret).await;
    database.close().await?;
    result
}

/// What the database flags say, for [`db::open`].
fn db_options(args: &DbArgs) -> DbOptions {
    DbOptions {
        database_url: args.database_url.clone(),
        app_database_url: args.app_database_url.clone(),
        data_dir: args.data_dir.clone(),
        pg_user: args.pg_user.clone(),
        max_connections: args.db_max_connections,
    }
}

/// Opens the database, runs `work` on it, and closes it again whatever `work` answered.
async fn with_database<T, F>(args: &DbArgs, work: impl FnOnce(sqlx::PgPool) -> F) -> Result<T>
where
    F: std::future::Future<Output = Result<T>>,
{
    let database = db::open(&db_options(args)).await?;
    let result = work(database.pool.clone()).await;
    database.close().await?;
    result
}

async fn run(args: &ServeArgs, database: &Database, secret: Option<ClusterSecret>) -> Result<()> {
    let pool = database.pool.clone();
    // The first admin is made where people sign in: on a UI host, not on an agent.
    let first_admin = match args.ui {
        true => service::bootstrap_admin(&pool, args.bootstrap_admin_password.as_deref()).await,
        false => Ok(None),
    };
    match first_admin {
        Ok(Some(password)) => {
            let path = write_bootstrap_password(&args.db.data_dir, &password)?;
            tracing::warn!(
                "created user `admin`; its password is in {} (readable by this user only): \
                 sign in, change it, and delete the file",
                path.display()
            );
        }
        Ok(None) => {}
        Err(e) => return Err(anyhow!("creating the first admin: {e}")),
    }
    let pass = PassConfig {
        headroom_mib: args.vram_headroom_mib,
        starvation_after: Duration::from_secs(args.starvation_after_s),
        cpu_node: args.node.clone(),
    };
    let (source, deprecated) = args.gpu_source();
    if let Some(warning) = deprecated {
        tracing::warn!("{warning}");
    }
    if std::env::var_os("GPUQ_GPUS").is_some() {
        tracing::warn!(
            "GPUQ_GPUS is set but not read: it names a job's cards inside its container; \
             `gpuq serve` takes its GPU source from GPUQ_GPU_SOURCE (--gpu-source)"
        );
    }
    let mode: GpuMode = source.parse().map_err(|e| anyhow!("--gpu-source: {e}"))?;
    let job_uids = job_uid_range(args)?;
    let inventory: Arc<dyn GpuInventory> = Arc::from(gpu::from_config_with_lib(
        mode,
        args.sim_gpus.as_deref(),
        &args.node,
        args.nvml_lib.as_deref(),
    )?);
    tracing::info!(node = %args.node, kind = ?inventory.kind(), "GPU inventory");
    let notifier = Notifier::new(Duration::from_millis(args.pass_interval_ms.max(50)));
    let mut state = AppState::new(
        pool.clone(),
        &args
            .site_root
            .as_deref()
            .map(|dir| dir.to_string_lossy())
            .unwrap_or_default(),
        pass.clone(),
        args.db.data_dir.join("logs"),
        notifier.clone(),
    );
    if args.site_root.is_none() {
        crate::server::http::use_embedded_site(&mut state)?;
    }
    state.leptos_options.site_addr = args.listen;
    state.log_reads = crate::server::jobs::log_read::LogReads::new(args.log_reads as usize);
    state.peers = Some(Peers::new(&args.node, secret));
    state.submit_rate = crate::server::jobs::rate::SubmitRate::new(
        args.submit_rate_per_min,
        args.preview_rate_per_min,
    );
    state.session_lifetime = chrono::TimeDelta::hours(i64::from(args.session_lifetime_h));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let (cards, card_tasks) =
        crate::server::card_tasks::start(&pool, card_tasks(args, inventory), &stop_rx).await?;
    let node = register_node(&pool, args).await?;
    let lease = node.lease.clone();
    tasks.spawn(crate::server::nodes::heartbeat(
        pool.clone(),
        node,
        Duration::from_secs(args.heartbeat_s),
        stop_rx.clone(),
    ));
    // Subscribe before the notifier runs, so nothing said at start-up is missed.
    let sched = scheduler::run(pool.clone(), pass, notifier.subscribe(), stop_rx.clone());
    if args.runner {
        let health = Arc::new(DockerHealth::default());
        health.report(Some(
            "connecting to Docker and re-adopting its containers".into(),
        ));
        prepare_sim_devices(&cards)?;
        let launch = RunnerConfig {
            node: args.node.clone(),
            logs_dir: state.logs_dir.clone(),
            log_max_bytes: args.log_max_bytes,
            stop_grace: Duration::from_secs(args.stop_grace_s),
            mode: LaunchMode::Fenced,
            job_uids,
            never_mount: never_mount(args),
        };
        tasks.spawn(run_node(
            NodeParts {
                pool: pool.clone(),
                socket: args.docker_socket.clone(),
                cfg: launch,
                health: Arc::clone(&health),
                notifier: notifier.clone(),
                lease,
            },
            sched,
            stop_rx.clone(),
        ));
        state.docker = Some(health);
    } else {
        tasks.spawn(sched);
    }
    for task in card_tasks {
        tasks.spawn(task);
    }
    tasks.spawn(crate::server::jobs::retention::run(
        pool.clone(),
        state.logs_dir.clone(),
        (Duration::from_secs(3600), Duration::from_secs(10)),
        notifier.subscribe(),
        stop_rx.clone(),
    ));
    let metrics = Metrics::new(&args.node).context("setting up metrics")?;
    crate::server::metrics::snapshot::refresh(&pool, &metrics, &args.node).await;
    tasks.spawn(crate::server::metrics::snapshot::run(
        pool.clone(),
        metrics.clone(),
        args.node.clone(),
        Duration::from_millis(args.metrics_refresh_ms.max(100)),
        stop_rx.clone(),
    ));
    tasks.spawn(notifier.run(pool.clone(), stop_rx));
    let scrape = metrics_router(metrics, args.metrics_token.as_deref());
    let http_opts = HttpOptions {
        secure_cookies: args.secure_cookies,
        trusted_proxies: args.trusted_proxy.clone(),
    };
    let limits = ListenLimits {
        read_timeout: Duration::from_secs(args.http_read_timeout_s),
        max_connections: args.http_max_connections as usize,
    };
    let mut router = match args.ui {
        true => app(state, http_opts),
        false => agent(state, http_opts),
    };
    let metrics_server = match args.metrics_listen {
        None => {
            router = router.merge(scrape);
            None
        }
        Some(at) => Some(serve_metrics_apart(at, scrape, limits).await?),
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let sweeper = tokio::spawn(
        session_store(&pool).continuously_delete_expired(tokio::time::Duration::from_secs(300)),
    );
    match args.ui {
        true => tracing::info!("gpuq listening on http://{addr}"),
        false => tracing::info!("gpuq agent listening on http://{addr} (no UI, no API)"),
    }
    listen::serve(listener, router, limits, shutdown_signal()).await;
    sweeper.abort();
    if let Some(m) = metrics_server {
        m.abort();
    }
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// Registers this process's node (a new epoch, held until a heartbeat is refused).
async fn register_node(
    pool: &sqlx::PgPool,
    args: &ServeArgs,
) -> Result<crate::server::nodes::Registered> {
    let reg = crate::server::nodes::Registration {
        name: args.node.clone(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        advertise_url: args.advertise_url(),
        runs_jobs: args.runner,
        lost_after_s: args.node_lost_after_s.min(i32::MAX as u32) as i32,
    };
    crate::server::nodes::register(pool, &reg)
        .await
        .map_err(|e| anyhow!("registering node `{}`: {e}", args.node))
}

/// Serves `/metrics` alone on `at` (`--metrics-listen`).
async fn serve_metrics_apart(
    at: SocketAddr,
    scrape: axum::Router,
    limits: ListenLimits,
) -> Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(at)
        .await
        .with_context(|| format!("--metrics-listen: listening on {at}"))?;
    tracing::info!("metrics on http://{}/metrics", listener.local_addr()?);
    Ok(tokio::spawn(listen::serve(
        listener,
        scrape,
        limits,
        std::future::pending(),
    )))
}

/// The uid range jobs' users are allocated from, or an error naming the flag.
fn job_uid_range(args: &ServeArgs) -> Result<JobUidRange> {
    args.job_uid_range
        .parse()
        .map_err(|e| anyhow!("--job-uid-range (GPUQ_JOB_UID_RANGE): {e}"))
}

/// This node's own paths no job may mount: the Docker socket it uses (and the one `DOCKER_HOST`
/// names), containerd's socket, and gpuq's data folder.
fn never_mount(args: &ServeArgs) -> Vec<PathBuf> {
    let mut never = vec![
        PathBuf::from("/var/run/docker.sock"),
        PathBuf::from("/run/containerd/containerd.sock"),
        args.db.data_dir.clone(),
    ];
    never.extend(args.docker_socket.as_ref().map(PathBuf::from));
    let host = std::env::var("DOCKER_HOST").unwrap_or_default();
    never.extend(host.strip_prefix("unix://").map(PathBuf::from));
    // A relative data folder is relative to where gpuq runs.
    never
        .into_iter()
        .map(|p| std::path::absolute(&p).unwrap_or(p))
        .collect()
}

/// Name of the file, in the data directory, holding the generated first admin password.
pub const BOOTSTRAP_PASSWORD_FILE: &str = "bootstrap-admin-password";

/// Writes the generated first admin password to a file only this user can read (mode 0600, set as
/// the file is created, so it is never readable by others even for a moment); never to the log,
/// which is often shipped elsewhere and readable by more people.
pub fn write_bootstrap_password(
    data_dir: &std::path::Path,
    password: &str,
) -> Result<std::path::PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating the data directory {}", data_dir.display()))?;
    let path = data_dir.join(BOOTSTRAP_PASSWORD_FILE);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    // A file left over from an earlier start keeps its old mode: set it again.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("restricting {}", path.display()))?;
    writeln!(file, "{password}").with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The card observer and its consumers, as the flags set them.
fn card_tasks(
    args: &ServeArgs,
    inventory: Arc<dyn GpuInventory>,
) -> crate::server::card_tasks::CardTasks {
    crate::server::card_tasks::CardTasks {
        node: args.node.clone(),
        inventory,
        refresh_every: Duration::from_secs(args.gpu_refresh_s.max(1)),
        sampling: crate::server::usage::Sampling::from_flags(
            args.sample_every_s,
            args.sample_retention_h,
        ),
        vram: args.runner.then(|| crate::server::vram::VramConfig {
            node: args.node.clone(),
            every: Duration::from_millis(args.vram_sample_ms),
            overuse_samples: args.vram_overuse_samples,
            reserve_mib: args.vram_reserve_mib,
        }),
        proc_root: "/proc".into(),
    }
}

fn prepare_sim_devices(cards: &gpu::observer::Cards) -> Result<()> {
    if cards.kind() != gpu::InventoryKind::Simulated {
        return Ok(());
    }
    let snapshot = cards.latest();
    let count = snapshot
        .cards()?
        .iter()
        .map(|c| c.index as usize + 1)
        .max()
        .unwrap_or(0);
    ensure_sim_devices(count).context("creating the simulated cards' device nodes")?;
    Ok(())
}

/// What a node's Docker side is made of.
struct NodeParts {
    pool: sqlx::PgPool,
    socket: Option<String>,
    cfg: RunnerConfig,
    health: Arc<DockerHealth>,
    notifier: Notifier,
    lease: crate::server::nodes::Lease,
}

/// This node's Docker side: connect (retrying while Docker is unreachable), re-adopt what Docker
/// still runs, and only then start admitting, then launch admitted jobs until stopped.
async fn run_node(
    parts: NodeParts,
    scheduler: impl std::future::Future<Output = ()> + Send + 'static,
    mut stop: watch::Receiver<bool>,
) {
    let NodeParts {
        pool,
        socket,
        cfg,
        health,
        notifier,
        lease,
    } = parts;
    // The runner's subscription starts now: what is announced during re-adoption still reaches it.
    let notes = notifier.subscribe();
    let docker = loop {
        let connected = Docker::connect_to(socket.as_deref()).await;
        match connected {
            Ok(d) => break d,
            Err(e) => {
                let problem = e.to_string();
                if health.problem().as_deref() != Some(problem.as_str()) {
                    tracing::warn!(error = %problem, "Docker unreachable: this node starts nothing until it answers");
                }
                health.report(Some(problem));
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    };
    let runner = Runner::leased(pool, docker, cfg, health, notifier, lease);
    if !runner.start_up(&mut stop).await {
        return;
    }
    let scheduler = tokio::spawn(scheduler);
    runner.run(notes, stop).await;
    let _ = scheduler.await;
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await
            }
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}

/// `gpuq doctor`: runs the checks, prints them (lines or JSON) and fails when any check failed.
/// `gpuq firewall …` (see [`crate::server::firewall`]).
pub async fn firewall(args: crate::server::config::FirewallArgs) -> Result<()> {
    use crate::server::config::FirewallAction;
    use crate::server::firewall::{self, Action, FirewallOptions};
    let opts = FirewallOptions {
        docker_socket: args.docker_socket,
        allow: firewall::parse_allow(&args.egress.egress_allow).map_err(|e| anyhow!(e))?,
    };
    let action = match args.action {
        FirewallAction::Apply => Action::Apply,
        FirewallAction::Check => Action::Check,
        FirewallAction::Remove => Action::Remove,
    };
    let said = firewall::run(action, &opts).await.map_err(|e| anyhow!(e))?;
    println!("{said}");
    Ok(())
}

pub async fn doctor(args: crate::server::config::DoctorArgs) -> Result<()> {
    use crate::server::doctor;
    let s = &args.serve;
    let opts = doctor::DoctorOptions {
        gpu_source: s.gpu_source().0.to_owned(),
        sim_gpus: s.sim_gpus.clone(),
        nvml_lib: s.nvml_lib.clone(),
        node: s.node.clone(),
        data_dir: s.db.data_dir.clone(),
        database_url: s.db.database_url.clone(),
        docker_socket: s.docker_socket.clone(),
        runner: s.runner,
        listen: s.listen,
        secure_cookies: s.secure_cookies,
        smoke_image: args.smoke_image.clone(),
        job_uid_range: job_uid_range(s)?,
        egress_allow: crate::server::firewall::parse_allow(&args.egress.egress_allow)
            .map_err(|e| anyhow!(e))?,
    };
    let checks = doctor::run(&opts).await;
    if args.json {
        println!("{:#}", doctor::render_json(&checks));
    } else {
        print!("{}", doctor::render_text(&checks));
    }
    if doctor::any_failed(&checks) {
        let failed: Vec<&str> = checks
            .iter()
            .filter(|c| c.status == doctor::Status::Fail)
            .map(|c| c.name)
            .collect();
        return Err(anyhow!("doctor: failed checks: {}", failed.join(", ")));
    }
    Ok(())
}

/// `gpuq user add NAME --role ROLE`, password on standard input.
pub async fn user_add(args: UserAddArgs) -> Result<()> {
    let role: Role = args.role.parse().map_err(|e: String| anyhow!(e))?;
    let mut password = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut password)
        .context("reading the password from standard input")?;
    let password = password.trim_end_matches(['\r', '\n']);
    let row = with_database(&args.db, |pool| async move {
        service::add_user(&pool, &args.name, role, password)
            .await
            .map_err(|e| anyhow!("{e}"))
    })
    .await?;
    println!("created user `{}` with role {}", row.username, role);
    Ok(())
}

/// `gpuq bench admission`: prints planner, pass and burst figures.
pub async fn bench_admission(args: crate::server::cli::BenchAdmissionArgs) -> Result<()> {
    with_database(&args.db, |pool| async move {
        crate::server::bench::admission(&pool, &args.opts, &mut std::io::stdout()).await
    })
    .await
}

/// `gpuq bench runner`: prints launch overhead figures.
pub async fn bench_runner(args: crate::server::cli::BenchRunnerArgs) -> Result<()> {
    with_database(&args.db, |pool| async move {
        crate::server::bench::launch::runner(&pool, &args.opts, &mut std::io::stdout()).await
    })
    .await
}

/// `gpuq bench vram`: the VRAM policing's latencies and the sampler's cost.
pub async fn bench_vram(args: crate::server::cli::BenchVramArgs) -> Result<()> {
    with_database(&args.db, |pool| async move {
        crate::server::bench::vram::run(&pool, &args.opts, &mut std::io::stdout()).await
    })
    .await
}

/// `gpuq bench failover`: kills and restarts a `gpuq serve` on the given external database.
pub async fn bench_failover(args: crate::server::cli::BenchFailoverArgs) -> Result<()> {
    let url = args.db.database_url.clone().ok_or_else(|| {
        anyhow!("gpuq bench failover needs --database-url: the nodes it starts and kills share it")
    })?;
    with_database(&args.db, |pool| async move {
        crate::server::bench::failover::run(&pool, &url, &args.opts, &mut std::io::stdout()).await
    })
    .await
}

/// `gpuq bench logs`: a `gpuq serve`'s resident memory under many log reads at once.
pub async fn bench_logs(args: crate::server::cli::BenchLogsArgs) -> Result<()> {
    let url = args.db.database_url.clone().ok_or_else(|| {
        anyhow!("gpuq bench logs needs --database-url: the server it measures shares it")
    })?;
    with_database(&args.db, |pool| async move {
        crate::server::bench::logs::run(&pool, &url, &args.opts, &mut std::io::stdout()).await
    })
    .await
}

/// `gpuq bench external`: measures the running server at `url` from outside. It only reads the
/// server's database (no migration: the server may be an older build).
pub async fn bench_external(
    args: crate::server::cli::BenchExternalArgs,
    url: String,
    token: Option<crate::model::Secret>,
) -> Result<()> {
    crate::server::bench::external::run(&url, token, &args.opts, &mut std::io::stdout()).await
}
