//! The scheduler: a snapshot of the nodes and an ordered list of requests in, a placement
//! [`Plan`] out. The shape is Nomad's: for each request, *feasibility* (which nodes could take
//! it), then *rank* (which of those is best), and the result is a plan that the server's one
//! applier commits. Nothing here reads the store or the clock, so the same snapshot always gives
//! the same plan, and a plan that lost a race when committed can simply be computed again.
//!
//! # Order
//! Requests are served in the order given (the caller sorts by priority and submit time). Each
//! placement uses up capacity before the next request is looked at, so one call never
//! overcommits a node. A request that does not fit does not hold back the ones behind it: like
//! Nomad, this backfills. Keeping a large request from starving behind a stream of small ones is
//! the caller's policy (it can leave the small ones out of the call).
//!
//! # Feasibility
//! A node can take a request when its pool matches (`pool: None` matches every pool), it is
//! schedulable (not held, not down), no exclusive job runs there, and its free cores, memory
//! and every device count the request names cover the request. An exclusive request also needs
//! a node with nothing running, and takes it whole: nothing else is placed there afterwards.
//! Three more filters apply to the requests that ask for them:
//! - Labels: the node has every label the request names, with the same value (exact string
//!   match; `nvidia.com/gpu.model=T4` does not match `t4`).
//! - Host ports: none of the request's host ports is taken on the node, by the snapshot's
//!   host-network containers or by a placement earlier in the call. Placing it takes them.
//!   Ports of containers in their own network namespace never conflict and are not counted.
//! - Host networking: the node's pool allows it (`NodeView::host_network`).
//!
//! # Gangs
//! A request with `members: N > 1` (a multinode job) needs N distinct nodes of one pool, each
//! able to take `need` as an ordinary request would (all the filters above apply to each
//! member), and is placed whole in one decision or not at all: a plan never holds part of a
//! gang. Nothing is reserved between calls, so two gangs that each fit alone but not together
//! cannot deadlock holding half each: the first in order is placed whole, the second is left
//! unplaced whole and waits for a later call. Requests after an unplaced gang still backfill,
//! so a stream of small requests can keep a gang waiting; as for large requests, that is the
//! caller's policy.
//!
//! # Rank
//! Bin-packing, as Nomad's default: among the nodes that can take a request, the one left with
//! the least free capacity wins, so that whole nodes stay free for large and exclusive requests.
//! "Least" is read lexicographically: fewest free cores, then least free memory, then the node
//! name (which makes ties deterministic whatever order the caller listed the nodes in). Since
//! every candidate loses the same amount, ranking by free capacity before placement is the same
//! as ranking by what is left after it. Two refinements:
//! - A request that names devices ranks first by the free count of its first device (by name):
//!   devices are the scarcest thing a node has, so they are packed before cores.
//! - A request that names no device goes to a node without devices whenever one fits: a CPU job
//!   parked on a GPU node can keep a GPU job waiting for hours.
//!
//! A gang takes, in each pool it may use, the first N feasible nodes in that order (member 0 on
//! the best). With `pool: None`, of the pools that have N feasible nodes the one whose N-th
//! node ranks best wins (ties cannot happen: ranks are distinct), so the gang leaves the
//! roomiest nodes free just as a single request does; with N = 1 this is the same node an
//! ordinary request would get.
//!
//! # Speed
//! Scanning every node for every request is quadratic (10^9 checks for 100,000 jobs on 10,000
//! nodes). Instead each pool keeps its nodes in ordered sets keyed by free capacity (see
//! `index`): finding the best node is a range query, and placing updates one or two sets. The
//! search only walks distinct free-core levels, not nodes, so it stays fast even when many nodes
//! are too full. Requests for devices, or for a second kind of device, check candidates one by
//! one within those levels; that is the one place where the cost grows with the number of nodes,
//! and only with nodes that have the request's first device.
//!
//! Gangs and requests with labels, host ports or host networking walk the same sets in the same
//! order, checking each node with enough capacity against those filters and collecting up to N,
//! in every pool they may use: their cost grows with the number of large-enough nodes that fail
//! a filter (a label few nodes have on a big pool is the worst case). Plain requests never take
//! that path and pay nothing for it. Equal asks that failed are remembered, as for plain ones.
//!
//! # Reasons
//! An unplaced request gets a reason for people, in the style of Kubernetes' "0/5 nodes are
//! available: 3 Insufficient cpu, 2 node(s) were cordoned", and an [`UnplacedKind`] that says
//! whether it has to wait or can never fit. As in Kubernetes, a node short of both cores and
//! memory counts under both, so the counts can add up to more than the nodes. See `explain`.
//! - Labels and host networking never change while a node runs work, so they decide
//!   `TooLarge`: `no node has label nvidia.com/gpu.model=T4` (it waits until such a node
//!   joins), `pool "secure" does not allow host networking`, `no pool allows host networking`.
//!   When some nodes match, the others are counted (`2 lack nvidia.com/gpu.model=T4`) beside
//!   the usual shortfalls of the matching ones.
//! - A taken host port is a `Wait`: `1 has host port 8080 taken`.
//! - A gang is `TooLarge` when no pool it may use has N nodes that could ever take a member
//!   (`needs 3 nodes with 1 core each, and only 2 of the 5 nodes in pool "cpu" could ever
//!   take one`), and `Wait` otherwise, with how many have room now and why the others do not
//!   (for `pool: None`, in the pool with the most room).
//! - "most free" in a shortfall is the most any of the nodes short of that dimension has:
//!   what the request would have to shrink to, on those nodes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

use gantry_api::agent::Capacity;

mod explain;
mod index;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use index::Tier;

/// A node's name, as its agent registered it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub String);

impl NodeId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for NodeId {
    fn from(s: &str) -> Self {
        NodeId(s.to_owned())
    }
}

impl From<String> for NodeId {
    fn from(s: String) -> Self {
        NodeId(s)
    }
}

/// An amount of resources: what a node has, what is in use, or what a request needs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Res {
    /// Thousandths of a core, so that fractional requests (`cpu.cores: 0.5`) stay exact.
    pub millicpus: u64,
    pub memory_bytes: u64,
    /// Devices such as `nvidia.com/gpu` and their counts. A count of 0 is the same as absent.
    pub devices: BTreeMap<String, u32>,
}

impl Res {
    pub fn new(millicpus: u64, memory_bytes: u64) -> Self {
        Res {
            millicpus,
            memory_bytes,
            devices: BTreeMap::new(),
        }
    }

    /// `Res::new(..).with_device("nvidia.com/gpu", 2)`.
    pub fn with_device(mut self, name: impl Into<String>, count: u32) -> Self {
        self.devices.insert(name.into(), count);
        self
    }
}

impl From<&Capacity> for Res {
    fn from(c: &Capacity) -> Self {
        Res {
            millicpus: u64::from(c.cpus) * 1000,
            memory_bytes: c.memory_bytes,
            devices: c.devices.clone(),
        }
    }
}

/// One node as the scheduler sees it in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    /// Expected to be unique; duplicates are kept apart by their position in the list.
    pub id: NodeId,
    pub pool: String,
    pub total: Res,
    /// What the attempts placed there already hold (more than `total` reads as full).
    pub used: Res,
    /// False when held (cordoned, evicting) or down: no new work goes there.
    pub schedulable: bool,
    /// Why it is not schedulable, for people: e.g. "cordoned: hold by monitoring (DiskFull)".
    /// Nodes with the same text are counted together in reasons.
    pub unschedulable_reason: Option<String>,
    /// An exclusive job runs there: nothing else may be placed on it.
    pub exclusive_taken: bool,
    /// Attempts placed there; an exclusive request needs 0.
    pub running: u32,
    /// What the node is (GPU model, CPU model, an administrator's `--label`): requests that
    /// name labels only go where each has the same value.
    pub labels: BTreeMap<String, String>,
    /// Host ports taken by host-network containers there.
    pub host_ports: BTreeSet<u16>,
    /// Its pool allows host networking (an administrator's per-pool setting; default true).
    pub host_network: bool,
}

impl NodeView {
    /// An empty, schedulable node without labels whose pool allows host networking: the
    /// caller sets what differs.
    pub fn new(id: impl Into<NodeId>, pool: impl Into<String>, total: Res) -> Self {
        NodeView {
            id: id.into(),
            pool: pool.into(),
            total,
            used: Res::default(),
            schedulable: true,
            unschedulable_reason: None,
            exclusive_taken: false,
            running: 0,
            labels: BTreeMap::new(),
            host_ports: BTreeSet::new(),
            host_network: true,
        }
    }
}

/// One task (attempt) to place. `K` is the caller's handle for it, returned in the [`Plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRequest<K> {
    pub key: K,
    /// `None`: any pool.
    pub pool: Option<String>,
    pub need: Res,
    /// Per member. Whole node: it needs a node with nothing running and nothing else goes
    /// there after it.
    pub exclusive: bool,
    /// 1: one container. N > 1: a gang (a multinode job): N containers on N distinct nodes of
    /// ONE pool, each taking `need`, all placed in this call or none of them. 0 reads as 1.
    pub members: u32,
    /// Node labels the request needs, each equal (the job's `resource.annotations` whose keys
    /// the cluster treats as constraints, e.g. nvidia.com/gpu.model=T4). Exact string match.
    pub labels: BTreeMap<String, String>,
    /// Host ports its container binds on its node (host networking): a node where one of
    /// them is taken cannot take it, and placing it takes them.
    pub host_ports: Vec<u16>,
    /// It uses its node's network namespace (`network.host`, or a multinode member): only
    /// nodes whose pool allows host networking can take it.
    pub host_network: bool,
}

impl<K> TaskRequest<K> {
    /// One container needing `need`, not exclusive, without labels or host networking: the
    /// caller sets what differs.
    pub fn new(key: K, pool: Option<String>, need: Res) -> Self {
        TaskRequest {
            key,
            pool,
            need,
            exclusive: false,
            members: 1,
            labels: BTreeMap::new(),
            host_ports: Vec::new(),
            host_network: false,
        }
    }
}

/// The outcome of one [`schedule`] call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan<K> {
    /// In request order.
    pub placements: Vec<Placement<K>>,
    /// In request order.
    pub unplaced: Vec<Unplaced<K>>,
}

/// Where one request went. A single container's `others` is empty (and so allocates
/// nothing: most placements are of single containers, and a second allocation per placement
/// cost the plain path a fifth of its speed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement<K> {
    pub key: K,
    /// Member 0's node (the only one, for a single container).
    pub node: NodeId,
    /// The other members' nodes of a gang, member 1 first.
    pub others: Vec<NodeId>,
}

impl<K> Placement<K> {
    /// Every member's node, member 0 first.
    pub fn nodes(&self) -> impl Iterator<Item = &NodeId> {
        std::iter::once(&self.node).chain(self.others.iter())
    }

    /// How many members were placed (1 for a single container).
    pub fn members(&self) -> usize {
        1 + self.others.len()
    }
}

/// A request that could not be placed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unplaced<K> {
    pub key: K,
    pub kind: UnplacedKind,
    /// For people, e.g. `no node fits now: of 5 nodes in pool "cpu", 3 have too few free
    /// cores (need 4, most free 2), 2 unavailable (cordoned: hold by monitoring (DiskFull))`.
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnplacedKind {
    /// Some node in the pool is large enough: the request fits once work ends or held nodes
    /// come back.
    Wait,
    /// Larger than every node of the pool, in whatever state: it will not fit unless bigger
    /// nodes join.
    TooLarge,
    /// The pool (or, for `pool: None`, the cluster) has no nodes at all.
    NoNodes,
}

/// Place `requests`, in order, onto `nodes`. Pure and deterministic: see the module docs for
/// the rules.
pub fn schedule<K: Clone>(nodes: &[NodeView], requests: &[TaskRequest<K>]) -> Plan<K> {
    let mut state = State::new(nodes, requests);
    let (placements, pending) = state.serve(requests);

    // Capacity only shrinks during a call, so a request that did not fit when its turn came
    // does not fit at the end either. Explaining every unplaced request against the final state
    // is therefore exact, and lets all requests of one shape share one explanation.
    let mut explainer = explain::Explainer::new(&state);
    let unplaced = pending
        .into_iter()
        .map(|(i, what)| {
            let req = &requests[i];
            let (kind, reason) = match what {
                None => explainer.unknown_pool(req.pool.as_deref().unwrap_or_default()),
                Some(ask) => explainer.explain(&ask),
            };
            Unplaced {
                key: req.key.clone(),
                kind,
                reason,
            }
        })
        .collect();
    Plan {
        placements,
        unplaced,
    }
}

/// Which pools a request may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Scope {
    All,
    Pool(u32),
}

/// A request left unplaced: its position, and what it asked (`None`: it named a pool without
/// nodes).
type Leftover<'r> = (usize, Option<Ask<'r>>);

/// One request as the search sees it. Requests with equal asks are interchangeable: once one
/// failed, the others fail too.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Ask<'r> {
    scope: Scope,
    need: Need,
    exclusive: bool,
    /// `None` for a plain request, and boxed otherwise: asks are hashed, copied and kept once
    /// per failed shape, and plain ones must cost what they did before gangs existed.
    extra: Option<Box<Extra<'r>>>,
}

impl<'r> Ask<'r> {
    fn extra(&self) -> &Extra<'r> {
        self.extra.as_deref().unwrap_or(&PLAIN)
    }
}

/// What a request asks beyond capacity. Empty for most requests, which then take the indexed
/// path alone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Extra<'r> {
    /// At least 1.
    members: u32,
    labels: Vec<(&'r str, &'r str)>,
    /// Sorted, without repeats.
    ports: Vec<u16>,
    host_network: bool,
}

/// What a plain request asks beyond capacity: nothing.
static PLAIN: Extra<'static> = Extra {
    members: 1,
    labels: Vec::new(),
    ports: Vec::new(),
    host_network: false,
};

impl<'r> Extra<'r> {
    /// `None` for a plain request.
    fn of<K>(req: &'r TaskRequest<K>) -> Option<Box<Self>> {
        if req.members <= 1
            && req.labels.is_empty()
            && req.host_ports.is_empty()
            && !req.host_network
        {
            return None;
        }
        let mut ports = req.host_ports.clone();
        ports.sort_unstable();
        ports.dedup();
        Some(Box::new(Extra {
            members: req.members.max(1),
            labels: req
                .labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect(),
            ports,
            host_network: req.host_network,
        }))
    }
}

/// A request's need with device names replaced by ids, zero counts dropped, sorted by id (and
/// so by name, since ids are handed out in name order).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Need {
    cpu: u64,
    mem: u64,
    dev: Vec<(u32, u32)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Dev {
    id: u32,
    total: u32,
    free: u32,
}

/// A node's working state during one call. Nodes live in a vector sorted by name; their
/// position there (the *rank*) is what the indexes store and what breaks ties.
#[derive(Debug, Clone)]
struct Node {
    pool: u32,
    total_cpu: u64,
    total_mem: u64,
    free_cpu: u64,
    free_mem: u64,
    /// Only the devices the node has (total > 0), sorted by id.
    dev: Vec<Dev>,
    running: u32,
    schedulable: bool,
    exclusive_taken: bool,
    host_ports: BTreeSet<u16>,
    host_network: bool,
}

impl Node {
    /// May take new non-exclusive work (given capacity).
    fn open(&self) -> bool {
        self.schedulable && !self.exclusive_taken
    }

    /// May take an exclusive request (given capacity).
    fn idle(&self) -> bool {
        self.open() && self.running == 0
    }

    fn free_of(&self, id: u32) -> u32 {
        self.dev.iter().find(|d| d.id == id).map_or(0, |d| d.free)
    }

    fn total_of(&self, id: u32) -> u32 {
        self.dev.iter().find(|d| d.id == id).map_or(0, |d| d.total)
    }

    fn could_ever_fit(&self, need: &Need) -> bool {
        self.total_cpu >= need.cpu
            && self.total_mem >= need.mem
            && need.dev.iter().all(|&(d, k)| self.total_of(d) >= k)
    }
}

/// Ordered sets of the nodes that can take work, per pool: `open` for ordinary requests,
/// `idle` (nothing running) for exclusive ones.
#[derive(Debug, Default)]
struct PoolSlots {
    open: Tier,
    idle: Tier,
}

impl PoolSlots {
    fn tier(&self, exclusive: bool) -> &Tier {
        if exclusive {
            &self.idle
        } else {
            &self.open
        }
    }
}

struct State<'a> {
    views: &'a [NodeView],
    /// rank -> position in `views`.
    order: Vec<usize>,
    nodes: Vec<Node>,
    pool_ids: HashMap<&'a str, u32>,
    pool_names: Vec<&'a str>,
    dev_ids: HashMap<&'a str, u32>,
    dev_names: Vec<&'a str>,
    pools: Vec<PoolSlots>,
    /// Every label some node has: a request naming another one is refused without a search.
    labels: HashSet<(&'a str, &'a str)>,
}

impl<'a> State<'a> {
    fn new<K>(views: &'a [NodeView], requests: &'a [TaskRequest<K>]) -> Self {
        let mut order: Vec<usize> = (0..views.len()).collect();
        order.sort_by(|&a, &b| views[a].id.cmp(&views[b].id).then(a.cmp(&b)));

        let pool_names: Vec<&str> = views
            .iter()
            .map(|v| v.pool.as_str())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let pool_ids: HashMap<&str, u32> = pool_names
            .iter()
            .enumerate()
            .map(|(i, &p)| (p, i as u32))
            .collect();

        // Requests' device names get ids too, so that a device no node has is simply an index
        // with no entries rather than a special case.
        let dev_names: Vec<&str> = views
            .iter()
            .flat_map(|v| v.total.devices.iter())
            .chain(requests.iter().flat_map(|r| r.need.devices.iter()))
            .filter(|&(_, &n)| n > 0)
            .map(|(name, _)| name.as_str())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let dev_ids: HashMap<&str, u32> = dev_names
            .iter()
            .enumerate()
            .map(|(i, &d)| (d, i as u32))
            .collect();

        let nodes: Vec<Node> = order
            .iter()
            .map(|&i| {
                let v = &views[i];
                let dev = v
                    .total
                    .devices
                    .iter()
                    .filter(|&(_, &n)| n > 0)
                    .map(|(name, &total)| Dev {
                        id: dev_ids[name.as_str()],
                        total,
                        free: total.saturating_sub(v.used.devices.get(name).copied().unwrap_or(0)),
                    })
                    .collect();
                Node {
                    pool: pool_ids[v.pool.as_str()],
                    total_cpu: v.total.millicpus,
                    total_mem: v.total.memory_bytes,
                    free_cpu: v.total.millicpus.saturating_sub(v.used.millicpus),
                    free_mem: v.total.memory_bytes.saturating_sub(v.used.memory_bytes),
                    dev,
                    running: v.running,
                    schedulable: v.schedulable,
                    exclusive_taken: v.exclusive_taken,
                    host_ports: v.host_ports.clone(),
                    host_network: v.host_network,
                }
            })
            .collect();

        let mut pools: Vec<PoolSlots> = pool_names.iter().map(|_| PoolSlots::default()).collect();
        for (rank, n) in nodes.iter().enumerate() {
            let slots = &mut pools[n.pool as usize];
            if n.open() {
                slots.open.insert(rank as u32, n);
            }
            if n.idle() {
                slots.idle.insert(rank as u32, n);
            }
        }

        let labels = views
            .iter()
            .flat_map(|v| v.labels.iter())
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();

        State {
            views,
            order,
            nodes,
            pool_ids,
            pool_names,
            dev_ids,
            dev_names,
            pools,
            labels,
        }
    }

    /// Place each request in turn. Returns the placements and, for each request left over,
    /// its position and what it asked for (`None`: it named a pool without nodes).
    fn serve<'r, K: Clone>(
        &mut self,
        requests: &'r [TaskRequest<K>],
    ) -> (Vec<Placement<K>>, Vec<Leftover<'r>>) {
        let mut placements = Vec::with_capacity(requests.len());
        let mut pending = Vec::new();
        // Capacity only shrinks during a call (and taken host ports only grow), so once an ask
        // has failed, every later equal ask fails too: remembering it saves the search, which
        // is at its longest exactly when nothing fits.
        let mut failed: HashSet<Ask<'r>> = HashSet::new();
        for (i, req) in requests.iter().enumerate() {
            let scope = match &req.pool {
                None => Scope::All,
                Some(p) => match self.pool_ids.get(p.as_str()) {
                    Some(&id) => Scope::Pool(id),
                    None => {
                        pending.push((i, None));
                        continue;
                    }
                },
            };
            let ask = Ask {
                scope,
                need: self.need(&req.need),
                exclusive: req.exclusive,
                extra: Extra::of(req),
            };
            if failed.contains(&ask) {
                pending.push((i, Some(ask)));
                continue;
            }
            // The plain path allocates nothing but the answer: it is most requests.
            let ids: Option<(NodeId, Vec<NodeId>)> = if ask.extra.is_none() {
                self.pick(scope, &ask.need, ask.exclusive).map(|rank| {
                    self.place(rank, &ask.need, ask.exclusive, &[]);
                    (self.id_of(rank), Vec::new())
                })
            } else {
                self.pick_members(&ask).map(|ranks| {
                    let mut ids = ranks.into_iter().map(|rank| {
                        self.place(rank, &ask.need, ask.exclusive, &ask.extra().ports);
                        self.id_of(rank)
                    });
                    // `pick_members` returns every member, so at least one.
                    let first = ids.next().unwrap_or_else(|| NodeId(String::new()));
                    (first, ids.collect())
                })
            };
            match ids {
                Some((node, others)) => placements.push(Placement {
                    key: req.key.clone(),
                    node,
                    others,
                }),
                None => {
                    pending.push((i, Some(ask.clone())));
                    failed.insert(ask);
                }
            }
        }
        (placements, pending)
    }

    /// Why the node at `rank` takes no work, for people.
    fn unschedulable(&self, rank: usize) -> &'a str {
        self.views[self.order[rank]]
            .unschedulable_reason
            .as_deref()
            .unwrap_or("unschedulable")
    }

    fn id_of(&self, rank: u32) -> NodeId {
        self.views[self.order[rank as usize]].id.clone()
    }

    fn need(&self, res: &Res) -> Need {
        let mut dev: Vec<(u32, u32)> = res
            .devices
            .iter()
            .filter(|&(_, &n)| n > 0)
            .map(|(name, &n)| (self.dev_ids[name.as_str()], n))
            .collect();
        dev.sort_unstable();
        Need {
            cpu: res.millicpus,
            mem: res.memory_bytes,
            dev,
        }
    }

    fn pools_in(&self, scope: Scope) -> &[PoolSlots] {
        match scope {
            Scope::All => &self.pools,
            Scope::Pool(p) => std::slice::from_ref(&self.pools[p as usize]),
        }
    }

    /// The best node for `need`, or `None` when no node can take it now.
    fn pick(&self, scope: Scope, need: &Need, exclusive: bool) -> Option<u32> {
        let pools = self.pools_in(scope);
        if need.dev.is_empty() {
            let best_in = |with_devices: bool| {
                pools
                    .iter()
                    .filter_map(|p| p.tier(exclusive).find_plain(need, with_devices, |_| true))
                    .min()
            };
            best_in(false)
                .or_else(|| best_in(true))
                .map(|(_, _, rank)| rank)
        } else {
            pools
                .iter()
                .filter_map(|p| p.tier(exclusive).find_devices(need, &self.nodes, |_| true))
                .min()
                .map(|(_, _, _, rank)| rank)
        }
    }

    /// The best nodes, one per member, for a request with labels, host ports, host
    /// networking or several members: within each pool the first `members` nodes in rank order
    /// that admit it, and of the pools that have that many, the one whose last pick ranks best.
    /// With one member that is the same node [`State::pick`] would choose among admitting nodes.
    fn pick_members(&self, ask: &Ask<'_>) -> Option<Vec<u32>> {
        let want = ask.extra().members as usize;
        // `members` comes from the workflow: more than there are nodes is answered before
        // anything is sized by it.
        if want > self.nodes.len() || !ask.extra().labels.iter().all(|l| self.labels.contains(l)) {
            return None;
        }
        let mut best: Option<(RankKey, Vec<u32>)> = None;
        for slots in self.pools_in(ask.scope) {
            let tier = slots.tier(ask.exclusive);
            let mut got = Vec::with_capacity(want);
            let mut take = |rank: u32| {
                if self.admits(rank, ask.extra()) {
                    got.push(rank);
                }
                got.len() == want
            };
            if ask.need.dev.is_empty() {
                if tier.find_plain(&ask.need, false, &mut take).is_none() {
                    tier.find_plain(&ask.need, true, &mut take);
                }
            } else {
                tier.find_devices(&ask.need, &self.nodes, &mut take);
            }
            if let Some(&last) = got.get(want.wrapping_sub(1)) {
                let key = self.rank_key(last, &ask.need);
                if best.as_ref().is_none_or(|(k, _)| key < *k) {
                    best = Some((key, got));
                }
            }
        }
        best.map(|(_, ranks)| ranks)
    }

    /// Where a node stands in the order the indexes walk for `need` (see Rank).
    fn rank_key(&self, rank: u32, need: &Need) -> RankKey {
        let n = &self.nodes[rank as usize];
        let first = match need.dev.first() {
            Some(&(d, _)) => u64::from(n.free_of(d)),
            None => u64::from(!n.dev.is_empty()),
        };
        (first, n.free_cpu, n.free_mem, rank)
    }

    /// The node has what the request asks beyond capacity: its labels, its host ports free,
    /// and host networking allowed.
    fn admits(&self, rank: u32, extra: &Extra<'_>) -> bool {
        let n = &self.nodes[rank as usize];
        self.matches(rank, extra) && extra.ports.iter().all(|p| !n.host_ports.contains(p))
    }

    /// The part of [`State::admits`] that does not change while the node runs work.
    fn matches(&self, rank: u32, extra: &Extra<'_>) -> bool {
        let n = &self.nodes[rank as usize];
        (!extra.host_network || n.host_network) && self.lacking(rank, extra).next().is_none()
    }

    /// The positions in `extra.labels` of the labels the node does not have.
    fn lacking<'e>(&'e self, rank: u32, extra: &'e Extra<'_>) -> impl Iterator<Item = usize> + 'e {
        let labels = &self.views[self.order[rank as usize]].labels;
        extra
            .labels
            .iter()
            .enumerate()
            .filter(move |&(_, &(k, v))| labels.get(k).map(String::as_str) != Some(v))
            .map(|(i, _)| i)
    }

    fn place(&mut self, rank: u32, need: &Need, exclusive: bool, ports: &[u16]) {
        let n = &mut self.nodes[rank as usize];
        let slots = &mut self.pools[n.pool as usize];
        if n.open() {
            slots.open.remove(rank, n);
        }
        if n.idle() {
            slots.idle.remove(rank, n);
        }
        // `pick` only returns nodes that fit, so these never saturate; saturating keeps a
        // logic slip from wrapping into a huge free capacity.
        n.free_cpu = n.free_cpu.saturating_sub(need.cpu);
        n.free_mem = n.free_mem.saturating_sub(need.mem);
        for &(id, k) in &need.dev {
            if let Some(d) = n.dev.iter_mut().find(|d| d.id == id) {
                d.free = d.free.saturating_sub(k);
            }
        }
        n.host_ports.extend(ports);
        n.running = n.running.saturating_add(1);
        if exclusive {
            n.exclusive_taken = true;
        }
        if n.open() {
            slots.open.insert(rank, n);
        }
        if n.idle() {
            slots.idle.insert(rank, n);
        }
    }
}

/// (free count of the first device asked for, or 1 for a node with devices when none is asked
/// for; free cores; free memory; rank): lower is better.
type RankKey = (u64, u64, u64, u32);
