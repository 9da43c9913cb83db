//! `gpuq firewall apply|check|remove`: the host firewall that keeps jobs on the job network from
//! the host, the private ranges and link-local (see [`crate::server::runtime::egress`]). Run as
//! root on each node that runs jobs, after dockerd starts and whenever the allowed destinations
//! change (`packaging/systemd/gpuq-firewall.service` does both).

use crate::server::runtime::egress::{self, Allow, Plan};
use crate::server::runtime::Docker;

/// What `gpuq firewall` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Install the rules (the job network is created first if it does not exist yet).
    Apply,
    /// Say whether the installed rules are exactly the meant ones.
    Check,
    /// Take the rules out.
    Remove,
}

/// Where and what: the Docker socket, and the destinations an admin allows.
#[derive(Debug, Clone, Default)]
pub struct FirewallOptions {
    /// Docker socket; `None`: the local default.
    pub docker_socket: Option<String>,
    /// Destinations jobs may reach besides the internet.
    pub allow: Vec<Allow>,
}

/// Parses the allowed destinations (`CIDR[:PORT]` each); the error names the entry.
pub fn parse_allow(entries: &[String]) -> Result<Vec<Allow>, String> {
    entries
        .iter()
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            e.trim()
                .parse()
                .map_err(|m| format!("--egress-allow (GPUQ_EGRESS_ALLOW): {m}"))
        })
        .collect()
}

/// The plan for this host's job network; with `create`, the network is made first if missing.
pub async fn plan(opts: &FirewallOptions, create: bool) -> Result<Option<(Plan, bool)>, String> {
    let docker = Docker::connect_to(opts.docker_socket.as_deref())
        .await
        .map_err(|e| format!("Docker: {e}"))?;
    if create {
        docker
            .ensure_job_network()
            .await
            .map_err(|e| format!("the job network: {e}"))?;
    }
    let Some((bridge, ipv6)) = docker
        .job_network_bridge()
        .await
        .map_err(|e| format!("the job network: {e}"))?
    else {
        return Ok(None);
    };
    let resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    Ok(Some((
        Plan {
            bridge,
            prefix: "GPUQ".into(),
            allow: opts.allow.clone(),
            resolvers: egress::resolvers_of(&resolv),
        },
        ipv6,
    )))
}

/// Carries out `action`; the text says what was done or found.
pub async fn run(action: Action, opts: &FirewallOptions) -> Result<String, String> {
    let found = plan(opts, action == Action::Apply).await?;
    let Some((plan, ipv6)) = found else {
        return Ok(format!(
            "the job network {} does not exist: nothing to do",
            crate::server::runtime::JOB_NETWORK
        ));
    };
    let task = tokio::task::spawn_blocking(move || match action {
        Action::Apply => egress::apply(&plan).map(|()| {
            let mut said = format!(
                "jobs on {} ({}) reach the internet, and of the host, the private ranges and \
                 link-local only {} allowed destination(s) and DNS at {:?}",
                crate::server::runtime::JOB_NETWORK,
                plan.bridge,
                plan.allow.len(),
                plan.resolvers
            );
            if ipv6 {
                said.push_str("; the job network has IPv6, which these rules do not cover");
            }
            said
        }),
        Action::Remove => {
            egress::remove(&plan).map(|()| format!("rules for {} removed", plan.bridge))
        }
        Action::Check => egress::differences(&plan).and_then(|p| {
            if p.is_empty() {
                Ok(format!("the rules for {} are in place", plan.bridge))
            } else {
                Err(p.join("; "))
            }
        }),
    });
    task.await.map_err(|e| format!("firewall: {e}"))?
}
