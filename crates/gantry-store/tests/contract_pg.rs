//! The backend contract (`gantry_store::testkit`) on PostgreSQL: one test per contract, each
//! on a database of its own on the server `scripts/test-images.sh` starts, on a
//! multi-threaded runtime so that concurrent writers really race.

use std::sync::Arc;

use gantry_store::testkit::{self, ScratchDb};
use gantry_store::{PgStore, Store};

async fn fresh() -> (ScratchDb, Arc<dyn Store>) {
    let db = ScratchDb::create(testkit::test_env("GANTRY_TEST_PG")).await;
    let s = PgStore::connect(db.url()).await.unwrap();
    (db, Arc::new(s))
}

macro_rules! contract {
    ($($name:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let (_db, s) = fresh().await;
                testkit::$name(s).await;
            }
        )+
    };
}

gantry_store::every_contract!(contract);

/// `run_all` runs the same suite through a factory.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_whole_suite_runs_through_a_factory() {
    let dbs = std::sync::Mutex::new(vec![]);
    testkit::run_all(|| async {
        let (db, s) = fresh().await;
        dbs.lock().unwrap().push(db);
        s
    })
    .await;
}
