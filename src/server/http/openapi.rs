//! The OpenAPI document of the REST API, generated from the handlers' annotations and the wire
//! types, served at `GET /api/v1/openapi.json`.

use super::error::ErrorBody;
use super::{
    arrays, budgets, cluster, fair_share, health, jobs, live, nodes, notify, registries, sessions,
    suggest, teams, usage, v1,
};
use crate::model::spec::{RawCommand, RawJobSpec};
use crate::model::{
    AssignedGpu, AuditEntry, AuditKind, CreatedToken, GpuHolder, GpuList, GpuState, GpuView,
    JobAck, JobNetwork, JobPage, JobStatus, JobView, LaunchPolicy, ManifestState, ManifestView,
    Role, SkippedGpuView, TokenView, UserView, VolumeRule, WorkloadView,
};
use crate::server::manifest::WorkloadPut;
use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "gpuq",
        description = "GPU job admission and isolation. Authenticate with `Authorization: Bearer <token>` \
                       (create one with POST /api/v1/tokens). Errors are `{\"error\", \"kind\", \"field\"}`."
    ),
    paths(
        health::healthz, health::readyz,
        v1::me, v1::create_token, v1::list_tokens, v1::revoke_token,
        v1::list_users, v1::create_user, v1::update_user, v1::change_password,
        jobs::submit, jobs::list, jobs::show, jobs::cancel, jobs::resubmit, jobs::logs,
        jobs::events, arrays::show, arrays::cancel, arrays::resubmit,
        sessions::open,
        cluster::list_gpus, cluster::put_sim, cluster::patch_gpu,
        cluster::get_manifest, cluster::put_workload, cluster::delete_workload,
        cluster::rename_workload, cluster::manifest_history,
        suggest::list, suggest::apply,
        cluster::get_policy, cluster::put_policy,
        nodes::list_nodes, nodes::patch_node, nodes::forget_node,
        usage::report, usage::samples_csv, usage::jobs_csv,
        fair_share::report,
        live::events,
        notify::get_settings, notify::put_settings, notify::deliveries,
        openapi_json,
        registries::list_registries, registries::put_registry, registries::delete_registry,
        teams::list_teams, teams::create_team, teams::update_team,
        budgets::mine,
    ),
    components(schemas(
        ErrorBody, Role, UserView, TokenView, CreatedToken, v1::TokenRequest, v1::NewUser, v1::UserPatch, v1::PasswordChange,
        cluster::WorkloadRename, ManifestState, AuditEntry,
        RawJobSpec, RawCommand, JobStatus, AssignedGpu, JobView, JobPage, JobAck, AuditKind, GpuState,
        GpuHolder, GpuView, SkippedGpuView, GpuList, cluster::SimPut, cluster::GpuPatch,
        crate::model::NodeView, crate::model::NodeState, nodes::NodePatch, nodes::Forgotten,
        WorkloadView, ManifestView, WorkloadPut, LaunchPolicy, VolumeRule, JobNetwork,
        crate::model::UsageReport, crate::model::CardSeries, crate::model::CardPoint,
        crate::model::WaitStats, crate::model::WaitBucket, crate::model::UsageTotal,
        crate::model::ReclaimedTotal,
        crate::model::ManifestSuggestions, crate::model::WorkloadSuggestion,
        crate::model::ImageSuggestion, crate::model::Observed, crate::model::PeakStats, suggest::ApplySuggestion,
        crate::model::RegistryLogin, crate::model::RegistryView,
        crate::model::NotificationSettings, crate::model::NotificationsPut, crate::model::WebhookPut,
        crate::model::WebhookView, crate::model::DeliveryView, crate::model::NotifyEvent,
        crate::model::WebhookFormat, crate::model::DeliveryState,
        crate::model::JobEventView, crate::model::JobEventKind,
        crate::model::batch::ArrayView, crate::model::batch::ArrayAck, crate::model::batch::ArraySummary,
        crate::model::TeamView, crate::model::NewTeam, crate::model::TeamPatch, crate::model::Budget,
        crate::model::BudgetUse, crate::model::BudgetScope,
        crate::model::FairShareReport, crate::model::FairShareRow,
        crate::model::BudgetPeriod, crate::model::BudgetKind,
    )),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme(
                "bearer",
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
    }
}

/// `GET /api/v1/openapi.json`
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "meta", responses((status = 200, description = "this document")))]
pub(super) async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
