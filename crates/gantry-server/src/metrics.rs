//! The server's own counters for `/metrics` (`monitoring.rs` serves them with the gauges it
//! reads from the store at scrape time).

use std::sync::atomic::AtomicI64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

pub(crate) type Labels = Vec<(&'static str, String)>;

/// Counters kept across scrapes; gauges are computed from the store at scrape time.
#[derive(Default)]
pub struct Metrics {
    pub(crate) webhook_requests: Family<Labels, Counter>,
    pub(crate) webhook_errors: Counter,
    pub(crate) webhook_alerts: Family<Labels, Counter>,
    /// When the last watchdog alert arrived (ms since the epoch; 0: never).
    pub(crate) watchdog_at: AtomicI64,
}
