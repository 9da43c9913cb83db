//! The `egress` check: are the host firewall's rules for the job network in place, exactly?

use super::{Check, DoctorOptions};
use crate::server::firewall::{self, FirewallOptions};
use crate::server::runtime::egress;

const NAME: &str = "egress";

/// Passes when the installed rules are exactly those `gpuq firewall apply` makes with the same
/// allowed destinations; warns when they are missing or differ, or cannot be read (not root).
pub(super) async fn egress(opts: &DoctorOptions) -> Check {
    if !opts.runner {
        return Check::pass(NAME, "this node runs no jobs");
    }
    let fw = FirewallOptions {
        docker_socket: opts.docker_socket.clone(),
        allow: opts.egress_allow.clone(),
    };
    let fix = "run `gpuq firewall apply` as root (packaging/systemd/gpuq-firewall.service), with \
               the same --egress-allow";
    let plan = match firewall::plan(&fw, false).await {
        Ok(Some((plan, _))) => plan,
        Ok(None) => {
            return Check::warn(
                NAME,
                "the job network does not exist yet, so no firewall rules hold it",
                fix,
            )
        }
        Err(e) => return Check::warn(NAME, format!("cannot look at the job network: {e}"), fix),
    };
    if !nix::unistd::geteuid().is_root() {
        return Check::warn(
            NAME,
            "the firewall can only be read as root",
            "run `gpuq doctor` as root to check the egress rules",
        );
    }
    let bridge = plan.bridge.clone();
    match tokio::task::spawn_blocking(move || egress::differences(&plan)).await {
        Ok(Ok(p)) if p.is_empty() => Check::pass(
            NAME,
            format!(
                "jobs on {bridge} reach neither the host, the private ranges nor link-local, \
                 beyond {} allowed destination(s)",
                opts.egress_allow.len()
            ),
        ),
        Ok(Ok(p)) => Check::warn(
            NAME,
            format!(
                "jobs on {bridge} can reach the host or the private ranges: {}",
                p.join("; ")
            ),
            fix,
        ),
        Ok(Err(e)) => Check::warn(NAME, format!("reading the firewall: {e}"), fix),
        Err(e) => Check::warn(NAME, format!("reading the firewall: {e}"), fix),
    }
}
