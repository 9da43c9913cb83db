//! How a failed action shows itself: one line, announced to screen readers.

use crate::model::AppError;
use leptos::prelude::*;

/// The error of an action's last result, as an alert line; nothing when it worked or has not run.
pub fn action_error<T>(result: Option<Result<T, AppError>>) -> Option<impl IntoView> {
    result
        .and_then(|r| r.err())
        .map(|e| view! { <p class="error" role="alert">{e.to_string()}</p> })
}

/// Data a page fetches from the server: the value, or why it could not be read.
pub type Fetched<T> = Resource<Result<T, AppError>>;

/// A resource's value, drawn by `show` once it has loaded ("Loading…" until then, and the last
/// value while it reloads), or its error as an alert line.
pub fn loaded<T, V>(
    resource: Resource<Result<T, AppError>>,
    show: impl Fn(T) -> V + Clone + Send + Sync + 'static,
) -> impl IntoView
where
    T: Clone + Send + Sync + serde::Serialize + serde::de::DeserializeOwned + 'static,
    V: IntoView + 'static,
{
    view! {
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || {
                let show = show.clone();
                Suspend::new(async move {
                    match resource.await {
                        Ok(value) => show(value).into_any(),
                        Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                    }
                })
            }}
        </Transition>
    }
}
