//! Guessing passwords and stretching tokens.
