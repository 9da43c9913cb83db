//! What every handler and server function shares: the domain's context ([`Ctx`]) and the web's
//! own settings. Built by one constructor for `gpuq serve` and the tests alike.

use crate::server::context::Ctx;
use axum::extract::FromRef;
use leptos::config::LeptosOptions;

/// The web's state: the domain's context, and how pages are rendered and served (cheap to clone:
/// everything inside is a handle). An edge module: no domain module imports it.
#[derive(Clone, Debug)]
pub struct AppState {
    /// What the domain's services share; handlers pass `&state.ctx` to them.
    pub ctx: Ctx,
    /// Where the browser bundle is and how pages are rendered.
    pub leptos_options: LeptosOptions,
    /// Where the browser bundle is served from.
    pub site: SiteSource,
}

/// Where the browser bundle (JS, WASM, CSS, static files) comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiteSource {
    /// The folder `leptos_options.site_root` on disk (`--site-root`, the tests).
    Dir,
    /// The bundle built into the binary (`gpuq serve` without `--site-root`).
    Embedded,
}

impl AppState {
    /// The state of one process: the bundle under `site_root` (see [`SiteSource`]) and the
    /// domain's context.
    pub fn new(ctx: Ctx, site_root: &str) -> Self {
        let leptos_options = LeptosOptions::builder()
            .output_name("gpuq")
            .site_root(site_root)
            .site_pkg_dir("pkg")
            .build();
        AppState {
            ctx,
            leptos_options,
            site: SiteSource::Dir,
        }
    }
}

impl FromRef<AppState> for Ctx {
    fn from_ref(state: &AppState) -> Self {
        state.ctx.clone()
    }
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}
