//! Where a member's webhook may go (SSRF): the public internet, and beyond it only what the launch
//! policy's `webhook_allowlist` names. Loopback, link-local (the cloud metadata address among
//! them), private ranges (RFC 1918, fc00::/7, CGNAT 100.64/10), unspecified, multicast and
//! broadcast addresses, and every gpuq node's own address are refused.
//!
//! A URL is checked when it is saved and again at each send, after its name is resolved; the send
//! then connects to the very address that was checked ([`Checked::addr`]), so a name that
//! resolves elsewhere between the check and the connection (DNS rebinding) changes nothing.

use ipnet::IpNet;
use reqwest::Url;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// What the allowlist lets through, and which hosts are gpuq's own.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    nets: Vec<IpNet>,
    hosts: Vec<(String, Option<u16>)>,
    own: Vec<IpAddr>,
}

/// A URL that may be reached, and the address to connect to.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The URL.
    pub url: Url,
    /// Its host name, when it is one (not an address): the send pins it to [`Checked::addr`].
    pub domain: Option<String>,
    /// The checked address the send connects to.
    pub addr: SocketAddr,
}

impl Guard {
    /// A guard from the policy's `webhook_allowlist` entries and gpuq's own addresses (this
    /// node's listen address, every node's advertise address, resolved).
    pub fn new(allowlist: &[String], own: Vec<IpAddr>) -> Guard {
        let mut g = Guard {
            own,
            ..Guard::default()
        };
        for entry in allowlist {
            let entry = entry.trim().to_ascii_lowercase();
            if let Ok(net) = entry.parse::<IpNet>() {
                g.nets.push(net);
            } else if let Ok(ip) = entry.parse::<IpAddr>() {
                g.nets.push(IpNet::from(ip));
            } else if let Ok(sa) = entry.parse::<SocketAddr>() {
                g.hosts.push((sa.ip().to_string(), Some(sa.port())));
            } else if let Some((h, p)) = entry.rsplit_once(':') {
                g.hosts.push((h.to_owned(), p.parse().ok()));
            } else {
                g.hosts.push((entry, None));
            }
        }
        g
    }

    fn host_allowed(&self, host: &str, port: u16) -> bool {
        self.hosts
            .iter()
            .any(|(h, p)| h == host && p.is_none_or(|p| p == port))
    }

    /// Whether `ip` may be reached when the host itself is not allowlisted; `Err` says why not.
    fn address_allowed(&self, ip: IpAddr) -> Result<(), String> {
        let ip = canonical(ip);
        if self.nets.iter().any(|n| n.contains(&ip)) {
            return Ok(());
        }
        if self.own.iter().any(|o| canonical(*o) == ip) {
            return Err(format!("{ip} is a gpuq node's own address"));
        }
        match forbidden_class(ip) {
            Some(class) => Err(format!("{ip} is a {class} address")),
            None => Ok(()),
        }
    }

    /// Checks `raw`: an `http`/`https` URL without credentials whose every resolved address may
    /// be reached. Returns the address to connect to. The error names the URL and why.
    pub async fn check(&self, raw: &str) -> Result<Checked, String> {
        let url = Url::parse(raw).map_err(|e| format!("`{raw}` is not a URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("`{raw}`: only http:// and https:// URLs"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!(
                "`{raw}`: no user name or password in the URL (sign with the secret instead)"
            ));
        }
        let port = url
            .port_or_known_default()
            .ok_or_else(|| format!("`{raw}` has no port"))?;
        let host = url
            .host_str()
            .ok_or_else(|| format!("`{raw}` has no host"))?;
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        let (domain, addrs): (Option<String>, Vec<IpAddr>) = match literal.parse::<IpAddr>() {
            Ok(ip) => (None, vec![ip]),
            Err(_) => {
                let d = host.to_ascii_lowercase();
                let found = resolve(&d, port)
                    .await
                    .map_err(|e| format!("`{raw}`: {d} cannot be resolved: {e}"))?;
                (Some(d), found)
            }
        };
        let host = match &domain {
            Some(d) => d.clone(),
            None => canonical(addrs[0]).to_string(),
        };
        let allowed_host = self.host_allowed(&host, port);
        let mut first = None;
        for ip in &addrs {
            if !allowed_host {
                self.address_allowed(*ip).map_err(|why| {
                    format!(
                        "`{raw}` may not be reached: {why} (an admin may allow it in the launch \
                         policy's webhook_allowlist)"
                    )
                })?;
            }
            first.get_or_insert(*ip);
        }
        let ip = first.ok_or_else(|| format!("`{raw}`: its host has no address"))?;
        Ok(Checked {
            url,
            domain,
            addr: SocketAddr::new(ip, port),
        })
    }
}

/// Resolves `host` (bounded to 5 s).
async fn resolve(host: &str, port: u16) -> Result<Vec<IpAddr>, String> {
    let lookup = tokio::net::lookup_host((host, port));
    match tokio::time::timeout(Duration::from_secs(5), lookup).await {
        Err(_) => Err("the lookup took longer than 5 s".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(found)) => {
            let v: Vec<IpAddr> = found.map(|a| a.ip()).collect();
            if v.is_empty() {
                Err("no address".into())
            } else {
                Ok(v)
            }
        }
    }
}

/// An IPv4 address carried in IPv6 (`::ffff:127.0.0.1`) is judged as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// The kind of address a webhook may not reach by default, or `None` for a public one.
pub fn forbidden_class(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(v4) => v4_class(v4),
        IpAddr::V6(v6) => v6_class(v6),
    }
}

fn v4_class(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() || o[0] == 0 {
        Some("unspecified (\"this network\")")
    } else if ip.is_link_local() {
        Some("link-local (cloud metadata among them)")
    } else if ip.is_private() {
        Some("private (RFC 1918)")
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        Some("shared (CGNAT, 100.64.0.0/10)")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if ip.is_broadcast() || o[0] >= 240 {
        Some("reserved or broadcast")
    } else if o[0] == 192 && o[1] == 0 && o[2] == 0 {
        Some("IETF protocol assignment (192.0.0.0/24)")
    } else if o[0] == 198 && (o[1] & 0xfe) == 18 {
        Some("benchmarking (198.18.0.0/15)")
    } else {
        None
    }
}

fn v6_class(ip: Ipv6Addr) -> Option<&'static str> {
    let seg = ip.segments();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("unspecified")
    } else if (seg[0] & 0xffc0) == 0xfe80 {
        Some("link-local")
    } else if (seg[0] & 0xfe00) == 0xfc00 {
        Some("private (unique local, fc00::/7)")
    } else if (seg[0] & 0xffc0) == 0xfec0 {
        Some("site-local")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if seg[0] == 0x64 && seg[1] == 0xff9b {
        // NAT64 carries an IPv4 address in its last 32 bits: judge that one.
        let v4 = Ipv4Addr::new(
            (seg[6] >> 8) as u8,
            seg[6] as u8,
            (seg[7] >> 8) as u8,
            seg[7] as u8,
        );
        v4_class(v4)
    } else if let Some(v4) = ip.to_ipv4() {
        // IPv4-compatible (deprecated) addresses: `::127.0.0.1`.
        if seg[..6].iter().all(|s| *s == 0) {
            v4_class(v4)
        } else {
            None
        }
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(s: &str) -> Option<&'static str> {
        forbidden_class(s.parse().unwrap())
    }

    #[test]
    fn every_forbidden_range_is_refused_and_public_addresses_pass() {
        for ip in [
            "127.0.0.1",
            "127.9.9.9",
            "0.0.0.0",
            "169.254.169.254",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.254",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "::127.0.0.1",
        ] {
            assert!(class(ip).is_some(), "{ip} passed");
        }
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "100.128.0.1",
            "172.32.0.1",
            "2606:4700::1111",
        ] {
            assert_eq!(class(ip), None, "{ip} refused");
        }
    }

    #[tokio::test]
    async fn the_allowlist_opens_exactly_what_it_names() {
        let g = Guard::new(
            &["127.0.0.1:8080".into(), "10.0.0.0/8".into()],
            vec!["203.0.113.7".parse().unwrap()],
        );
        assert!(g.check("http://127.0.0.1:8080/hook").await.is_ok());
        assert!(g.check("http://127.0.0.1:8081/hook").await.is_err());
        assert!(g.check("http://10.9.9.9/x").await.is_ok());
        assert!(g.check("http://192.168.0.1/x").await.is_err());
        let own = g.check("https://203.0.113.7/x").await.unwrap_err();
        assert!(own.contains("gpuq node"), "{own}");
        assert!(g.check("ftp://1.1.1.1/x").await.is_err());
        assert!(g.check("http://user:pw@1.1.1.1/x").await.is_err());
        assert!(g.check("http://[::ffff:127.0.0.1]:8080/x").await.is_ok());
    }
}
