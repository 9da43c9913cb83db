//! `gpuq doctor` and `gpuq firewall`: the host tools, from their flags.

use anyhow::{anyhow, Result};

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

/// `gpuq doctor`: runs the checks, prints them (lines or JSON) and fails when any check failed.
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
        job_uid_range: crate::server::serve::job_uid_range(s)?,
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
