//! Getting out of a job onto the host, or into a neighbour's job.
