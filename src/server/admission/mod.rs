//! Admission: the pure planner, the advisory-locked pass that applies its decisions, and the
//! scheduler loop that runs passes on NOTIFY and on a timer; the start estimate, which runs the
//! planner forward in virtual time.

pub mod estimate;
pub mod fair;
pub mod gates;
mod images;
pub mod pass;
pub mod planner;
pub mod scheduler;

pub use pass::{run_pass, PassConfig, PassOutcome};
