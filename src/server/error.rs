//! The one way domain code turns an unexpected failure into [`AppError::Internal`]: the cause is
//! logged here with what was being done, and only the safe, typed error travels on. The edges
//! (`http`, the server functions, the CLI) decide what status or message each error becomes.

use crate::model::AppError;
use std::fmt::Display;

/// Turns any error into [`AppError::Internal`], logging the cause with what was being done.
pub trait OrInternal<T> {
    /// Logs the error with `doing` and answers `Internal`.
    fn or_internal(self, doing: &str) -> Result<T, AppError>;
}

impl<T, E: Display> OrInternal<T> for Result<T, E> {
    fn or_internal(self, doing: &str) -> Result<T, AppError> {
        self.map_err(|e| {
            tracing::error!(error = %e, "{doing}");
            AppError::Internal
        })
    }
}
