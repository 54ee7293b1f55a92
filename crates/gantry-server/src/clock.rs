//! Time as the store keeps it (milliseconds since the epoch, UTC) and as the API shows it.

use time::OffsetDateTime;

/// Now, in the store's milliseconds.
pub fn now_ms() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp_nanos() as i64 / 1_000_000
}

/// The store's milliseconds as the API's time.
pub fn ts(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}
