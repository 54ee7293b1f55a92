//! Property tests: the indexed scheduler against the rules themselves, checked directly
//! (no overcommit, every placement feasible) and against a naive scan that follows the module
//! docs word for word.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const GIB: u64 = 1 << 30;
const GPU: &str = "nvidia.com/gpu";
const FPGA: &str = "xilinx.com/fpga";
const POOLS: [&str; 3] = ["a", "b", "c"];

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
    )
        .prop_map(
            |(pool, cpu, gib, devices, (uc, um, ud), schedulable, why, excl, running)| {
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

fn arb_requests() -> impl Strategy<Value = Vec<TaskRequest<u64>>> {
    prop::collection::vec(arb_request(), 0..40).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(k, (pool, need, exclusive))| TaskRequest {
                key: k as u64,
                pool: pool.map(str::to_owned),
                need,
                exclusive,
            })
            .collect()
    })
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
    }
}

/// The rules of the module docs as a scan over every node: the indexed scheduler must agree
/// with it exactly. Returns the plan's placements and the kinds of the unplaced, and each
/// node's state at the end.
#[allow(clippy::type_complexity)]
fn naive(
    nodes: &[NodeView],
    reqs: &[TaskRequest<u64>],
) -> (Vec<(u64, String)>, Vec<(u64, UnplacedKind)>, Vec<Naive>) {
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by(|&a, &b| nodes[a].id.cmp(&nodes[b].id).then(a.cmp(&b)));
    let mut state: Vec<Naive> = nodes.iter().map(Naive::of).collect();
    let mut placed = Vec::new();
    let mut unplaced = Vec::new();
    for r in reqs {
        let first_dev = r.need.devices.iter().find(|&(_, &n)| n > 0).map(|(k, _)| k);
        let best = order
            .iter()
            .enumerate()
            .filter(|&(_, &i)| state[i].fits(&nodes[i], r))
            .min_by_key(|&(rank, &i)| {
                let s = &state[i];
                let first = match first_dev {
                    Some(d) => u64::from(s.dev[d]),
                    None => u64::from(s.has_devices),
                };
                (first, s.cpu, s.mem, rank)
            })
            .map(|(_, &i)| i);
        match best {
            Some(i) => {
                let s = &mut state[i];
                s.cpu -= r.need.millicpus;
                s.mem -= r.need.memory_bytes;
                for (k, &n) in &r.need.devices {
                    if n > 0 {
                        *s.dev.get_mut(k).unwrap() -= n;
                    }
                }
                s.running += 1;
                s.taken |= r.exclusive;
                placed.push((r.key, nodes[i].id.0.clone()));
            }
            None => {
                let in_scope: Vec<&NodeView> = nodes
                    .iter()
                    .filter(|v| r.pool.as_ref().is_none_or(|p| *p == v.pool))
                    .collect();
                let kind = if in_scope.is_empty() {
                    UnplacedKind::NoNodes
                } else if in_scope.iter().any(|v| {
                    v.total.millicpus >= r.need.millicpus
                        && v.total.memory_bytes >= r.need.memory_bytes
                        && r.need.devices.iter().all(|(k, &n)| dev(&v.total, k) >= n)
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
    /// where they were allowed, and exclusive ones are alone on their node.
    #[test]
    fn never_overcommits_and_every_placement_was_feasible(nodes in arb_nodes(), reqs in arb_requests()) {
        let plan = schedule(&nodes, &reqs);
        let by_id: BTreeMap<&str, &NodeView> = nodes.iter().map(|n| (n.id.as_str(), n)).collect();
        let mut on_node: BTreeMap<&str, Vec<&TaskRequest<u64>>> = BTreeMap::new();
        for (key, id) in &plan.placements {
            on_node.entry(id.as_str()).or_default().push(&reqs[*key as usize]);
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
            for r in placed {
                prop_assert!(r.pool.as_ref().is_none_or(|p| *p == v.pool));
                if r.exclusive {
                    prop_assert_eq!(placed.len(), 1, "{} shares its node", r.key);
                    prop_assert_eq!(v.running, 0, "{} went to a busy node", r.key);
                }
            }
        }
        // Every request is answered once, in order.
        let mut seen: Vec<u64> = plan.placements.iter().map(|(k, _)| *k)
            .chain(plan.unplaced.iter().map(|u| u.key)).collect();
        prop_assert!(plan.placements.windows(2).all(|w| w[0].0 < w[1].0));
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
        let got: Vec<(u64, String)> =
            plan.placements.iter().map(|(k, n)| (*k, n.0.clone())).collect();
        prop_assert_eq!(got, placed);
        let got: Vec<(u64, UnplacedKind)> = plan.unplaced.iter().map(|u| (u.key, u.kind)).collect();
        prop_assert_eq!(got, unplaced);
    }

    /// The order in which the caller lists nodes does not matter.
    #[test]
    fn node_order_does_not_matter(
        (nodes, shuffled) in arb_nodes().prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle())),
        reqs in arb_requests(),
    ) {
        prop_assert_eq!(schedule(&nodes, &reqs), schedule(&shuffled, &reqs));
    }

    /// The counts in a wait reason match a node-by-node classification of the final state, and
    /// every node is accounted for.
    #[test]
    fn reason_counts_match_a_node_by_node_count(
        nodes in arb_nodes(),
        reqs in arb_requests(),
        probes in prop::collection::vec(arb_request(), 1..8),
    ) {
        let mut state = State::new(&nodes, &reqs);
        let (_, _) = state.serve(&reqs);
        let (_, _, end) = naive(&nodes, &reqs);
        let mut explainer = explain::Explainer::new(&state);
        for (pool, res, exclusive) in probes {
            let scope = match pool {
                None => Scope::All,
                Some(p) => match state.pool_ids.get(p) {
                    Some(&id) => Scope::Pool(id),
                    None => continue,
                },
            };
            // Probe devices must have ids; skip ones only a request could have named.
            if res.devices.iter().any(|(k, &n)| n > 0 && !state.dev_ids.contains_key(k.as_str())) {
                continue;
            }
            let need = state.need(&res);
            let sf = explainer.shortfall(scope, &need, exclusive);

            let mut want_unavailable: BTreeMap<&str, usize> = BTreeMap::new();
            let (mut total, mut taken, mut busy, mut cands) = (0, 0, 0, 0);
            let (mut short_cpu, mut short_mem) = (0, 0);
            let mut short_dev: BTreeMap<&str, usize> = BTreeMap::new();
            for (v, s) in nodes.iter().zip(&end) {
                if pool.is_some_and(|p| p != v.pool) {
                    continue;
                }
                total += 1;
                if !v.schedulable {
                    *want_unavailable
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
                }
            }
            prop_assert_eq!(sf.nodes, total);
            let got_unavailable: BTreeMap<&str, usize> = sf.unavailable.iter().copied().collect();
            prop_assert_eq!(got_unavailable, want_unavailable);
            prop_assert_eq!(sf.exclusive_taken, taken);
            prop_assert_eq!(sf.busy, busy);
            prop_assert_eq!(sf.candidates, cands);
            prop_assert_eq!(sf.cpu.0, short_cpu);
            prop_assert_eq!(sf.mem.0, short_mem);
            let got_dev: BTreeMap<&str, usize> = sf
                .dev
                .iter()
                .filter(|&&(_, n, _)| n > 0)
                .map(|&(d, n, _)| (state.dev_names[d as usize], n))
                .collect();
            prop_assert_eq!(got_dev, short_dev);
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
