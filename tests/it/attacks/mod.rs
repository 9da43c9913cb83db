//! The threat model as code: each test here is an attack a member of a shared GPU host might try,
//! run from a member account against the real server, Postgres and dockerd, and shows it refused.
//! docs/security.md says what these cover and what the host's admin must do.
//!
//! - `accounts`: inheriting a moved user's job uid, a default uid range that is also someone's
//!   rootless-container range, a disabled member's jobs running on, telling
//!   a disabled account from a wrong password, other users' edits and a demoted manager's view
//!   on the live stream, a disabled or demoted user's open log follows.
//! - `isolation`: getting out of a job onto the host (symlink swap of a queued job's volume, a
//!   setuid plant on a mounted folder) or into a neighbour's job (its open ports).
//! - `egress`: a job reading a host service through its network's gateway (the host firewall's
//!   rules, `gpuq firewall`).
//! - `signin`: guessing passwords in parallel, tokens minting tokens.
//! - `bounds`: starving the box (over-cap submits, too many CPU jobs, raising one's own priority).
//! - `volumes`: the start race (a job flipping a folder between the check and the mount), folders
//!   inside ones a member can change, allowlist rules others can change, the most specific rule.
//! - `shared_docker`: a second installation on the same dockerd settling the first one's jobs;
//!   a restart of dockerd killing jobs silently and leaving their containers.
//! - `logs`: logs as a weapon (parallel reads of a big log, a huge tail, a job printing without
//!   end, filling the log folder).
//! - `visibility`: reading what is not one's own (another member's command line, volumes, env,
//!   logs and event trail, other people's details on the live stream).
//! - `submits`: flooding with refused submits, submitting and previewing in a loop, lists that
//!   load everyone's specs.
//! - `lockout`: locking the admin out with others' wrong guesses; forged `X-Forwarded-For`.
//! - `sessions`: a busy session outliving its lifetime; a junk bearer header on a cross-site post.
//! - `listener`: slowloris (head and body), idle keep-alive connections, too many connections.
//! - `peers`: a peer that redirects a log read (and its grant) elsewhere.
//! - `database`: the embedded Postgres's socket without its password (its owner account, root
//!   past the folder, other users), and a cluster that trusted its socket before.
//! - `registries`: registry credentials set, read or removed by a member (REST and the admin
//!   page's server functions), a password read back from the page, a row copied to another
//!   registry, a key file others may read, a bad key given to `gpuq serve`.

mod accounts;
mod bounds;
mod database;
mod egress;
mod isolation;
mod listener;
mod lockout;
mod logs;
mod peers;
mod registries;
mod sessions;
mod shared_docker;
mod signin;
mod submits;
mod visibility;
mod volumes;
