//! gpuq: GPU job admission and isolation for shared multi-GPU servers.
//!
//! The crate builds twice: with `ssr` as the server binary (axum, Postgres, scheduler, Docker) and with
//! `hydrate` as the browser bundle. Everything server-only lives behind the one `server` module wall.

// Leptos views are nested types; without `--cfg erase_components` (release builds) the deepest pages
// need more than the default 128.
#![recursion_limit = "256"]

pub mod api;
pub mod app;
pub mod model;

/// The `gpuq` command-line client (speaks the REST API); native only, built with the server.
#[cfg(feature = "ssr")]
pub mod client;
#[cfg(feature = "ssr")]
pub mod server;

/// Entry point of the browser bundle: attaches the reactive system to the server-rendered page.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    // Lazy routes (their own WASM chunks) need the async hydration entry point.
    leptos::mount::hydrate_lazy(app::App);
}
