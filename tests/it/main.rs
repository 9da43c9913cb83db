//! gpuq's integration tests: one binary (the crate is linked once), a module per area, all against
//! real Postgres (`#[sqlx::test]` gives each test its own database), real dockerd and the real
//! `gpuq` binary where a test needs a process.

mod support;

mod admin;
mod admission;
mod arrays;
mod attacks;
mod auth;
mod backfill;
mod backfill_props;
mod budgets;
mod cards;
mod cli;
mod cluster;
mod compat;
mod concurrency;
mod database;
mod deps;
mod docker;
mod doctor;
mod edges;
mod estimate;
mod fair_share;
mod faults;
mod gpu_hours;
mod hints;
mod idle;
mod image_gc;
mod isolation;
mod lifecycle;
mod logs_json;
mod metrics;
mod nodes;
mod notifier;
mod notify;
mod nvml;
mod planner_props;
mod pull;
mod registry_auth;
mod retention;
mod roles;
mod runner;
mod sessions;
mod spec_props;
mod suggest;
mod teams;
mod usage;
mod vram;
