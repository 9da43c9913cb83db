//! Authentication: password hashing, sign-in with throttling, API tokens, and `CurrentUser`, who
//! is calling, which every protected route and server function resolves.

mod current;
pub mod password;
pub mod service;
pub mod tokens;

pub use current::{
    client_address, ClientAddr, CurrentUser, DEFAULT_SESSION_LIFETIME_H, SESSION_SINCE_KEY,
    SESSION_USER_KEY, TOKEN_CANNOT_MINT,
};
