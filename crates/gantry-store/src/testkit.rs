//! The contract every [`Store`] backend keeps, as tests written over the trait alone: what the
//! controller, the agents' reports and the event stream rely on, whatever the database. A
//! backend runs the suite with a fresh store per contract (see `tests/contract.rs` for
//! SQLite, `tests/contract_pg.rs` for PostgreSQL): [`run_all`] with a factory, or each
//! contract on its own, named by [`every_contract!`](crate::every_contract). Also here, for
//! backends' and the server's tests: [`test_env`] (the services `scripts/test-images.sh`
//! starts) and [`ScratchDb`] (a PostgreSQL database per test).
//!
//! Each contract panics with what it saw when the store breaks it. Stores are given as
//! `Arc<dyn Store>` so that contracts can write from several tasks at once; those that race
//! writers need a multi-threaded runtime to mean anything.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use gantry_api::{EndCause, TaskStatus};
use uuid::Uuid;

use crate::*;

/// Calls `$each!(name, name, ...)` with the name of every contract: the one list, so that a
/// backend's tests (one test per contract, see `tests/contract.rs`) and [`run_all`] cannot
/// miss one.
#[macro_export]
macro_rules! every_contract {
    ($each:ident) => {
        $each!(
            snapshot_sees_whole_plans,
            events_are_read_in_commit_order,
            a_placement_of_a_task_not_waiting_is_refused,
            a_placement_on_a_node_not_ready_is_refused,
            a_placement_that_overfills_its_node_is_refused,
            concurrent_plans_neither_place_twice_nor_overfill,
            exclusive_attempts_are_alone_on_their_node,
            stale_attempt_ends_are_refused,
            batched_reports_apply_each_as_alone,
            node_sequence_numbers_are_unique_under_concurrent_registration,
            last_seen_only_moves_forward,
            nodes_version_moves_with_each_node_change_but_sightings,
            node_usage_sums_the_live_attempts,
            silent_nodes_are_those_not_heard_from_since,
            a_submit_is_stored_whole_or_not_at_all,
            tasks_are_paged_and_counted_in_workflow_order,
            a_big_array_is_a_range_whose_tasks_are_born_as_its_first_are_placed,
            a_lease_has_one_holder_and_its_token_fences_a_deposed_one,
            a_hold_decision_on_holds_that_changed_since_is_refused,
            a_signed_out_web_session_stays_out_until_its_cookie_would_expire,
            a_confirmation_is_taken_once_by_its_user_for_its_action_before_it_expires,
            proxy_views_are_each_replicas_latest_and_age_out,
        );
    };
}

/// Runs every contract, each on a store of its own from `fresh`.
pub async fn run_all<F, Fut>(fresh: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    macro_rules! run {
        ($($name:ident),+ $(,)?) => { $( $name(fresh().await).await; )+ };
    }
    every_contract!(run);
}

/// A value from the env file `scripts/test-images.sh` writes for the tests (the PostgreSQL
/// server's admin URL is `GANTRY_TEST_PG`). The script runs once per test binary, and
/// starts what is down; a test that needs a service fails when the script does.
pub fn test_env(key: &str) -> &'static str {
    use std::path::Path;
    use std::process::{Command, Stdio};
    static ENV: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    let all = ENV.get_or_init(|| {
        let dir = std::env::var("GANTRY_TEST_DIR").unwrap_or_else(|_| "/tmp/gantry-test".into());
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-images.sh");
        let status = Command::new(&script)
            .stdout(Stdio::null())
            .status()
            .expect("running scripts/test-images.sh");
        assert!(status.success(), "scripts/test-images.sh failed");
        let env = std::fs::read_to_string(Path::new(&dir).join("env")).expect("test env file");
        env.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect()
    });
    all.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("{key} is not in the test env file"))
}

/// A database of its own on a PostgreSQL server, for one test: made empty through the
/// server's admin URL, and dropped with it (connections still open to it included), also
/// when the test panics.
pub struct ScratchDb {
    admin_url: String,
    name: String,
    url: String,
}

impl ScratchDb {
    /// A new database on the server of `admin_url` (a URL whose user may create databases).
    pub async fn create(admin_url: &str) -> ScratchDb {
        use sqlx::Connection;
        let name = format!("gantry_test_{}", Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(admin_url)
            .await
            .unwrap_or_else(|e| panic!("connecting to {admin_url}: {e}"));
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("creating database {name}: {e}"));
        let _ = admin.close().await;
        // The same server and user, another database: the path is the database's name.
        let (base, query) = match admin_url.split_once('?') {
            Some((b, q)) => (b, format!("?{q}")),
            None => (admin_url, String::new()),
        };
        let server = match base.split_once("://") {
            Some((scheme, rest)) => {
                format!(
                    "{scheme}://{}",
                    rest.split_once('/').map_or(rest, |(s, _)| s)
                )
            }
            None => panic!("{admin_url} is not a postgres:// URL"),
        };
        ScratchDb {
            admin_url: admin_url.to_string(),
            url: format!("{server}/{name}{query}"),
            name,
        }
    }

    /// Its URL, for [`PgStore::connect`] or a server's `--store`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for ScratchDb {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        // Drop cannot wait on the test's runtime (it may be the one dropping us): a thread
        // of its own with a runtime of its own.
        let dropped = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(async {
                    use sqlx::Connection;
                    let mut admin = sqlx::PgConnection::connect(&admin_url).await?;
                    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut admin)
                        .await?;
                    admin.close().await
                })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("dropping test database {}: {e}", self.name);
        }
    }
}

// --- helpers ------------------------------------------------------------------------------

fn new_workflow(tasks: usize) -> NewWorkflow {
    NewWorkflow {
        id: Uuid::new_v4(),
        name: "contract".into(),
        owner: "ada".into(),
        group: "physics".into(),
        spec: "version: v4".into(),
        plan: "{}".into(),
        tasks: (0..tasks)
            .map(|i| NewTask {
                id: Uuid::new_v4(),
                job: "member".into(),
                index: Some(i as u32),
                ord: 0,
            })
            .collect(),
        unborn: vec![],
        volumes: vec![],
        takeovers: vec![],
        takeover_changes: vec![],
        ended: vec![],
    }
}

async fn submit(s: &dyn Store, tasks: usize) -> NewWorkflow {
    let w = new_workflow(tasks);
    s.create_workflow(&w, 1).await.expect("create_workflow");
    w
}

/// A READY node with `cpus` cores, `memory` bytes and the devices given.
async fn node(s: &dyn Store, name: &str, cpus: u32, memory: u64, devices: &[(&str, u32)]) {
    let capacity = gantry_api::agent::Capacity {
        cpus,
        memory_bytes: memory,
        devices: devices.iter().map(|(d, n)| (d.to_string(), *n)).collect(),
    };
    let capacity = serde_json::to_string(&capacity).expect("capacity");
    register(s, name, &capacity, 1).await;
}

/// A node of the default pool registered at `at` with this capacity (JSON).
async fn register(s: &dyn Store, name: &str, capacity: &str, at: Millis) {
    s.register_node(
        &NodeRegistration {
            name: name.into(),
            pool: "default".into(),
            capacity: capacity.into(),
            version: "contract".into(),
            ..Default::default()
        },
        at,
    )
    .await
    .expect("register_node");
}

fn need(millicpus: u64, memory_bytes: u64, devices: &[(&str, u32)]) -> AttemptNeed {
    AttemptNeed {
        millicpus,
        memory_bytes,
        devices: devices.iter().map(|(d, n)| (d.to_string(), *n)).collect(),
        exclusive: false,
    }
}

fn place(w: &NewWorkflow, task: usize, node: &str, need: AttemptNeed) -> Change {
    Change::CreateAttempt {
        attempt_id: Uuid::new_v4(),
        task_id: w.tasks[task].id,
        workflow_id: w.id,
        node: node.into(),
        assignment: "{}".into(),
        need,
    }
}

fn attempt_of(c: &Change) -> Uuid {
    match c {
        Change::CreateAttempt { attempt_id, .. } => *attempt_id,
        other => panic!("not a placement: {other:?}"),
    }
}

fn end(attempt_id: Uuid, next: TaskNext) -> AttemptEnd {
    AttemptEnd {
        attempt_id,
        status: TaskStatus::Finished,
        cause: EndCause::Exit,
        exit_code: Some(0),
        reason: None,
        task: next,
    }
}

fn finished() -> TaskNext {
    TaskNext::Final {
        status: TaskStatus::Finished,
        reason: None,
    }
}

async fn all_events(s: &dyn Store) -> Vec<EventRow> {
    let mut out: Vec<EventRow> = vec![];
    loop {
        let after = out.last().map_or(0, |e| e.seq);
        let page = s
            .events(&EventQuery {
                after,
                limit: 1000,
                ..Default::default()
            })
            .await
            .expect("events");
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

/// What a refused plan must not have changed: the workflow's tasks and attempts, and the
/// event log.
struct Before {
    tasks: Vec<(Uuid, TaskStatus, u32)>,
    attempts: usize,
    events: usize,
}

async fn before(s: &dyn Store, w: &NewWorkflow) -> Before {
    Before {
        tasks: tasks_of(s, w).await,
        attempts: s.attempts(w.id).await.expect("attempts").len(),
        events: all_events(s).await.len(),
    }
}

async fn tasks_of(s: &dyn Store, w: &NewWorkflow) -> Vec<(Uuid, TaskStatus, u32)> {
    let mut t: Vec<_> = s
        .tasks(w.id)
        .await
        .expect("tasks")
        .into_iter()
        .map(|t| (t.id, t.status, t.attempts))
        .collect();
    t.sort();
    t
}

/// `plan` is refused, naming `names` in its reason, and nothing of it is applied.
async fn assert_refused(s: &dyn Store, w: &NewWorkflow, plan: &[Change], names: &str, what: &str) {
    let was = before(s, w).await;
    match s.apply(plan, 5).await {
        Err(StoreError::Refused(why)) => {
            assert!(
                why.contains(names),
                "{what}: the refusal names {names}: {why}"
            )
        }
        other => panic!("{what}: want Refused, got {other:?}"),
    }
    assert_eq!(tasks_of(s, w).await, was.tasks, "{what}: no task moved");
    assert_eq!(
        s.attempts(w.id).await.expect("attempts").len(),
        was.attempts,
        "{what}: no attempt was made"
    );
    assert_eq!(
        all_events(s).await.len(),
        was.events,
        "{what}: no event was written"
    );
}

// --- the contracts ------------------------------------------------------------------------

/// `active()` is one consistent snapshot: while plans that each place every task of a
/// workflow are applied, a reader never sees some of a plan's attempts without the others,
/// nor a task STARTED without its attempt.
pub async fn snapshot_sees_whole_plans(s: Arc<dyn Store>) {
    const TASKS: usize = 8;
    const PLANS: usize = 25;
    node(s.as_ref(), "n1", 1024, 1 << 40, &[]).await;
    let mut wfs = vec![];
    for _ in 0..PLANS {
        wfs.push(submit(s.as_ref(), TASKS).await);
    }
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (s, done) = (s.clone(), done.clone());
        tokio::spawn(async move {
            let mut seen_partial_free = 0u32;
            loop {
                let last = done.load(std::sync::atomic::Ordering::SeqCst);
                for aw in s.active().await.expect("active") {
                    let live = aw.live.len();
                    let started = aw
                        .tasks
                        .iter()
                        .filter(|t| t.status == TaskStatus::Started)
                        .count();
                    assert!(
                        live == 0 || live == TASKS,
                        "a snapshot saw {live} of a plan's {TASKS} attempts"
                    );
                    assert_eq!(started, live, "STARTED tasks and live attempts disagree");
                    for t in &aw.tasks {
                        assert_eq!(
                            t.live_attempt.is_some(),
                            aw.live.iter().any(|a| a.task_id == t.id),
                            "a task's live attempt is missing from the snapshot"
                        );
                    }
                }
                seen_partial_free += 1;
                if last {
                    return seen_partial_free;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    for w in &wfs {
        let plan: Vec<Change> = (0..TASKS)
            .map(|i| place(w, i, "n1", need(1000, 1, &[])))
            .collect();
        s.apply(&plan, 2)
            .await
            .expect("a plan that fits is applied");
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let reads = reader.await.expect("the reader saw only whole plans");
    assert!(reads > 0);
    // And the end state is whole too.
    for aw in s.active().await.expect("active") {
        assert_eq!(aw.live.len(), TASKS);
    }
}

/// Event sequence numbers increase in commit order, across concurrent writers: a reader that
/// follows the log by `after = last seq seen` misses nothing, and each writer's events are in
/// the order it wrote them.
pub async fn events_are_read_in_commit_order(s: Arc<dyn Store>) {
    const WRITERS: usize = 6;
    const EACH: usize = 40;
    let base = all_events(s.as_ref()).await.last().map_or(0, |e| e.seq);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tail = {
        let (s, done) = (s.clone(), done.clone());
        tokio::spawn(async move {
            let mut seen: Vec<EventRow> = vec![];
            loop {
                let last = done.load(std::sync::atomic::Ordering::SeqCst);
                let after = seen.last().map_or(base, |e| e.seq);
                let page = s
                    .events(&EventQuery {
                        after,
                        limit: 1000,
                        ..Default::default()
                    })
                    .await
                    .expect("events");
                let empty = page.is_empty();
                seen.extend(page);
                if last && empty {
                    return seen;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let s = s.clone();
            tokio::spawn(async move {
                for i in 0..EACH {
                    s.record_event(
                        &NewEvent {
                            workflow_id: None,
                            node: None,
                            task: None,
                            kind: "contract.order".into(),
                            message: format!("{w}:{i}"),
                        },
                        10,
                    )
                    .await
                    .expect("record_event");
                }
            })
        })
        .collect();
    for w in writers {
        w.await.expect("writer");
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let tailed = tail.await.expect("tail");
    let all: Vec<EventRow> = all_events(s.as_ref())
        .await
        .into_iter()
        .filter(|e| e.seq > base)
        .collect();
    assert_eq!(all.len(), WRITERS * EACH, "every event was recorded");
    assert!(
        all.windows(2).all(|p| p[0].seq < p[1].seq),
        "sequence numbers are unique and listed in order"
    );
    let seqs = |v: &[EventRow]| v.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(&tailed),
        seqs(&all),
        "a reader following the log by sequence number saw every event: none committed \
         behind a number it had read past"
    );
    let mut next = [0usize; WRITERS];
    for e in &all {
        let (w, i) = e.message.split_once(':').expect("message");
        let (w, i): (usize, usize) = (w.parse().unwrap(), i.parse().unwrap());
        assert_eq!(
            i, next[w],
            "writer {w}'s events are in the order it wrote them"
        );
        next[w] += 1;
    }
}

/// A placement whose task is not PENDING (it has a live attempt: STARTED, or RUNNING) is
/// refused with the whole plan, and the plan's other placements are not applied.
pub async fn a_placement_of_a_task_not_waiting_is_refused(s: Arc<dyn Store>) {
    let s = s.as_ref();
    node(s, "n1", 64, 1 << 30, &[]).await;
    let w = submit(s, 3).await;
    let first = place(&w, 0, "n1", need(1000, 0, &[]));
    let a0 = attempt_of(&first);
    s.apply(&[first], 2).await.expect("the first placement");

    let again = [
        place(&w, 1, "n1", need(1000, 0, &[])),
        place(&w, 0, "n1", need(1000, 0, &[])),
    ];
    assert_refused(s, &w, &again, "member[0]", "a STARTED task placed again").await;

    assert!(s.attempt_running(a0, 3).await.expect("running"));
    assert_refused(
        s,
        &w,
        &[place(&w, 0, "n1", need(1000, 0, &[]))],
        "member[0]",
        "a RUNNING task placed again",
    )
    .await;

    // Once its attempt ended and the task waits again, it may be placed.
    let retry = TaskNext::Retry {
        reason: "again".into(),
        not_before: 0,
    };
    assert_eq!(
        s.end_attempt(&end(a0, retry), 4).await.expect("end"),
        EndOutcome::Ended
    );
    s.apply(&again, 5)
        .await
        .expect("a waiting task is placed again");
    let finished_task = place(&w, 2, "n1", need(0, 0, &[]));
    let a2 = attempt_of(&finished_task);
    s.apply(&[finished_task], 6).await.expect("placed");
    assert_eq!(
        s.end_attempt(&end(a2, finished()), 7).await.expect("end"),
        EndOutcome::Ended
    );
    assert_refused(
        s,
        &w,
        &[place(&w, 2, "n1", need(0, 0, &[]))],
        "member[2]",
        "a FINISHED task placed again",
    )
    .await;
}

/// A placement on a node that is not READY (held, down) or that the store does not know is
/// refused.
pub async fn a_placement_on_a_node_not_ready_is_refused(s: Arc<dyn Store>) {
    let s = s.as_ref();
    node(s, "n1", 64, 1 << 30, &[]).await;
    node(s, "n2", 64, 1 << 30, &[]).await;
    let w = submit(s, 2).await;
    s.set_node_state("n2", NodeState::Cordoned, "contract", 2)
        .await
        .expect("set_node_state");
    let plan = [
        place(&w, 0, "n1", need(0, 0, &[])),
        place(&w, 1, "n2", need(0, 0, &[])),
    ];
    assert_refused(s, &w, &plan, "n2", "a placement on a cordoned node").await;
    s.node_disconnected("n1", 3).await.expect("disconnected");
    s.set_node_state("n1", NodeState::Down, "contract", 3)
        .await
        .expect("set_node_state");
    assert_refused(
        s,
        &w,
        &[place(&w, 0, "n1", need(0, 0, &[]))],
        "n1",
        "a placement on a down node",
    )
    .await;
    assert_refused(
        s,
        &w,
        &[place(&w, 0, "nowhere", need(0, 0, &[]))],
        "nowhere",
        "a placement on an unknown node",
    )
    .await;
    s.set_node_state("n2", NodeState::Ready, "contract", 4)
        .await
        .expect("set_node_state");
    s.apply(&[place(&w, 1, "n2", need(0, 0, &[]))], 5)
        .await
        .expect("a READY node takes it");
}

/// The node's live attempts and the plan's new ones must fit its cores, memory and each
/// device; the placements of one plan count together, and an ended attempt frees its share.
pub async fn a_placement_that_overfills_its_node_is_refused(s: Arc<dyn Store>) {
    let s = s.as_ref();
    node(s, "n1", 2, 1000, &[("nvidia.com/gpu", 1)]).await;
    let w = submit(s, 4).await;
    let big = place(&w, 0, "n1", need(1500, 600, &[]));
    let a0 = attempt_of(&big);
    s.apply(&[big], 2).await.expect("fits an empty node");

    assert_refused(
        s,
        &w,
        &[place(&w, 1, "n1", need(1000, 0, &[]))],
        "n1",
        "cores beyond the node's",
    )
    .await;
    assert_refused(
        s,
        &w,
        &[place(&w, 1, "n1", need(0, 500, &[]))],
        "n1",
        "memory beyond the node's",
    )
    .await;
    // Each fits alone; together they do not.
    let two = [
        place(&w, 1, "n1", need(0, 0, &[("nvidia.com/gpu", 1)])),
        place(&w, 2, "n1", need(0, 0, &[("nvidia.com/gpu", 1)])),
    ];
    assert_refused(
        s,
        &w,
        &two,
        "member[2]",
        "devices beyond the node's, in one plan",
    )
    .await;
    assert_refused(
        s,
        &w,
        &[place(&w, 1, "n1", need(0, 0, &[("example.com/fpga", 1)]))],
        "n1",
        "a device the node has none of",
    )
    .await;
    // Exactly full is not overfull.
    s.apply(
        &[place(&w, 1, "n1", need(500, 400, &[("nvidia.com/gpu", 1)]))],
        3,
    )
    .await
    .expect("what is left fits");
    assert_refused(
        s,
        &w,
        &[place(&w, 2, "n1", need(1, 0, &[]))],
        "n1",
        "a full node",
    )
    .await;
    // The first attempt's end frees its share.
    assert_eq!(
        s.end_attempt(&end(a0, finished()), 4).await.expect("end"),
        EndOutcome::Ended
    );
    s.apply(&[place(&w, 2, "n1", need(1500, 600, &[]))], 5)
        .await
        .expect("an ended attempt holds nothing");
}

/// Plans applied at once are checked as if one after the other: of plans placing the same
/// task, one is applied; of plans that each fit a node alone but not together, one is.
pub async fn concurrent_plans_neither_place_twice_nor_overfill(s: Arc<dyn Store>) {
    const TASKS: usize = 12;
    node(s.as_ref(), "big", 64, 1 << 30, &[]).await;
    node(s.as_ref(), "small", 1, 1 << 30, &[]).await;
    let race = |plans: Vec<Vec<Change>>| {
        let s = s.clone();
        async move {
            let tasks: Vec<_> = plans
                .into_iter()
                .map(|plan| {
                    let s = s.clone();
                    tokio::spawn(async move {
                        match s.apply(&plan, 2).await {
                            Ok(()) => true,
                            Err(StoreError::Refused(_)) => false,
                            Err(e) => panic!("apply: {e}"),
                        }
                    })
                })
                .collect();
            let mut applied = 0;
            for t in tasks {
                applied += usize::from(t.await.expect("apply"));
            }
            applied
        }
    };
    let w = submit(s.as_ref(), TASKS).await;
    let twice = (0..TASKS)
        .flat_map(|i| [0, 1].map(|_| vec![place(&w, i, "big", need(0, 0, &[]))]))
        .collect();
    assert_eq!(race(twice).await, TASKS, "each task placed once");
    assert_eq!(s.attempts(w.id).await.expect("attempts").len(), TASKS);
    // A workflow each: tasks of one job share rows (their counts) that a backend may lock,
    // which would order the plans without any check of the node's fit.
    let mut one_core = vec![];
    for _ in 0..TASKS {
        let w = submit(s.as_ref(), 1).await;
        one_core.push(vec![place(&w, 0, "small", need(1000, 0, &[]))]);
    }
    assert_eq!(race(one_core).await, 1, "one core, one attempt");
    let usage = s.node_usage(Some("small")).await.expect("node_usage");
    assert_eq!(usage[0].attempts, 1);
}

/// An exclusive attempt needs a node with nothing live, and nothing is placed beside it.
pub async fn exclusive_attempts_are_alone_on_their_node(s: Arc<dyn Store>) {
    let s = s.as_ref();
    node(s, "n1", 64, 1 << 30, &[]).await;
    let w = submit(s, 3).await;
    let whole = |task| {
        place(
            &w,
            task,
            "n1",
            AttemptNeed {
                exclusive: true,
                ..need(1000, 0, &[])
            },
        )
    };
    let first = place(&w, 0, "n1", need(1000, 0, &[]));
    let a0 = attempt_of(&first);
    s.apply(&[first], 2).await.expect("placed");
    assert_refused(s, &w, &[whole(1)], "n1", "exclusive beside a live attempt").await;
    assert_eq!(
        s.end_attempt(&end(a0, finished()), 3).await.expect("end"),
        EndOutcome::Ended
    );
    s.apply(&[whole(1)], 4)
        .await
        .expect("exclusive on an idle node");
    assert_refused(
        s,
        &w,
        &[place(&w, 2, "n1", need(0, 0, &[]))],
        "n1",
        "anything beside an exclusive attempt",
    )
    .await;
}

/// Only the first end of a task's current attempt is applied: a repeated end, or the end of
/// an attempt its task has moved on from, changes nothing and says so.
/// (`NotCurrent`, a live attempt that is not its task's current one, cannot be made through
/// the trait: the placement guard forbids it. The SQLite tests plant one as an old database
/// could hold it.)
pub async fn stale_attempt_ends_are_refused(s: Arc<dyn Store>) {
    let s = s.as_ref();
    node(s, "n1", 64, 1 << 30, &[]).await;
    let w = submit(s, 1).await;
    let p1 = place(&w, 0, "n1", need(0, 0, &[]));
    let a1 = attempt_of(&p1);
    s.apply(&[p1], 2).await.expect("placed");
    let retry = TaskNext::Retry {
        reason: "again".into(),
        not_before: 0,
    };
    assert_eq!(
        s.end_attempt(&end(a1, retry.clone()), 3)
            .await
            .expect("end"),
        EndOutcome::Ended
    );
    let was = before(s, &w).await;
    assert_eq!(
        s.end_attempt(&end(a1, finished()), 4).await.expect("end"),
        EndOutcome::AlreadyEnded,
        "a repeated end"
    );
    assert_eq!(
        tasks_of(s, &w).await,
        was.tasks,
        "a repeated end moves nothing"
    );
    assert_eq!(all_events(s).await.len(), was.events, "nor writes an event");

    let p2 = place(&w, 0, "n1", need(0, 0, &[]));
    let a2 = attempt_of(&p2);
    s.apply(&[p2], 5).await.expect("the second attempt");
    let was = before(s, &w).await;
    assert_eq!(
        s.end_attempt(&end(a1, finished()), 6).await.expect("end"),
        EndOutcome::AlreadyEnded,
        "the first attempt's late end"
    );
    assert_eq!(
        tasks_of(s, &w).await,
        was.tasks,
        "a stale end does not move the task its successor runs"
    );
    assert_eq!(all_events(s).await.len(), was.events);
    assert_eq!(
        s.attempt(a2).await.expect("attempt").ended_at,
        None,
        "the current attempt is untouched"
    );
    assert_eq!(
        s.end_attempt(&end(a2, finished()), 7).await.expect("end"),
        EndOutcome::Ended
    );
    let t = s.task(w.tasks[0].id).await.expect("task");
    assert_eq!((t.status, t.live_attempt), (TaskStatus::Finished, None));
}

/// Reports committed as a group (`attempts_running`, `end_attempts`) apply each one as it
/// would apply alone, in order: a repeat within the batch is stale, an unknown attempt changes
/// nothing and does not spoil the others, and each end is stamped with its own time.
pub async fn batched_reports_apply_each_as_alone(s: Arc<dyn Store>) {
    let s = s.as_ref();
    node(s, "n1", 64, 1 << 30, &[]).await;
    let w = submit(s, 3).await;
    let plan: Vec<Change> = (0..3)
        .map(|i| place(&w, i, "n1", need(0, 0, &[])))
        .collect();
    let a: Vec<Uuid> = plan.iter().map(attempt_of).collect();
    s.apply(&plan, 2).await.expect("placed");
    let ghost = Uuid::new_v4();
    assert_eq!(
        s.attempts_running(&[(a[0], 3), (a[0], 4), (ghost, 4), (a[1], 5)])
            .await
            .expect("running"),
        vec![true, false, false, true]
    );
    assert_eq!(s.attempt(a[0]).await.expect("a0").running_at, Some(3));
    let was = all_events(s).await.len();
    let outcomes = s
        .end_attempts(&[
            (end(a[0], finished()), 6),
            (end(ghost, finished()), 6),
            (end(a[0], finished()), 7),
            (end(a[1], finished()), 8),
        ])
        .await
        .expect("ends");
    assert_eq!(
        outcomes,
        vec![
            EndOutcome::Ended,
            EndOutcome::Unknown,
            EndOutcome::AlreadyEnded,
            EndOutcome::Ended
        ]
    );
    assert_eq!(s.attempt(a[0]).await.expect("a0").ended_at, Some(6));
    assert_eq!(s.attempt(a[1]).await.expect("a1").ended_at, Some(8));
    // Each applied end writes its attempt's and its task's event; the others write none.
    assert_eq!(all_events(s).await.len(), was + 4);
    let t = s.task(w.tasks[2].id).await.expect("task 2");
    assert_eq!(
        t.status,
        TaskStatus::Started,
        "the one not reported is untouched"
    );
    assert!(matches!(
        s.end_attempt(&end(ghost, finished()), 9).await,
        Err(StoreError::NotFound)
    ));
}

/// Concurrent registrations of distinct nodes get distinct ids and sequence numbers (1, 2,
/// 3... in some order), and a node registering again keeps both.
pub async fn node_sequence_numbers_are_unique_under_concurrent_registration(s: Arc<dyn Store>) {
    const NODES: usize = 24;
    let register = |name: String| {
        let s = s.clone();
        tokio::spawn(async move {
            s.register_node(
                &NodeRegistration {
                    name,
                    pool: "default".into(),
                    capacity: "{}".into(),
                    version: "contract".into(),
                    ..Default::default()
                },
                1,
            )
            .await
            .expect("register_node")
        })
    };
    // Every node twice at once: first registrations race each other and re-registrations.
    let tasks: Vec<_> = (0..NODES)
        .flat_map(|i| [register(format!("node-{i}")), register(format!("node-{i}"))])
        .collect();
    let mut rows: BTreeMap<String, (Uuid, i64)> = BTreeMap::new();
    for t in tasks {
        let r = t.await.expect("registration");
        if let Some(was) = rows.insert(r.name.clone(), (r.id, r.seq)) {
            assert_eq!(
                was,
                (r.id, r.seq),
                "{} registered twice is one node",
                r.name
            );
        }
    }
    assert_eq!(rows.len(), NODES);
    let ids: HashSet<Uuid> = rows.values().map(|(id, _)| *id).collect();
    let seqs: HashSet<i64> = rows.values().map(|(_, seq)| *seq).collect();
    assert_eq!(ids.len(), NODES, "node ids are unique");
    assert_eq!(
        seqs.len(),
        NODES,
        "node sequence numbers are unique: {rows:?}"
    );
    assert!(
        seqs.iter().all(|&q| q >= 1),
        "sequence numbers start at 1: {seqs:?}"
    );
    let listed = s.nodes().await.expect("nodes");
    assert_eq!(listed.len(), NODES);
    for n in listed {
        assert_eq!(
            rows[&n.name],
            (n.id, n.seq),
            "{} is listed as registered",
            n.name
        );
    }
}

/// Batched sightings (`nodes_seen`) move each node's `last_seen` forward only: a batch
/// gathered before a reconnect does not undo the registration's time. Unknown names change
/// nothing.
pub async fn last_seen_only_moves_forward(s: Arc<dyn Store>) {
    for name in ["a", "b"] {
        register(s.as_ref(), name, "{}", 100).await;
    }
    // A name twice in one batch counts by its latest time.
    s.nodes_seen(&[
        ("a".into(), 250),
        ("b".into(), 50),
        ("ghost".into(), 900),
        ("a".into(), 200),
    ])
    .await
    .expect("nodes_seen");
    let seen = |n: &str| {
        let s = s.clone();
        let n = n.to_string();
        async move { s.node(&n).await.expect("node").last_seen }
    };
    assert_eq!(seen("a").await, Some(250), "moved forward");
    assert_eq!(seen("b").await, Some(100), "never back");
    s.nodes_seen(&[]).await.expect("an empty batch");
    assert!(matches!(s.node("ghost").await, Err(StoreError::NotFound)));
}

/// `nodes_version` moves with every change to a node's row (a registration, a new state, a
/// disconnect), and not with sightings (`nodes_seen`), which touch the whole fleet each second.
pub async fn nodes_version_moves_with_each_node_change_but_sightings(s: Arc<dyn Store>) {
    let s = s.as_ref();
    let v = || async { s.nodes_version().await.expect("nodes_version") };
    let v0 = v().await;
    register(s, "a", "{}", 100).await;
    let v1 = v().await;
    assert_ne!(v1, v0, "a registration");
    s.nodes_seen(&[("a".into(), 200)]).await.expect("seen");
    assert_eq!(v().await, v1, "a sighting");
    s.set_node_state("a", NodeState::Cordoned, "test", 300)
        .await
        .expect("state");
    let v2 = v().await;
    assert_ne!(v2, v1, "a new state");
    s.node_disconnected("a", 400).await.expect("disconnected");
    let v3 = v().await;
    assert_ne!(v3, v2, "a disconnect");
    register(s, "a", "{}", 500).await;
    assert_ne!(v().await, v3, "a registration again");
}

/// `node_usage` sums what each node's live attempts hold, one entry per node that has one;
/// an ended attempt holds nothing.
pub async fn node_usage_sums_the_live_attempts(s: Arc<dyn Store>) {
    let s = s.as_ref();
    node(s, "n1", 8, 8000, &[("nvidia.com/gpu", 4)]).await;
    node(s, "n2", 8, 8000, &[]).await;
    node(s, "idle", 8, 8000, &[]).await;
    let w = submit(s, 4).await;
    let plan = [
        place(&w, 0, "n1", need(1500, 100, &[("nvidia.com/gpu", 1)])),
        place(&w, 1, "n1", need(500, 200, &[("nvidia.com/gpu", 2)])),
        place(&w, 2, "n2", need(1000, 300, &[])),
        place(&w, 3, "n2", need(2000, 400, &[])),
    ];
    let gone = attempt_of(&plan[3]);
    s.apply(&plan, 2).await.expect("placements");
    assert_eq!(
        s.end_attempt(&end(gone, finished()), 3).await.expect("end"),
        EndOutcome::Ended
    );
    let mut usage = s.node_usage(None).await.expect("node_usage");
    usage.sort_by(|a, b| a.node.cmp(&b.node));
    assert_eq!(
        usage,
        vec![
            NodeUsage {
                node: "n1".into(),
                attempts: 2,
                need: need(2000, 300, &[("nvidia.com/gpu", 3)]),
            },
            NodeUsage {
                node: "n2".into(),
                attempts: 1,
                need: need(1000, 300, &[]),
            },
        ],
        "the idle node has no entry, the ended attempt counts for nothing"
    );
    assert_eq!(
        s.node_usage(Some("n2")).await.expect("node_usage"),
        vec![usage[1].clone()],
        "one node's alone"
    );
    assert_eq!(
        s.node_usage(Some("idle")).await.expect("node_usage"),
        vec![]
    );
}

/// `silent_nodes(before)`: the nodes not DOWN last heard from before `before`, strictly.
pub async fn silent_nodes_are_those_not_heard_from_since(s: Arc<dyn Store>) {
    for name in ["quiet", "fresh", "gone"] {
        register(s.as_ref(), name, "{}", 100).await;
    }
    s.nodes_seen(&[("fresh".into(), 500)]).await.expect("seen");
    s.set_node_state("gone", NodeState::Down, "lost", 200)
        .await
        .expect("down");
    let names = |v: Vec<NodeRow>| v.into_iter().map(|n| n.name).collect::<Vec<_>>();
    assert_eq!(
        names(s.silent_nodes(100).await.expect("silent")),
        Vec::<String>::new()
    );
    assert_eq!(
        names(s.silent_nodes(101).await.expect("silent")),
        vec!["quiet"]
    );
    assert_eq!(
        names(s.silent_nodes(501).await.expect("silent")),
        vec!["fresh", "quiet"],
        "a DOWN node is not silent, it is lost already"
    );
}

/// A submit is one call: the workflow, its takeovers and their confirmations, and the tasks
/// that end at once are stored together; when any of it fails, none of it is.
pub async fn a_submit_is_stored_whole_or_not_at_all(s: Arc<dyn Store>) {
    let s = s.as_ref();
    let takeover = |w: &NewWorkflow| TakeoverRow {
        id: Uuid::new_v4(),
        endpoint: "web".into(),
        from_workflow: None,
        to_workflow: w.id,
        to_service: "member".into(),
        port: 8080,
        requested_by: "ada".into(),
        channel: Channel::Api,
        mode: TakeoverMode::WhenReady,
        phase: TakeoverPhase::AwaitingConfirmation,
        reason: None,
        confirmed_by: None,
        confirmed_via: None,
        created_at: 1,
        updated_at: 1,
        switched_at: None,
        ended_at: None,
    };
    let mut w = new_workflow(2);
    let t = takeover(&w);
    w.takeovers = vec![t.clone()];
    w.takeover_changes = vec![EndpointChange::Confirm {
        id: t.id,
        by: "ada".into(),
        via: "mcp".into(),
    }];
    w.ended = vec![EndedTask {
        task_id: w.tasks[1].id,
        status: TaskStatus::Finished,
        reason: "cached".into(),
    }];
    s.create_workflow(&w, 1).await.expect("create_workflow");
    let stored = s.takeover(t.id).await.expect("the takeover is stored");
    assert_eq!(stored.confirmed_by.as_deref(), Some("ada"));
    assert_eq!(stored.confirmed_via.as_deref(), Some("mcp"));
    let tasks = s.task(w.tasks[1].id).await.expect("task");
    assert_eq!(
        (tasks.status, tasks.reason.as_deref()),
        (TaskStatus::Finished, Some("cached"))
    );
    assert_eq!(
        s.task(w.tasks[0].id).await.expect("task").status,
        TaskStatus::Pending
    );

    // A volume that does not exist fails the submit: nothing of it is stored.
    let mut bad = new_workflow(1);
    let bt = takeover(&bad);
    bad.takeovers = vec![bt.clone()];
    bad.ended = vec![EndedTask {
        task_id: bad.tasks[0].id,
        status: TaskStatus::Finished,
        reason: "cached".into(),
    }];
    bad.volumes = vec![Uuid::new_v4()];
    let events = all_events(s).await.len();
    assert!(s.create_workflow(&bad, 2).await.is_err());
    assert!(matches!(
        s.workflow(bad.id).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(s.takeover(bt.id).await, Err(StoreError::NotFound)));
    assert!(matches!(
        s.task(bad.tasks[0].id).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        all_events(s).await.len(),
        events,
        "no event of it was written"
    );
}

/// `tasks_page` walks a workflow's tasks in its order (a job's one unindexed task before the
/// next job's members), page by page from the previous page's last, filtered by status;
/// `task_counts` counts them by status; `attempts_of` reads only the tasks asked for.
pub async fn tasks_are_paged_and_counted_in_workflow_order(s: Arc<dyn Store>) {
    let s = s.as_ref();
    node(s, "n1", 64, 1 << 30, &[]).await;
    let mut w = new_workflow(5);
    // A second job, first in the workflow's order, of one task without an index.
    w.tasks.push(NewTask {
        id: Uuid::new_v4(),
        job: "first".into(),
        index: None,
        ord: 0,
    });
    for t in &mut w.tasks[..5] {
        t.ord = 1;
    }
    s.create_workflow(&w, 1).await.expect("create_workflow");
    let other = submit(s, 3).await;
    let want: Vec<Uuid> = std::iter::once(w.tasks[5].id)
        .chain(w.tasks[..5].iter().map(|t| t.id))
        .collect();
    let mut got = vec![];
    let mut after = None;
    loop {
        let page = s
            .tasks_page(
                w.id,
                &TaskPage {
                    after,
                    statuses: vec![],
                    limit: 2,
                },
            )
            .await
            .expect("tasks_page");
        assert!(page.len() <= 2);
        if page.is_empty() {
            break;
        }
        after = page.last().map(|t| t.id);
        got.extend(page.iter().map(|t| t.id));
    }
    assert_eq!(got, want, "every task once, in the workflow's order");

    let plan = [
        place(&w, 1, "n1", need(0, 0, &[])),
        place(&w, 3, "n1", need(0, 0, &[])),
    ];
    let attempts: Vec<Uuid> = plan.iter().map(attempt_of).collect();
    s.apply(&plan, 2).await.expect("placed");
    assert_eq!(
        s.end_attempt(&end(attempts[1], finished()), 3)
            .await
            .expect("end"),
        EndOutcome::Ended
    );
    let started = s
        .tasks_page(
            w.id,
            &TaskPage {
                after: None,
                statuses: vec![TaskStatus::Started, TaskStatus::Finished],
                limit: 10,
            },
        )
        .await
        .expect("tasks_page by status");
    let ids: Vec<Uuid> = started.iter().map(|t| t.id).collect();
    assert_eq!(ids, vec![w.tasks[1].id, w.tasks[3].id]);

    let counts = s
        .task_counts(&[w.id, other.id, Uuid::new_v4()])
        .await
        .expect("task_counts");
    assert_eq!(
        counts[&w.id],
        BTreeMap::from([
            (TaskStatus::Pending, 4),
            (TaskStatus::Started, 1),
            (TaskStatus::Finished, 1)
        ])
    );
    assert_eq!(
        counts[&other.id],
        BTreeMap::from([(TaskStatus::Pending, 3)])
    );
    assert_eq!(counts.len(), 2, "a workflow with no tasks has no counts");

    let of = s
        .attempts_of(&[w.tasks[3].id, w.tasks[0].id])
        .await
        .expect("attempts_of");
    assert_eq!(
        of.iter().map(|a| a.id).collect::<Vec<_>>(),
        vec![attempts[1]]
    );
}

/// A task array's members past those a submit stores as rows are one range: counted as
/// PENDING, shown by `tasks_page` with the ids they will have, given rows in index order as
/// the job's tasks are placed (as many as were placed), and ended as a whole by `EndPending`
/// with one event; an empty range is refused with nothing stored.
pub async fn a_big_array_is_a_range_whose_tasks_are_born_as_its_first_are_placed(
    s: Arc<dyn Store>,
) {
    let s = s.as_ref();
    node(s, "n1", 64, 1 << 30, &[]).await;
    let mut bad = new_workflow(1);
    bad.unborn.push(NewUnborn {
        job: "member".into(),
        ord: 0,
        first: 5,
        last: 4,
    });
    assert!(s.create_workflow(&bad, 1).await.is_err());
    assert!(matches!(
        s.workflow(bad.id).await,
        Err(StoreError::NotFound)
    ));

    let mut w = new_workflow(3);
    w.unborn.push(NewUnborn {
        job: "member".into(),
        ord: 0,
        first: 3,
        last: 9,
    });
    s.create_workflow(&w, 1).await.expect("create_workflow");
    let id = |i: u32| unborn_task_id(w.id, 0, i);
    let counts = |want: &[(TaskStatus, u64)]| BTreeMap::from_iter(want.iter().copied());
    assert_eq!(
        s.task_counts(&[w.id]).await.expect("counts")[&w.id],
        counts(&[(TaskStatus::Pending, 10)])
    );
    let snap = s.active().await.expect("active");
    assert_eq!(snap[0].tasks.len(), 3, "only rows are listed");
    assert_eq!(snap[0].pending[0].count, 10, "the range is counted");

    let page = |after, statuses: Vec<TaskStatus>, limit| {
        let p = TaskPage {
            after,
            statuses,
            limit,
        };
        async move { s.tasks_page(w.id, &p).await }
    };
    let first = page(None, vec![], 4).await.expect("page");
    let ids: Vec<Uuid> = first.iter().map(|t| t.id).collect();
    assert_eq!(ids, [w.tasks[0].id, w.tasks[1].id, w.tasks[2].id, id(3)]);
    let rest = page(Some(id(3)), vec![], 100)
        .await
        .expect("page after an unborn task");
    let got: Vec<(Uuid, Option<u32>, TaskStatus)> =
        rest.iter().map(|t| (t.id, t.index, t.status)).collect();
    let want: Vec<_> = (4..=9)
        .map(|i| (id(i), Some(i), TaskStatus::Pending))
        .collect();
    assert_eq!(got, want);
    for bad in [id(10), Uuid::new_v4(), unborn_task_id(Uuid::new_v4(), 0, 5)] {
        assert!(
            matches!(page(Some(bad), vec![], 10).await, Err(StoreError::NotFound)),
            "{bad} is no task of the workflow"
        );
    }
    let unplaced = Change::CreateAttempt {
        attempt_id: Uuid::new_v4(),
        task_id: id(9),
        workflow_id: w.id,
        node: "n1".into(),
        assignment: "{}".into(),
        need: need(0, 0, &[]),
    };
    assert!(
        s.apply(&[unplaced], 2).await.is_err(),
        "a task without a row is not placed"
    );

    // Two placed: two born, the next in index order, with the ids they were shown with.
    let plan = [
        place(&w, 0, "n1", need(0, 0, &[])),
        place(&w, 1, "n1", need(0, 0, &[])),
    ];
    s.apply(&plan, 3).await.expect("placed");
    let rows = s.tasks(w.id).await.expect("tasks");
    let row_ids: Vec<Uuid> = rows.iter().map(|t| t.id).collect();
    assert_eq!(
        row_ids,
        [w.tasks[0].id, w.tasks[1].id, w.tasks[2].id, id(3), id(4)]
    );
    assert_eq!(
        s.task_counts(&[w.id]).await.expect("counts")[&w.id],
        counts(&[(TaskStatus::Pending, 8), (TaskStatus::Started, 2)])
    );
    let waiting = page(None, vec![TaskStatus::Pending], 100)
        .await
        .expect("page");
    let idx: Vec<Option<u32>> = waiting.iter().map(|t| t.index).collect();
    assert_eq!(idx, (2..=9).map(Some).collect::<Vec<_>>());
    let of_job = s
        .job_tasks(w.id, "member", Some(3), 2)
        .await
        .expect("job_tasks");
    assert_eq!(
        of_job.iter().map(|t| t.id).collect::<Vec<_>>(),
        [id(3), id(4)]
    );
    assert_eq!(s.attempt_nodes(w.id).await.expect("nodes"), ["n1"]);

    // A stop ends the rows and the range alike.
    let events = all_events(s).await.len();
    let stop = Change::EndPending {
        workflow_id: w.id,
        job: "member".into(),
        status: TaskStatus::Stopped,
        reason: "stopped by ada".into(),
    };
    s.apply(&[stop], 4).await.expect("end pending");
    assert_eq!(
        s.task_counts(&[w.id]).await.expect("counts")[&w.id],
        counts(&[(TaskStatus::Stopped, 8), (TaskStatus::Started, 2)])
    );
    let stopped = page(None, vec![TaskStatus::Stopped], 100)
        .await
        .expect("page");
    assert_eq!(stopped.len(), 8);
    assert!(stopped
        .iter()
        .all(|t| t.reason.as_deref() == Some("stopped by ada") && t.ended_at == Some(4)));
    let new: Vec<EventRow> = all_events(s).await.split_off(events);
    let tasks: Vec<&str> = new.iter().filter_map(|e| e.task.as_deref()).collect();
    assert_eq!(
        tasks,
        ["member[2]", "member[3]", "member[4]", "member[5-9]"],
        "one event per row, one for the range"
    );
    assert!(page(None, vec![TaskStatus::Pending], 100)
        .await
        .expect("page")
        .is_empty());
    // Nothing is born once the range ended.
    let again = s.active().await.expect("active");
    assert!(again[0].pending.is_empty());
}

/// A lease has one holder at a time; it changes hands only once it ran out or was given up,
/// each time under a greater token; and a plan fenced with a token the lease no longer has is
/// refused whole (placements, endpoint steps), however it was built.
pub async fn a_lease_has_one_holder_and_its_token_fences_a_deposed_one(s: Arc<dyn Store>) {
    const L: &str = "controller";
    let take = |holder: &'static str, now: Millis| {
        let s = s.clone();
        async move {
            s.acquire_lease(L, holder, 1000, now)
                .await
                .expect("acquire_lease")
        }
    };
    assert_eq!(take("a", 1000).await, Some(1), "a new lease: token 1");
    assert_eq!(take("b", 1500).await, None, "a's lease runs until 2000");
    assert_eq!(
        take("a", 1800).await,
        Some(1),
        "a renews: same token, until 2800"
    );
    assert_eq!(take("b", 2700).await, None, "renewed, not run out");
    assert_eq!(
        take("b", 2900).await,
        Some(2),
        "run out: b takes it, token 2"
    );
    assert_eq!(take("a", 3000).await, None, "a is deposed");

    node(s.as_ref(), "n", 8, 1 << 30, &[]).await;
    let w = submit(s.as_ref(), 2).await;
    let fence = |token| {
        Change::Fence(Fence {
            lease: L.into(),
            token,
        })
    };
    let late = vec![fence(1), place(&w, 0, "n", need(1000, 0, &[]))];
    match s.apply(&late, 3000).await {
        Err(StoreError::Deposed(why)) => assert!(why.contains("token 2"), "{why}"),
        r => panic!("a deposed holder's plan: {r:?}"),
    }
    // A fence anywhere in the plan refuses what came before it too.
    let late = vec![place(&w, 0, "n", need(1000, 0, &[])), fence(1)];
    assert!(matches!(
        s.apply(&late, 3000).await,
        Err(StoreError::Deposed(_))
    ));
    assert!(
        s.attempts(w.id).await.expect("attempts").is_empty(),
        "nothing of a refused plan is applied"
    );
    let ev = |m: &str| {
        EndpointChange::Event(NewEvent {
            workflow_id: None,
            node: None,
            task: None,
            kind: "test.fenced".into(),
            message: m.into(),
        })
    };
    let late = vec![
        EndpointChange::Fence(Fence {
            lease: L.into(),
            token: 1,
        }),
        ev("late"),
    ];
    assert!(matches!(
        s.apply_endpoints(&late, 3000).await,
        Err(StoreError::Deposed(_))
    ));
    let ok = vec![fence(2), place(&w, 1, "n", need(1000, 0, &[]))];
    s.apply(&ok, 3000).await.expect("the holder's plan");
    let ok = vec![
        EndpointChange::Fence(Fence {
            lease: L.into(),
            token: 2,
        }),
        ev("current"),
    ];
    s.apply_endpoints(&ok, 3000)
        .await
        .expect("the holder's steps");
    assert_eq!(s.attempts(w.id).await.expect("attempts").len(), 1);
    let fenced: Vec<String> = all_events(s.as_ref())
        .await
        .into_iter()
        .filter(|e| e.kind == "test.fenced")
        .map(|e| e.message)
        .collect();
    assert_eq!(
        fenced,
        ["current"],
        "the deposed holder's event is not written"
    );

    // Given up: another takes it at once, under a greater token; a has no lease to give up.
    s.release_lease(L, "a", 3100)
        .await
        .expect("release by a non-holder");
    assert_eq!(take("a", 3100).await, None, "b's lease stands");
    s.release_lease(L, "b", 3100).await.expect("release");
    assert_eq!(take("a", 3100).await, Some(3));
    let row = s.lease(L).await.expect("lease").expect("a lease row");
    assert_eq!(
        (
            row.holder.as_str(),
            row.token,
            row.acquired_at,
            row.expires_at
        ),
        ("a", 3, 3100, 4100)
    );
    let kinds: Vec<String> = all_events(s.as_ref())
        .await
        .into_iter()
        .filter(|e| e.kind.starts_with("lease."))
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            "lease.taken",
            "lease.taken",
            "lease.released",
            "lease.taken"
        ]
    );

    // Holders racing for a new lease: exactly one takes it.
    let racers: Vec<_> = (0..8)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                s.acquire_lease("race", &format!("r{i}"), 1000, 5000)
                    .await
                    .expect("acquire_lease")
            })
        })
        .collect();
    let mut won = vec![];
    for r in racers {
        won.extend(r.await.expect("racer"));
    }
    assert_eq!(won, [1], "one holder of a new lease");
}

/// A hold decision names the holds' version it was made on; one applied since (another
/// server's) makes it refused whole, so that of deciders racing on the same version exactly
/// one applies.
pub async fn a_hold_decision_on_holds_that_changed_since_is_refused(s: Arc<dyn Store>) {
    node(s.as_ref(), "n1", 8, 1 << 30, &[]).await;
    let hold = |reason: &str| {
        HoldChange::Place(Box::new(HoldRow {
            id: Uuid::new_v4(),
            node: "n1".into(),
            pool: "default".into(),
            kind: HoldKind::Cordon,
            source: HoldSource::Admin,
            state: HoldStatus::Active,
            alertname: None,
            fingerprint: None,
            episode: None,
            release_rule: ReleaseRule::Admin,
            reason: reason.into(),
            created_by: "admin".into(),
            created_at: 1,
            activated_at: Some(1),
            alert_resolved_at: None,
            released_by: None,
            released_at: None,
            release_reason: None,
        }))
    };
    let holds = |s: Arc<dyn Store>| async move {
        let mut r: Vec<String> = s
            .holds(None, true)
            .await
            .expect("holds")
            .into_iter()
            .map(|h| h.reason)
            .collect();
        r.sort();
        r
    };
    let v0 = s.holds_version().await.expect("holds_version");
    s.apply_holds(&[HoldChange::Expect(v0), hold("first")], 1)
        .await
        .expect("a decision on the current version");
    let v1 = s.holds_version().await.expect("holds_version");
    assert_ne!(v0, v1, "a hold change moves the version");
    match s
        .apply_holds(&[hold("late"), HoldChange::Expect(v0)], 1)
        .await
    {
        Err(StoreError::Refused(_)) => {}
        r => panic!("a decision on an old version: {r:?}"),
    }
    assert_eq!(holds(s.clone()).await, ["first"], "nothing of it applied");
    assert_eq!(s.holds_version().await.expect("holds_version"), v1);

    let racers: Vec<_> = (0..8)
        .map(|i| {
            let s = s.clone();
            let change = hold(&format!("racer {i}"));
            tokio::spawn(async move {
                match s.apply_holds(&[HoldChange::Expect(v1), change], 1).await {
                    Ok(()) => true,
                    Err(StoreError::Refused(_)) => false,
                    Err(e) => panic!("apply_holds: {e}"),
                }
            })
        })
        .collect();
    let mut applied = 0;
    for r in racers {
        applied += usize::from(r.await.expect("racer"));
    }
    assert_eq!(applied, 1, "one decision of those made on one version");
    assert_eq!(holds(s.clone()).await.len(), 2);
}

/// A web session signed out is refused by every server on the store until its cookie would
/// have expired; signing out again changes nothing, and others' sessions are untouched.
pub async fn a_signed_out_web_session_stays_out_until_its_cookie_would_expire(s: Arc<dyn Store>) {
    let out = |sid: &'static str, now: Millis| {
        let s = s.clone();
        async move {
            s.session_signed_out(sid, now)
                .await
                .expect("session_signed_out")
        }
    };
    assert!(!out("s1", 10).await);
    s.sign_out_session("s1", 100, 10).await.expect("sign out");
    s.sign_out_session("s1", 100, 20).await.expect("again");
    assert!(out("s1", 50).await, "signed out");
    assert!(!out("s2", 50).await, "another session");
    assert!(!out("s1", 100).await, "its cookie has expired too");
    // A later sign-out drops those past their time, and keeps its own.
    s.sign_out_session("s2", 400, 200).await.expect("sign out");
    assert!(out("s2", 300).await);
    assert!(!out("s1", 50).await, "dropped once past its time");
}

/// Each server replica's proxy views replace what it published before and leave other
/// replicas' alone; a heartbeat keeps them seen, a read since a time leaves out those not
/// seen since (dead replicas), and a publish drops those long gone.
pub async fn proxy_views_are_each_replicas_latest_and_age_out(s: Arc<dyn Store>) {
    let (old, new, attempt) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let view = |endpoint: &str, workflow: Option<Uuid>, in_flight: u64| ProxyView {
        endpoint: endpoint.into(),
        workflow_id: workflow,
        attempt_id: workflow.map(|_| attempt),
        old_in_flight: in_flight,
    };
    let seen = |since: Millis| {
        let s = s.clone();
        async move {
            s.proxy_views(since)
                .await
                .expect("proxy_views")
                .into_iter()
                .map(|r| (r.replica, r.view.endpoint, r.view.old_in_flight, r.seen_at))
                .collect::<Vec<_>>()
        }
    };
    assert!(
        !s.touch_proxy_views("a", 5).await.expect("touch"),
        "nothing published to mark seen"
    );
    s.publish_proxy_views("b", &[view("chat", Some(old), 0)], 0, 10)
        .await
        .expect("publish b");
    s.publish_proxy_views(
        "a",
        &[view("chat", Some(old), 0), view("idle", None, 0)],
        0,
        20,
    )
    .await
    .expect("publish a");
    let all = s.proxy_views(0).await.expect("proxy_views");
    assert_eq!(
        all.iter()
            .map(|r| (r.replica.as_str(), r.view.endpoint.as_str()))
            .collect::<Vec<_>>(),
        [("a", "chat"), ("a", "idle"), ("b", "chat")],
        "by replica, then endpoint"
    );
    assert_eq!(all[0].view, view("chat", Some(old), 0), "read back whole");
    assert_eq!(all[1].view, view("idle", None, 0), "no backend");
    // `a` switched to the new backend with two requests left on the old one, and no longer
    // lists `idle`; `b`'s view is its own.
    s.publish_proxy_views("a", &[view("chat", Some(new), 2)], 0, 30)
        .await
        .expect("publish a again");
    let all = s.proxy_views(0).await.expect("proxy_views");
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[0].view, view("chat", Some(new), 2));
    assert_eq!(all[0].seen_at, 30);
    assert_eq!(all[1].view, view("chat", Some(old), 0), "b's untouched");
    // A heartbeat keeps the views and moves when they were seen.
    assert!(s.touch_proxy_views("b", 40).await.expect("touch b"));
    assert_eq!(
        seen(35).await,
        [("b".to_string(), "chat".to_string(), 0, 40)],
        "a, not seen since 30, is left out"
    );
    // A publish drops the views of replicas not seen since `forget_before`, its own kept.
    s.publish_proxy_views("c", &[view("chat", Some(new), 0)], 35, 50)
        .await
        .expect("publish c");
    assert_eq!(
        seen(0).await,
        [
            ("b".to_string(), "chat".to_string(), 0, 40),
            ("c".to_string(), "chat".to_string(), 0, 50)
        ],
        "a, long gone, dropped"
    );
    assert!(
        !s.touch_proxy_views("a", 60).await.expect("touch a"),
        "a's views are gone: it must publish them again"
    );
    // Publishing nothing leaves nothing of that replica's.
    s.publish_proxy_views("c", &[], 0, 70)
        .await
        .expect("publish c empty");
    assert_eq!(seen(0).await.len(), 1);
}

/// An MCP confirmation is taken once, only by its own user, for its own action and kind, and
/// only before it expires; a wrong take leaves it for the right one; two takes at once, one
/// wins.
pub async fn a_confirmation_is_taken_once_by_its_user_for_its_action_before_it_expires(
    s: Arc<dyn Store>,
) {
    let (ada, bob) = (Uuid::new_v4(), Uuid::new_v4());
    let new = |id: &str, kind, expires_at| NewConfirmation {
        kind,
        id_hash: id.into(),
        user_id: ada,
        action: "takeover:chat".into(),
        expires_at,
    };
    use ConfirmationKind::{Question, Token};
    s.put_confirmation(&new("h1", Token, 100), 1)
        .await
        .expect("put");
    s.put_confirmation(&new("h2", Question, 100), 1)
        .await
        .expect("put");
    s.put_confirmation(&new("h3", Token, 50), 1)
        .await
        .expect("put");
    let take = |kind, id: &'static str, user, action: &'static str, now| {
        let s = s.clone();
        async move {
            s.take_confirmation(kind, id, user, action, now)
                .await
                .expect("take")
        }
    };
    assert!(
        !take(Token, "h1", bob, "takeover:chat", 2).await,
        "another user's"
    );
    assert!(
        !take(Token, "h1", ada, "delete:chat", 2).await,
        "another action's"
    );
    assert!(
        !take(Question, "h1", ada, "takeover:chat", 2).await,
        "another kind's"
    );
    assert!(
        !take(Token, "h3", ada, "takeover:chat", 50).await,
        "expired"
    );
    let both = tokio::join!(
        take(Token, "h1", ada, "takeover:chat", 3),
        take(Token, "h1", ada, "takeover:chat", 3)
    );
    assert!(both.0 ^ both.1, "exactly one take wins: {both:?}");
    assert!(!take(Token, "h1", ada, "takeover:chat", 4).await, "used");
    assert!(take(Question, "h2", ada, "takeover:chat", 4).await);
    // Expired ones are dropped as others are kept: h3 is gone even for its own take.
    s.put_confirmation(&new("h4", Token, 500), 200)
        .await
        .expect("put");
    assert!(!take(Token, "h3", ada, "takeover:chat", 10).await);
}
