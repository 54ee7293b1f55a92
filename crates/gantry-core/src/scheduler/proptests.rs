//! Property tests: the indexed scheduler against the rules themselves, checked directly
//! (no overcommit, every placement feasible) and against a naive scan that follows the module
//! docs word for word, gangs, labels and host ports included.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

const GIB: u64 = 1 << 30;
const GPU: &str = "nvidia.com/gpu";
const FPGA: &str = "xilinx.com/fpga";
const POOLS: [&str; 3] = ["a", "b", "c"];
const MODEL: &str = "nvidia.com/gpu.model";
const ZONE: &str = "zone";
const PORTS: [u16; 2] = [80, 8080];

/// A few labels from a small set, so that requests naming them sometimes match.
fn arb_labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    (
        prop::option::of(prop::sample::select(&["T4", "H100"][..])),
        prop::option::of(Just("x")),
    )
        .prop_map(|(model, zone)| {
            let mut l = BTreeMap::new();
            if let Some(m) = model {
                l.insert(MODEL.to_owned(), m.to_owned());
            }
            if let Some(z) = zone {
                l.insert(ZONE.to_owned(), z.to_owned());
            }
            l
        })
}

fn arb_ports() -> impl Strategy<Value = Vec<u16>> {
    prop::sample::subsequence(&PORTS[..], 0..=2)
}

fn arb_devices(max_gpu: u32, max_fpga: u32) -> impl Strategy<Value = BTreeMap<String, u32>> {
    (
        prop_oneof![3 => Just(0u32), 2 => 0..=max_gpu],
        prop_oneof![4 => Just(0u32), 1 => 0..=max_fpga],
    )
        .prop_map(|(g, f)| {
            let mut d = BTreeMap::new();
            // Some zero counts, to check they read as absent.
            if g > 0 || f % 2 == 1 {
                d.insert(GPU.to_owned(), g);
            }
            if f > 0 {
                d.insert(FPGA.to_owned(), f);
            }
            d
        })
}

fn arb_node() -> impl Strategy<Value = NodeView> {
    (
        prop::sample::select(&POOLS[..]),
        prop::sample::select(&[0u64, 500, 1000, 2000, 4000, 8000][..]),
        prop::sample::select(&[0u64, 1, 2, 4, 8][..]),
        arb_devices(4, 2),
        // used as a fraction in eighths of the total; 9 overcommits.
        (0u64..=9, 0u64..=9, 0u32..=5),
        prop_oneof![4 => Just(true), 1 => Just(false)],
        prop::option::of(prop::sample::select(&["cordoned: DiskFull", "down"][..])),
        prop_oneof![9 => Just(false), 1 => Just(true)],
        0u32..3,
        (
            arb_labels(),
            arb_ports(),
            prop_oneof![5 => Just(true), 1 => Just(false)],
        ),
    )
        .prop_map(
            |(
                pool,
                cpu,
                gib,
                devices,
                (uc, um, ud),
                schedulable,
                why,
                excl,
                running,
                (labels, ports, host_network),
            )| {
                let total = Res {
                    millicpus: cpu,
                    memory_bytes: gib * GIB,
                    devices,
                };
                let used = Res {
                    millicpus: cpu * uc / 8,
                    memory_bytes: gib * GIB * um / 8,
                    devices: total
                        .devices
                        .iter()
                        .map(|(k, &n)| (k.clone(), (n * ud / 4).min(n + 1)))
                        .collect(),
                };
                let idle = uc == 0 && um == 0 && ud == 0;
                NodeView {
                    id: NodeId(String::new()),
                    pool: pool.to_owned(),
                    total,
                    used,
                    schedulable,
                    unschedulable_reason: why.map(str::to_owned),
                    exclusive_taken: excl,
                    running: if idle { running.min(1) } else { running + 1 },
                    labels,
                    host_ports: ports.into_iter().collect(),
                    host_network,
                }
            },
        )
}

fn arb_nodes() -> impl Strategy<Value = Vec<NodeView>> {
    prop::collection::vec(arb_node(), 0..14)
        .prop_map(|mut v| {
            for (i, n) in v.iter_mut().enumerate() {
                n.id = NodeId(format!("n{i:02}"));
            }
            v
        })
        .prop_shuffle()
}

fn arb_request() -> impl Strategy<Value = (Option<&'static str>, Res, bool)> {
    (
        prop::option::of(prop::sample::select(&["a", "b", "c", "nowhere"][..])),
        prop::sample::select(&[0u64, 250, 500, 1000, 2000, 4000, 9000][..]),
        prop::sample::select(&[0u64, GIB / 2, GIB, 3 * GIB, 9 * GIB][..]),
        arb_devices(5, 2),
        prop_oneof![6 => Just(false), 1 => Just(true)],
    )
        .prop_map(|(pool, cpu, mem, devices, excl)| {
            (
                pool,
                Res {
                    millicpus: cpu,
                    memory_bytes: mem,
                    devices,
                },
                excl,
            )
        })
}

/// (members, labels, host ports, host network): mostly a plain request, so that the indexed
/// path keeps most of the cases.
type Extras = (u32, BTreeMap<String, String>, Vec<u16>, bool);

fn arb_extras() -> impl Strategy<Value = Extras> {
    prop_oneof![
        3 => Just((1, BTreeMap::new(), Vec::new(), false)),
        2 => (
            prop_oneof![2 => Just(1u32), 1 => Just(0u32), 3 => 2u32..=4],
            prop_oneof![1 => Just(BTreeMap::new()), 1 => arb_labels()],
            prop_oneof![2 => Just(Vec::new()), 1 => arb_ports()],
            any::<bool>(),
        ),
    ]
}

fn arb_requests() -> impl Strategy<Value = Vec<TaskRequest<u64>>> {
    prop::collection::vec((arb_request(), arb_extras()), 0..40).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(
                |(k, ((pool, need, exclusive), (members, labels, host_ports, host_network)))| {
                    TaskRequest {
                        key: k as u64,
                        pool: pool.map(str::to_owned),
                        need,
                        exclusive,
                        members,
                        labels,
                        host_ports,
                        host_network,
                    }
                },
            )
            .collect()
    })
}

fn members(r: &TaskRequest<u64>) -> usize {
    r.members.max(1) as usize
}

/// What never changes while a node runs work: host networking allowed and the labels.
fn matches(v: &NodeView, r: &TaskRequest<u64>) -> bool {
    (!r.host_network || v.host_network) && r.labels.iter().all(|(k, x)| v.labels.get(k) == Some(x))
}

fn dev(r: &Res, name: &str) -> u32 {
    r.devices.get(name).copied().unwrap_or(0)
}

/// A node's free capacity in a plain shape, for the naive scheduler.
#[derive(Debug, Clone)]
struct Naive {
    cpu: u64,
    mem: u64,
    dev: BTreeMap<String, u32>,
    has_devices: bool,
    running: u32,
    taken: bool,
    ports: BTreeSet<u16>,
}

impl Naive {
    fn of(v: &NodeView) -> Self {
        let dev = v
            .total
            .devices
            .iter()
            .filter(|&(_, &n)| n > 0)
            .map(|(k, &n)| (k.clone(), n.saturating_sub(dev(&v.used, k))))
            .collect::<BTreeMap<_, _>>();
        Naive {
            cpu: v.total.millicpus.saturating_sub(v.used.millicpus),
            mem: v.total.memory_bytes.saturating_sub(v.used.memory_bytes),
            has_devices: !dev.is_empty(),
            dev,
            running: v.running,
            taken: v.exclusive_taken,
            ports: v.host_ports.clone(),
        }
    }

    fn fits(&self, v: &NodeView, r: &TaskRequest<u64>) -> bool {
        r.pool.as_ref().is_none_or(|p| *p == v.pool)
            && v.schedulable
            && !self.taken
            && (!r.exclusive || self.running == 0)
            && self.cpu >= r.need.millicpus
            && self.mem >= r.need.memory_bytes
            && r.need
                .devices
                .iter()
                .all(|(k, &n)| self.dev.get(k).copied().unwrap_or(0) >= n)
            && matches(v, r)
            && r.host_ports.iter().all(|p| !self.ports.contains(p))
    }

    fn take(&mut self, r: &TaskRequest<u64>) {
        self.cpu -= r.need.millicpus;
        self.mem -= r.need.memory_bytes;
        for (k, &n) in &r.need.devices {
            if n > 0 {
                *self.dev.get_mut(k).unwrap() -= n;
            }
        }
        self.running += 1;
        self.taken |= r.exclusive;
        self.ports.extend(&r.host_ports);
    }
}

/// The pools a request may use, in name order.
fn pools_for<'n>(nodes: &'n [NodeView], r: &TaskRequest<u64>) -> BTreeSet<&'n str> {
    nodes
        .iter()
        .map(|v| v.pool.as_str())
        .filter(|p| r.pool.as_deref().is_none_or(|want| want == *p))
        .collect()
}

/// The rules of the module docs as a scan over every node: the indexed scheduler must agree
/// with it exactly. Returns the plan's placements and the kinds of the unplaced, and each
/// node's state at the end.
#[allow(clippy::type_complexity)]
fn naive(
    nodes: &[NodeView],
    reqs: &[TaskRequest<u64>],
) -> (
    Vec<(u64, Vec<String>)>,
    Vec<(u64, UnplacedKind)>,
    Vec<Naive>,
) {
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by(|&a, &b| nodes[a].id.cmp(&nodes[b].id).then(a.cmp(&b)));
    let mut state: Vec<Naive> = nodes.iter().map(Naive::of).collect();
    let mut placed = Vec::new();
    let mut unplaced = Vec::new();
    for r in reqs {
        let first_dev = r.need.devices.iter().find(|&(_, &n)| n > 0).map(|(k, _)| k);
        let key = |state: &[Naive], rank: usize, i: usize| {
            let s = &state[i];
            let first = match first_dev {
                Some(d) => u64::from(s.dev[d]),
                None => u64::from(s.has_devices),
            };
            (first, s.cpu, s.mem, rank)
        };
        let want = members(r);
        // Per pool, its `want` best feasible nodes; the pool whose last one ranks best wins.
        let best = pools_for(nodes, r)
            .into_iter()
            .filter_map(|pool| {
                let mut fit: Vec<(usize, usize)> = order
                    .iter()
                    .enumerate()
                    .filter(|&(_, &i)| nodes[i].pool == pool && state[i].fits(&nodes[i], r))
                    .map(|(rank, &i)| (rank, i))
                    .collect();
                fit.sort_by_key(|&(rank, i)| key(&state, rank, i));
                fit.truncate(want);
                let &(rank, i) = fit.get(want - 1)?;
                Some((key(&state, rank, i), fit))
            })
            .min_by_key(|(k, _)| *k);
        match best {
            Some((_, picked)) => {
                let mut ids = Vec::new();
                for (_, i) in picked {
                    state[i].take(r);
                    ids.push(nodes[i].id.0.clone());
                }
                placed.push((r.key, ids));
            }
            None => {
                let kind = if pools_for(nodes, r).is_empty() {
                    UnplacedKind::NoNodes
                } else if pools_for(nodes, r).into_iter().any(|pool| {
                    let ever = nodes
                        .iter()
                        .filter(|v| {
                            v.pool == pool
                                && matches(v, r)
                                && v.total.millicpus >= r.need.millicpus
                                && v.total.memory_bytes >= r.need.memory_bytes
                                && r.need.devices.iter().all(|(k, &n)| dev(&v.total, k) >= n)
                        })
                        .count();
                    ever >= want
                }) {
                    UnplacedKind::Wait
                } else {
                    UnplacedKind::TooLarge
                };
                unplaced.push((r.key, kind));
            }
        }
    }
    (placed, unplaced, state)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Checked from the plan alone: each node's placements fit what it had free, went only
    /// where they were allowed, and exclusive ones are alone on their node; a gang has all its
    /// members, on distinct nodes of one pool.
    #[test]
    fn never_overcommits_and_every_placement_was_feasible(nodes in arb_nodes(), reqs in arb_requests()) {
        let plan = schedule(&nodes, &reqs);
        let by_id: BTreeMap<&str, &NodeView> = nodes.iter().map(|n| (n.id.as_str(), n)).collect();
        let mut on_node: BTreeMap<&str, Vec<&TaskRequest<u64>>> = BTreeMap::new();
        for p in &plan.placements {
            let (key, ids) = (&p.key, p.nodes().collect::<Vec<&NodeId>>());
            let r = &reqs[*key as usize];
            prop_assert_eq!(ids.len(), members(r), "{} is a partial gang", key);
            let distinct: BTreeSet<&str> = ids.iter().map(|n| n.as_str()).collect();
            prop_assert_eq!(distinct.len(), ids.len(), "{} has two members on one node", key);
            let pools: BTreeSet<&str> = ids.iter().map(|id| by_id[id.as_str()].pool.as_str()).collect();
            prop_assert_eq!(pools.len(), 1, "{} spans pools {:?}", key, pools);
            for id in ids {
                on_node.entry(id.as_str()).or_default().push(r);
            }
        }
        for (id, placed) in &on_node {
            let v = by_id[id];
            let free = Naive::of(v);
            prop_assert!(v.schedulable && !v.exclusive_taken, "{id} was not open");
            let cpu: u64 = placed.iter().map(|r| r.need.millicpus).sum();
            let mem: u64 = placed.iter().map(|r| r.need.memory_bytes).sum();
            prop_assert!(cpu <= free.cpu, "{id}: {cpu} millicores placed, {} free", free.cpu);
            prop_assert!(mem <= free.mem, "{id}: {mem} bytes placed, {} free", free.mem);
            for name in [GPU, FPGA] {
                let want: u32 = placed.iter().map(|r| dev(&r.need, name)).sum();
                let have = free.dev.get(name).copied().unwrap_or(0);
                prop_assert!(want <= have, "{id}: {want} {name} placed, {have} free");
            }
            let mut ports: Vec<u16> = placed.iter().flat_map(|r| r.host_ports.iter().copied()).collect();
            for p in &ports {
                prop_assert!(!v.host_ports.contains(p), "{id}: host port {p} was taken");
            }
            let count = ports.len();
            ports.sort_unstable();
            ports.dedup();
            prop_assert_eq!(ports.len(), count, "{}: a host port placed twice", id);
            for r in placed {
                prop_assert!(r.pool.as_ref().is_none_or(|p| *p == v.pool));
                prop_assert!(matches(v, r), "{} went to {id}, which lacks its labels or host networking", r.key);
                if r.exclusive {
                    prop_assert_eq!(placed.len(), 1, "{} shares its node", r.key);
                    prop_assert_eq!(v.running, 0, "{} went to a busy node", r.key);
                }
            }
        }
        // Every request is answered once, in order.
        let mut seen: Vec<u64> = plan.placements.iter().map(|p| p.key)
            .chain(plan.unplaced.iter().map(|u| u.key)).collect();
        prop_assert!(plan.placements.windows(2).all(|w| w[0].key < w[1].key));
        prop_assert!(plan.unplaced.windows(2).all(|w| w[0].key < w[1].key));
        seen.sort_unstable();
        prop_assert_eq!(seen, (0..reqs.len() as u64).collect::<Vec<_>>());
        for u in &plan.unplaced {
            prop_assert!(!u.reason.is_empty());
        }
    }

    /// The indexes change how nodes are found, never which node wins or why one is missing.
    #[test]
    fn agrees_with_a_naive_scan(nodes in arb_nodes(), reqs in arb_requests()) {
        let plan = schedule(&nodes, &reqs);
        let (placed, unplaced, _) = naive(&nodes, &reqs);
        let got: Vec<(u64, Vec<String>)> = plan
            .placements
            .iter()
            .map(|p| (p.key, p.nodes().map(|n| n.0.clone()).collect()))
            .collect();
        prop_assert_eq!(got, placed);
        let got: Vec<(u64, UnplacedKind)> = plan.unplaced.iter().map(|u| (u.key, u.kind)).collect();
        prop_assert_eq!(got, unplaced);
    }

    /// Independent of rank: replaying the plan in request order, each placed request's nodes
    /// could take a member at its turn, and an unplaced one had no pool with enough nodes that
    /// could (a brute-force count), so a gang is never refused while a pool had room for it.
    #[test]
    fn a_gang_is_placed_exactly_when_a_pool_has_room_at_its_turn(
        nodes in arb_nodes(),
        reqs in arb_requests(),
    ) {
        let plan = schedule(&nodes, &reqs);
        let placed: BTreeMap<u64, Vec<&NodeId>> = plan.placements.iter().map(|p| (p.key, p.nodes().collect())).collect();
        let index: BTreeMap<&str, usize> = nodes.iter().enumerate().map(|(i, v)| (v.id.as_str(), i)).collect();
        let mut state: Vec<Naive> = nodes.iter().map(Naive::of).collect();
        for r in &reqs {
            match placed.get(&r.key) {
                Some(ids) => {
                    for id in ids.iter() {
                        let i = index[id.as_str()];
                        prop_assert!(state[i].fits(&nodes[i], r), "{} placed on {} without room", r.key, id);
                        state[i].take(r);
                    }
                }
                None => {
                    for pool in pools_for(&nodes, r) {
                        let room = (0..nodes.len())
                            .filter(|&i| nodes[i].pool == pool && state[i].fits(&nodes[i], r))
                            .count();
                        prop_assert!(room < members(r), "{} unplaced while pool {} had {} nodes with room", r.key, pool, room);
                    }
                }
            }
        }
    }

    /// The order in which the caller lists nodes does not matter.
    #[test]
    fn node_order_does_not_matter(
        (nodes, shuffled) in arb_nodes().prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle())),
        reqs in arb_requests(),
    ) {
        prop_assert_eq!(schedule(&nodes, &reqs), schedule(&shuffled, &reqs));
    }

    /// The counts in a wait reason match a naive node-by-node classification of the final
    /// state, and every node is accounted for. Checked on the node-by-node count that explains
    /// gangs and requests with labels, host ports or host networking, which for plain requests
    /// must be exactly what the sorted summaries give.
    #[test]
    fn reason_counts_match_a_node_by_node_count(
        nodes in arb_nodes(),
        reqs in arb_requests(),
        probes in prop::collection::vec((arb_request(), arb_extras()), 1..8),
    ) {
        let mut state = State::new(&nodes, &reqs);
        let (_, _) = state.serve(&reqs);
        let (_, _, end) = naive(&nodes, &reqs);
        let mut explainer = explain::Explainer::new(&state);
        for ((pool, res, exclusive), (members, labels, host_ports, host_network)) in probes {
            let (scope, pool_id) = match pool {
                None => (Scope::All, None),
                Some(p) => match state.pool_ids.get(p) {
                    Some(&id) => (Scope::Pool(id), Some(id)),
                    None => continue,
                },
            };
            if res.devices.iter().any(|(k, &n)| n > 0 && !state.dev_ids.contains_key(k.as_str())) {
                continue;
            }
            let mut r = TaskRequest::new(0, pool.map(str::to_owned), res.clone());
            (r.exclusive, r.members, r.labels, r.host_ports, r.host_network) =
                (exclusive, members, labels, host_ports, host_network);
            let ask = Ask { scope, need: state.need(&res), exclusive, extra: Extra::of(&r) };
            let t = explain::tally(&state, &ask, pool_id);
            if ask.extra.is_none() {
                prop_assert_eq!(&t.sf, &explainer.shortfall(scope, &ask.need, exclusive));
            }

            let mut forbidden: BTreeMap<&str, usize> = BTreeMap::new();
            let mut lacking: BTreeMap<String, usize> = BTreeMap::new();
            let mut unavailable: BTreeMap<&str, usize> = BTreeMap::new();
            let (mut total, mut matching, mut ever, mut room) = (0, 0, 0, 0);
            let (mut taken, mut busy, mut cands, mut short_cpu, mut short_mem) = (0, 0, 0, 0, 0);
            let mut ports: BTreeMap<u16, usize> = BTreeMap::new();
            let mut short_dev: BTreeMap<&str, usize> = BTreeMap::new();
            for (v, s) in nodes.iter().zip(&end) {
                if pool.is_some_and(|p| p != v.pool) {
                    continue;
                }
                total += 1;
                if r.host_network && !v.host_network {
                    *forbidden.entry(v.pool.as_str()).or_default() += 1;
                    continue;
                }
                let missing: Vec<String> = r.labels.iter()
                    .filter(|(k, x)| v.labels.get(*k) != Some(x))
                    .map(|(k, x)| format!("{k}={x}"))
                    .collect();
                if !missing.is_empty() {
                    for m in missing {
                        *lacking.entry(m).or_default() += 1;
                    }
                    continue;
                }
                matching += 1;
                ever += usize::from(
                    v.total.millicpus >= res.millicpus
                        && v.total.memory_bytes >= res.memory_bytes
                        && res.devices.iter().all(|(k, &n)| dev(&v.total, k) >= n),
                );
                if !v.schedulable {
                    *unavailable
                        .entry(v.unschedulable_reason.as_deref().unwrap_or("unschedulable"))
                        .or_default() += 1;
                } else if s.taken {
                    taken += 1;
                } else if exclusive && s.running > 0 {
                    busy += 1;
                } else {
                    cands += 1;
                    short_cpu += usize::from(s.cpu < res.millicpus);
                    short_mem += usize::from(s.mem < res.memory_bytes);
                    for (k, &n) in &res.devices {
                        if n > 0 && s.dev.get(k).copied().unwrap_or(0) < n {
                            *short_dev.entry(k.as_str()).or_default() += 1;
                        }
                    }
                    for p in &r.host_ports {
                        if s.ports.contains(p) {
                            *ports.entry(*p).or_default() += 1;
                        }
                    }
                    room += usize::from(s.fits(v, &r));
                }
            }
            prop_assert_eq!(t.sf.nodes, total);
            prop_assert_eq!(t.matching, matching);
            prop_assert_eq!(t.ever, ever);
            prop_assert_eq!(t.room, room);
            prop_assert_eq!(t.sf.exclusive_taken, taken);
            prop_assert_eq!(t.sf.busy, busy);
            prop_assert_eq!(t.sf.candidates, cands);
            prop_assert_eq!(t.sf.cpu.0, short_cpu);
            prop_assert_eq!(t.sf.mem.0, short_mem);
            let got: BTreeMap<&str, usize> = t.sf.unavailable.iter().copied().collect();
            prop_assert_eq!(got, unavailable);
            let got: BTreeMap<&str, usize> = t.sf.forbidden.iter().copied().collect();
            prop_assert_eq!(got, forbidden);
            let got: BTreeMap<String, usize> = t.sf.lacking.iter().cloned().collect();
            prop_assert_eq!(got, lacking);
            let got: BTreeMap<u16, usize> = t.sf.ports.iter().copied().collect();
            prop_assert_eq!(got, ports);
            let got: BTreeMap<&str, usize> = t
                .sf
                .dev
                .iter()
                .filter(|&&(_, n, _)| n > 0)
                .map(|&(d, n, _)| (state.dev_names[d as usize], n))
                .collect();
            prop_assert_eq!(got, short_dev);
        }
    }

    /// After a call, each pool's indexes hold exactly the nodes that may still take work.
    #[test]
    fn indexes_stay_consistent(nodes in arb_nodes(), reqs in arb_requests()) {
        let mut state = State::new(&nodes, &reqs);
        state.serve(&reqs);
        for (p, slots) in state.pools.iter().enumerate() {
            let in_pool = || state.nodes.iter().filter(move |n| n.pool as usize == p);
            let entries = |n: &Node| 1 + n.dev.len() * usize::from(!n.dev.is_empty());
            let open: usize = in_pool().filter(|n| n.open()).map(entries).sum();
            let idle: usize = in_pool().filter(|n| n.idle()).map(entries).sum();
            prop_assert_eq!(slots.open.entries(), open);
            prop_assert_eq!(slots.idle.entries(), idle);
        }
    }
}
