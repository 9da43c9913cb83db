//! The sign-in page. A plain form that also works before (or without) the WASM bundle. It returns
//! to the page that sent the browser here (`?next=`); the server checks that it is a path on this
//! site.

use super::alert::action_error;
use super::Auth;
use crate::api::Login;
use crate::model::AppError;
use leptos::prelude::*;
use leptos::server::ServerActionError;
use leptos::server_fn::error::ServerFnUrlError;
use leptos::server_fn::ServerFn;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

/// `/login`
#[component]
pub fn LoginPage() -> impl IntoView {
    let auth = expect_context::<Auth>();
    let login = auth.login;
    // Without the WASM bundle (or before it has loaded) the form posts as a plain form, and a
    // refusal comes back in the URL (`?__path=…&__err=…`). The action lives above the router,
    // which is where that error is read, so this page reads it itself.
    let refused = use_context::<ServerActionError>()
        .filter(|e| e.path() == <Login as ServerFn>::PATH)
        .map(|e| ServerFnUrlError::<AppError>::decode_err(e.err()));
    let error = move || action_error(login.value().get().or_else(|| refused.clone().map(Err)));
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
