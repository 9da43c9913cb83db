//! The account page's notification settings and deliveries: the same domain calls as
//! `/api/v1/me/notifications`, for the caller only.

#[cfg(feature = "ssr")]
use crate::model::Role;
use crate::model::{AppError, DeliveryView, NotificationSettings, NotificationsPut};
use leptos::prelude::*;
use leptos::server_fn::codec::Json;

/// The caller's notification settings (secrets never shown).
#[server(endpoint = "my_notifications")]
pub async fn my_notifications() -> Result<NotificationSettings, AppError> {
    use crate::api::context::server_fn_require;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::notify::settings_of(&state.pool, user.id).await
}

/// Replaces the caller's notification settings.
#[server(endpoint = "save_notifications", input = Json)]
pub async fn save_notifications(
    settings: NotificationsPut,
) -> Result<NotificationSettings, AppError> {
    use crate::api::context::server_fn_require;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::notify::save(&state.pool, &user, settings).await
}

/// The caller's most recent notification deliveries.
#[server(endpoint = "my_deliveries")]
pub async fn my_deliveries() -> Result<Vec<DeliveryView>, AppError> {
    use crate::api::context::server_fn_require;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::notify::deliveries_of(&state.pool, user.id).await
}
