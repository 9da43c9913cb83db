//! argon2id hashing, always off the async runtime (one hash costs tens of milliseconds of CPU).

use crate::model::AppError;
use crate::server::error::OrInternal;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, SaltString};
use argon2::{Argon2, PasswordHasher, PasswordVerifier};
use std::sync::OnceLock;

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

/// Verifies a password against a stored hash. With no stored hash (unknown user) it verifies against
/// a fixed dummy hash so that the answer takes as long either way.
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
