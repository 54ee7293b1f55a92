//! Gantry's node agent: registration, runc runtime via shims, image pull and unpack, container
//! networking (CNI) and readiness probes, image builds, and the node's Prometheus exporter.

pub mod beneath;
pub mod build;
pub mod image;
pub mod metrics;
pub mod net;
pub mod node;
pub mod probe;
pub mod runtime;

/// Locks a mutex whose data stays valid if a holder panicked (plain maps and flags here).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
