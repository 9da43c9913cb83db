//! The bounds a process keeps on what its users may hold at once: live streams, log reads, and
//! the rate of submits and previews. Held by the domain's context ([`crate::server::context::Ctx`]).

pub mod log_reads;
pub mod rate;
pub mod streams;

pub use log_reads::{LogReads, ReadPlace, DEFAULT_LOG_READS, READS_PER_USER};
pub use rate::SubmitRate;
pub use streams::{StreamSlot, StreamSlots, STREAMS_PER_USER};
