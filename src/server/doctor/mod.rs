//! `gpuq doctor`: is this host ready for gpuq? Each check says pass, warn or fail, and how to fix
//! what is not right, in one line. The checks only look: the database is never migrated, the
//! embedded cluster never started, nothing is written but a probe file in the data directory and
//! the short-lived smoke container (removed again).

mod egress;
mod gpu;
mod host;
pub mod uids;

use serde::Serialize;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Ready.
    Pass,
    /// Works, but not as it should on a production host.
    Warn,
    /// gpuq will not work until this is fixed.
    Fail,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One check's answer.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Short name, e.g. `nvml`, `docker`.
    pub name: &'static str,
    /// Pass, warn or fail.
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// What to do about a warn or fail, in one line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// Facts for machines (the cards NVML sees, Docker's versions), when there are any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

impl Check {
    fn pass(name: &'static str, detail: impl Into<String>) -> Self {
        Check {
            name,
            status: Status::Pass,
            detail: detail.into(),
            fix: None,
            data: None,
        }
    }

    fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Check {
            status: Status::Warn,
            fix: Some(fix.into()),
            ..Check::pass(name, detail)
        }
    }

    fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Check {
            status: Status::Fail,
            fix: Some(fix.into()),
            ..Check::pass(name, detail)
        }
    }

    fn with_data(mut self, data: serde_json::Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// What the doctor checks against: the settings `gpuq serve` would run with.
#[derive(Debug, Clone)]
pub struct DoctorOptions {
    /// `auto`, `nvml` or `sim`.
    pub gpu_source: String,
    /// Simulated cards, when any.
    pub sim_gpus: Option<String>,
    /// The NVML library to load (`--nvml-lib`); `None` = the system's `libnvidia-ml.so.1`.
    pub nvml_lib: Option<PathBuf>,
    /// This node's name.
    pub node: String,
    /// gpuq's data directory.
    pub data_dir: PathBuf,
    /// External Postgres; `None` = the embedded cluster under the data directory.
    pub database_url: Option<String>,
    /// Docker socket; `None` = the local default.
    pub docker_socket: Option<String>,
    /// Whether this node runs jobs (else Docker is not needed).
    pub runner: bool,
    /// The web UI's address.
    pub listen: SocketAddr,
    /// Whether the server is told it is behind HTTPS.
    pub secure_cookies: bool,
    /// Image for the fenced smoke container.
    pub smoke_image: Option<String>,
    /// The uids gpuq gives jobs (`--job-uid-range`).
    pub job_uid_range: crate::server::db::job_uids::JobUidRange,
    /// Destinations jobs may reach besides the internet (as `gpuq firewall apply` was given).
    pub egress_allow: Vec<crate::server::runtime::egress::Allow>,
}

/// Runs every check, in the order an operator fixes things.
pub async fn run(opts: &DoctorOptions) -> Vec<Check> {
    let mut checks = Vec::new();
    let cards = gpu::cards(opts);
    checks.push(cards.check.clone());
    let docker = gpu::docker(opts).await;
    checks.extend(docker.checks.iter().cloned());
    checks.push(gpu::smoke(opts, &cards, docker.conn.as_ref()).await);
    checks.extend(host::storage(opts, docker.root_dir.as_deref()));
    checks.extend(host::database(opts, docker.root_dir.as_deref(), &cards.vram()).await);
    checks.push(host::listen(opts));
    if opts.runner {
        checks.push(uids::job_uids(opts.job_uid_range, docker.userns_remap));
    }
    checks.push(egress::egress(opts).await);
    checks
}

/// Whether any check failed.
pub fn any_failed(checks: &[Check]) -> bool {
    checks.iter().any(|c| c.status == Status::Fail)
}

/// The checks as lines for people: `pass  name  detail`, and the fix under a warn or fail.
pub fn render_text(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        out.push_str(&format!(
            "{:<4}  {:<18} {}\n",
            c.status.as_str(),
            c.name,
            c.detail
        ));
        if let Some(fix) = &c.fix {
            out.push_str(&format!("{:<4}  {:<18} fix: {}\n", "", "", fix));
        }
    }
    let count = |s| checks.iter().filter(|c| c.status == s).count();
    out.push_str(&format!(
        "{} passed, {} warned, {} failed\n",
        count(Status::Pass),
        count(Status::Warn),
        count(Status::Fail)
    ));
    out
}

/// The checks as one JSON document.
pub fn render_json(checks: &[Check]) -> serde_json::Value {
    serde_json::json!({
        "ok": !any_failed(checks),
        "checks": checks,
    })
}
