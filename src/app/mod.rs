//! The Leptos UI: the document shell, the router and the pages. No SQL or Docker here: pages call
//! server functions in `crate::api`.

mod account;
mod admin;
mod alert;
mod budget;
mod dashboard;
mod fair_share;
mod gate;
mod job;
mod live;
mod login;
mod manifest;
mod notifications;
mod queue;
mod registries;
mod submit;
mod teams;
mod usage;
mod widgets;

use crate::api::{whoami, Login, Logout};
use crate::model::{AppError, Role, UserView};
use dashboard::DashboardPage;
use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{Route, Router, Routes, A};
use leptos_router::{lazy_route, path, Lazy, LazyRoute, SsrMode};
use login::LoginPage;

/// The HTML document around the app, rendered on the server.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <HydrationScripts options />
                <link rel="icon" type="image/svg+xml" href="/favicon.svg" />
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

/// Sign-in state shared by the header and the pages.
#[derive(Clone, Copy)]
pub struct Auth {
    /// The sign-in action (its version moves on every attempt).
    pub login: ServerAction<Login>,
    /// The sign-out action.
    pub logout: ServerAction<Logout>,
    /// The signed-in user, refetched after sign-in and sign-out.
    pub user: Resource<Result<Option<UserView>, AppError>>,
}

/// The application: header, routes, and the sign-in state they share.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    let login = ServerAction::<Login>::new();
    let logout = ServerAction::<Logout>::new();
    let user = Resource::new(
        move || (login.version().get(), logout.version().get()),
        |_| whoami(),
    );
    provide_context(Auth {
        login,
        logout,
        user,
    });
    live::provide_live(Signal::derive(move || {
        matches!(user.get(), Some(Ok(Some(_))))
    }));

    view! {
        <Stylesheet id="leptos" href="/pkg/gpuq.css" />
        <Title text="gpuq" />
        <Router>
            <Header />
            <main id="content">
                <Routes fallback=|| view! { <p class="card">"Page not found."</p> }>
                    // Async: the sign-in check decides between the page and a redirect before any byte is sent.
                    <Route path=path!("/") view=DashboardPage ssr=SsrMode::Async />
                    <Route path=path!("/login") view=LoginPage />
                    <Route path=path!("/submit") view={Lazy::<SubmitRoute>::new()} ssr=SsrMode::Async />
                    <Route path=path!("/jobs") view={Lazy::<QueueRoute>::new()} ssr=SsrMode::Async />
                    <Route path=path!("/jobs/:id") view={Lazy::<JobRoute>::new()} ssr=SsrMode::Async />
                    <Route path=path!("/manifest") view={Lazy::<ManifestRoute>::new()} ssr=SsrMode::Async />
                    <Route path=path!("/usage") view={Lazy::<UsageRoute>::new()} ssr=SsrMode::Async />
                    <Route path=path!("/admin") view={Lazy::<AdminRoute>::new()} ssr=SsrMode::Async />
                    <Route path=path!("/account") view={Lazy::<AccountRoute>::new()} ssr=SsrMode::Async />
                </Routes>
            </main>
        </Router>
    }
}

/// A page whose code loads on its first visit: built with `cargo leptos build --split`, each one
/// is its own WASM chunk, so the first page load fetches only the dashboard and sign-in code.
macro_rules! lazy_page {
    ($($route:ident => $page:path),* $(,)?) => {$(
        struct $route;

        #[lazy_route]
        impl LazyRoute for $route {
            fn data() -> Self {
                $route
            }

            fn view(this: Self) -> AnyView {
                let _ = this;
                $page().into_any()
            }
        }
    )*};
}

lazy_page! {
    SubmitRoute => submit::SubmitPage,
    QueueRoute => queue::QueuePage,
    JobRoute => job::JobPage,
    ManifestRoute => manifest::ManifestPage,
    UsageRoute => usage::UsagePage,
    AdminRoute => admin::AdminPage,
    AccountRoute => account::AccountPage,
}

#[component]
fn Header() -> impl IntoView {
    let auth = expect_context::<Auth>();
    view! {
        <a class="skip" href="#content">"Skip to content"</a>
        <header class="topbar">
            <a class="brand" href="/">
                "gpuq"
            </a>
            <nav aria-label="Main">
                <A href="/">"Dashboard"</A>
                <A href="/jobs">"Jobs"</A>
                <A href="/submit">"Submit"</A>
                <A href="/manifest">"Manifest"</A>
                <Transition fallback=|| ()>
                    {move || Suspend::new(async move {
                        let role = match auth.user.await {
                            Ok(Some(u)) => Some(u.role),
                            _ => None,
                        };
                        view! {
                            {role.is_some_and(|r| r.at_least(Role::Manager)).then(|| view! { <A href="/usage">"Usage"</A> })}
                            {role.is_some_and(|r| r.at_least(Role::Admin)).then(|| view! { <A href="/admin">"Admin"</A> })}
                        }
                    })}
                </Transition>
                <A href="/account">"Account"</A>
            </nav>
            <div class="account">
                <Transition fallback=|| ()>
                    {move || Suspend::new(async move {
                        match auth.user.await {
                            Ok(Some(user)) => {
                                view! {
                                    <span class="who">
                                        {user.username} <span class="role">{user.role.as_str()}</span>
                                    </span>
                                    <ActionForm action=auth.logout>
                                        <button type="submit" class="link">
                                            "Sign out"
                                        </button>
                                    </ActionForm>
                                }
                                    .into_any()
                            }
                            _ => view! { <A href="/login">"Sign in"</A> }.into_any(),
                        }
                    })}
                </Transition>
            </div>
        </header>
    }
}
