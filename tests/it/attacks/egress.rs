//! Egress: a job on the job network reaching the host's own services through the bridge gateway
//! (and so anything the host listens on, the private ranges, cloud metadata). The rules
//! `gpuq firewall apply` installs refuse it, except for destinations an admin allows.
//!
//! The test runs on a job network of its own (same options as gpuq's, its own bridge and chain
//! names), so the rules it installs and removes touch no other test's jobs.

use crate::support::docker::docker_cli;
use crate::support::isolation::IMAGE;
use gpuq::server::runtime::egress::{self, Allow, Plan};
use std::io::Write;
use std::net::TcpListener;

/// A listener on all of the host's addresses that greets every connection with `banner`.
fn host_service(banner: &'static str) -> u16 {
    let l = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let _ = s.write_all(banner.as_bytes());
        }
    });
    port
}

/// A bridge network like gpuq's job network, and the rules for it; both removed when dropped.
struct TestNet {
    name: String,
    plan: Plan,
}

impl Drop for TestNet {
    fn drop(&mut self) {
        let _ = egress::remove(&self.plan);
        let _ = std::process::Command::new("docker")
            .args(["network", "rm", &self.name])
            .output();
    }
}

/// What a container on `net` reads from `ip:port` within 3 s (empty: nothing).
fn read_from(net: &str, ip: &str, port: u16) -> String {
    let out = std::process::Command::new("docker")
        .args(["run", "--rm", "--network", net, IMAGE, "sh", "-c"])
        .arg(format!(
            "busybox nc -w 3 {ip} {port} </dev/null; echo exit=$?"
        ))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn a_job_reaches_no_host_service_but_what_an_admin_allows() {
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..6];
    let name = format!("gpuq-egress-test-{tag}");
    let bridge = format!("gqe{tag}");
    docker_cli(&[
        "network",
        "create",
        "--driver",
        "bridge",
        "-o",
        "com.docker.network.bridge.enable_icc=false",
        "-o",
        &format!("com.docker.network.bridge.name={bridge}"),
        &name,
    ]);
    let gateway = docker_cli(&[
        "network",
        "inspect",
        "-f",
        "{{range .IPAM.Config}}{{.Gateway}}{{end}}",
        &name,
    ]);
    let secret = host_service("host-secret-banner\n");
    let proxy = host_service("allowed-proxy-banner\n");
    let net = TestNet {
        name: name.clone(),
        plan: Plan {
            bridge,
            prefix: format!("GQT{tag}"),
            allow: vec![format!("{gateway}/32:{proxy}").parse::<Allow>().unwrap()],
            resolvers: Vec::new(),
        },
    };
    // Without the rules, the attack works: the job reads a host service through its gateway.
    assert!(read_from(&name, &gateway, secret).contains("host-secret-banner"));
    assert!(!egress::differences(&net.plan).unwrap().is_empty());

    egress::apply(&net.plan).unwrap();
    assert_eq!(
        egress::differences(&net.plan).unwrap(),
        Vec::<String>::new()
    );
    let refused = read_from(&name, &gateway, secret);
    assert!(!refused.contains("host-secret-banner"), "{refused}");
    assert!(refused.contains("exit=1"), "{refused}");
    // What the admin allowed is reached.
    assert!(read_from(&name, &gateway, proxy).contains("allowed-proxy-banner"));
    // The private ranges and link-local (cloud metadata) are refused on the way out.
    let out = egress::listed(&net.plan.forward_chain()).unwrap();
    for range in [
        "169.254.0.0/16",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
    ] {
        assert!(
            out.iter()
                .any(|l| l.contains(&format!("-d {range} -j REJECT"))),
            "{range}: {out:?}"
        );
    }
    // Applying again changes nothing; a rule taken out is noticed (the doctor warns).
    egress::apply(&net.plan).unwrap();
    assert_eq!(
        egress::differences(&net.plan).unwrap(),
        Vec::<String>::new()
    );
    let chain = net.plan.host_chain();
    iptables(&[
        "-D",
        &chain,
        "-j",
        "REJECT",
        "--reject-with",
        "icmp-admin-prohibited",
    ]);
    let problems = egress::differences(&net.plan).unwrap();
    assert!(problems.iter().any(|p| p.contains(&chain)), "{problems:?}");
    assert!(read_from(&name, &gateway, secret).contains("host-secret-banner"));
}

/// gpuq's own job network: the bridge `gpuq firewall` writes its rules for is the interface
/// dockerd really made for it.
#[tokio::test]
async fn the_firewall_names_the_job_networks_real_bridge() {
    let opts = gpuq::server::firewall::FirewallOptions::default();
    let (plan, _ipv6) = gpuq::server::firewall::plan(&opts, true)
        .await
        .unwrap()
        .expect("the job network exists once created");
    assert!(
        std::path::Path::new(&format!("/sys/class/net/{}", plan.bridge)).exists(),
        "{}",
        plan.bridge
    );
    assert_eq!(plan.prefix, "GPUQ");
}

fn iptables(args: &[&str]) {
    let out = std::process::Command::new("iptables")
        .arg("-w")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}
