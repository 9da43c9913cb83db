//! Types shared by the browser and the server: what crosses the wire.

mod error;
mod status;
mod user;

pub use error::AppError;
pub use status::StatusView;
pub use user::{Role, UserView, Username};
