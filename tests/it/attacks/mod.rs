//! The threat model as code: each test here is an attack a member of a shared GPU host might try,
//! run from a member account against the real server, Postgres and dockerd, and shows it refused.
//! The README's "Security model" section says what these cover and what the host's admin must do.
//!
//! - `accounts`: inheriting a moved user's job uid, a disabled member's jobs running on, telling
//!   a disabled account from a wrong password, other users' edits and a demoted manager's view
//!   on the live stream.
//! - `isolation`: getting out of a job onto the host (symlink swap of a queued job's volume, a
//!   setuid plant on a mounted folder) or into a neighbour's job (its open ports).
//! - `signin`: guessing passwords in parallel, tokens minting tokens.
//! - `bounds`: starving the box (over-cap submits, too many CPU jobs, raising one's own priority).
//! - `visibility`: reading what is not one's own (another member's command line, volumes, env,
//!   logs and event trail, other people's details on the live stream).

mod accounts;
mod bounds;
mod isolation;
mod signin;
mod visibility;
