//! Reasons for unplaced requests, for people.
//!
//! Classifying every node for every unplaced request would be quadratic: 50,000 requests left
//! over on 10,000 nodes is half a billion checks. Instead each scope (a pool, or all pools) is
//! summarised once, after the last placement, into sorted arrays of free capacity per
//! dimension: how many nodes are short of cores is then a binary search. Requests of the same
//! shape share one explanation.
//!
//! Requests with labels, host ports, host networking or several members are rare and their
//! causes depend on more than capacity, so they are explained by counting the scope's nodes
//! one by one (`tally`), once per distinct ask.

use std::collections::{BTreeMap, HashMap};

use super::{Ask, Need, Node, Scope, State, UnplacedKind};

/// Show at most this many distinct reasons why nodes are unavailable; holds name their cause,
/// so a pool with many holds could otherwise fill a screen.
const MAX_UNAVAILABLE_GROUPS: usize = 3;
/// Show at most this many pool names when a request names a pool that has no nodes.
const MAX_POOL_NAMES: usize = 10;

pub(super) struct Explainer<'s, 'a, 'r> {
    state: &'s State<'a>,
    stats: HashMap<Scope, Stats<'a>>,
    memo: HashMap<Ask<'r>, (UnplacedKind, String)>,
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

    /// (nodes with less than `need` free, most free on any of those).
    fn short<T: Ord + Copy + Default>(v: &[T], need: T) -> (usize, T) {
        let short = v.partition_point(|&x| x < need);
        (
            short,
            short.checked_sub(1).map_or_else(T::default, |i| v[i]),
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
    fn of_scope(state: &State<'a>, scope: Scope) -> Self {
        Self::build(state, |_, n| match scope {
            Scope::All => true,
            Scope::Pool(p) => n.pool == p,
        })
    }

    /// Summarises the nodes `keep` accepts (given their rank).
    fn build(state: &State<'a>, keep: impl Fn(u32, &Node) -> bool) -> Self {
        let mut s = Stats::default();
        for (rank, n) in state.nodes.iter().enumerate() {
            if !keep(rank as u32, n) {
                continue;
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
                *s.unavailable.entry(state.unschedulable(rank)).or_default() += 1;
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
    /// (candidates with too few free, most free on any of those: what the request would need
    /// to shrink to, whatever other candidates lack).
    pub(super) cpu: (usize, u64),
    pub(super) mem: (usize, u64),
    /// (device id, candidates with too few free, most free).
    pub(super) dev: Vec<(u32, usize, u32)>,
    /// Only for requests with host networking: (pool that forbids it, its nodes).
    pub(super) forbidden: Vec<(&'a str, usize)>,
    /// Only for requests with labels: (`key=value`, nodes without it), in the request's order.
    pub(super) lacking: Vec<(String, usize)>,
    /// Only for requests with host ports: (port, candidates where it is taken).
    pub(super) ports: Vec<(u16, usize)>,
}

impl<'s, 'a, 'r> Explainer<'s, 'a, 'r> {
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

    pub(super) fn explain(&mut self, ask: &Ask<'r>) -> (UnplacedKind, String) {
        if let Some(hit) = self.memo.get(ask) {
            return hit.clone();
        }
        let out = if ask.extra.is_none() {
            self.plain(ask.scope, &ask.need, ask.exclusive)
        } else {
            constrained(self.state, ask)
        };
        self.memo.insert(ask.clone(), out.clone());
        out
    }

    fn plain(&mut self, scope: Scope, need: &Need, exclusive: bool) -> (UnplacedKind, String) {
        let state = self.state;
        let stats = self
            .stats
            .entry(scope)
            .or_insert_with(|| Stats::of_scope(state, scope));
        let label = scope_label(state, scope);
        if stats.nodes == 0 {
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
        }
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
            .or_insert_with(|| Stats::of_scope(state, scope));
        shortfall(stats, need, exclusive)
    }
}

fn scope_label(state: &State<'_>, scope: Scope) -> String {
    match scope {
        Scope::All => String::new(),
        Scope::Pool(p) => format!(" in pool {:?}", state.pool_names[p as usize]),
    }
}

/// A node-by-node count of one pool (or all, for `None`) for a request with labels, host
/// ports, host networking or several members.
pub(super) struct Tally<'a> {
    /// Counts among the nodes that match (see `State::matches`), except `nodes` (all of them)
    /// and `forbidden` and `lacking` (the ones that do not match, and why).
    pub(super) sf: Shortfall<'a>,
    /// Per label of the request: nodes allowing host networking (when asked) without it.
    pub(super) lacking: Vec<usize>,
    pub(super) matching: usize,
    /// Matching nodes large enough for one member, in whatever state.
    pub(super) ever: usize,
    /// Matching nodes that could take one member now.
    pub(super) room: usize,
}

/// Counts `free` towards a dimension's (short, most free of those); false when it is short.
fn count_dim<T: Ord + Copy>(slot: &mut (usize, T), free: T, want: T) -> bool {
    if free < want {
        slot.0 += 1;
        slot.1 = slot.1.max(free);
        false
    } else {
        true
    }
}

pub(super) fn tally<'a>(state: &State<'a>, ask: &Ask<'_>, pool: Option<u32>) -> Tally<'a> {
    let in_scope = |n: &Node| pool.is_none_or(|p| p == n.pool).then_some(0);
    let mut one = tallies(state, ask, 1, in_scope);
    one.pop().unwrap_or_else(|| Tally::new(ask))
}

/// One tally per pool, in one pass over the nodes.
fn tally_per_pool<'a>(state: &State<'a>, ask: &Ask<'_>) -> Vec<Tally<'a>> {
    tallies(state, ask, state.pool_names.len(), |n| {
        Some(n.pool as usize)
    })
}

/// `buckets` tallies; `bucket` says which one a node counts towards, if any.
fn tallies<'a>(
    state: &State<'a>,
    ask: &Ask<'_>,
    buckets: usize,
    bucket: impl Fn(&Node) -> Option<usize>,
) -> Vec<Tally<'a>> {
    let mut counts: Vec<Counting<'a>> = (0..buckets)
        .map(|_| Counting {
            tally: Tally::new(ask),
            forbidden: BTreeMap::new(),
            unavailable: BTreeMap::new(),
        })
        .collect();
    for (rank, n) in state.nodes.iter().enumerate() {
        if let Some(c) = bucket(n).and_then(|b| counts.get_mut(b)) {
            c.add(state, ask, rank, n);
        }
    }
    counts.into_iter().map(|c| c.finish(ask)).collect()
}

/// A tally being counted, with the groups it sorts at the end.
struct Counting<'a> {
    tally: Tally<'a>,
    forbidden: BTreeMap<&'a str, usize>,
    unavailable: BTreeMap<&'a str, usize>,
}

impl<'a> Tally<'a> {
    fn new(ask: &Ask<'_>) -> Self {
        let extra = ask.extra();
        Tally {
            sf: Shortfall {
                nodes: 0,
                unavailable: Vec::new(),
                exclusive_taken: 0,
                busy: 0,
                candidates: 0,
                cpu: (0, 0),
                mem: (0, 0),
                dev: ask.need.dev.iter().map(|&(d, _)| (d, 0, 0)).collect(),
                forbidden: Vec::new(),
                lacking: Vec::new(),
                ports: extra.ports.iter().map(|&p| (p, 0)).collect(),
            },
            lacking: vec![0; extra.labels.len()],
            matching: 0,
            ever: 0,
            room: 0,
        }
    }
}

impl<'a> Counting<'a> {
    fn add(&mut self, state: &State<'a>, ask: &Ask<'_>, rank: usize, n: &Node) {
        let (need, extra) = (&ask.need, ask.extra());
        let t = &mut self.tally;
        t.sf.nodes += 1;
        if extra.host_network && !n.host_network {
            *self
                .forbidden
                .entry(state.pool_names[n.pool as usize])
                .or_default() += 1;
            return;
        }
        let mut lacks = false;
        for i in state.lacking(rank as u32, extra) {
            t.lacking[i] += 1;
            lacks = true;
        }
        if lacks {
            return;
        }
        t.matching += 1;
        t.ever += usize::from(n.could_ever_fit(need));
        let sf = &mut t.sf;
        if !n.schedulable {
            *self
                .unavailable
                .entry(state.unschedulable(rank))
                .or_default() += 1;
        } else if n.exclusive_taken {
            sf.exclusive_taken += 1;
        } else if ask.exclusive && n.running > 0 {
            sf.busy += 1;
        } else {
            sf.candidates += 1;
            // `&` rather than `&&`: every dimension is counted, as in the summaries.
            let mut fits = count_dim(&mut sf.cpu, n.free_cpu, need.cpu)
                & count_dim(&mut sf.mem, n.free_mem, need.mem);
            for (slot, &(d, k)) in sf.dev.iter_mut().zip(&need.dev) {
                let mut pair = (slot.1, slot.2);
                fits &= count_dim(&mut pair, n.free_of(d), k);
                (slot.1, slot.2) = pair;
            }
            for (port, taken) in &mut sf.ports {
                if n.host_ports.contains(port) {
                    *taken += 1;
                    fits = false;
                }
            }
            t.room += usize::from(fits);
        }
    }

    fn finish(self, ask: &Ask<'_>) -> Tally<'a> {
        let mut t = self.tally;
        t.sf.unavailable = by_count(self.unavailable);
        t.sf.forbidden = by_count(self.forbidden);
        t.sf.lacking = ask
            .extra()
            .labels
            .iter()
            .zip(&t.lacking)
            .filter(|&(_, &c)| c > 0)
            .map(|(&(k, v), &c)| (format!("{k}={v}"), c))
            .collect();
        t.sf.ports.retain(|&(_, c)| c > 0);
        t
    }
}

/// (name, count), most first, then by name.
fn by_count(m: BTreeMap<&str, usize>) -> Vec<(&str, usize)> {
    let mut v: Vec<(&str, usize)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v
}

/// The reason for a request with labels, host ports, host networking or several members. A
/// gang's pool must hold `members` nodes that could take one member: fewer is `TooLarge`,
/// enough but too few with room now is `Wait`.
fn constrained(state: &State<'_>, ask: &Ask<'_>) -> (UnplacedKind, String) {
    let extra = ask.extra();
    let pool = match ask.scope {
        Scope::All => None,
        Scope::Pool(p) => Some(p),
    };
    let label = scope_label(state, ask.scope);
    let whole = tally(state, ask, pool);
    let nodes = whole.sf.nodes;
    if nodes == 0 {
        return (
            UnplacedKind::NoNodes,
            "never fits: there are no nodes".to_owned(),
        );
    }
    let forbidden: usize = whole.sf.forbidden.iter().map(|&(_, n)| n).sum();
    if forbidden == nodes {
        let msg = match whole.sf.forbidden.as_slice() {
            [(p, _)] => format!("never fits: pool {p:?} does not allow host networking"),
            _ => "never fits: no pool allows host networking".to_owned(),
        };
        return (UnplacedKind::TooLarge, msg);
    }
    let allowing = if forbidden > 0 {
        " that allows host networking"
    } else {
        ""
    };
    let pairs: Vec<String> = extra
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if whole.matching == 0 {
        let absent: Vec<String> = pairs
            .iter()
            .zip(&whole.lacking)
            .filter(|&(_, &c)| c == nodes - forbidden)
            .map(|(p, _)| p.clone())
            .collect();
        let msg = match absent.len() {
            0 => format!(
                "never fits: no node{label}{allowing} has labels {} at once",
                and_join(&pairs)
            ),
            1 => format!(
                "never fits: no node{label}{allowing} has label {}",
                absent[0]
            ),
            _ => format!(
                "never fits: no node{label}{allowing} has labels {}",
                and_join(&absent)
            ),
        };
        return (UnplacedKind::TooLarge, msg);
    }
    if whole.ever == 0 {
        let with = if pairs.is_empty() {
            String::new()
        } else {
            format!(" with {}", and_join(&pairs))
        };
        let stats = Stats::build(state, |rank, n| {
            pool.is_none_or(|p| n.pool == p) && state.matches(rank, extra)
        });
        let qual = format!("{label}{with}{allowing}");
        return (
            UnplacedKind::TooLarge,
            too_large(state, &stats, &ask.need, &qual),
        );
    }
    let want = extra.members as usize;
    if want == 1 {
        let parts = parts(state, &ask.need, &whole.sf);
        return (
            UnplacedKind::Wait,
            format!(
                "no node fits now: of {nodes} {}{label}, {parts}",
                node_s(nodes)
            ),
        );
    }
    let what = members_need(state, ask, &pairs);
    if let Some(p) = pool {
        let msg = if whole.ever < want {
            (
                UnplacedKind::TooLarge,
                format!(
                    "never fits: needs {want} {what}, and only {} of the {nodes} {}{label} could \
                     ever take one",
                    whole.ever,
                    node_s(nodes)
                ),
            )
        } else {
            (
                UnplacedKind::Wait,
                gang_wait(state, ask, &what, p, &whole, ""),
            )
        };
        return msg;
    }
    // Any pool: the gang needs one pool with enough nodes, so each pool is counted alone.
    let per_pool: Vec<(u32, Tally<'_>)> = (0..).zip(tally_per_pool(state, ask)).collect();
    // The pool with the most nodes that could ever take a member, and of the pools with
    // enough of those, the one with the most room now. `whole` had nodes, so there is a pool.
    let mut most: Option<&(u32, Tally<'_>)> = None;
    let mut roomiest: Option<&(u32, Tally<'_>)> = None;
    for entry in &per_pool {
        let t = &entry.1;
        if most.is_none_or(|(_, m)| t.ever > m.ever) {
            most = Some(entry);
        }
        if t.ever >= want && roomiest.is_none_or(|(_, r)| t.room > r.room) {
            roomiest = Some(entry);
        }
    }
    match (roomiest, most) {
        (Some((p, t)), _) => (
            UnplacedKind::Wait,
            gang_wait(state, ask, &what, *p, t, " of one pool"),
        ),
        (None, Some((p, t))) => (
            UnplacedKind::TooLarge,
            format!(
                "never fits: needs {want} {what} of one pool, and no pool has more than {} that \
                 could ever take one (pool {:?}: {} of its {} {})",
                t.ever,
                state.pool_names[*p as usize],
                t.ever,
                t.sf.nodes,
                node_s(t.sf.nodes)
            ),
        ),
        (None, None) => (
            UnplacedKind::NoNodes,
            "never fits: there are no nodes".to_owned(),
        ),
    }
}

/// `3 nodes with nvidia.com/gpu.model=T4 and 4 cores each`, `2 whole nodes`.
fn members_need(state: &State<'_>, ask: &Ask<'_>, pairs: &[String]) -> String {
    let mut wants: Vec<String> = pairs.to_vec();
    wants.extend(resources(state, &ask.need));
    let whole = if ask.exclusive { "whole " } else { "" };
    if wants.is_empty() {
        format!("{whole}nodes")
    } else {
        format!("{whole}nodes with {} each", and_join(&wants))
    }
}

fn gang_wait(
    state: &State<'_>,
    ask: &Ask<'_>,
    what: &str,
    pool: u32,
    t: &Tally<'_>,
    of_one: &str,
) -> String {
    let want = ask.extra().members;
    let name = state.pool_names[pool as usize];
    let (room, nodes) = (t.room, t.sf.nodes);
    let in_pool = if of_one.is_empty() {
        String::new()
    } else {
        format!(" (at most, in pool {name:?})")
    };
    format!(
        "not all members fit now: needs {want} {what}{of_one}, and {room} {} room{in_pool}; of \
         {nodes} {} in pool {name:?}, {}",
        if room == 1 { "has" } else { "have" },
        node_s(nodes),
        parts(state, &ask.need, &t.sf)
    )
}

fn node_s(n: usize) -> &'static str {
    if n == 1 {
        "node"
    } else {
        "nodes"
    }
}

/// "a", "a and b", "a, b and c".
fn and_join(items: &[String]) -> String {
    match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => items.join(""),
    }
}

fn shortfall<'a>(s: &Stats<'a>, need: &Need, exclusive: bool) -> Shortfall<'a> {
    let frees = if exclusive { &s.idle } else { &s.open };
    let unavailable = by_count(s.unavailable.clone());
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
        forbidden: Vec::new(),
        lacking: Vec::new(),
        ports: Vec::new(),
    }
}

fn wait(state: &State<'_>, need: &Need, sf: &Shortfall<'_>, label: &str) -> String {
    let nodes = sf.nodes;
    format!(
        "no node fits now: of {nodes} {}{label}, {}",
        node_s(nodes),
        parts(state, need, sf)
    )
}

/// What keeps the nodes of `sf` from taking `need`, cause by cause: first what will not
/// change while they run work (host networking, labels), then their state, then capacity and
/// host ports.
fn parts(state: &State<'_>, need: &Need, sf: &Shortfall<'_>) -> String {
    let verb = |n: usize, one: &'static str, many: &'static str| if n == 1 { one } else { many };
    let mut parts = Vec::new();
    for &(pool, n) in &sf.forbidden {
        parts.push(format!(
            "pool {pool:?} does not allow host networking ({n} {})",
            node_s(n)
        ));
    }
    for (label, n) in &sf.lacking {
        parts.push(format!("{n} {} {label}", verb(*n, "lacks", "lack")));
    }
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
    for &(port, n) in &sf.ports {
        parts.push(format!(
            "{n} {} host port {port} taken",
            verb(n, "has", "have")
        ));
    }
    parts.join(", ")
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
    let wants = and_join(&resources(state, need));
    format!("never fits: no node{label} has {wants} at once")
}

/// `["4 cores", "2 GiB memory", "1 nvidia.com/gpu"]`, leaving out what is 0.
fn resources(state: &State<'_>, need: &Need) -> Vec<String> {
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
    wants
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
