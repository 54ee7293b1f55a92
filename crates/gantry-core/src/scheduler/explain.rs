//! Reasons for unplaced requests, for people.
//!
//! Classifying every node for every unplaced request would be quadratic: 50,000 requests left
//! over on 10,000 nodes is half a billion checks. Instead each scope (a pool, or all pools) is
//! summarised once, after the last placement, into sorted arrays of free capacity per
//! dimension: how many nodes are short of cores is then a binary search. Requests of the same
//! shape share one explanation.

use std::collections::{BTreeMap, HashMap};

use super::{Need, Node, Scope, State, UnplacedKind};

/// Show at most this many distinct reasons why nodes are unavailable; holds name their cause,
/// so a pool with many holds could otherwise fill a screen.
const MAX_UNAVAILABLE_GROUPS: usize = 3;
/// Show at most this many pool names when a request names a pool that has no nodes.
const MAX_POOL_NAMES: usize = 10;

pub(super) struct Explainer<'s, 'a> {
    state: &'s State<'a>,
    stats: HashMap<Scope, Stats<'a>>,
    memo: HashMap<(Scope, bool, Need), (UnplacedKind, String)>,
}

/// Free capacity of the nodes that could take a request now, each dimension sorted.
#[derive(Debug, Default)]
struct Frees {
    n: usize,
    cpu: Vec<u64>,
    mem: Vec<u64>,
    /// Only nodes that have the device; the others count as 0 free.
    dev: BTreeMap<u32, Vec<u32>>,
}

impl Frees {
    fn add(&mut self, n: &Node) {
        self.n += 1;
        self.cpu.push(n.free_cpu);
        self.mem.push(n.free_mem);
        for d in &n.dev {
            self.dev.entry(d.id).or_default().push(d.free);
        }
    }

    fn sort(&mut self) {
        self.cpu.sort_unstable();
        self.mem.sort_unstable();
        for v in self.dev.values_mut() {
            v.sort_unstable();
        }
    }

    /// (nodes with less than `need` free, most free on any node).
    fn short<T: Ord + Copy + Default>(v: &[T], need: T) -> (usize, T) {
        (
            v.partition_point(|&x| x < need),
            v.last().copied().unwrap_or_default(),
        )
    }
}

/// One scope's nodes, summarised at the end of a call.
#[derive(Debug, Default)]
struct Stats<'a> {
    nodes: usize,
    /// Unschedulable nodes by their reason text.
    unavailable: BTreeMap<&'a str, usize>,
    exclusive_taken: usize,
    /// Open nodes with something running: they cannot take an exclusive request.
    busy: usize,
    /// Nodes that may take an ordinary request.
    open: Frees,
    /// Nodes that may take an exclusive request.
    idle: Frees,
    /// (total cores, most total memory among nodes with at least that many cores), by cores
    /// descending: "does any node have c cores and m memory" is one binary search.
    by_cpu_desc: Vec<(u64, u64)>,
    max_cpu: u64,
    max_mem: u64,
    max_dev: BTreeMap<u32, u32>,
    /// Ranks of nodes with devices; requests for devices check these one by one.
    with_devices: Vec<u32>,
}

impl<'a> Stats<'a> {
    fn build(state: &State<'a>, scope: Scope) -> Self {
        let mut s = Stats::default();
        for (rank, n) in state.nodes.iter().enumerate() {
            if let Scope::Pool(p) = scope {
                if n.pool != p {
                    continue;
                }
            }
            s.nodes += 1;
            s.by_cpu_desc.push((n.total_cpu, n.total_mem));
            s.max_cpu = s.max_cpu.max(n.total_cpu);
            s.max_mem = s.max_mem.max(n.total_mem);
            for d in &n.dev {
                let m = s.max_dev.entry(d.id).or_default();
                *m = (*m).max(d.total);
            }
            if !n.dev.is_empty() {
                s.with_devices.push(rank as u32);
            }
            if !n.schedulable {
                let reason = state.views[state.order[rank]]
                    .unschedulable_reason
                    .as_deref()
                    .unwrap_or("unschedulable");
                *s.unavailable.entry(reason).or_default() += 1;
            } else if n.exclusive_taken {
                s.exclusive_taken += 1;
            } else {
                s.open.add(n);
                if n.running == 0 {
                    s.idle.add(n);
                } else {
                    s.busy += 1;
                }
            }
        }
        s.open.sort();
        s.idle.sort();
        s.by_cpu_desc
            .sort_unstable_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
        let mut most_mem = 0;
        for e in &mut s.by_cpu_desc {
            most_mem = most_mem.max(e.1);
            e.1 = most_mem;
        }
        s
    }

    /// Whether some node of the scope, in whatever state, is large enough.
    fn could_ever_fit(&self, need: &Need, nodes: &[Node]) -> bool {
        if need.dev.is_empty() {
            let enough_cores = self.by_cpu_desc.partition_point(|&(c, _)| c >= need.cpu);
            enough_cores > 0 && self.by_cpu_desc[enough_cores - 1].1 >= need.mem
        } else {
            self.with_devices
                .iter()
                .any(|&rank| nodes[rank as usize].could_ever_fit(need))
        }
    }
}

/// What keeps a request off each node now, counted per cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Shortfall<'a> {
    pub(super) nodes: usize,
    /// (reason, nodes), most nodes first.
    pub(super) unavailable: Vec<(&'a str, usize)>,
    pub(super) exclusive_taken: usize,
    /// Only for exclusive requests: open nodes with something running.
    pub(super) busy: usize,
    /// Nodes that could take the request but for capacity.
    pub(super) candidates: usize,
    /// (candidates with too few free, most free on any candidate).
    pub(super) cpu: (usize, u64),
    pub(super) mem: (usize, u64),
    /// (device id, candidates with too few free, most free).
    pub(super) dev: Vec<(u32, usize, u32)>,
}

impl<'s, 'a> Explainer<'s, 'a> {
    pub(super) fn new(state: &'s State<'a>) -> Self {
        Explainer {
            state,
            stats: HashMap::new(),
            memo: HashMap::new(),
        }
    }

    pub(super) fn unknown_pool(&self, pool: &str) -> (UnplacedKind, String) {
        let names = &self.state.pool_names;
        let known = if names.is_empty() {
            " (there are no nodes at all)".to_owned()
        } else {
            let mut shown: Vec<String> = names
                .iter()
                .take(MAX_POOL_NAMES)
                .map(|p| format!("{p:?}"))
                .collect();
            if names.len() > MAX_POOL_NAMES {
                shown.push(format!("and {} more", names.len() - MAX_POOL_NAMES));
            }
            format!(" (pools with nodes: {})", shown.join(", "))
        };
        (
            UnplacedKind::NoNodes,
            format!("never fits: pool {pool:?} has no nodes{known}"),
        )
    }

    pub(super) fn explain(
        &mut self,
        scope: Scope,
        need: &Need,
        exclusive: bool,
    ) -> (UnplacedKind, String) {
        let key = (scope, exclusive, need.clone());
        if let Some(hit) = self.memo.get(&key) {
            return hit.clone();
        }
        let state = self.state;
        let stats = self
            .stats
            .entry(scope)
            .or_insert_with(|| Stats::build(state, scope));
        let label = match scope {
            Scope::All => String::new(),
            Scope::Pool(p) => format!(" in pool {:?}", state.pool_names[p as usize]),
        };
        let out = if stats.nodes == 0 {
            (
                UnplacedKind::NoNodes,
                "never fits: there are no nodes".to_owned(),
            )
        } else if !stats.could_ever_fit(need, &state.nodes) {
            (
                UnplacedKind::TooLarge,
                too_large(state, stats, need, &label),
            )
        } else {
            let sf = shortfall(stats, need, exclusive);
            (UnplacedKind::Wait, wait(state, need, &sf, &label))
        };
        self.memo.insert(key, out.clone());
        out
    }

    /// The counts behind a wait message, for tests.
    #[cfg(test)]
    pub(super) fn shortfall(
        &mut self,
        scope: Scope,
        need: &Need,
        exclusive: bool,
    ) -> Shortfall<'a> {
        let state = self.state;
        let stats = self
            .stats
            .entry(scope)
            .or_insert_with(|| Stats::build(state, scope));
        shortfall(stats, need, exclusive)
    }
}

fn shortfall<'a>(s: &Stats<'a>, need: &Need, exclusive: bool) -> Shortfall<'a> {
    let frees = if exclusive { &s.idle } else { &s.open };
    let mut unavailable: Vec<(&str, usize)> = s.unavailable.iter().map(|(&r, &n)| (r, n)).collect();
    unavailable.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let dev = need
        .dev
        .iter()
        .map(|&(d, k)| {
            let v = frees.dev.get(&d).map_or(&[][..], Vec::as_slice);
            let (short, most) = Frees::short(v, k);
            (d, frees.n - v.len() + short, most)
        })
        .collect();
    Shortfall {
        nodes: s.nodes,
        unavailable,
        exclusive_taken: s.exclusive_taken,
        busy: if exclusive { s.busy } else { 0 },
        candidates: frees.n,
        cpu: Frees::short(&frees.cpu, need.cpu),
        mem: Frees::short(&frees.mem, need.mem),
        dev,
    }
}

fn wait(state: &State<'_>, need: &Need, sf: &Shortfall<'_>, label: &str) -> String {
    let verb = |n: usize, one: &'static str, many: &'static str| if n == 1 { one } else { many };
    let mut parts = Vec::new();
    let unavailable: usize = sf.unavailable.iter().map(|&(_, n)| n).sum();
    if unavailable > 0 {
        let groups = if sf.unavailable.len() == 1 {
            sf.unavailable[0].0.to_owned()
        } else {
            let mut g: Vec<String> = sf
                .unavailable
                .iter()
                .take(MAX_UNAVAILABLE_GROUPS)
                .map(|&(r, n)| format!("{n} {r}"))
                .collect();
            let rest: usize = sf
                .unavailable
                .iter()
                .skip(MAX_UNAVAILABLE_GROUPS)
                .map(|&(_, n)| n)
                .sum();
            if rest > 0 {
                g.push(format!("{rest} more for other reasons"));
            }
            g.join("; ")
        };
        parts.push(format!("{unavailable} unavailable ({groups})"));
    }
    if sf.exclusive_taken > 0 {
        let n = sf.exclusive_taken;
        parts.push(format!("{n} {} an exclusive job", verb(n, "runs", "run")));
    }
    if sf.busy > 0 {
        let n = sf.busy;
        parts.push(format!(
            "{n} {} busy (an exclusive request needs an idle node)",
            verb(n, "is", "are")
        ));
    }
    let (n, most) = sf.cpu;
    if n > 0 {
        parts.push(format!(
            "{n} {} too few free cores (need {}, most free {})",
            verb(n, "has", "have"),
            cores(need.cpu),
            cores(most)
        ));
    }
    let (n, most) = sf.mem;
    if n > 0 {
        parts.push(format!(
            "{n} {} too little free memory (need {}, most free {})",
            verb(n, "has", "have"),
            bytes(need.mem, Round::Up),
            bytes(most, Round::Down)
        ));
    }
    for (&(d, n, most), &(_, k)) in sf.dev.iter().zip(&need.dev) {
        if n > 0 {
            parts.push(format!(
                "{n} {} too few free {} (need {k}, most free {most})",
                verb(n, "has", "have"),
                state.dev_names[d as usize],
            ));
        }
    }
    let nodes = sf.nodes;
    format!(
        "no node fits now: of {nodes} {}{label}, {}",
        verb(nodes, "node", "nodes"),
        parts.join(", ")
    )
}

fn too_large(state: &State<'_>, s: &Stats<'_>, need: &Need, label: &str) -> String {
    let mut over = Vec::new();
    if need.cpu > s.max_cpu {
        over.push(format!(
            "{} (most: {})",
            core_count(need.cpu),
            cores(s.max_cpu)
        ));
    }
    if need.mem > s.max_mem {
        over.push(format!(
            "{} memory (most: {})",
            bytes(need.mem, Round::Up),
            bytes(s.max_mem, Round::Down)
        ));
    }
    for &(d, k) in &need.dev {
        let most = s.max_dev.get(&d).copied().unwrap_or(0);
        if k > most {
            over.push(format!(
                "{k} {} (most: {most})",
                state.dev_names[d as usize]
            ));
        }
    }
    if !over.is_empty() {
        return format!(
            "never fits: needs more than any node{label} has: {}",
            over.join(", ")
        );
    }
    // Every dimension fits some node, just not all of them the same node.
    let mut wants = Vec::new();
    if need.cpu > 0 {
        wants.push(core_count(need.cpu));
    }
    if need.mem > 0 {
        wants.push(format!("{} memory", bytes(need.mem, Round::Up)));
    }
    for &(d, k) in &need.dev {
        wants.push(format!("{k} {}", state.dev_names[d as usize]));
    }
    let wants = match wants.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => wants.join(""),
    };
    format!("never fits: no node{label} has {wants} at once")
}

/// "4", "0.5", "1.25": millicores as a number of cores.
fn cores(millis: u64) -> String {
    let (whole, frac) = (millis / 1000, millis % 1000);
    if frac == 0 {
        whole.to_string()
    } else {
        format!("{whole}.{frac:03}")
            .trim_end_matches('0')
            .to_owned()
    }
}

/// "1 core", "4 cores", "0.5 cores".
fn core_count(millis: u64) -> String {
    let n = cores(millis);
    if millis == 1000 {
        format!("{n} core")
    } else {
        format!("{n} cores")
    }
}

#[derive(Clone, Copy)]
enum Round {
    Up,
    Down,
}

/// IEC units with at most two decimals. A need is rounded up and a free amount down, so that a
/// need just above what is free never reads as equal to it.
fn bytes(b: u64, round: Round) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut exp = 0;
    while exp + 1 < UNITS.len() && b >> (10 * (exp + 1)) > 0 {
        exp += 1;
    }
    if exp == 0 {
        return format!("{b} B");
    }
    let unit = 1u128 << (10 * exp);
    let hundredths = u128::from(b) * 100;
    let mut scaled = hundredths / unit;
    if matches!(round, Round::Up) && hundredths % unit != 0 {
        scaled += 1;
    }
    let (whole, frac) = (scaled / 100, scaled % 100);
    let num = if frac == 0 {
        whole.to_string()
    } else {
        format!("{whole}.{frac:02}")
            .trim_end_matches('0')
            .to_owned()
    };
    format!("{num} {}", UNITS[exp])
}

#[cfg(test)]
mod format_tests {
    use super::*;

    #[test]
    fn cores_are_exact() {
        assert_eq!(cores(0), "0");
        assert_eq!(cores(4000), "4");
        assert_eq!(cores(500), "0.5");
        assert_eq!(cores(1250), "1.25");
        assert_eq!(cores(1), "0.001");
        assert_eq!(core_count(1000), "1 core");
        assert_eq!(core_count(2000), "2 cores");
        assert_eq!(core_count(500), "0.5 cores");
    }

    #[test]
    fn bytes_round_need_up_and_free_down() {
        const GIB: u64 = 1 << 30;
        assert_eq!(bytes(0, Round::Down), "0 B");
        assert_eq!(bytes(1023, Round::Up), "1023 B");
        assert_eq!(bytes(1024, Round::Up), "1 KiB");
        assert_eq!(bytes(8 * GIB, Round::Up), "8 GiB");
        assert_eq!(bytes(GIB + GIB / 2, Round::Down), "1.5 GiB");
        assert_eq!(bytes(8 * GIB + 1, Round::Up), "8.01 GiB");
        assert_eq!(bytes(8 * GIB + 1, Round::Down), "8 GiB");
        assert_eq!(bytes(8 * GIB - 1, Round::Down), "7.99 GiB");
        assert_eq!(bytes(512 << 20, Round::Up), "512 MiB");
        assert_eq!(bytes(u64::MAX, Round::Down), "15.99 EiB");
        assert_eq!(bytes(u64::MAX, Round::Up), "16 EiB");
    }
}
