//! The ordered sets that make placement a range query instead of a scan over every node.

use std::collections::{BTreeMap, BTreeSet};

use super::{Need, Node};

/// Nodes ordered by (free cores, free memory, rank). Two levels rather than one set of triples:
/// with one set, a request whose memory does not fit the nodes with the fewest free cores would
/// walk past every one of them; with a set per free-core level, a level whose roomiest node is
/// too small is skipped in constant time, and there are only as many levels as distinct
/// free-core amounts.
#[derive(Debug, Default)]
pub(super) struct CapIndex {
    by_cpu: BTreeMap<u64, Level>,
}

#[derive(Debug, Default)]
struct Level {
    nodes: BTreeSet<(u64, u32)>,
    /// The most free memory of any node in the level, kept so that skipping costs no lookup.
    max_mem: u64,
}

impl CapIndex {
    pub(super) fn insert(&mut self, cpu: u64, mem: u64, rank: u32) {
        let level = self.by_cpu.entry(cpu).or_default();
        level.nodes.insert((mem, rank));
        level.max_mem = level.max_mem.max(mem);
    }

    pub(super) fn remove(&mut self, cpu: u64, mem: u64, rank: u32) {
        if let Some(level) = self.by_cpu.get_mut(&cpu) {
            level.nodes.remove(&(mem, rank));
            if level.nodes.is_empty() {
                // An empty level left behind would be walked by every later search.
                self.by_cpu.remove(&cpu);
            } else if mem == level.max_mem {
                level.max_mem = level.nodes.last().map_or(0, |&(m, _)| m);
            }
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_cpu.is_empty()
    }

    /// The first node in (free cores, free memory, rank) order with at least `cpu` and `mem`
    /// free that `ok` accepts.
    pub(super) fn find(
        &self,
        cpu: u64,
        mem: u64,
        mut ok: impl FnMut(u32) -> bool,
    ) -> Option<(u64, u64, u32)> {
        for (&c, level) in self.by_cpu.range(cpu..) {
            if level.max_mem < mem {
                continue;
            }
            for &(m, rank) in level.nodes.range((mem, 0)..) {
                if ok(rank) {
                    return Some((c, m, rank));
                }
            }
        }
        None
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_cpu.values().map(|l| l.nodes.len()).sum()
    }
}

/// The nodes of one pool that may take one kind of request (ordinary or exclusive).
#[derive(Debug, Default)]
pub(super) struct Tier {
    /// Nodes without devices.
    plain: CapIndex,
    /// Nodes with devices, for requests without any: used only when no plain node fits.
    with_devices: CapIndex,
    /// Device id -> free count of that device -> nodes. A node is in the map of each device
    /// it has.
    by_device: BTreeMap<u32, BTreeMap<u32, CapIndex>>,
}

impl Tier {
    pub(super) fn insert(&mut self, rank: u32, n: &Node) {
        if n.dev.is_empty() {
            self.plain.insert(n.free_cpu, n.free_mem, rank);
            return;
        }
        self.with_devices.insert(n.free_cpu, n.free_mem, rank);
        for d in &n.dev {
            self.by_device
                .entry(d.id)
                .or_default()
                .entry(d.free)
                .or_default()
                .insert(n.free_cpu, n.free_mem, rank);
        }
    }

    /// `n` must be as it was when inserted.
    pub(super) fn remove(&mut self, rank: u32, n: &Node) {
        if n.dev.is_empty() {
            self.plain.remove(n.free_cpu, n.free_mem, rank);
            return;
        }
        self.with_devices.remove(n.free_cpu, n.free_mem, rank);
        for d in &n.dev {
            if let Some(levels) = self.by_device.get_mut(&d.id) {
                if let Some(level) = levels.get_mut(&d.free) {
                    level.remove(n.free_cpu, n.free_mem, rank);
                    if level.is_empty() {
                        levels.remove(&d.free);
                    }
                }
            }
        }
    }

    /// Best node for a request without devices that `ok` accepts, among nodes without devices
    /// or among nodes with them. Returns (free cores, free memory, rank). `ok` sees the nodes
    /// with enough capacity in rank order, so a caller that wants several nodes can collect
    /// them and accept the last.
    pub(super) fn find_plain(
        &self,
        need: &Need,
        with_devices: bool,
        ok: impl FnMut(u32) -> bool,
    ) -> Option<(u64, u64, u32)> {
        let set = if with_devices {
            &self.with_devices
        } else {
            &self.plain
        };
        set.find(need.cpu, need.mem, ok)
    }

    /// Best node for a request with devices that `ok` accepts, walked as in `find_plain`.
    /// Returns (free count of the request's first device, free cores, free memory, rank).
    pub(super) fn find_devices(
        &self,
        need: &Need,
        nodes: &[Node],
        mut ok: impl FnMut(u32) -> bool,
    ) -> Option<(u32, u64, u64, u32)> {
        let (&(first, count), rest) = need.dev.split_first()?;
        let levels = self.by_device.get(&first)?;
        for (&free, set) in levels.range(count..) {
            let found = set.find(need.cpu, need.mem, |rank| {
                let n = &nodes[rank as usize];
                rest.iter().all(|&(d, k)| n.free_of(d) >= k) && ok(rank)
            });
            if let Some((c, m, rank)) = found {
                return Some((free, c, m, rank));
            }
        }
        None
    }

    /// How many entries in all; a node with devices is in several.
    #[cfg(test)]
    pub(super) fn entries(&self) -> usize {
        self.plain.len()
            + self.with_devices.len()
            + self
                .by_device
                .values()
                .flat_map(BTreeMap::values)
                .map(CapIndex::len)
                .sum::<usize>()
    }
}
