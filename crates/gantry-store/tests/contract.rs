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

gantry_store::every_contract!(contract);

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
