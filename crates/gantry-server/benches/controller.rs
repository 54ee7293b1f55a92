//! The controller's cost per tick: `cargo bench -p gantry-server --bench controller`. Prints
//! one line per case. A plain binary, like gantry-core's scheduler bench: no criterion to
//! build on a 2-core machine, and a tick is long enough to time with a clock.
//!
//! Each case is one active workflow: a task array of N members of which all but a few have
//! FINISHED (each with its ended attempt, as a real run leaves them), a few are RUNNING and a
//! few PENDING, on a real SQLite store (WAL, `synchronous=FULL`) in a temporary directory.
//! The one node is registered but has no agent connected, so the pending members stay
//! unplaced: every timed tick reads the same state, runs the workflow state machine and the
//! scheduler, and writes nothing. So this is what a tick costs on top of its own commit, which
//! is the part that used to grow with the array. `store.active()` alone is timed as well.
//!
//! Wall time is the median of the ticks; CPU is the process's user+system time (every
//! thread, sqlx's SQLite workers included) over all the timed ticks, divided by their number.
//! The database lives in /dev/shm when there is one: the timed ticks only read (from the page
//! cache either way), and setting up 10,000 ended attempts is 10,000 fsyncs otherwise.
//! See `README.md` next to this file for figures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gantry_api::agent::{Assignment, Capacity, ImageSource, Resources};
use gantry_api::{EndCause, TaskStatus};
use gantry_server::{Controller, ServerConfig};
use gantry_store::{AttemptEnd, Change, NewTask, NewWorkflow, NodeRegistration, Store, TaskNext};
use uuid::Uuid;

const RUNNING: u32 = 8;
const PENDING: u32 = 8;
const NODE: &str = "bench-node";

fn spec(n: u32) -> String {
    format!(
        "version: v4
jobs:
  prepare:
    image: {{ uri: docker://busybox:1 }}
    command: [ 'true' ]
  member:
    image: {{ uri: docker://busybox:1 }}
    depends-on: [ {{ name: prepare, status: FINISHED }} ]
    task-array: {{ start: 1, end: {n} }}
    env: [ MODE=bench ]
    command: [ sh, -c, 'echo $FB_TASK_ID' ]
"
    )
}

/// The process's user+system CPU time so far, from /proc (clock ticks of 10 ms: read over
/// many ticks).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A store holding one workflow of `n` array members in the state described at the top.
async fn setup(dir: &std::path::Path, n: u32) -> (Controller, Arc<dyn Store>) {
    let store = gantry_store::SqliteStore::open(&dir.join("gantry.db"))
        .await
        .unwrap();
    let store: Arc<dyn Store> = Arc::new(store);
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), dir.to_path_buf());
    config.heartbeat_timeout = Duration::from_secs(3600);
    let controller = Controller::new(store.clone(), config);
    let t0 = now_ms();
    let capacity = Capacity {
        cpus: 64,
        memory_bytes: 256 << 30,
        devices: Default::default(),
    };
    store
        .register_node(
            &NodeRegistration {
                name: NODE.into(),
                pool: "default".into(),
                capacity: serde_json::to_string(&capacity).unwrap(),
                version: "bench".into(),
                metrics_addr: None,
                node_exporter: None,
                ..Default::default()
            },
            t0,
        )
        .await
        .unwrap();

    let wf = gantry_spec::parse(&spec(n)).expect("the bench's workflow parses");
    let plan = gantry_server::plan::compile(&wf);
    let mut tasks = Vec::new();
    for (ord, job) in plan.jobs.iter().enumerate() {
        let indexes: Vec<Option<u32>> = match job.task_array {
            Some((a, b)) => (a..=b).map(Some).collect(),
            None => vec![None],
        };
        for index in indexes {
            tasks.push(NewTask {
                id: Uuid::new_v4(),
                job: job.name.clone(),
                index,
                ord: ord as u32,
            });
        }
    }
    let wf_id = Uuid::new_v4();
    store
        .create_workflow(
            &NewWorkflow {
                id: wf_id,
                name: format!("bench-{n}"),
                owner: "bench".into(),
                group: "bench".into(),
                spec: spec(n),
                plan: serde_json::to_string(&plan).unwrap(),
                tasks: tasks.clone(),
                volumes: vec![],
                takeovers: vec![],
                takeover_changes: vec![],
                unborn: vec![],
                ended: vec![],
            },
            t0,
        )
        .await
        .unwrap();

    // Everything but the last PENDING members gets an attempt, in one transaction; all but
    // the last RUNNING of those then finish, one transaction each, as agents' reports do.
    let placed = tasks.len() - PENDING as usize;
    let attempts: Vec<(Uuid, &NewTask)> = tasks[..placed]
        .iter()
        .map(|t| (Uuid::new_v4(), t))
        .collect();
    let assignment = serde_json::to_string(&Assignment {
        attempt_id: Uuid::nil(),
        workflow_id: wf_id,
        task: "member".into(),
        attempt: 1,
        image: ImageSource {
            uri: "docker://busybox:1".into(),
            credential: None,
            secret: None,
        },
        argv: vec!["true".into()],
        env: vec![],
        cwd: None,
        mounts: vec![],
        files: vec![],
        resources: Resources {
            cpus: 1.0,
            memory_bytes: None,
            devices: Default::default(),
        },
        network: None,
        service: None,
        build: None,
        transfer: None,
        host_network: false,
        multinode: None,
    })
    .unwrap();
    let creates: Vec<Change> = attempts
        .iter()
        .map(|(a, t)| Change::CreateAttempt {
            attempt_id: *a,
            task_id: t.id,
            workflow_id: wf_id,
            node: NODE.into(),
            assignment: assignment.clone(),
            need: Default::default(),
        })
        .collect();
    store.apply(&creates, t0).await.unwrap();
    store
        .apply(
            &[Change::SetWorkflow {
                workflow_id: wf_id,
                status: gantry_api::WorkflowStatus::Running,
                reason: None,
            }],
            t0,
        )
        .await
        .unwrap();
    let finished = placed - RUNNING as usize;
    for (i, (a, _)) in attempts.iter().enumerate() {
        store.attempt_running(*a, t0).await.unwrap();
        if i < finished {
            let ended = store
                .end_attempt(
                    &AttemptEnd {
                        attempt_id: *a,
                        status: TaskStatus::Finished,
                        cause: EndCause::Exit,
                        exit_code: Some(0),
                        reason: None,
                        task: TaskNext::Final {
                            status: TaskStatus::Finished,
                            reason: None,
                        },
                    },
                    t0,
                )
                .await
                .unwrap();
            assert!(ended.is_ended());
        }
    }
    (controller, store)
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// Runs `f` until `budget` is spent (at least `min` times): (median wall time, CPU per run).
async fn time<F, Fut>(min: usize, budget: Duration, mut f: F) -> (Duration, Duration, usize)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..3 {
        f().await;
    }
    let mut walls = Vec::new();
    let start = Instant::now();
    let cpu0 = cpu_time();
    while walls.len() < min || start.elapsed() < budget {
        let t = Instant::now();
        f().await;
        walls.push(t.elapsed());
    }
    let cpu = (cpu_time() - cpu0) / walls.len() as u32;
    let runs = walls.len();
    (median(walls), cpu, runs)
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sizes: Vec<u32> = match std::env::var("BENCH_SIZES") {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => vec![100, 1_000, 10_000],
    };
    let shm = std::path::Path::new("/dev/shm");
    rt.block_on(async {
        for n in sizes {
            let dir = if shm.is_dir() {
                tempfile::tempdir_in(shm).unwrap()
            } else {
                tempfile::tempdir().unwrap()
            };
            let t = Instant::now();
            let (st, store) = setup(dir.path(), n).await;
            let setup_s = t.elapsed().as_secs_f64();

            // The first tick records why the pending members wait; the timed ones change nothing.
            st.tick().await.unwrap();
            let active = store.active().await.unwrap();
            let open: usize = active.iter().map(|w| w.tasks.len()).sum();
            let live: usize = active.iter().map(|w| w.live.len()).sum();
            assert_eq!(live, RUNNING as usize, "the live attempts are the running ones");
            assert!(open >= (RUNNING + PENDING) as usize, "open tasks: {open}");

            let budget = Duration::from_secs(2);
            let (tick_wall, tick_cpu, ticks) = time(20, budget, || async {
                st.tick().await.unwrap();
            })
            .await;
            let (act_wall, act_cpu, reads) = time(20, budget, || {
                let store = store.clone();
                async move {
                    std::hint::black_box(store.active().await.unwrap());
                }
            })
            .await;
            println!(
                "tasks {:>6} ({RUNNING} running, {PENDING} pending): tick {} wall, {} CPU ({ticks} ticks); store.active() {} wall, {} CPU ({reads} reads); setup {setup_s:.1} s",
                n + 1,
                ms(tick_wall),
                ms(tick_cpu),
                ms(act_wall),
                ms(act_cpu),
            );
        }
    });
}
