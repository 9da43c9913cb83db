//! Starving the box: over-cap submits, a flood of CPU jobs, raising one's own priority.
