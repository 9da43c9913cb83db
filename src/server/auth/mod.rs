//! Authentication: password hashing, sign-in with throttling, API tokens, and the `CurrentUser`
//! extractor every protected route and server function goes through.

mod current;
pub mod password;
pub mod service;
pub mod tokens;

pub use current::{
    server_fn_caller, server_fn_require, server_fn_session, CurrentUser, SESSION_SINCE_KEY,
    SESSION_USER_KEY,
};
