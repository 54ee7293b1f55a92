//! Row decoding: SQLite rows are read by the decoders both backends share (`crate::rows`).

pub(super) use crate::rows::*;
