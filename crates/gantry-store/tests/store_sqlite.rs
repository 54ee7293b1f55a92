//! The store on SQLite, against a real database file: the backend-neutral cases
//! (`cases/store.rs`, which `store_pg.rs` runs on PostgreSQL), and SQLite's own, its upgrades
//! of databases older migrations made (PostgreSQL's schema starts at today's).

use std::sync::Arc;

use gantry_api::{EndCause, TaskStatus};
use gantry_store::*;
use uuid::Uuid;

#[path = "cases/store.rs"]
mod cases;

use cases::{open, set, strings, workflow};

/// A database file in a directory of its own.
pub struct Db {
    dir: tempfile::TempDir,
}

impl Db {
    pub async fn fresh() -> Db {
        Db {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("gantry.db")
    }

    pub async fn open(&self) -> Arc<dyn Store> {
        Arc::new(SqliteStore::open(&self.path()).await.unwrap())
    }

    /// Runs `sql` beside the store, as an older version of it could have written rows.
    pub async fn exec(&self, sql: &str) {
        let opts = sqlx::sqlite::SqliteConnectOptions::new().filename(self.path());
        let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
        sqlx::query(sql).execute(&pool).await.unwrap();
        pool.close().await;
    }
}

/// A database from before links: what each repository's tags reach becomes linked there, and
/// nothing else.
#[tokio::test]
async fn links_are_made_for_images_cached_before_them() {
    let dir = Db::fresh().await;
    let old = tempfile::tempdir().unwrap();
    let migrations = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    for e in std::fs::read_dir(&migrations).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().to_string();
        if name.as_str() < "0011" {
            std::fs::copy(e.path(), old.path().join(&name)).unwrap();
        }
    }
    let path = dir.path();
    {
        let opts = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true);
        let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
        sqlx::migrate::Migrator::new(old.path())
            .await
            .unwrap()
            .run(&pool)
            .await
            .unwrap();
        for sql in [
            "INSERT INTO blobs VALUES ('c', 1, 1, 1), ('l', 1, 1, 1), ('m', 1, 1, 1),
             ('idx', 1, 1, 1), ('lonely', 1, 1, 1)",
            "INSERT INTO manifests VALUES ('m', 't', 1, 1), ('idx', 't', 1, 1)",
            "INSERT INTO manifest_refs VALUES ('m', 'c'), ('m', 'l'), ('idx', 'm'),
             ('idx', 'missing')",
            "INSERT INTO images VALUES ('group', 'physics', 'multi', '1', 'idx', 't', 1, 1, 1,
             NULL), ('user', 'alice', 'one', '1', 'm', 't', 1, 1, 1, NULL)",
        ] {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        pool.close().await;
    }
    let s = open(&dir).await;
    let everything = strings(&["c", "l", "m", "idx", "lonely", "missing"]);
    assert_eq!(
        s.linked_blobs(("group", "physics", "multi"), &everything)
            .await
            .unwrap(),
        set(&["c", "l", "m", "idx"])
    );
    assert_eq!(
        s.linked_blobs(("user", "alice", "one"), &everything)
            .await
            .unwrap(),
        set(&["c", "l", "m"])
    );
    assert!(s
        .linked_blobs(("user", "bob", "one"), &everything)
        .await
        .unwrap()
        .is_empty());
}

/// A database from before attempts carried what they hold (0017): live attempts get it from
/// their assignments, so the applier's fit check counts them after the upgrade; ended ones
/// hold nothing.
#[tokio::test]
async fn live_attempts_from_before_0017_hold_what_their_assignment_says() {
    let dir = Db::fresh().await;
    let s = open(&dir).await;
    s.register_node(
        &NodeRegistration {
            name: "n1".into(),
            pool: "default".into(),
            capacity: r#"{"cpus":4,"memory_bytes":1000,"devices":{"nvidia.com/gpu":2}}"#.into(),
            version: "0".into(),
            ..Default::default()
        },
        1,
    )
    .await
    .unwrap();
    let w = workflow("ada", "physics", 3);
    s.create_workflow(&w, 1).await.unwrap();
    let asg = |cpus: f64, exclusive: bool| {
        let mut devices = serde_json::json!({"nvidia.com/gpu": 1});
        if exclusive {
            devices["gantry.io/exclusive"] = 1.into();
        }
        serde_json::json!({"resources": {"cpus": cpus, "memory_bytes": 100, "devices": devices}})
            .to_string()
    };
    let (ended, live) = (Uuid::new_v4(), Uuid::new_v4());
    let at = |a: Uuid, t: usize, assignment: String| Change::CreateAttempt {
        attempt_id: a,
        task_id: w.tasks[t].id,
        workflow_id: w.id,
        node: "n1".into(),
        assignment,
        need: AttemptNeed::default(),
    };
    s.apply(&[at(ended, 0, asg(4.0, false))], 2).await.unwrap();
    let fin = AttemptEnd {
        attempt_id: ended,
        status: TaskStatus::Finished,
        cause: EndCause::Exit,
        exit_code: Some(0),
        reason: None,
        task: TaskNext::Final {
            status: TaskStatus::Finished,
            reason: None,
        },
    };
    assert_eq!(s.end_attempt(&fin, 3).await.unwrap(), EndOutcome::Ended);
    s.apply(&[at(live, 1, asg(2.0, true))], 4).await.unwrap();
    drop(s);
    // Back to the schema before 0017, rows kept.
    let path = dir.path();
    {
        let pool = sqlx::SqlitePool::connect_with(
            sqlx::sqlite::SqliteConnectOptions::new().filename(&path),
        )
        .await
        .unwrap();
        for sql in [
            "DELETE FROM _sqlx_migrations WHERE version = 17",
            "ALTER TABLE attempts DROP COLUMN millicpus",
            "ALTER TABLE attempts DROP COLUMN memory_bytes",
            "ALTER TABLE attempts DROP COLUMN devices",
            "ALTER TABLE attempts DROP COLUMN exclusive",
        ] {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        pool.close().await;
    }
    let s = open(&dir).await;
    let pool =
        sqlx::SqlitePool::connect_with(sqlx::sqlite::SqliteConnectOptions::new().filename(&path))
            .await
            .unwrap();
    let held = |a: Uuid| {
        let pool = pool.clone();
        async move {
            let r: (i64, i64, String, bool) = sqlx::query_as(
                "SELECT millicpus, memory_bytes, devices, exclusive FROM attempts WHERE id = ?",
            )
            .bind(a.to_string())
            .fetch_one(&pool)
            .await
            .unwrap();
            r
        }
    };
    assert_eq!(
        held(live).await,
        (2000, 100, r#"{"nvidia.com/gpu":1}"#.to_string(), true)
    );
    assert_eq!(held(ended).await, (0, 0, "{}".to_string(), false));
    // The upgraded live attempt is exclusive: nothing goes beside it.
    match s.apply(&[at(Uuid::new_v4(), 2, "{}".into())], 5).await {
        Err(StoreError::Refused(why)) => assert!(why.contains("exclusive"), "{why}"),
        other => panic!("want Refused, got {other:?}"),
    }
}
