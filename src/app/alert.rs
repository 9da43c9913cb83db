//! How a failed action shows itself: one line, announced to screen readers.

use crate::model::AppError;
use leptos::prelude::*;

/// The error of an action's last result, as an alert line; nothing when it worked or has not run.
pub fn action_error<T>(result: Option<Result<T, AppError>>) -> Option<impl IntoView> {
    result
        .and_then(|r| r.err())
        .map(|e| view! { <p class="error" role="alert">{e.to_string()}</p> })
}
