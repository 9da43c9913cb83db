//! The dashboard: for now who you are, a live server check, and (for admins) the users.

use crate::api::{list_users, whoami, ServerStatus};
use crate::model::{Role, StatusView, UserView};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::Redirect;

/// `/`: signed-in users only; others are sent to the sign-in page.
#[component]
pub fn DashboardPage() -> impl IntoView {
    // Its own fetch (not the header's): right after sign-in the header's copy may still be stale.
    let user = Resource::new(|| (), |_| whoami());
    view! {
        <Title text="Dashboard · gpuq" />
        <Transition fallback=|| view! { <p class="card">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match user.await {
                    Ok(Some(user)) => view! { <Dashboard user /> }.into_any(),
                    Ok(None) => view! { <Redirect path="/login" /> }.into_any(),
                    Err(e) => view! { <p class="card error">{e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn Dashboard(user: UserView) -> impl IntoView {
    let is_admin = user.role.at_least(Role::Admin);
    view! {
        <section class="card">
            <h1>{format!("Welcome, {}", user.username)}</h1>
            <p>"You are signed in as " <strong>{user.role.as_str()}</strong> "."</p>
        </section>
        <StatusCard />
        {is_admin.then(|| view! { <UsersCard /> })}
    }
}

/// A button that asks the server how it is: it only works once the page has hydrated.
#[component]
fn StatusCard() -> impl IntoView {
    let check = ServerAction::<ServerStatus>::new();
    let text = move || match check.value().get() {
        Some(Ok(s)) => describe(&s),
        Some(Err(e)) => format!("Check failed: {e}"),
        None if check.pending().get() => "Checking…".to_owned(),
        None => "Not checked yet.".to_owned(),
    };
    view! {
        <section class="card">
            <h2>"Server"</h2>
            <button id="check-status" type="button" on:click=move |_| {
                check.dispatch(ServerStatus {});
            }>"Check now"</button>
            <p id="status-result" aria-live="polite">{text}</p>
        </section>
    }
}

fn describe(s: &StatusView) -> String {
    format!(
        "Database: ok ({:.1} ms); {} active users; checked {} UTC",
        s.database_ms,
        s.active_users,
        s.checked_at.format("%H:%M:%S")
    )
}

#[component]
fn UsersCard() -> impl IntoView {
    let users = Resource::new(|| (), |_| list_users());
    view! {
        <section class="card">
            <h2>"Users"</h2>
            <Transition fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match users.await {
                        Ok(list) => view! {
                            <table>
                                <thead><tr><th scope="col">"Name"</th><th scope="col">"Role"</th></tr></thead>
                                <tbody>
                                    {list.into_iter().map(|u| view! {
                                        <tr><td>{u.username}</td><td>{u.role.as_str()}</td></tr>
                                    }).collect_view()}
                                </tbody>
                            </table>
                        }.into_any(),
                        Err(e) => view! { <p class="error">{e.to_string()}</p> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}
