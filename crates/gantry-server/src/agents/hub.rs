//! The live agent connections, by node name: the agent sessions register in it, and the
//! controller sends through it as its `AgentLink`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gantry_api::agent::ServerMessage;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::link::AgentLink;

/// Live agent connections by node name.
#[derive(Clone, Default)]
pub struct Hub {
    inner: Arc<Mutex<HashMap<String, Conn>>>,
}

struct Conn {
    id: Uuid,
    tx: mpsc::UnboundedSender<ServerMessage>,
    /// The `Peers` this connection was sent, by workflow.
    peers: HashMap<Uuid, Vec<String>>,
}

impl Hub {
    pub(crate) fn insert(&self, node: &str, id: Uuid, tx: mpsc::UnboundedSender<ServerMessage>) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).insert(
            node.to_string(),
            Conn {
                id,
                tx,
                peers: HashMap::new(),
            },
        );
    }

    /// Removes the connection unless a newer one replaced it. True when no connection holds
    /// the node now: this one was its last, or the controller had dropped it.
    pub(crate) fn remove(&self, node: &str, id: Uuid) -> bool {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(node) {
            Some(c) if c.id != id => false,
            Some(_) => {
                map.remove(node);
                true
            }
            None => true,
        }
    }
}

impl AgentLink for Hub {
    /// Sends to a node's agent; false when it is not connected (the message is not queued:
    /// everything an agent must know is re-sent as its desired set when it reconnects).
    fn send(&self, node: &str, msg: ServerMessage) -> bool {
        let map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        map.get(node).is_some_and(|c| c.tx.send(msg).is_ok())
    }

    fn is_connected(&self, node: &str) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(node)
    }

    /// Sends each connected node the `Peers` of `want` that its connection was not sent yet,
    /// and an empty one for each workflow it no longer runs containers of.
    fn sync_peers(&self, want: &HashMap<String, HashMap<Uuid, Vec<String>>>) {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let none = HashMap::new();
        for (node, conn) in map.iter_mut() {
            let wanted = want.get(node).unwrap_or(&none);
            let send = |workflow_id: Uuid, addresses: Vec<String>| {
                let _ = conn.tx.send(ServerMessage::Peers {
                    workflow_id,
                    addresses,
                });
            };
            for (wf, addrs) in wanted {
                if conn.peers.get(wf) != Some(addrs) {
                    send(*wf, addrs.clone());
                }
            }
            for wf in conn.peers.keys() {
                if !wanted.contains_key(wf) {
                    send(*wf, vec![]);
                }
            }
            conn.peers = wanted.clone();
        }
    }

    fn drop_node(&self, node: &str) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(node);
    }

    fn drop_all(&self) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::Hub;
    use crate::link::AgentLink;
    use gantry_api::agent::ServerMessage;
    use std::collections::HashMap;
    use uuid::Uuid;

    fn peers(
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<ServerMessage>,
    ) -> Vec<(Uuid, Vec<String>)> {
        let mut out = vec![];
        while let Ok(m) = rx.try_recv() {
            if let ServerMessage::Peers {
                workflow_id,
                addresses,
            } = m
            {
                out.push((workflow_id, addresses));
            }
        }
        out.sort();
        out
    }

    #[test]
    fn peers_are_sent_when_they_change_and_again_to_a_new_connection() {
        let hub = Hub::default();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        hub.insert("n1", Uuid::new_v4(), tx);
        let (w1, w2) = (Uuid::new_v4(), Uuid::new_v4());
        let want = |v: Vec<(Uuid, Vec<&str>)>| {
            let m: HashMap<Uuid, Vec<String>> = v
                .into_iter()
                .map(|(w, a)| (w, a.into_iter().map(String::from).collect()))
                .collect();
            HashMap::from([("n1".to_string(), m)])
        };
        hub.sync_peers(&want(vec![(w1, vec!["10.1.1.2"]), (w2, vec![])]));
        let mut first = vec![(w1, vec!["10.1.1.2".to_string()]), (w2, vec![])];
        first.sort();
        assert_eq!(peers(&mut rx), first);
        // Nothing changed: nothing sent.
        hub.sync_peers(&want(vec![(w1, vec!["10.1.1.2"]), (w2, vec![])]));
        assert_eq!(peers(&mut rx), vec![]);
        // A change is sent whole; a workflow no longer there is sent empty, once.
        hub.sync_peers(&want(vec![(w1, vec!["10.1.1.2", "10.1.2.3"])]));
        let mut second = vec![
            (w1, vec!["10.1.1.2".to_string(), "10.1.2.3".to_string()]),
            (w2, vec![]),
        ];
        second.sort();
        assert_eq!(peers(&mut rx), second);
        hub.sync_peers(&want(vec![(w1, vec!["10.1.1.2", "10.1.2.3"])]));
        assert_eq!(peers(&mut rx), vec![]);
        // A reconnected agent hears everything again.
        let (tx, mut rx2) = tokio::sync::mpsc::unbounded_channel();
        hub.insert("n1", Uuid::new_v4(), tx);
        hub.sync_peers(&want(vec![(w1, vec!["10.1.1.2", "10.1.2.3"])]));
        assert_eq!(
            peers(&mut rx2),
            vec![(w1, vec!["10.1.1.2".to_string(), "10.1.2.3".to_string()])]
        );
        // A node that runs none of the workflow's containers any more hears so; a node that
        // is not connected is sent nothing.
        hub.sync_peers(&HashMap::from([(
            "n2".to_string(),
            HashMap::from([(w1, vec![])]),
        )]));
        assert_eq!(peers(&mut rx2), vec![(w1, vec![])]);
    }
}
