//! `gpuq serve`: checks the flags, opens the database, builds the domain's context, starts the
//! node's tasks ([`crate::server::node::start`]) and serves HTTP until SIGINT/SIGTERM. It only
//! wires; the other server-side subcommands are in [`crate::server::commands`].

use crate::server::admission::PassConfig;
use crate::server::auth::service;
use crate::server::config::ServeArgs;
use crate::server::db::job_uids::JobUidRange;
use crate::server::db::{self, session_store, Database};
use crate::server::gpu::{self, GpuInventory, GpuMode};
use crate::server::http::listen::{self, ListenLimits};
use crate::server::http::metrics::router as metrics_router;
use crate::server::http::{agent, app, HttpOptions};
use crate::server::metrics::Metrics;
use crate::server::node::{self, DockerAt, NodeSetup, RunnerSetup};
use crate::server::notifier::Notifier;
use crate::server::peers::{ClusterSecret, Peers};
use crate::server::registries::key::{KeyError, SecretsKey, KEY_ENV};
use crate::server::runner::{DockerHealth, RunnerConfig};
use crate::server::runtime::LaunchMode;
use crate::server::{AppState, Ctx};
use anyhow::{anyhow, Context, Result};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tower_sessions::ExpiredDeletion;

/// Runs the server until SIGINT/SIGTERM, then stops what it started.
pub async fn serve(args: ServeArgs) -> Result<()> {
    if let Some(pw) = &args.bootstrap_admin_password {
        crate::server::auth::password::check_policy(pw)
            .map_err(|e| anyhow!("GPUQ_BOOTSTRAP_ADMIN_PASSWORD: {e}"))?;
    }
    args.validate().map_err(|e| anyhow!(e))?;
    job_uid_range(&args)?;
    let secret = args
        .cluster_secret
        .as_deref()
        .map(ClusterSecret::new)
        .transpose()
        .map_err(|e| anyhow!("--cluster-secret (GPUQ_CLUSTER_SECRET) {e}"))?;
    let secrets = secrets_key(&args.db.data_dir)?;
    let database = db::open(&super::commands::db_options(&args.db)).await?;
    let result = run(&args, &database, secret, secrets).await;
    database.close().await?;
    result
}

async fn run(
    args: &ServeArgs,
    database: &Database,
    secret: Option<ClusterSecret>,
    secrets: SecretsKey,
) -> Result<()> {
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
    let mut ctx = Ctx::new(
        pool.clone(),
        pass.clone(),
        args.db.data_dir.join("logs"),
        notifier.clone(),
    );
    ctx.log_reads = crate::server::limits::LogReads::new(args.log_reads as usize);
    ctx.peers = Some(Peers::new(&args.node, secret));
    ctx.submit_rate =
        crate::server::limits::SubmitRate::new(args.submit_rate_per_min, args.preview_rate_per_min);
    ctx.session_lifetime = chrono::TimeDelta::hours(i64::from(args.session_lifetime_h));
    ctx.secrets = secrets;
    ctx.sessions = session_origin(args);
    let registered = register_node(&pool, args).await?;
    let lease = registered.lease.clone();
    let runner = args.runner.then(|| {
        let health = Arc::new(DockerHealth::default());
        ctx.docker = Some(Arc::clone(&health));
        RunnerSetup {
            docker: DockerAt::Socket(args.docker_socket.clone()),
            cfg: RunnerConfig {
                node: args.node.clone(),
                logs_dir: ctx.logs_dir.clone(),
                log_max_bytes: args.log_max_bytes,
                stop_grace: Duration::from_secs(args.stop_grace_s),
                mode: LaunchMode::Fenced,
                job_uids,
                never_mount: never_mount(args),
                secrets: ctx.secrets.clone(),
            },
            health,
            lease: Some(lease),
        }
    });
    let metrics = Metrics::new(&args.node).context("setting up metrics")?;
    let notify = crate::server::notify::NotifySetup {
        ctx: ctx.clone(),
        cfg: delivery_config(args)?,
    };
    let tasks = node::start(NodeSetup {
        pool: pool.clone(),
        notifier: notifier.clone(),
        pass,
        heartbeat: Some((registered, Duration::from_secs(args.heartbeat_s))),
        runner,
        cards: Some(card_tasks(args, inventory)),
        retention: Some(ctx.logs_dir.clone()),
        metrics: Some((
            metrics.clone(),
            args.node.clone(),
            Duration::from_millis(args.metrics_refresh_ms.max(100)),
        )),
        notify: Some(notify),
    })
    .await?;
    let scrape = metrics_router(metrics, args.metrics_token.as_deref());
    let http_opts = HttpOptions {
        secure_cookies: args.secure_cookies,
        trusted_proxies: args.trusted_proxy.clone(),
    };
    let limits = ListenLimits {
        read_timeout: Duration::from_secs(args.http_read_timeout_s),
        max_connections: args.http_max_connections as usize,
    };
    let mut state = AppState::new(
        ctx,
        &args
            .site_root
            .as_deref()
            .map(|dir| dir.to_string_lossy())
            .unwrap_or_default(),
    );
    if args.site_root.is_none() {
        crate::server::http::use_embedded_site(&mut state)?;
    }
    state.leptos_options.site_addr = args.listen;
    let state_for_sessions = state.clone();
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
    let sessions_server = match args.sessions_listen {
        None => None,
        Some(at) => Some(serve_sessions(at, &state_for_sessions, limits).await?),
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
    if let Some(tasks) = sessions_server {
        for t in tasks {
            t.abort();
        }
    }
    tasks.stop().await;
    Ok(())
}

/// The key registry passwords are sealed under: `GPUQ_SECRETS_KEY` (read from the environment
/// only, never a flag, so it is not in `ps`), else `<data-dir>/secrets.key`, made when a password
/// is first stored. A key file already there is checked now, so a bad one is said at start-up;
/// jobs whose registries need no credentials run either way.
fn secrets_key(data_dir: &std::path::Path) -> Result<SecretsKey> {
    let key = match std::env::var(KEY_ENV) {
        Ok(text) if !text.trim().is_empty() => {
            SecretsKey::from_base64(&text).map_err(|e| anyhow!("{KEY_ENV}: {e}"))?
        }
        _ => SecretsKey::in_data_dir(data_dir),
    };
    match key.for_opening() {
        Ok(_) | Err(KeyError::Missing(_)) => {}
        Err(e) => tracing::warn!("registry credentials cannot be stored or used: {e}"),
    }
    Ok(key)
}

/// The notification worker's settings from `--smtp-*`, `--notify-*` and `--public-url`.
fn delivery_config(args: &ServeArgs) -> Result<crate::server::notify::DeliveryConfig> {
    use crate::server::notify::send::{SmtpConfig, SmtpTls};
    let n = &args.notify;
    let smtp = match &n.smtp_host {
        None => None,
        Some(host) => {
            let from = n.smtp_from.clone().ok_or_else(|| {
                anyhow!(
                    "--smtp-host is set but --smtp-from (GPUQ_SMTP_FROM) is not: name the sender"
                )
            })?;
            from.parse::<lettre::message::Mailbox>()
                .map_err(|e| anyhow!("--smtp-from (GPUQ_SMTP_FROM) `{from}`: {e}"))?;
            let credentials = match (&n.smtp_username, &n.smtp_password) {
                (Some(u), Some(p)) => Some((u.clone(), p.clone())),
                (None, None) => None,
                _ => {
                    return Err(anyhow!(
                        "--smtp-username and --smtp-password (GPUQ_SMTP_PASSWORD) go together"
                    ))
                }
            };
            let tls = match n.smtp_tls.as_str() {
                "none" => SmtpTls::None,
                "tls" => SmtpTls::Tls,
                _ => SmtpTls::StartTls,
            };
            let ca_pem = match &n.smtp_ca_file {
                None => None,
                Some(path) => {
                    let pem = std::fs::read(path).map_err(|e| {
                        anyhow!("--smtp-ca-file (GPUQ_SMTP_CA_FILE) {}: {e}", path.display())
                    })?;
                    lettre::transport::smtp::client::Certificate::from_pem(&pem).map_err(|e| {
                        anyhow!(
                            "--smtp-ca-file (GPUQ_SMTP_CA_FILE) {}: no PEM certificate in it ({e})",
                            path.display()
                        )
                    })?;
                    Some(pem)
                }
            };
            Some(SmtpConfig {
                host: host.clone(),
                port: n.smtp_port,
                tls,
                credentials,
                from,
                ca_pem,
            })
        }
    };
    let public_url = n
        .public_url
        .clone()
        .unwrap_or_else(|| args.advertise_url())
        .trim_end_matches('/')
        .to_owned();
    let own = match args.listen.ip().is_unspecified() {
        true => Vec::new(),
        false => vec![args.listen.ip()],
    };
    Ok(crate::server::notify::DeliveryConfig {
        smtp,
        retry_first: Duration::from_millis(n.notify_retry_first_ms),
        retry_max: Duration::from_secs(n.notify_retry_max_s),
        attempts: n.notify_attempts,
        lease: Duration::from_secs(n.notify_lease_s),
        public_url,
        own,
        webhook_timeout: crate::server::notify::send::WEBHOOK_TIMEOUT,
    })
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

/// Where sessions are served (`--sessions-listen`, `--sessions-url`, `--sessions-domain`); `None`
/// without a sessions listener. A visitor without a session's cookie is sent to gpuq's public URL.
fn session_origin(args: &ServeArgs) -> Option<crate::server::sessions::Sessions> {
    use crate::server::sessions::{SessionOrigin, Sessions};
    let at = args.sessions_listen?;
    let origin = match &args.sessions_domain {
        Some(domain) => SessionOrigin::Domain {
            scheme: "https".into(),
            domain: domain.trim_matches('.').to_ascii_lowercase(),
        },
        None => SessionOrigin::Path {
            base: args
                .sessions_url
                .clone()
                .unwrap_or_else(|| format!("http://{at}"))
                .trim_end_matches('/')
                .to_owned(),
        },
    };
    let ui = args
        .notify
        .public_url
        .clone()
        .unwrap_or_else(|| args.advertise_url());
    Some(Sessions::new(origin, Some(ui)))
}

/// Serves the session proxy on `at` (`--sessions-listen`) and runs the idle-session watcher.
async fn serve_sessions(
    at: SocketAddr,
    state: &AppState,
    limits: ListenLimits,
) -> Result<Vec<tokio::task::JoinHandle<()>>> {
    let Some(router) = crate::server::http::sessions::router(state) else {
        return Ok(Vec::new());
    };
    let listener = tokio::net::TcpListener::bind(at)
        .await
        .with_context(|| format!("--sessions-listen: listening on {at}"))?;
    tracing::info!("sessions on http://{}", listener.local_addr()?);
    let idle = tokio::spawn(crate::server::sessions::idle::run(
        state.ctx.pool.clone(),
        state.ctx.sessions.clone(),
    ));
    let served = tokio::spawn(listen::serve(listener, router, limits, shutdown_signal()));
    Ok(vec![served, idle])
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
pub(crate) fn job_uid_range(args: &ServeArgs) -> Result<JobUidRange> {
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
) -> crate::server::node::CardTasks {
    crate::server::node::CardTasks {
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
