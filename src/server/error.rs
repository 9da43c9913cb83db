//! The one way domain code turns an unexpected failure into [`AppError::Internal`] (or, when the
//! database is out of reach, [`AppError::Unavailable`]): the cause is logged here with what was
//! being done, and only the safe, typed error travels on. The edges
//! (`http`, the server functions, the CLI) decide what status or message each error becomes.

use crate::model::AppError;
use std::any::Any;
use std::fmt::Display;

/// Turns any error into [`AppError::Internal`], logging the cause with what was being done.
pub trait OrInternal<T> {
    /// Logs the error with `doing` and answers `Internal`.
    fn or_internal(self, doing: &str) -> Result<T, AppError>;
}

impl<T, E: Display + 'static> OrInternal<T> for Result<T, E> {
    fn or_internal(self, doing: &str) -> Result<T, AppError> {
        self.map_err(|e| {
            let any = &e as &dyn Any;
            let db_error = any.downcast_ref::<sqlx::Error>().or_else(|| {
                any.downcast_ref::<anyhow::Error>()
                    .and_then(|a| a.downcast_ref::<sqlx::Error>())
            });
            if let Some(why) = db_error.and_then(database_out_of_reach) {
                tracing::warn!(error = %e, "{doing}: the database is out of reach");
                return AppError::Unavailable(format!(
                    "the database is out of reach ({why}); try again shortly"
                ));
            }
            tracing::error!(error = %e, "{doing}");
            AppError::Internal
        })
    }
}

/// Why an error means the database cannot be reached now (down, restarting, or no connection to
/// be had), so the caller hears "unavailable, try again" (503) rather than an internal error.
fn database_out_of_reach(e: &sqlx::Error) -> Option<&'static str> {
    match e {
        sqlx::Error::PoolTimedOut => Some("no connection could be had in time"),
        sqlx::Error::PoolClosed => Some("this server is shutting down"),
        sqlx::Error::Io(_) => Some("the connection failed"),
        sqlx::Error::Database(d) => match d.code().as_deref() {
            // Class 08: connection exceptions. 57P01-03: shut down by an admin, crash, or
            // starting up.
            Some(c) if c.starts_with("08") => Some("the connection failed"),
            Some("57P01" | "57P02" | "57P03") => Some("it is restarting"),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped<E: Display + 'static>(e: E) -> AppError {
        Err::<(), E>(e).or_internal("testing").unwrap_err()
    }

    #[test]
    fn an_unreachable_database_is_unavailable_and_anything_else_internal() {
        for e in [
            mapped(sqlx::Error::PoolTimedOut),
            mapped(sqlx::Error::Io(
                std::io::ErrorKind::ConnectionRefused.into(),
            )),
            mapped(anyhow::Error::from(sqlx::Error::PoolTimedOut).context("reading the queue")),
        ] {
            assert_eq!(e.status(), 503, "{e}");
            assert!(e.to_string().contains("database is out of reach"), "{e}");
        }
        assert_eq!(mapped(sqlx::Error::RowNotFound), AppError::Internal);
        assert_eq!(mapped("some other failure"), AppError::Internal);
        assert_eq!(
            mapped(anyhow::anyhow!("not a database error")),
            AppError::Internal
        );
    }
}
