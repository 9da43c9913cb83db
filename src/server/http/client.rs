//! Which client a request comes from. Behind a reverse proxy every request arrives from the proxy's
//! address, so the sign-in throttle would count every user as one client; the proxy says who the
//! client was in `X-Forwarded-For`. That header is believed only when the peer is a trusted proxy
//! (`--trusted-proxy`), and then only as far as the trusted hops go: the client is the rightmost
//! address in the chain that is not itself a trusted proxy. Whatever a client writes into the
//! header itself sits to the left of what its proxy appended, so it is never reached.

use crate::server::auth::ClientAddr;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use ipnet::IpNet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The proxies whose `X-Forwarded-For` is believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Arc<[IpNet]>);

impl TrustedProxies {
    /// The proxies in `nets`.
    pub fn new(nets: &[IpNet]) -> Self {
        TrustedProxies(nets.into())
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|n| n.contains(&ip))
    }

    /// The client of a request that came from `peer` with `headers`.
    pub fn client_of(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = peer.to_canonical();
        if !self.trusts(client) {
            return client;
        }
        let hops: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect();
        for hop in hops.iter().rev() {
            // Something that is not an address ends the chain: the last hop believed stands.
            let Ok(ip) = hop.parse::<IpAddr>() else {
                break;
            };
            client = ip.to_canonical();
            if !self.trusts(client) {
                break;
            }
        }
        client
    }
}

/// Middleware: records the request's [`ClientAddr`] for the handlers (the sign-in throttle).
pub async fn client_addr(
    State(proxies): State<TrustedProxies>,
    mut req: Request,
    next: Next,
) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    if let Some(peer) = peer {
        let client = proxies.client_of(peer, req.headers());
        req.extensions_mut().insert(ClientAddr(client));
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn xff(values: &[&'static str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", HeaderValue::from_static(v));
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let proxies = TrustedProxies::new(&["10.0.0.0/8".parse().unwrap()]);
        // From an untrusted peer the header is ignored.
        let forged = xff(&["1.2.3.4"]);
        assert_eq!(proxies.client_of(ip("192.0.2.9"), &forged), ip("192.0.2.9"));
        // Through a trusted proxy: what the client wrote is left of what the proxy appended.
        let chain = xff(&["6.6.6.6, 203.0.113.5"]);
        assert_eq!(proxies.client_of(ip("10.1.1.1"), &chain), ip("203.0.113.5"));
        // Two trusted proxies in a row; several header lines read as one list.
        let two = xff(&["6.6.6.6", "203.0.113.5, 10.2.2.2"]);
        assert_eq!(proxies.client_of(ip("10.1.1.1"), &two), ip("203.0.113.5"));
        // Garbage ends the chain at the last address believed.
        let junk = xff(&["203.0.113.5, not-an-ip"]);
        assert_eq!(proxies.client_of(ip("10.1.1.1"), &junk), ip("10.1.1.1"));
        // No header: the proxy itself.
        assert_eq!(
            proxies.client_of(ip("10.1.1.1"), &HeaderMap::new()),
            ip("10.1.1.1")
        );
        // An IPv4 peer seen on an IPv6 socket is the same peer.
        assert_eq!(
            proxies.client_of(ip("::ffff:10.1.1.1"), &chain),
            ip("203.0.113.5")
        );
        // Trusting no one: the peer, whatever the header says.
        assert_eq!(
            TrustedProxies::default().client_of(ip("10.1.1.1"), &chain),
            ip("10.1.1.1")
        );
    }
}
