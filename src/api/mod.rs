//! Server functions: the browser's door to the service layer. Each one authorizes, calls the same
//! service functions as the REST API, and maps errors to [`crate::model::AppError`].

pub mod jobs;
pub mod session;

pub use jobs::*;
pub use session::*;
