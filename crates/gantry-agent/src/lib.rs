//! Gantry's node agent: registration, runc runtime via shims, image pull and unpack, container
//! networking (CNI) and readiness probes, image builds, and the node's Prometheus exporter.

pub mod beneath;
pub mod build;
pub mod image;
pub mod labels;
pub mod metrics;
pub mod net;
pub mod node;
pub mod probe;
pub mod runtime;
pub mod transfer;

/// Locks a mutex whose data stays valid if a holder panicked (plain maps and flags here).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes permissions off a directory the agent keeps, never adding any: `keep` is what group
/// and others may still have. The agent's state holds assignments (with their secrets filled
/// in), job output and private images' layers, so nobody else may list or read it; where an
/// image build's or a job's user namespace (an unprivileged host uid) must pass through to its
/// bundle, 0o7711 keeps the right to pass (x) and nothing else.
pub(crate) fn restrict_dir(path: &std::path::Path, keep: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)?.permissions().mode() & 0o7777;
    if mode & !keep != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & keep))?;
    }
    Ok(())
}

/// For [`restrict_dir`]: nobody else may enter.
pub(crate) const OWNER_ONLY: u32 = 0o7700;
/// For [`restrict_dir`]: others may pass through, not list or change.
pub(crate) const PASS_THROUGH: u32 = 0o7711;
