//! Reading what lives on another node: a job's log stays on the disk of the node that ran it, and
//! any other node asks that node for it over HTTP, at the advertise URL the node registered.
//!
//! A forwarded request carries no user credential. The node that got the user's request checks
//! the user's right to the log itself, then signs a short-lived grant for exactly that job with the
//! secret the nodes share (`--cluster-secret`): HMAC-SHA-256 over the job, the user (whose bound
//! on open streams the owning node applies) and an expiry. A grant seen on the wire opens that one
//! log for at most [`GRANT_TTL_S`] seconds, never anything else, and the secret itself never
//! travels. Without a secret a node neither forwards nor answers forwarded requests.

use crate::model::AppError;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use uuid::Uuid;

/// The header a forwarded request carries its grant in.
pub const GRANT_HEADER: &str = "x-gpuq-grant";
/// How long a grant is good for (seconds). Node clocks must agree to within this (NTP).
pub const GRANT_TTL_S: u64 = 60;
/// The shortest secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 32;

/// The secret the nodes of one gpuq share. Its `Debug` never shows it.
#[derive(Clone)]
pub struct ClusterSecret(Vec<u8>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(…)")
    }
}

impl ClusterSecret {
    /// A secret from its text, refused when shorter than [`MIN_SECRET_BYTES`] (after trimming
    /// the white space a file or an environment file leaves around it).
    pub fn new(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "is {} bytes long; give at least {MIN_SECRET_BYTES} random bytes, e.g. the output \
                 of `openssl rand -hex 32`, the same on every node",
                text.len()
            ));
        }
        Ok(ClusterSecret(text.as_bytes().to_vec()))
    }

    fn mac(&self, job: Uuid, user: Uuid, expires: u64) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(format!("gpuq-log-grant-v1\n{job}\n{user}\n{expires}").as_bytes());
        mac
    }

    /// A grant to read `job`'s log for `user`, good until `now + GRANT_TTL_S`.
    pub fn grant(&self, job: Uuid, user: Uuid, now: SystemTime) -> String {
        let expires = unix(now) + GRANT_TTL_S;
        let sig = self.mac(job, user, expires).finalize().into_bytes();
        format!("{user}.{expires}.{}", hex::encode(sig))
    }

    /// Checks a grant for `job` at `now`; answers the user it was made for. The signature is
    /// compared in constant time.
    pub fn check(&self, grant: &str, job: Uuid, now: SystemTime) -> Result<Uuid, String> {
        let mut parts = grant.splitn(3, '.');
        let (Some(user), Some(expires), Some(sig)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err("the grant is not `user.expires.signature`".into());
        };
        let user: Uuid = user.parse().map_err(|_| "the grant's user is not a uuid")?;
        let expires: u64 = expires
            .parse()
            .map_err(|_| "the grant's expiry is not a number")?;
        let sig = hex::decode(sig).map_err(|_| "the grant's signature is not hex")?;
        self.mac(job, user, expires)
            .verify_slice(&sig)
            .map_err(|_| "the grant's signature is wrong (another job, or another secret)")?;
        let now = unix(now);
        if expires < now {
            return Err(format!("the grant expired {} s ago", now - expires));
        }
        if expires > now + GRANT_TTL_S * 2 {
            return Err("the grant expires too far ahead (are the nodes' clocks apart?)".into());
        }
        Ok(user)
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// What a process knows to reach the other nodes: its own name, the shared secret if any, and
/// one HTTP client.
#[derive(Clone, Debug)]
pub struct Peers {
    /// This process's node.
    pub node: String,
    /// `--cluster-secret`, when given.
    pub secret: Option<ClusterSecret>,
    client: reqwest::Client,
}

impl Peers {
    /// The peers of node `node`.
    pub fn new(node: &str, secret: Option<ClusterSecret>) -> Self {
        // No redirects: a grant is for the node asked, and a node (or whatever answers at its
        // advertise URL) must not be able to send it, with the reader's request, anywhere else.
        // A 3xx is a refusal like any other.
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(3))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client with rustls");
        Peers {
            node: node.to_owned(),
            secret,
            client,
        }
    }

    /// Asks the node at `base` (its advertise URL) for `job`'s log on behalf of `user`, who may
    /// read it. `follow` keeps the answer open until the job ends. The node's answer is returned
    /// as it comes; a refusal or an unreachable node is an error that names the node.
    pub async fn log(
        &self,
        node: &str,
        base: &str,
        job: Uuid,
        user: Uuid,
        tail: Option<usize>,
        follow: bool,
    ) -> Result<reqwest::Response, AppError> {
        let Some(secret) = &self.secret else {
            return Err(AppError::Unavailable(format!(
                "job {job}'s log is on node `{node}`; this node cannot fetch it because no \
                 cluster secret is set: give every node the same --cluster-secret \
                 (GPUQ_CLUSTER_SECRET), or ask node `{node}` directly at {base}"
            )));
        };
        let url = format!("{}/internal/v1/jobs/{job}/logs", base.trim_end_matches('/'));
        let mut query: Vec<(&str, String)> = vec![("follow", follow.to_string())];
        query.extend(tail.map(|n| ("tail", n.to_string())));
        let mut req = self
            .client
            .get(&url)
            .query(&query)
            .header(GRANT_HEADER, secret.grant(job, user, SystemTime::now()));
        if !follow {
            req = req.timeout(Duration::from_secs(30));
        }
        let answer = req.send().await.map_err(|e| {
            AppError::Unavailable(format!(
                "job {job}'s log is on node `{node}`, which did not answer at {base}: {e}"
            ))
        })?;
        if answer.status().is_success() {
            return Ok(answer);
        }
        let status = answer.status();
        let body = answer.text().await.unwrap_or_default();
        tracing::warn!(%node, %job, %status, body = %body, "a node refused a forwarded log read");
        Err(AppError::Unavailable(format!(
            "job {job}'s log is on node `{node}`, which refused to hand it over ({status}): {}",
            body.chars().take(300).collect::<String>()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(c: char) -> ClusterSecret {
        ClusterSecret::new(&c.to_string().repeat(40)).unwrap()
    }

    #[test]
    fn a_short_secret_is_refused_with_its_length() {
        let e = ClusterSecret::new("  too-short \n").unwrap_err();
        assert!(e.starts_with("is 9 bytes long"), "{e}");
        assert!(ClusterSecret::new(&"x".repeat(32)).is_ok());
        assert_eq!(format!("{:?}", secret('s')), "ClusterSecret(…)");
    }

    #[test]
    fn a_grant_opens_its_own_job_only_while_fresh_and_only_under_its_secret() {
        let (job, other, user) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let now = SystemTime::now();
        let s = secret('a');
        let g = s.grant(job, user, now);
        assert_eq!(s.check(&g, job, now), Ok(user));
        assert!(s
            .check(&g, other, now)
            .unwrap_err()
            .contains("signature is wrong"));
        assert!(secret('b').check(&g, job, now).is_err());
        let later = now + Duration::from_secs(GRANT_TTL_S + 2);
        assert!(s.check(&g, job, later).unwrap_err().contains("expired"));
        // Another user, or a later expiry, breaks the signature: neither can be edited in.
        let (_, rest) = g.split_once('.').unwrap();
        let forged = format!("{}.{rest}", Uuid::new_v4());
        assert!(s.check(&forged, job, now).is_err());
        let mut parts: Vec<String> = g.split('.').map(str::to_owned).collect();
        parts[1] = (parts[1].parse::<u64>().unwrap() + 3600).to_string();
        assert!(s.check(&parts.join("."), job, now).is_err());
        for junk in ["", "a.b", "x.1.00", &format!("{user}.1.zz")] {
            assert!(s.check(junk, job, now).is_err(), "{junk}");
        }
    }
}
