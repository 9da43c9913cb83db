//! The sign-in page. A plain form that also works before (or without) the WASM bundle. It returns
//! to the page that sent the browser here (`?next=`); the server checks that it is a path on this
//! site.

use super::alert::action_error;
use super::Auth;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

/// `/login`
#[component]
pub fn LoginPage() -> impl IntoView {
    let auth = expect_context::<Auth>();
    let login = auth.login;
    let error = move || action_error(login.value().get());
    let query = use_query_map();
    let next = move || query.read().get("next").unwrap_or_default();
    view! {
        <Title text="Sign in · gpuq" />
        <section class="card narrow">
            <h1>"Sign in"</h1>
            <ActionForm action=login>
                <input type="hidden" name="next" value=next />
                <div class="field">
                    <label for="username">"Username"</label>
                    <input id="username" type="text" name="username" autocomplete="username" required />
                </div>
                <div class="field">
                    <label for="password">"Password"</label>
                    <input
                        id="password"
                        type="password"
                        name="password"
                        autocomplete="current-password"
                        required
                    />
                </div>
                <button type="submit" disabled=move || login.pending().get()>
                    "Sign in"
                </button>
            </ActionForm>
            {error}
        </section>
        <super::gate::Hydrated />
    }
}
