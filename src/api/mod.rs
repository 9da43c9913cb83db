//! Server functions: the browser's door to the service layer. Each one authorizes, calls the same
//! service functions as the REST API, and maps errors to [`crate::model::AppError`].

pub mod admin;
pub mod budgets;
#[cfg(feature = "ssr")]
pub mod context;
pub mod jobs;
pub mod notify;
pub mod registries;
pub mod session;
pub mod suggest;
pub mod usage;

pub use admin::*;
pub use budgets::*;
pub use jobs::*;
pub use notify::*;
pub use registries::*;
pub use session::*;
pub use suggest::*;
pub use usage::*;
