//! Who may see and do what with a job: the role and ownership rules, in one place. Everyone signed
//! in sees the shared queue (name, owner, status, cards, VRAM, position), because it explains their
//! wait; what a job runs and says is its owner's business and their managers'.

use crate::model::{JobView, Role};
use crate::server::auth::CurrentUser;
use uuid::Uuid;

/// Command, volumes, status details, start estimate, event trail and logs: the owner, managers and
/// admins.
pub fn sees_details(viewer: &CurrentUser, owner: Uuid) -> bool {
    viewer.id == owner || viewer.role.at_least(Role::Manager)
}

/// The environment (often holds tokens): the owner and admins only.
pub fn sees_env(viewer: &CurrentUser, owner: Uuid) -> bool {
    viewer.id == owner || viewer.role.at_least(Role::Admin)
}

/// Cancelling: the owner and admins.
pub fn may_cancel(viewer: &CurrentUser, owner: Uuid) -> bool {
    viewer.id == owner || viewer.role.at_least(Role::Admin)
}

/// Resubmitting runs the job's environment again as the caller: the owner only.
pub fn may_resubmit(viewer: &CurrentUser, owner: Uuid) -> bool {
    viewer.id == owner
}

/// Blanks what `viewer` may not see of a job that belongs to `owner`.
pub fn redact(view: &mut JobView, viewer: &CurrentUser, owner: Uuid) {
    if !sees_env(viewer, owner) {
        view.env = None;
    }
    if !sees_details(viewer, owner) {
        view.command = Vec::new();
        view.volumes = Vec::new();
        view.status_reason = None;
        view.stop_cause = None;
        view.log_path = None;
        view.estimated_start_at = None;
        view.latest_start_at = None;
        view.cannot_start = None;
        view.details_hidden = true;
    }
}
