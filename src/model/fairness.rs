//! Fair share as people read it: each user's and team's weight, decayed GPU-hours, part of the
//! recent total, owed share and budget (`GET /api/v1/fair-share`, the usage page, `gpuq
//! fair-share`).

use super::budget::Budget;
use serde::{Deserialize, Serialize};

/// Where everyone stands in fair share (a member sees only their own row and their team's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct FairShareReport {
    /// Whether the queue orders by fair share now (the launch policy's `fair_share`).
    pub fair_share: bool,
    /// Hours after which a GPU-hour counts half (`fair_share_half_life_h`).
    pub half_life_h: f64,
    /// Everyone's decayed GPU-hours together (what `share_of_recent` divides by).
    pub total_decayed_gpu_hours: f64,
    /// Users, by name.
    pub users: Vec<FairShareRow>,
    /// Teams, by name.
    pub teams: Vec<FairShareRow>,
}

/// One user's or one team's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct FairShareRow {
    /// The user's login name, or the team's name.
    pub name: String,
    /// The user's team (for a team: its own name).
    pub team: String,
    /// Share weight (a user's within their team; a team's against the other teams).
    pub weight: f64,
    /// GPU-hours used, each counting less the longer ago it was used (halved every half-life).
    pub decayed_gpu_hours: f64,
    /// `decayed_gpu_hours` over everyone's (0 to 1; 0 when nobody used anything).
    pub share_of_recent: f64,
    /// The part of the cards the weights owe them (0 to 1) among the teams and users with jobs
    /// queued or holding cards, counting them as one of those.
    pub owed_share: f64,
    /// Their budget, if they have one.
    pub budget: Option<Budget>,
    /// GPU-hours left of the budget in its current period (negative: over it); absent without one.
    pub budget_left_gpu_hours: Option<f64>,
}
