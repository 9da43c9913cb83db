//! The one sign-in gate every page goes through.

use crate::api::whoami;
use crate::model::{Role, UserView};
use leptos::prelude::*;
use leptos_router::components::Redirect;

/// Renders `page` for the signed-in user; sends everyone else to the sign-in page. Pages that use
/// it are rendered `SsrMode::Async`, so the redirect is a real 302 before any byte is sent.
#[component]
pub fn SignedIn<F, V>(page: F) -> impl IntoView
where
    F: Fn(UserView) -> V + Clone + Send + Sync + 'static,
    V: IntoView + 'static,
{
    // Its own fetch (not the header's): right after sign-in the header's copy may still be stale.
    let user = Resource::new(|| (), |_| whoami());
    view! {
        <Transition fallback=|| view! { <p class="card">"Loading…"</p> }>
            {move || {
                let page = page.clone();
                Suspend::new(async move {
                    match user.await {
                        Ok(Some(u)) => view! { {page(u)} <Hydrated /> }.into_any(),
                        Ok(None) => view! { <Redirect path="/login" /> }.into_any(),
                        Err(e) => view! { <p class="card error">{e.to_string()}</p> }.into_any(),
                    }
                })
            }}
        </Transition>
    }
}

/// [`SignedIn`] for a page of one role: `page` for users of at least `min`, `refused` for the
/// others.
#[component]
pub fn SignedInAs<F, V, R, W>(min: Role, page: F, refused: R) -> impl IntoView
where
    F: Fn(UserView) -> V + Clone + Send + Sync + 'static,
    V: IntoView + 'static,
    R: Fn() -> W + Clone + Send + Sync + 'static,
    W: IntoView + 'static,
{
    let page = move |me: UserView| {
        if me.role.at_least(min) {
            page(me).into_any()
        } else {
            refused().into_any()
        }
    };
    view! { <SignedIn page /> }
}

/// Marks the page as live once the browser has hydrated it: `<body data-hydrated="/path">`. Tests
/// (and anyone automating the UI) wait for it before typing, since keystrokes that land before
/// hydration reach no handler.
#[component]
pub fn Hydrated() -> impl IntoView {
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let doc = document();
        let path = doc
            .location()
            .and_then(|l| l.pathname().ok())
            .unwrap_or_default();
        if let Some(body) = doc.body() {
            let _ = body.set_attribute("data-hydrated", &path);
        }
    });
}
