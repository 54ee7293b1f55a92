//! What agents report about running attempts that is news, not record: a transfer step's
//! latest progress and why a service not ready yet fails its readiness probe. Kept in memory
//! by attempt (the change of a probe's outcome is an event, which is stored); a restarted
//! server shows it again from the next report. The agents' sessions write it, the attempt-end
//! applier clears an attempt's, `describe` and the endpoints read it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use gantry_api::v1::TransferProgress;
use uuid::Uuid;

#[derive(Default)]
pub struct News {
    transfers: Mutex<HashMap<Uuid, TransferProgress>>,
    probes: Mutex<HashMap<Uuid, ProbeFailure>>,
}

/// A poisoned map is still a map of news: a panic elsewhere loses nothing worth refusing.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl News {
    pub fn transfers(&self) -> MutexGuard<'_, HashMap<Uuid, TransferProgress>> {
        lock(&self.transfers)
    }

    pub fn probes(&self) -> MutexGuard<'_, HashMap<Uuid, ProbeFailure>> {
        lock(&self.probes)
    }

    /// An attempt ended: its news is over.
    pub fn forget(&self, attempt: Uuid) {
        self.transfers().remove(&attempt);
        self.probes().remove(&attempt);
    }
}

/// The latest failed check of a service's readiness probe.
#[derive(Debug, Clone)]
pub struct ProbeFailure {
    pub workflow: Uuid,
    /// The service's name.
    pub service: String,
    pub why: String,
    /// Consecutive failed checks with this outcome.
    pub count: u32,
}

impl ProbeFailure {
    /// The task's reason while it waits to be ready, e.g. `readiness probe: GET
    /// http://10.0.0.2:8080/notthere answered 404 Not Found, 30 times in a row`.
    pub fn reason(&self) -> String {
        match self.count {
            1 => format!("readiness probe: {}", self.why),
            n => format!("readiness probe: {}, {n} times in a row", self.why),
        }
    }
}
