//! Reading what is not one's own.
