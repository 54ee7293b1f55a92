//! The controller's lease. Several server processes may share one store; each serves the API,
//! but only the one holding the lease `controller` runs the controller, and every plan it
//! commits carries the lease's fencing token, so that a holder deposed in the middle of a tick
//! (paused, cut off from the database, its lease run out and taken) commits nothing after the
//! new holder took over: the store refuses the plan whole ([`StoreError::Deposed`]).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use gantry_store::{Fence, Millis, Store, StoreError};

pub const CONTROLLER: &str = "controller";
/// How long a lease lasts unrenewed: a holder killed outright is replaced within this and one
/// standby's poll ([`RENEW`]).
pub const TTL: Duration = Duration::from_secs(3);
/// How often the holder renews and a standby asks.
pub const RENEW: Duration = Duration::from_secs(1);

/// This process's side of the lease.
pub struct Lease {
    /// Who this process is, as the store and the events name it.
    pub holder: String,
    /// The fencing token while this process holds the lease, else 0.
    token: AtomicI64,
    /// When it was last taken or renewed (ms).
    renewed_at: AtomicI64,
    /// When this process last took it (ms; 0 before).
    taken_at: AtomicI64,
}

impl Lease {
    pub fn new(holder: String) -> Self {
        Lease {
            holder,
            token: AtomicI64::new(0),
            renewed_at: AtomicI64::new(0),
            taken_at: AtomicI64::new(0),
        }
    }

    /// The fence for this process's plans while it holds the lease.
    pub fn fence(&self) -> Option<Fence> {
        match self.token.load(Ordering::Acquire) {
            0 => None,
            token => Some(Fence {
                lease: CONTROLLER.into(),
                token,
            }),
        }
    }

    pub fn held(&self) -> bool {
        self.token.load(Ordering::Acquire) != 0
    }

    /// When this process last took the lease (ms; 0 if never).
    pub fn taken_at(&self) -> Millis {
        self.taken_at.load(Ordering::Acquire)
    }

    /// Takes the lease, or renews it when due (at most every [`RENEW`]): whether this process
    /// holds it now, and whether it has only just taken it.
    pub async fn keep(&self, store: &dyn Store, now: Millis) -> Keep {
        let token = self.token.load(Ordering::Acquire);
        let since = now - self.renewed_at.load(Ordering::Acquire);
        if token != 0 && since < RENEW.as_millis() as i64 {
            return Keep::Held;
        }
        // A standby asks every second: another's lease that has not run out is read, not
        // tried for, so that standbys do not take the store's write lock from the leader.
        if token == 0 {
            match store.lease(CONTROLLER).await {
                Ok(Some(l)) if l.holder != self.holder && l.expires_at > now => {
                    return Keep::Standby
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("the controller's lease: {e}");
                    return Keep::Standby;
                }
            }
        }
        match store
            .acquire_lease(CONTROLLER, &self.holder, TTL.as_millis() as i64, now)
            .await
        {
            Ok(Some(t)) => {
                self.renewed_at.store(now, Ordering::Release);
                self.token.store(t, Ordering::Release);
                if t == token {
                    Keep::Held
                } else {
                    self.taken_at.store(now, Ordering::Release);
                    tracing::info!(token = t, holder = %self.holder, "this server runs the controller");
                    Keep::Taken
                }
            }
            Ok(None) => {
                if token != 0 {
                    tracing::warn!("another server took the controller's lease: standing by");
                }
                self.token.store(0, Ordering::Release);
                Keep::Standby
            }
            // The store did not answer: lead on only while the lease taken last has not run
            // out (what is committed meanwhile is fenced anyway).
            Err(e) => {
                tracing::warn!("the controller's lease: {e}");
                if token != 0 && since < TTL.as_millis() as i64 {
                    Keep::Held
                } else {
                    self.token.store(0, Ordering::Release);
                    Keep::Standby
                }
            }
        }
    }

    /// The store refused a plan of ours as a deposed holder's.
    pub fn deposed(&self, why: &str) {
        tracing::warn!("the controller's lease is lost ({why}): standing by");
        self.token.store(0, Ordering::Release);
    }

    /// Gives the lease up (a clean shutdown), so that a standby takes it at once.
    pub async fn release(&self, store: &dyn Store, now: Millis) {
        if self.token.swap(0, Ordering::AcqRel) != 0 {
            if let Err(e) = store.release_lease(CONTROLLER, &self.holder, now).await {
                tracing::warn!("giving the controller's lease up: {e}");
            }
        }
    }
}

/// What [`Lease::keep`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Held before and still.
    Held,
    /// Held from now on (a new token): what this process knew as a standby is stale.
    Taken,
    Standby,
}

/// `changes` as the holder of `fence`'s plan (a controller's, an endpoint driver's): fenced
/// first, so that the store refuses it whole once another server took the lease. An empty
/// plan stays empty (no transaction), and so does one with no fence (a controller outside a
/// server's loop, the benchmark's, holds no lease).
pub fn fenced<C: From<Fence>>(fence: Option<Fence>, mut changes: Vec<C>) -> Vec<C> {
    if let (false, Some(f)) = (changes.is_empty(), fence) {
        changes.insert(0, C::from(f));
    }
    changes
}

/// Whether `e` (from a tick) is the store's refusal of a deposed holder's plan.
pub fn deposed(e: &anyhow::Error) -> Option<&str> {
    match e.downcast_ref::<StoreError>() {
        Some(StoreError::Deposed(why)) => Some(why),
        _ => None,
    }
}
