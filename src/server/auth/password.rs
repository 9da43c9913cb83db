//! argon2id hashing, always off the async runtime (one hash costs tens of milliseconds of CPU).

use crate::model::AppError;
use crate::server::error::OrInternal;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, SaltString};
use argon2::{Argon2, PasswordHasher, PasswordVerifier};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::Semaphore;

/// Shortest password accepted for new accounts.
pub const MIN_LEN: usize = 8;

/// Checks a new password against the policy.
pub fn check_policy(password: &str) -> Result<(), AppError> {
    if password.chars().count() < MIN_LEN {
        return Err(AppError::invalid(
            "password",
            format!("password must be at least {MIN_LEN} characters"),
        ));
    }
    if password.len() > 1024 {
        return Err(AppError::invalid(
            "password",
            "password must be at most 1024 bytes",
        ));
    }
    Ok(())
}

/// Hashes a password into a PHC string.
pub async fn hash(password: String) -> Result<String, AppError> {
    tokio::task::spawn_blocking(move || hash_blocking(&password))
        .await
        .or_internal("password hashing task")?
}

fn hash_blocking(password: &str) -> Result<String, AppError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .or_internal("hashing a password")
}

/// Seconds a caller refused by a full [`HashGate`] is told to wait.
pub const BUSY_RETRY_AFTER_S: u64 = 2;

/// The global bound on concurrent password checks: each one holds tens of MiB and a core for tens
/// of milliseconds, so an anonymous flood must not start more than the machine can carry. When
/// full, a check is refused at once (503 with `Retry-After`) rather than queued.
#[derive(Debug, Clone)]
pub struct HashGate {
    permits: Arc<Semaphore>,
    checks: Arc<AtomicU64>,
}

impl HashGate {
    /// A gate letting `limit` checks (at least one) run at once.
    pub fn new(limit: usize) -> Self {
        HashGate {
            permits: Arc::new(Semaphore::new(limit.max(1))),
            checks: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The default bound: one check per available core, and at least 4 (so that a few people
    /// signing in at once on a small machine are not turned away; 4 checks hold about 80 MiB).
    pub fn per_core() -> Self {
        Self::new(std::thread::available_parallelism().map_or(4, |n| n.get().max(4)))
    }

    /// How many passwords this gate has let be checked since it was made (for tests and metrics).
    pub fn checks(&self) -> u64 {
        self.checks.load(Ordering::Relaxed)
    }

    /// Verifies a password like [`verify`], or refuses with [`AppError::Busy`] when the bound is
    /// reached.
    pub async fn verify(&self, password: String, stored: Option<String>) -> Result<bool, AppError> {
        let Ok(_permit) = Arc::clone(&self.permits).try_acquire_owned() else {
            return Err(AppError::Busy {
                message: "too many password checks at once".into(),
                retry_after_s: BUSY_RETRY_AFTER_S,
            });
        };
        self.checks.fetch_add(1, Ordering::Relaxed);
        verify(password, stored).await
    }
}

impl Default for HashGate {
    fn default() -> Self {
        Self::per_core()
    }
}

/// Verifies a password against a stored hash. With no stored hash (unknown user) it verifies against
/// a fixed dummy hash so that the answer takes as long either way. Sign-ins go through
/// [`HashGate::verify`] instead.
pub async fn verify(password: String, stored: Option<String>) -> Result<bool, AppError> {
    tokio::task::spawn_blocking(move || {
        let dummy;
        let phc = match &stored {
            Some(s) => s.as_str(),
            None => {
                dummy = dummy_hash()?;
                dummy.as_str()
            }
        };
        let parsed = PasswordHash::new(phc).or_internal("parsing a stored password hash")?;
        let ok = Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok();
        Ok(ok && stored.is_some())
    })
    .await
    .or_internal("password verification task")?
}

fn dummy_hash() -> Result<String, AppError> {
    static DUMMY: OnceLock<String> = OnceLock::new();
    if let Some(h) = DUMMY.get() {
        return Ok(h.clone());
    }
    let h = hash_blocking("gpuq-timing-equaliser")?;
    Ok(DUMMY.get_or_init(|| h).clone())
}
