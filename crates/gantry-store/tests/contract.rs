//! The backend contract (`gantry_store::testkit`) on SQLite: one test per contract, each on a
//! fresh database file, on a multi-threaded runtime so that concurrent writers really race.

use std::sync::Arc;

use gantry_store::{testkit, SqliteStore, Store};

async fn fresh() -> (tempfile::TempDir, Arc<dyn Store>) {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(&dir.path().join("gantry.db"))
        .await
        .unwrap();
    (dir, Arc::new(s))
}

macro_rules! contract {
    ($($name:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let (_dir, s) = fresh().await;
                testkit::$name(s).await;
            }
        )+
    };
}

contract!(
    snapshot_sees_whole_plans,
    events_are_read_in_commit_order,
    a_placement_of_a_task_not_waiting_is_refused,
    a_placement_on_a_node_not_ready_is_refused,
    a_placement_that_overfills_its_node_is_refused,
    exclusive_attempts_are_alone_on_their_node,
    stale_attempt_ends_are_refused,
    batched_reports_apply_each_as_alone,
    node_sequence_numbers_are_unique_under_concurrent_registration,
    a_submit_is_stored_whole_or_not_at_all,
    last_seen_only_moves_forward,
    nodes_version_moves_with_each_node_change_but_sightings,
    node_usage_sums_the_live_attempts,
    silent_nodes_are_those_not_heard_from_since,
);

/// `run_all` runs the same suite through a factory, as another backend's tests may.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_whole_suite_runs_through_a_factory() {
    let dirs = std::sync::Mutex::new(vec![]);
    testkit::run_all(|| async {
        let (dir, s) = fresh().await;
        dirs.lock().unwrap().push(dir);
        s
    })
    .await;
}
