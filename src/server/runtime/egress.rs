//! What a job on gpuq's job network may reach: the internet, and nothing of the host, the private
//! ranges or link-local (cloud metadata at 169.254.169.254), unless an admin allows a destination.
//! Docker's bridge forwards anywhere and delivers to every address of the host, so the host's
//! firewall enforces it: two chains of `iptables` rules for the job network's bridge, one for
//! traffic the host forwards (jumped to from `DOCKER-USER`, which dockerd keeps first in
//! `FORWARD`), one for traffic to the host itself (jumped to from `INPUT`).
//!
//! gpuq itself runs without the privilege to change the firewall: `gpuq firewall apply` (root,
//! `packaging/systemd/gpuq-firewall.service`) installs the rules, `gpuq doctor` checks them. The
//! rules are plain data ([`rules`]), so the tests compare what is installed with what is meant.

use std::fmt;
use std::net::Ipv4Addr;
use std::process::Command;
use std::str::FromStr;

/// Destinations a job never reaches unless allowed: "this network", the private ranges, carrier
/// NAT, loopback, link-local (cloud metadata), IETF protocol assignments, benchmarking,
/// multicast and the reserved range.
pub const BLOCKED_RANGES: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
];

/// An IPv4 network, `a.b.c.d/len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    addr: Ipv4Addr,
    len: u8,
}

impl FromStr for Net {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, len) = s.split_once('/').unwrap_or((s, "32"));
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("{s:?} is not an IPv4 address or CIDR (a.b.c.d[/len])"))?;
        let len: u8 = len
            .parse()
            .ok()
            .filter(|l| *l <= 32)
            .ok_or_else(|| format!("{s:?}: the prefix length must be 0 to 32"))?;
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        if u32::from(addr) & !mask != 0 {
            return Err(format!(
                "{s:?} has host bits set: write {}/{len}",
                Ipv4Addr::from(u32::from(addr) & mask)
            ));
        }
        Ok(Net { addr, len })
    }
}

impl fmt::Display for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// A destination an admin allows: a network, and a port (TCP and UDP) or every port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allow {
    /// Where.
    pub net: Net,
    /// Which port; `None`: every port.
    pub port: Option<u16>,
}

impl FromStr for Allow {
    type Err = String;
    /// `CIDR` or `CIDR:PORT`, e.g. `10.1.2.3/32:3128` or `192.168.7.0/24`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (net, port) = match s.rsplit_once(':') {
            Some((net, port)) => {
                let port = port
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| format!("{s:?}: the port must be 1 to 65535"))?;
                (net, Some(port))
            }
            None => (s, None),
        };
        Ok(Allow {
            net: net.parse()?,
            port,
        })
    }
}

/// The rules for one job network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The job network's bridge interface (`br-<id>` or its `bridge.name` option).
    pub bridge: String,
    /// Chain names start with this (`GPUQ`: `GPUQ-EGRESS`, `GPUQ-HOST`); tests use their own.
    pub prefix: String,
    /// Destinations an admin allows.
    pub allow: Vec<Allow>,
    /// DNS servers jobs may ask (port 53), as dockerd forwards the job's lookups to them.
    pub resolvers: Vec<Ipv4Addr>,
}

impl Plan {
    /// The chain for traffic the host forwards (out of the bridge).
    pub fn forward_chain(&self) -> String {
        format!("{}-EGRESS", self.prefix)
    }
    /// The chain for traffic to the host itself.
    pub fn host_chain(&self) -> String {
        format!("{}-HOST", self.prefix)
    }

    /// The jumps into the two chains: (chain jumped from, rule).
    pub fn jumps(&self) -> Vec<(String, Vec<String>)> {
        let jump = |to: String| args(&["-i", &self.bridge, "-j", &to]);
        vec![
            ("DOCKER-USER".into(), jump(self.forward_chain())),
            ("INPUT".into(), jump(self.host_chain())),
        ]
    }

    /// Every rule of the two chains, in order, as `iptables -A CHAIN …` arguments after the chain.
    pub fn rules(&self) -> Vec<(String, Vec<String>)> {
        let mut out = Vec::new();
        for chain in [self.forward_chain(), self.host_chain()] {
            let mut add = |rule: Vec<String>| out.push((chain.clone(), rule));
            add(args(&[
                "-m",
                "conntrack",
                "--ctstate",
                "RELATED,ESTABLISHED",
                "-j",
                "RETURN",
            ]));
            for r in &self.resolvers {
                for proto in ["udp", "tcp"] {
                    add(args(&[
                        "-d",
                        &format!("{r}/32"),
                        "-p",
                        proto,
                        "-m",
                        proto,
                        "--dport",
                        "53",
                        "-j",
                        "RETURN",
                    ]));
                }
            }
            for a in &self.allow {
                let net = a.net.to_string();
                match a.port {
                    None => add(args(&["-d", &net, "-j", "RETURN"])),
                    Some(port) => {
                        for proto in ["tcp", "udp"] {
                            add(args(&[
                                "-d",
                                &net,
                                "-p",
                                proto,
                                "-m",
                                proto,
                                "--dport",
                                &port.to_string(),
                                "-j",
                                "RETURN",
                            ]));
                        }
                    }
                }
            }
            let reject = ["-j", "REJECT", "--reject-with", "icmp-admin-prohibited"];
            if chain == self.host_chain() {
                // Nothing of the host: every address it has, on every port.
                add(args(&reject));
            } else {
                for range in BLOCKED_RANGES {
                    let mut rule = args(&["-d", range]);
                    rule.extend(args(&reject));
                    add(rule);
                }
            }
        }
        out
    }
}

fn args(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

/// The IPv4 name servers of a `resolv.conf` (loopback ones are the host's own resolver, which
/// dockerd does not hand to jobs).
pub fn resolvers_of(resolv_conf: &str) -> Vec<Ipv4Addr> {
    resolv_conf
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.trim().parse::<Ipv4Addr>().ok())
        .filter(|ip| !ip.is_loopback())
        .collect()
}

/// Runs `iptables -w` with `args`; the error carries what it said.
fn iptables(args: &[String]) -> Result<String, String> {
    let out = Command::new("iptables")
        .arg("-w")
        .args(args)
        .output()
        .map_err(|e| format!("running iptables: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The rules of `chain` as `iptables -S` prints them (`-A CHAIN …` lines), or why not.
pub fn listed(chain: &str) -> Result<Vec<String>, String> {
    Ok(iptables(&args(&["-S", chain]))?
        .lines()
        .filter(|l| l.starts_with("-A "))
        .map(str::to_owned)
        .collect())
}

/// The `-A CHAIN …` line `iptables -S` prints for `rule` in `chain`.
fn line(chain: &str, rule: &[String]) -> String {
    format!("-A {chain} {}", rule.join(" "))
}

/// Installs the plan: both chains emptied and filled again, the jumps into them moved to the top
/// of `DOCKER-USER` and `INPUT` (a jump for an older bridge of the same chains is removed).
/// Needs root; safe to run again.
pub fn apply(plan: &Plan) -> Result<(), String> {
    for chain in [
        plan.forward_chain(),
        plan.host_chain(),
        "DOCKER-USER".into(),
    ] {
        if iptables(&args(&["-S", &chain])).is_err() {
            iptables(&args(&["-N", &chain]))?;
        }
    }
    for chain in [plan.forward_chain(), plan.host_chain()] {
        iptables(&args(&["-F", &chain]))?;
    }
    for (chain, rule) in plan.rules() {
        let mut a = args(&["-A", &chain]);
        a.extend(rule);
        iptables(&a)?;
    }
    remove_jumps(plan)?;
    for (from, rule) in plan.jumps() {
        let mut a = args(&["-I", &from, "1"]);
        a.extend(rule);
        iptables(&a)?;
    }
    // dockerd keeps `FORWARD` jumping to `DOCKER-USER` first; without its iptables management
    // (`"iptables": false`) nothing does, and the forward chain is jumped to from `FORWARD`.
    if iptables(&args(&["-C", "FORWARD", "-j", "DOCKER-USER"])).is_err() {
        iptables(&args(&["-I", "FORWARD", "1", "-j", "DOCKER-USER"]))?;
    }
    Ok(())
}

/// Removes every jump into the plan's chains (whatever bridge it named).
fn remove_jumps(plan: &Plan) -> Result<(), String> {
    for (from, _) in plan.jumps() {
        for l in listed(&from)? {
            let to_ours = l.ends_with(&format!(" -j {}", plan.forward_chain()))
                || l.ends_with(&format!(" -j {}", plan.host_chain()));
            if to_ours {
                let rule: Vec<String> = l.split(' ').skip(2).map(str::to_owned).collect();
                let mut a = args(&["-D", &from]);
                a.extend(rule);
                iptables(&a)?;
            }
        }
    }
    Ok(())
}

/// Takes the plan's chains and jumps out again (tests; an operator uninstalling gpuq).
pub fn remove(plan: &Plan) -> Result<(), String> {
    remove_jumps(plan)?;
    for chain in [plan.forward_chain(), plan.host_chain()] {
        if iptables(&args(&["-S", &chain])).is_ok() {
            iptables(&args(&["-F", &chain]))?;
            iptables(&args(&["-X", &chain]))?;
        }
    }
    Ok(())
}

/// What is wrong with the installed rules against the plan, as sentences; empty when they match
/// exactly (each chain holds exactly the plan's rules, the jumps for this bridge are in place).
pub fn differences(plan: &Plan) -> Result<Vec<String>, String> {
    let mut problems = Vec::new();
    for chain in [plan.forward_chain(), plan.host_chain()] {
        let want: Vec<String> = plan
            .rules()
            .into_iter()
            .filter(|(c, _)| *c == chain)
            .map(|(c, r)| line(&c, &r))
            .collect();
        match listed(&chain) {
            Err(_) => problems.push(format!("chain {chain} is missing")),
            Ok(have) if have != want => problems.push(format!(
                "chain {chain} holds {} rules, not the {} meant (run gpuq firewall apply again)",
                have.len(),
                want.len()
            )),
            Ok(_) => {}
        }
    }
    for (from, rule) in plan.jumps() {
        let want = line(&from, &rule);
        let have = listed(&from)?;
        if !have.contains(&want) {
            problems.push(format!("{from} does not send {} to its chain", plan.bridge));
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(allow: &[&str]) -> Plan {
        Plan {
            bridge: "br-0123456789ab".into(),
            prefix: "GPUQ".into(),
            allow: allow.iter().map(|a| a.parse().unwrap()).collect(),
            resolvers: vec![Ipv4Addr::new(10, 0, 0, 2)],
        }
    }

    fn lines(p: &Plan) -> Vec<String> {
        p.rules().iter().map(|(c, r)| line(c, r)).collect()
    }

    #[test]
    fn allow_entries_parse_or_say_what_is_wrong() {
        let a: Allow = "10.1.2.3/32:3128".parse().unwrap();
        assert_eq!(a.port, Some(3128));
        assert_eq!(a.net.to_string(), "10.1.2.3/32");
        let a: Allow = "192.168.7.0/24".parse().unwrap();
        assert_eq!(a.port, None);
        assert_eq!(
            "10.1.2.3".parse::<Allow>().unwrap().net.to_string(),
            "10.1.2.3/32"
        );
        for (bad, why) in [
            ("10.1.2.3/33", "0 to 32"),
            ("10.1.2.3/24", "host bits"),
            ("example.com", "not an IPv4"),
            ("10.0.0.0/8:0", "1 to 65535"),
            ("10.0.0.0/8:http", "1 to 65535"),
        ] {
            let e = bad.parse::<Allow>().unwrap_err();
            assert!(
                e.contains(why) && e.contains(bad.split(':').next().unwrap()),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn the_host_and_the_private_ranges_are_refused_after_what_is_allowed() {
        let p = plan(&["10.9.0.0/16:443"]);
        let l = lines(&p);
        let first_reject = l.iter().position(|r| r.contains("REJECT")).unwrap();
        let allow = l
            .iter()
            .position(|r| r.contains("-d 10.9.0.0/16 -p tcp -m tcp --dport 443 -j RETURN"))
            .unwrap();
        assert!(allow < first_reject);
        assert!(l[0].starts_with("-A GPUQ-EGRESS -m conntrack --ctstate RELATED,ESTABLISHED"));
        for range in [
            "169.254.0.0/16",
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
        ] {
            let rule =
                format!("-A GPUQ-EGRESS -d {range} -j REJECT --reject-with icmp-admin-prohibited");
            assert!(l.contains(&rule), "{rule}");
        }
        // To the host itself: everything is refused but replies, DNS and what is allowed.
        let host: Vec<&String> = l.iter().filter(|r| r.starts_with("-A GPUQ-HOST")).collect();
        assert_eq!(
            host.last().unwrap().as_str(),
            "-A GPUQ-HOST -j REJECT --reject-with icmp-admin-prohibited"
        );
        assert!(
            l.contains(&"-A GPUQ-HOST -d 10.0.0.2/32 -p udp -m udp --dport 53 -j RETURN".into())
        );
        assert_eq!(
            p.jumps(),
            vec![
                (
                    "DOCKER-USER".into(),
                    args(&["-i", "br-0123456789ab", "-j", "GPUQ-EGRESS"])
                ),
                (
                    "INPUT".into(),
                    args(&["-i", "br-0123456789ab", "-j", "GPUQ-HOST"])
                ),
            ]
        );
    }

    #[test]
    fn resolvers_come_from_resolv_conf_without_loopback() {
        let conf = "# x\nnameserver 127.0.0.53\nnameserver 10.0.0.2\nnameserver ::1\nsearch a\n";
        assert_eq!(resolvers_of(conf), vec![Ipv4Addr::new(10, 0, 0, 2)]);
    }
}
