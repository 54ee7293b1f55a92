//! Scheduler throughput: `cargo bench -p gantry-core`. Prints one `placements/s: N` line per
//! case. A plain binary rather than criterion: one call places 100,000 requests, which is long
//! enough to time with a clock, and it keeps the build small on a 2-core machine.
//!
//! `constrained` is the one case on the slower path (gangs, labels, host ports); the others
//! are plain requests only.
//!
//! Each case times whole `schedule` calls (index build, placement, reasons), reports the median
//! of several runs, and fails loudly if the plan is not the expected size, so a fast wrong
//! answer cannot pass for a fast right one.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use gantry_core::scheduler::{schedule, NodeId, NodeView, Plan, Res, TaskRequest, UnplacedKind};

const GIB: u64 = 1 << 30;
const GPU: &str = "nvidia.com/gpu";
const FPGA: &str = "xilinx.com/fpga";
const RUNS: usize = 7;

/// splitmix64: deterministic inputs without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }

    /// True with probability `pct`/100.
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

fn node(i: usize, pool: &str, cores: u64, gib: u64) -> NodeView {
    NodeView::new(
        NodeId(format!("node-{i:05}")),
        pool,
        Res::new(cores * 1000, gib * GIB),
    )
}

fn request(key: u64, pool: Option<&str>, need: Res, exclusive: bool) -> TaskRequest<u64> {
    let mut r = TaskRequest::new(key, pool.map(str::to_owned), need);
    r.exclusive = exclusive;
    r
}

/// 100,000 single-core jobs onto 10,000 identical 32-core nodes: all fit.
fn uniform() -> (Vec<NodeView>, Vec<TaskRequest<u64>>) {
    let nodes = (0..10_000).map(|i| node(i, "cpu", 32, 128)).collect();
    let reqs = (0..100_000)
        .map(|k| request(k, Some("cpu"), Res::new(1000, GIB), false))
        .collect();
    (nodes, reqs)
}

/// A cluster that looks like a real one: three pools of mixed sizes, GPU and FPGA nodes, held
/// and down nodes, nodes already part used, and requests of every kind, some of which cannot
/// fit.
fn heterogeneous() -> (Vec<NodeView>, Vec<TaskRequest<u64>>) {
    let mut rng = Rng(42);
    let holds = [
        "cordoned: hold by monitoring (DiskFull)",
        "cordoned: hold by monitoring (HighTemperature)",
        "evicting: hold by admin (bad DIMM)",
    ];
    let nodes: Vec<NodeView> = (0..10_000)
        .map(|i| {
            let mut n = match i % 10 {
                0..=6 => {
                    let cores = rng.pick(&[16, 32, 64]);
                    node(i, "cpu", cores, cores * rng.pick(&[2, 4, 8]))
                }
                7 | 8 => {
                    let mut n = node(i, "gpu", rng.pick(&[32, 64]), rng.pick(&[256, 512]));
                    n.total.devices.insert(GPU.into(), rng.pick(&[4, 8]));
                    if rng.chance(20) {
                        n.total.devices.insert(FPGA.into(), 2);
                    }
                    n
                }
                _ => node(i, "big", 128, rng.pick(&[1024, 2048])),
            };
            if rng.chance(30) {
                n.used.millicpus = n.total.millicpus * rng.below(8) / 8;
                n.used.memory_bytes = n.total.memory_bytes * rng.below(8) / 8;
                if let Some(&g) = n.total.devices.get(GPU) {
                    n.used
                        .devices
                        .insert(GPU.into(), rng.below(u64::from(g) + 1) as u32);
                }
                n.running = 1 + rng.below(6) as u32;
                n.exclusive_taken = rng.chance(5);
            }
            if rng.chance(5) {
                n.schedulable = false;
                n.unschedulable_reason = Some(rng.pick(&holds).to_owned());
            } else if rng.chance(1) {
                n.schedulable = false;
                n.unschedulable_reason = Some("down: no heartbeat".to_owned());
            }
            n
        })
        .collect();

    let reqs = (0..100_000u64)
        .map(|k| {
            let roll = rng.below(1000);
            let any_or = |rng: &mut Rng, pool: &'static str| {
                if rng.chance(20) {
                    None
                } else {
                    Some(pool)
                }
            };
            match roll {
                // Small CPU jobs, fractional cores included.
                0..=649 => {
                    let millis = rng.pick(&[250, 500, 1000, 1000, 2000, 4000]);
                    let mem = rng.pick(&[GIB / 2, GIB, 2 * GIB, 4 * GIB, 16 * GIB]);
                    let pool = any_or(&mut rng, "cpu");
                    request(k, pool, Res::new(millis, mem), false)
                }
                // Memory-heavy jobs.
                650..=749 => {
                    let need = Res::new(rng.pick(&[4000, 8000]), rng.pick(&[64, 256, 512]) * GIB);
                    let pool = any_or(&mut rng, "big");
                    request(k, pool, need, false)
                }
                // GPU jobs; a few want an FPGA too.
                750..=929 => {
                    let mut need = Res::new(rng.pick(&[4000, 8000, 16000]), 32 * GIB)
                        .with_device(GPU, rng.pick(&[1, 1, 2, 4, 8]));
                    if rng.chance(5) {
                        need.devices.insert(FPGA.into(), 1);
                    }
                    let pool = any_or(&mut rng, "gpu");
                    request(k, pool, need, false)
                }
                // Whole-node (MPI-style) jobs.
                930..=979 => {
                    let pool = rng.pick(&[Some("cpu"), Some("big"), None]);
                    request(k, pool, Res::new(16000, 32 * GIB), true)
                }
                // Larger than any node.
                980..=989 => request(k, None, Res::new(256_000, GIB), false),
                // More GPUs than a node has.
                990..=994 => request(
                    k,
                    Some("gpu"),
                    Res::new(1000, GIB).with_device(GPU, 16),
                    false,
                ),
                // A pool nobody runs.
                _ => request(k, Some("tpu"), Res::new(1000, GIB), false),
            }
        })
        .collect();
    (nodes, reqs)
}

/// 100,000 four-core jobs onto 1,000 32-core nodes, each asking for a different amount of
/// memory: 92,000 are left over with distinct shapes, so every reason is computed, not shared.
fn oversubscribed() -> (Vec<NodeView>, Vec<TaskRequest<u64>>) {
    let nodes = (0..1_000).map(|i| node(i, "cpu", 32, 256)).collect();
    let reqs = (0..100_000)
        .map(|k| request(k, Some("cpu"), Res::new(4000, GIB + k), false))
        .collect();
    (nodes, reqs)
}

/// The slower path: 10,000 nodes in three pools with GPU-model labels, some forbidding host
/// networking and some with host ports already taken, and 20,000 requests that are gangs of 2
/// to 16 members, label constraints, host-port services or plain (a quarter each), some of
/// which cannot fit.
fn constrained() -> (Vec<NodeView>, Vec<TaskRequest<u64>>) {
    const MODEL: &str = "nvidia.com/gpu.model";
    let mut rng = Rng(7);
    let nodes: Vec<NodeView> = (0..10_000)
        .map(|i| {
            let pool = rng.pick(&["cpu", "gpu", "secure"]);
            let mut n = node(i, pool, rng.pick(&[16, 32, 64]), 256);
            if pool == "gpu" {
                n.total.devices.insert(GPU.into(), 8);
                n.labels
                    .insert(MODEL.into(), rng.pick(&["T4", "A100", "H100"]).into());
            }
            n.host_network = pool != "secure";
            if rng.chance(10) {
                n.host_ports.insert(rng.pick(&[8080, 8443]));
            }
            if rng.chance(30) {
                n.used.millicpus = n.total.millicpus * rng.below(8) / 8;
                n.running = 1;
            }
            n
        })
        .collect();
    let reqs = (0..20_000u64)
        .map(|k| {
            let cores = rng.pick(&[1000, 4000, 8000]);
            let mut r = request(k, None, Res::new(cores, GIB), false);
            match rng.below(4) {
                0 => {
                    r.members = rng.pick(&[2, 4, 8, 16]) as u32;
                    r.host_network = true;
                    r.pool = rng.pick(&[Some("cpu"), None]).map(str::to_owned);
                }
                1 => {
                    let model = rng.pick(&["T4", "A100", "H100", "L4"]);
                    r.labels.insert(MODEL.into(), model.into());
                    r.need.devices.insert(GPU.into(), rng.pick(&[1, 2]));
                }
                2 => {
                    r.host_network = true;
                    r.host_ports = vec![rng.pick(&[8080, 8443, 9000])];
                }
                _ => {}
            }
            r
        })
        .collect();
    (nodes, reqs)
}

fn run(
    name: &str,
    (nodes, reqs): (Vec<NodeView>, Vec<TaskRequest<u64>>),
    check: impl Fn(&Plan<u64>),
) {
    let plan = schedule(&nodes, &reqs);
    check(&plan);
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            black_box(schedule(black_box(&nodes), black_box(&reqs)));
            start.elapsed()
        })
        .collect();
    times.sort();
    let median = times[RUNS / 2];
    let placed = plan.placements.len();
    let per_sec = |n: usize| (n as f64 / median.as_secs_f64()) as u64;
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for u in &plan.unplaced {
        *kinds.entry(format!("{:?}", u.kind)).or_default() += 1;
    }
    println!(
        "{name}: placements/s: {}  requests/s: {}  ({} nodes, {} requests, {placed} placed, \
         unplaced {kinds:?}; median {:.1} ms, best {:.1} ms of {RUNS} runs)",
        per_sec(placed),
        per_sec(reqs.len()),
        nodes.len(),
        reqs.len(),
        median.as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument selects cases by name.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));

    if wanted("uniform") {
        run("uniform", uniform(), |plan| {
            assert_eq!(plan.placements.len(), 100_000);
        });
    }
    if wanted("heterogeneous") {
        run("heterogeneous", heterogeneous(), |plan| {
            assert!(plan.placements.len() > 50_000, "{}", plan.placements.len());
            assert!(plan
                .unplaced
                .iter()
                .any(|u| u.kind == UnplacedKind::TooLarge));
            assert!(plan
                .unplaced
                .iter()
                .any(|u| u.kind == UnplacedKind::NoNodes));
            assert!(plan.unplaced.iter().any(|u| u.kind == UnplacedKind::Wait));
        });
    }
    if wanted("constrained") {
        run("constrained", constrained(), |plan| {
            assert!(plan.placements.iter().any(|p| p.members() == 16));
            assert!(plan.placements.len() > 5_000, "{}", plan.placements.len());
            assert!(plan
                .unplaced
                .iter()
                .any(|u| u.kind == UnplacedKind::TooLarge));
            assert!(plan.unplaced.iter().any(|u| u.kind == UnplacedKind::Wait));
        });
    }
    if wanted("oversubscribed") {
        run("oversubscribed", oversubscribed(), |plan| {
            assert_eq!(plan.placements.len(), 8_000);
            assert_eq!(plan.unplaced.len(), 92_000);
        });
    }
}
