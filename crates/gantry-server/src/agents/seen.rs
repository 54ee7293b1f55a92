//! When each node was last heard from. Every message an agent sends counts (a node is judged
//! by any message, not only by heartbeats). The sessions note it here, in memory, and one
//! writer stores what was noted in one transaction per flush, instead of one fsynced write per
//! heartbeat: at 10,000 nodes that was 2,000 writes a second on the store's one writer, and a
//! connection's next message waited behind its own. The controller judges liveness from the
//! store's `last_seen`, at most one flush behind.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use gantry_store::{Millis, Store};

#[derive(Default)]
pub struct Seen {
    noted: Mutex<HashMap<String, Millis>>,
}

impl Seen {
    fn noted(&self) -> MutexGuard<'_, HashMap<String, Millis>> {
        self.noted.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn note(&self, node: &str, at: Millis) {
        let mut m = self.noted();
        match m.get_mut(node) {
            Some(t) => *t = (*t).max(at),
            None => {
                m.insert(node.to_string(), at);
            }
        }
    }

    /// Stores what was noted since the last flush. What a failed write held is noted again,
    /// so a store that recovers does not find live nodes silent.
    pub async fn flush(&self, store: &dyn Store) {
        let batch: Vec<(String, Millis)> = std::mem::take(&mut *self.noted()).into_iter().collect();
        if let Err(e) = store.nodes_seen(&batch).await {
            tracing::warn!("recording {} nodes' heartbeats: {e}", batch.len());
            for (node, at) in batch {
                self.note(&node, at);
            }
        }
    }
}

/// Flushes `seen` every `every` for the life of the server.
pub fn spawn_writer(seen: Arc<Seen>, store: Arc<dyn Store>, every: Duration) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            seen.flush(store.as_ref()).await;
        }
    });
}
