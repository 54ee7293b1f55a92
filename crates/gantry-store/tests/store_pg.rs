//! The store on PostgreSQL, on the server `scripts/test-images.sh` starts: the
//! backend-neutral cases (`cases/store.rs`, which `store_sqlite.rs` runs on SQLite), and that
//! the two schemas say the same.

use std::collections::BTreeMap;
use std::sync::Arc;

use gantry_store::testkit::{test_env, ScratchDb};
use gantry_store::*;
use sqlx::Connection;

#[path = "cases/store.rs"]
mod cases;

/// A database of its own on the test server.
pub struct Db {
    db: ScratchDb,
}

impl Db {
    pub async fn fresh() -> Db {
        Db {
            db: ScratchDb::create(test_env("GANTRY_TEST_PG")).await,
        }
    }

    pub async fn open(&self) -> Arc<dyn Store> {
        Arc::new(PgStore::connect(self.db.url()).await.unwrap())
    }

    /// Runs `sql` beside the store, as an older version of it could have written rows.
    pub async fn exec(&self, sql: &str) {
        let mut c = sqlx::PgConnection::connect(self.db.url()).await.unwrap();
        sqlx::query(sql).execute(&mut c).await.unwrap();
        c.close().await.unwrap();
    }
}

/// A table as both backends can describe it: its columns (name: type class, NOT NULL, part of
/// the primary key), its indexes (name: unique, partial, columns), the columns of its UNIQUE
/// constraints.
#[derive(Debug, PartialEq, Default)]
struct Table {
    columns: BTreeMap<String, (&'static str, bool, bool)>,
    indexes: BTreeMap<String, (bool, bool, Vec<String>)>,
    unique: Vec<Vec<String>>,
}

/// SQLite's INTEGER is PostgreSQL's BIGINT, or BOOLEAN for a flag SQLite keeps as 0 or 1.
fn class(sql_type: &str) -> &'static str {
    match sql_type.to_ascii_lowercase().as_str() {
        "integer" | "bigint" | "boolean" => "integer",
        "text" => "text",
        other => panic!("a column of type {other}: say what it is in the other backend"),
    }
}

async fn sqlite_schema() -> BTreeMap<String, Table> {
    use sqlx::Row;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gantry.db");
    drop(SqliteStore::open(&path).await.unwrap());
    let pool =
        sqlx::SqlitePool::connect_with(sqlx::sqlite::SqliteConnectOptions::new().filename(&path))
            .await
            .unwrap();
    let mut out = BTreeMap::new();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table'
         AND name NOT LIKE 'sqlite_%' AND name != '_sqlx_migrations'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    for t in tables {
        let mut table = Table::default();
        for c in sqlx::query("SELECT name, type, \"notnull\", pk FROM pragma_table_info(?)")
            .bind(&t)
            .fetch_all(&pool)
            .await
            .unwrap()
        {
            let pk = c.get::<i64, _>("pk") > 0;
            // A primary key's columns are NOT NULL in PostgreSQL whatever they say.
            let not_null = c.get::<i64, _>("notnull") != 0 || pk;
            table
                .columns
                .insert(c.get("name"), (class(c.get("type")), not_null, pk));
        }
        for i in sqlx::query("SELECT name, \"unique\", origin, partial FROM pragma_index_list(?)")
            .bind(&t)
            .fetch_all(&pool)
            .await
            .unwrap()
        {
            let name: String = i.get("name");
            let cols: Vec<String> =
                sqlx::query_scalar("SELECT name FROM pragma_index_info(?) ORDER BY seqno")
                    .bind(&name)
                    .fetch_all(&pool)
                    .await
                    .unwrap();
            match i.get::<String, _>("origin").as_str() {
                "pk" => {}
                "u" => table.unique.push(cols),
                _ => {
                    let flags = (
                        i.get::<i64, _>("unique") != 0,
                        i.get::<i64, _>("partial") != 0,
                    );
                    table.indexes.insert(name, (flags.0, flags.1, cols));
                }
            }
        }
        table.unique.sort();
        out.insert(t, table);
    }
    out
}

async fn pg_schema(url: &str) -> BTreeMap<String, Table> {
    use sqlx::Row;
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    let mut out: BTreeMap<String, Table> = BTreeMap::new();
    for r in sqlx::query(
        "SELECT c.table_name::text AS t, c.column_name::text AS name, c.data_type::text AS type,
                c.is_nullable = 'NO' AS not_null,
                EXISTS (SELECT 1 FROM information_schema.table_constraints k
                        JOIN information_schema.key_column_usage u
                          ON u.constraint_name = k.constraint_name AND u.table_name = k.table_name
                        WHERE k.table_name = c.table_name AND k.constraint_type = 'PRIMARY KEY'
                          AND u.column_name = c.column_name) AS pk
         FROM information_schema.columns c
         WHERE c.table_schema = 'public' AND c.table_name != '_sqlx_migrations'",
    )
    .fetch_all(&mut c)
    .await
    .unwrap()
    {
        out.entry(r.get("t")).or_default().columns.insert(
            r.get("name"),
            (class(r.get("type")), r.get("not_null"), r.get("pk")),
        );
    }
    // An expression's place in an index is '' (attnum 0), as SQLite's index_info says it.
    for r in sqlx::query(
        "SELECT t.relname::text AS t, i.relname::text AS name, x.indisunique AS uniq,
                x.indisprimary AS pk, con.conname IS NOT NULL AS constraint,
                x.indpred IS NOT NULL AS partial,
                ARRAY(SELECT COALESCE(a.attname::text, '') FROM unnest(x.indkey) WITH ORDINALITY k(n, o)
                      LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.n AND k.n != 0
                      ORDER BY k.o) AS cols
         FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
         JOIN pg_class t ON t.oid = x.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace
         LEFT JOIN pg_constraint con ON con.conindid = x.indexrelid
         WHERE n.nspname = 'public' AND t.relname != '_sqlx_migrations'",
    )
    .fetch_all(&mut c)
    .await
    .unwrap()
    {
        let table = out.entry(r.get("t")).or_default();
        let cols: Vec<String> = r.get("cols");
        if r.get("pk") {
            continue;
        }
        // A UNIQUE in a table's definition is a constraint; a CREATE UNIQUE INDEX is an index
        // in both backends.
        if r.get("constraint") {
            table.unique.push(cols);
        } else {
            table
                .indexes
                .insert(r.get("name"), (r.get("uniq"), r.get("partial"), cols));
        }
    }
    for t in out.values_mut() {
        t.unique.sort();
    }
    out
}

/// `migrations/` and `migrations-pg/` make the same tables, columns, keys and indexes: a
/// schema change made to one backend only fails here.
#[tokio::test]
async fn both_backends_have_the_same_schema() {
    let db = ScratchDb::create(test_env("GANTRY_TEST_PG")).await;
    drop(PgStore::connect(db.url()).await.unwrap());
    let (lite, pg) = (sqlite_schema().await, pg_schema(db.url()).await);
    assert_eq!(
        lite.keys().collect::<Vec<_>>(),
        pg.keys().collect::<Vec<_>>(),
        "the same tables"
    );
    for (name, table) in &lite {
        assert_eq!(table, &pg[name], "table {name}: SQLite, then PostgreSQL");
    }
}

/// The counts the controller reads come from triggers, in both backends.
#[tokio::test]
async fn both_backends_count_tasks_with_the_same_triggers() {
    let db = ScratchDb::create(test_env("GANTRY_TEST_PG")).await;
    drop(PgStore::connect(db.url()).await.unwrap());
    let mut c = sqlx::PgConnection::connect(db.url()).await.unwrap();
    let mut pg: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT trigger_name::text FROM information_schema.triggers
         WHERE trigger_schema = 'public'",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    pg.sort();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gantry.db");
    drop(SqliteStore::open(&path).await.unwrap());
    let pool =
        sqlx::SqlitePool::connect_with(sqlx::sqlite::SqliteConnectOptions::new().filename(&path))
            .await
            .unwrap();
    let lite: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(lite, pg);
}

/// PostgreSQL's text holds no NUL character: free text that has one (an agent's error, an
/// alert's summary) is stored with U+FFFD in its place rather than failing the write.
#[tokio::test]
async fn free_text_with_a_nul_is_stored_with_a_replacement_character() {
    let db = Db::fresh().await;
    let s = db.open().await;
    s.record_event(
        &NewEvent {
            workflow_id: None,
            node: Some("n1".into()),
            task: None,
            kind: "test".into(),
            message: "before\0after".into(),
        },
        1,
    )
    .await
    .unwrap();
    let events = s
        .events(&EventQuery {
            node: Some("n1".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(events[0].message, "before\u{FFFD}after");
}

/// Two stores on one database, as two server processes would hold it: their writers queue on
/// the same lock, so concurrent registrations still get distinct sequence numbers, of two
/// plans placing the same task, one through each store, exactly one is applied, and plans
/// racing for the last core of a node do not overfill it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_on_one_database_keep_the_guards() {
    const NODES: usize = 16;
    const TASKS: usize = 12;
    let db = Db::fresh().await;
    let (a, b) = (db.open().await, db.open().await);
    let regs: Vec<_> = (0..NODES)
        .map(|i| {
            let s = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                s.register_node(
                    &NodeRegistration {
                        name: format!("n{i}"),
                        pool: "default".into(),
                        capacity: r#"{"cpus":64,"memory_bytes":1099511627776}"#.into(),
                        version: "0".into(),
                        ..Default::default()
                    },
                    1,
                )
                .await
                .unwrap()
                .seq
            })
        })
        .collect();
    let mut seqs = vec![];
    for r in regs {
        seqs.push(r.await.unwrap());
    }
    seqs.sort();
    assert_eq!(seqs, (1..=NODES as i64).collect::<Vec<_>>());

    let w = cases::workflow("ada", "physics", TASKS);
    a.create_workflow(&w, 1).await.unwrap();
    let races: Vec<_> = w
        .tasks
        .iter()
        .flat_map(|t| [(a.clone(), t.id), (b.clone(), t.id)])
        .map(|(s, task_id)| {
            let wf = w.id;
            tokio::spawn(async move {
                let plan = [Change::CreateAttempt {
                    attempt_id: uuid::Uuid::new_v4(),
                    task_id,
                    workflow_id: wf,
                    node: "n0".into(),
                    assignment: "{}".into(),
                    need: AttemptNeed::default(),
                }];
                s.apply(&plan, 2).await
            })
        })
        .collect();
    let mut applied = 0;
    for r in races {
        match r.await.unwrap() {
            Ok(()) => applied += 1,
            Err(StoreError::Refused(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(applied, TASKS, "each task placed once");
    let attempts = b.attempts(w.id).await.unwrap();
    assert_eq!(attempts.len(), TASKS);
    assert!(attempts.iter().all(|a| a.number == 1));

    // One core, and every task wants it: each plan alone fits, so only the lock keeps the
    // second from reading the node as empty.
    a.register_node(
        &NodeRegistration {
            name: "small".into(),
            pool: "default".into(),
            capacity: r#"{"cpus":1,"memory_bytes":1073741824}"#.into(),
            version: "0".into(),
            ..Default::default()
        },
        3,
    )
    .await
    .unwrap();
    let w = cases::workflow("ada", "physics", TASKS);
    a.create_workflow(&w, 3).await.unwrap();
    let races: Vec<_> = w
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let s = if i % 2 == 0 { a.clone() } else { b.clone() };
            let plan = [Change::CreateAttempt {
                attempt_id: uuid::Uuid::new_v4(),
                task_id: t.id,
                workflow_id: w.id,
                node: "small".into(),
                assignment: "{}".into(),
                need: AttemptNeed {
                    millicpus: 1000,
                    ..Default::default()
                },
            }];
            tokio::spawn(async move { s.apply(&plan, 4).await.is_ok() })
        })
        .collect();
    let mut applied = 0;
    for r in races {
        applied += usize::from(r.await.unwrap());
    }
    assert_eq!(applied, 1, "one core, one attempt");
    assert_eq!(a.node_usage(Some("small")).await.unwrap()[0].attempts, 1);
}

/// What one server announces reaches the other servers on the database (LISTEN/NOTIFY), and
/// several announcements unread make one.
#[tokio::test]
async fn a_change_announced_by_one_store_reaches_the_others() {
    let db = Db::fresh().await;
    let (a, b) = (db.open().await, db.open().await);
    let mut heard = b
        .announcements()
        .await
        .unwrap()
        .expect("PostgreSQL announces");
    a.announce_change().await.unwrap();
    assert_eq!(heard_within(&mut heard).await, Some(()));
    for _ in 0..5 {
        a.announce_change().await.unwrap();
    }
    assert_eq!(heard_within(&mut heard).await, Some(()));
    // Coalesced: at most one more, never a backlog of five; and the listener, which dropped
    // what found the channel full, still passes the next one on.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let _ = heard.try_recv();
    assert!(heard.try_recv().is_err(), "a backlog of announcements");
    a.announce_change().await.unwrap();
    assert_eq!(heard_within(&mut heard).await, Some(()));
}

async fn heard_within(rx: &mut tokio::sync::mpsc::Receiver<()>) -> Option<()> {
    tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
        .await
        .expect("announced within 10 s")
}
