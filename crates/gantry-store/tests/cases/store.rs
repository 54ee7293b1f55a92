//! The store against a real database, through the `Store` trait: each backend's test file
//! (`store_sqlite.rs`, `store_pg.rs`) includes these cases with its own `Db`, a fresh database
//! per test.

use std::sync::Arc;

use gantry_api::{EndCause, TaskStatus, WorkflowStatus};
use gantry_store::*;
use uuid::Uuid;

use crate::Db;

type S = Arc<dyn Store>;

async fn set_status(s: &S, id: Uuid, status: WorkflowStatus, now: Millis) {
    s.apply(
        &[Change::SetWorkflow {
            workflow_id: id,
            status,
            reason: None,
        }],
        now,
    )
    .await
    .unwrap();
}

/// The store on `db`, opened (again, when it was before) as a server opens it.
pub(crate) async fn open(db: &Db) -> S {
    db.open().await
}

pub(crate) fn workflow(owner: &str, group: &str, tasks: usize) -> NewWorkflow {
    NewWorkflow {
        id: Uuid::new_v4(),
        name: "wf".into(),
        owner: owner.into(),
        group: group.into(),
        spec: "version: v4".into(),
        plan: "{}".into(),
        tasks: (0..tasks)
            .map(|i| NewTask {
                id: Uuid::new_v4(),
                job: format!("job{i}"),
                index: None,
                ord: i as u32,
            })
            .collect(),
        volumes: vec![],
        takeovers: vec![],
        takeover_changes: vec![],
        unborn: vec![],
        ended: vec![],
    }
}

/// `n` members of a task array, then one plain task: a workflow's tasks in its order.
fn array_then(job: &str, n: u32, then: &str, then_ord: u32) -> Vec<NewTask> {
    (0..n)
        .map(|i| NewTask {
            id: Uuid::new_v4(),
            job: job.into(),
            index: Some(i),
            ord: 1,
        })
        .chain(std::iter::once(NewTask {
            id: Uuid::new_v4(),
            job: then.into(),
            index: None,
            ord: then_ord,
        }))
        .collect()
}

/// A store with one workflow of one task (returned with it) and nodes to place it on.
async fn one_task(dir: &Db) -> (S, NewWorkflow, Uuid) {
    let s = open(dir).await;
    let w = workflow("ada", "physics", 1);
    let task = w.tasks[0].id;
    s.create_workflow(&w, 1).await.unwrap();
    ready_nodes(&s).await;
    (s, w, task)
}

/// Places an attempt of the task on node n1.
fn place(workflow_id: Uuid, attempt_id: Uuid, task_id: Uuid) -> Change {
    Change::CreateAttempt {
        attempt_id,
        task_id,
        workflow_id,
        node: "n1".into(),
        assignment: "{}".into(),
        need: AttemptNeed::default(),
    }
}

/// Registers nodes n1 and n2, READY, for attempts to be placed on: the store refuses
/// placements on nodes it does not know.
async fn ready_nodes(s: &S) {
    for name in ["n1", "n2"] {
        s.register_node(
            &NodeRegistration {
                name: name.into(),
                pool: "default".into(),
                capacity: "{}".into(),
                version: "0".into(),
                ..Default::default()
            },
            0,
        )
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn users_and_tokens() {
    let dir = Db::fresh().await;
    let s = open(&dir).await;
    let u = User {
        id: Uuid::new_v4(),
        name: "ada".into(),
        group: "physics".into(),
        role: Role::User,
    };
    s.create_user(&u, "hash1", None, 0).await.unwrap();
    assert_eq!(s.user_by_token("hash1", 1).await.unwrap(), Some(u.clone()));
    assert_eq!(s.user_by_token("nope", 1).await.unwrap(), None);
    assert!(matches!(
        s.create_user(&u, "hash2", None, 0).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(s.count_users().await.unwrap(), 1);
}

fn person(name: &str, role: &str) -> User {
    User {
        id: Uuid::new_v4(),
        name: name.into(),
        group: "physics".into(),
        role: parse_role(role).unwrap(),
    }
}

#[tokio::test]
async fn tokens_expire_are_listed_revoked_and_rotated() {
    let dir = Db::fresh().await;
    let s = open(&dir).await;
    let ada = person("ada", "user");
    s.create_user(&ada, "h-login", Some(100), 0).await.unwrap();
    let second = s
        .add_token(ada.id, "h-second", "ci", None, 5)
        .await
        .unwrap();
    assert_eq!(
        s.user_by_token("h-login", 99).await.unwrap(),
        Some(ada.clone())
    );
    assert_eq!(s.user_by_token("h-login", 100).await.unwrap(), None);
    assert_eq!(
        s.token_refusal("h-login", 100).await.unwrap(),
        Some(TokenRefusal::Expired(100))
    );
    assert_eq!(s.token_refusal("unknown", 100).await.unwrap(), None);

    let list = s.tokens(Some("ada")).await.unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].purpose, "login");
    assert_eq!(list[0].expires_at, Some(100));
    assert_eq!(list[1].id, second);
    assert_ne!(list[0].id, list[1].id);
    assert!(list.iter().all(|t| t.user == "ada" && t.role == Role::User));
    assert!(s.tokens(Some("nobody")).await.unwrap().is_empty());

    // Rotating swaps the secret in place: same id, same user; the old hash stops.
    let r = s
        .rotate_token(&second, "h-third", Some(1000), "root", 10)
        .await
        .unwrap();
    assert_eq!((r.id.as_str(), r.user.as_str()), (second.as_str(), "ada"));
    assert_eq!(r.expires_at, Some(1000));
    assert_eq!(s.user_by_token("h-second", 11).await.unwrap(), None);
    assert_eq!(s.token_refusal("h-second", 11).await.unwrap(), None);
    assert_eq!(
        s.user_by_token("h-third", 11).await.unwrap(),
        Some(ada.clone())
    );

    s.revoke_token(&second, "root", 12).await.unwrap();
    assert_eq!(s.user_by_token("h-third", 13).await.unwrap(), None);
    assert!(matches!(
        s.revoke_token(&second, "root", 14).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        s.rotate_token("nope", "h", None, "root", 14).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(s.tokens(None).await.unwrap().len(), 1);
}

#[tokio::test]
async fn users_are_disabled_and_deleted_but_never_the_last_admin() {
    let dir = Db::fresh().await;
    let s = open(&dir).await;
    let root = person("root", "admin");
    let ada = person("ada", "user");
    s.create_user(&root, "h-root", None, 0).await.unwrap();
    s.create_user(&ada, "h-ada", None, 0).await.unwrap();

    s.set_user_disabled("ada", true, "root", 1).await.unwrap();
    assert_eq!(s.user_by_token("h-ada", 2).await.unwrap(), None);
    assert_eq!(
        s.token_refusal("h-ada", 2).await.unwrap(),
        Some(TokenRefusal::UserDisabled("ada".into()))
    );
    let users = s.users().await.unwrap();
    let row = users.iter().find(|u| u.user.name == "ada").unwrap();
    assert_eq!(
        (row.disabled_at, row.tokens, row.created_at),
        (Some(1), 1, 0)
    );
    s.set_user_disabled("ada", false, "root", 3).await.unwrap();
    assert_eq!(
        s.user_by_token("h-ada", 4).await.unwrap(),
        Some(ada.clone())
    );

    assert!(matches!(
        s.set_user_disabled("root", true, "root", 5).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        s.delete_user("root", true, "root", 5).await,
        Err(StoreError::Conflict(_))
    ));
    // A second administrator who is disabled does not count: deleting root would lock out.
    let ops = person("ops", "admin");
    s.create_user(&ops, "h-ops", None, 5).await.unwrap();
    s.set_user_disabled("ops", true, "root", 5).await.unwrap();
    assert!(matches!(
        s.delete_user("root", true, "root", 5).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        s.set_user_disabled("root", true, "root", 5).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        s.set_user_disabled("nobody", true, "root", 5).await,
        Err(StoreError::NotFound)
    ));

    // A workflow not yet ended keeps its owner unless forced; it is left alone either way.
    let wf = workflow("ada", "physics", 1);
    s.create_workflow(&wf, 6).await.unwrap();
    assert!(matches!(
        s.delete_user("ada", false, "root", 7).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(s.user_by_name("ada").await.unwrap().is_some());
    s.delete_user("ada", true, "root", 8).await.unwrap();
    assert!(s.user_by_name("ada").await.unwrap().is_none());
    assert_eq!(s.user_by_token("h-ada", 9).await.unwrap(), None);
    assert!(s.tokens(Some("ada")).await.unwrap().is_empty());
    assert_eq!(s.workflow(wf.id).await.unwrap().owner, "ada");
}

#[tokio::test]
async fn endpoint_tokens_are_listed_and_revoked_by_id() {
    let dir = Db::fresh().await;
    let s = open(&dir).await;
    s.add_endpoint_token("chat", "e1", "ada", None, 1)
        .await
        .unwrap();
    s.add_endpoint_token("chat", "e2", "ada", Some(50), 2)
        .await
        .unwrap();
    s.add_endpoint_token("search", "e3", "bob", None, 3)
        .await
        .unwrap();
    let chat = s.endpoint_tokens(Some("chat")).await.unwrap();
    assert_eq!(chat.len(), 2);
    assert_eq!(chat[1].expires_at, Some(50));
    assert_eq!(s.endpoint_tokens(None).await.unwrap().len(), 3);
    assert_eq!(
        s.token_refusal("e2", 50).await.unwrap(),
        Some(TokenRefusal::Expired(50))
    );
    let id = chat[0].id.clone();
    assert_eq!(s.endpoint_token_by_id(&id).await.unwrap(), chat[0]);
    s.revoke_endpoint_token(&id, "ada", 4).await.unwrap();
    assert_eq!(s.endpoint_token("e1", 5).await.unwrap(), None);
    assert!(matches!(
        s.revoke_endpoint_token(&id, "ada", 6).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        s.endpoint_token("e3", 5).await.unwrap().as_deref(),
        Some("search")
    );
}

#[tokio::test]
async fn workflow_visibility_and_prefix() {
    let dir = Db::fresh().await;
    let s = open(&dir).await;
    let a = workflow("ada", "physics", 1);
    let b = workflow("bob", "chem", 1);
    s.create_workflow(&a, 1).await.unwrap();
    s.create_workflow(&b, 2).await.unwrap();
    let mine = s
        .list_workflows(&Visibility::UserOrGroup {
            user: "carol".into(),
            group: "physics".into(),
        })
        .await
        .unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].id, a.id);
    assert_eq!(s.list_workflows(&Visibility::All).await.unwrap().len(), 2);
    let prefix = &a.id.to_string()[..8];
    assert_eq!(s.resolve_workflow(prefix).await.unwrap().id, a.id);
    assert!(matches!(
        s.resolve_workflow(&a.id.to_string()[..7]).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        s.resolve_workflow("zzzzzzzz").await,
        Err(StoreError::NotFound)
    ));
}

/// Two workflows whose ids share their first 8 characters are both found by that prefix (the
/// server lists them), and a node's events come paged, newest kept, with the workflow's name,
/// leaving out workflows the caller may not see.
#[tokio::test]
async fn shared_prefixes_and_a_node_s_named_events() {
    let dir = Db::fresh().await;
    let s = open(&dir).await;
    let mut a = workflow("ada", "physics", 1);
    let mut b = workflow("bob", "chem", 1);
    a.id = Uuid::parse_str("86ec1234-0000-4000-8000-000000000001").unwrap();
    b.id = Uuid::parse_str("86ec1234-0000-4000-8000-000000000002").unwrap();
    a.name = "ada-train".into();
    s.create_workflow(&a, 1).await.unwrap();
    s.create_workflow(&b, 2).await.unwrap();
    let both = s.workflows_by_prefix("86ec1234", 10).await.unwrap();
    assert_eq!(both.len(), 2);
    assert_eq!(
        s.workflows_by_prefix("86ec1234-0000-4000-8000-000000000002", 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(s
        .workflows_by_prefix("86ec1235", 10)
        .await
        .unwrap()
        .is_empty());

    let e = |wf: Option<Uuid>, task: Option<&str>, msg: &str| NewEvent {
        workflow_id: wf,
        node: Some("n1".into()),
        task: task.map(str::to_string),
        kind: "test".into(),
        message: msg.into(),
    };
    s.record_event(&e(None, None, "connected"), 10)
        .await
        .unwrap();
    s.record_event(&e(Some(a.id), Some("prep[3]"), "ada's"), 20)
        .await
        .unwrap();
    s.record_event(&e(Some(b.id), Some("x"), "bob's"), 30)
        .await
        .unwrap();
    s.record_event(&e(None, None, "last"), 40).await.unwrap();
    let (page, more) = s.node_events("n1", 0, 2, &Visibility::All).await.unwrap();
    assert!(more);
    let msgs: Vec<&str> = page.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(msgs, ["bob's", "last"], "the newest, oldest first");
    let (all, more) = s.node_events("n1", 0, 10, &Visibility::All).await.unwrap();
    assert!(!more);
    assert_eq!(all[1].workflow_name.as_deref(), Some("ada-train"));
    assert_eq!(all[1].task.as_deref(), Some("prep[3]"));
    let (recent, _) = s.node_events("n1", 30, 10, &Visibility::All).await.unwrap();
    assert_eq!(recent.len(), 2);
    let ada = Visibility::UserOrGroup {
        user: "ada".into(),
        group: "physics".into(),
    };
    let (hers, _) = s.node_events("n1", 0, 10, &ada).await.unwrap();
    let msgs: Vec<&str> = hers.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(msgs, ["connected", "ada's", "last"]);
}

/// `active()` lists the tasks in play and counts the ended ones, whichever way they ended
/// and back (a retry), and forgets a workflow once it ends.
#[tokio::test]
async fn active_lists_open_tasks_and_counts_ended_ones() {
    let dir = Db::fresh().await;
    let s = open(&dir).await;
    let mut w = workflow("ada", "physics", 0);
    w.tasks = array_then("member", 5, "prepare", 0);
    s.create_workflow(&w, 1).await.unwrap();
    ready_nodes(&s).await;
    let other = workflow("bob", "chem", 2);
    s.create_workflow(&other, 1).await.unwrap();
    let t: Vec<Uuid> = w.tasks.iter().map(|t| t.id).collect();
    let (a0, a1, a2) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let place = |a: Uuid, task: Uuid| place(w.id, a, task);
    s.apply(&[place(a0, t[0]), place(a1, t[1]), place(a2, t[2])], 2)
        .await
        .unwrap();
    let end = |a: Uuid, next: TaskNext| AttemptEnd {
        attempt_id: a,
        status: TaskStatus::Finished,
        cause: EndCause::Exit,
        exit_code: Some(0),
        reason: None,
        task: next,
    };
    let finished = TaskNext::Final {
        status: TaskStatus::Finished,
        reason: None,
    };
    assert_eq!(
        s.end_attempt(&end(a0, finished.clone()), 3).await.unwrap(),
        EndOutcome::Ended
    );
    assert_eq!(
        s.end_attempt(&end(a1, finished), 3).await.unwrap(),
        EndOutcome::Ended
    );
    // A retry takes a task back to PENDING: open again.
    let retry = TaskNext::Retry {
        reason: "again".into(),
        not_before: 1003,
    };
    assert_eq!(
        s.end_attempt(&end(a2, retry), 3).await.unwrap(),
        EndOutcome::Ended
    );
    s.apply(
        &[Change::EndTask {
            task_id: t[3],
            status: TaskStatus::Failed,
            reason: "dependency failed".into(),
        }],
        4,
    )
    .await
    .unwrap();

    let active = s.active().await.unwrap();
    assert_eq!(active.len(), 2);
    let aw = active.iter().find(|a| a.workflow.id == w.id).unwrap();
    let open: Vec<(Uuid, TaskStatus)> = aw.tasks.iter().map(|t| (t.id, t.status)).collect();
    assert_eq!(
        open,
        [
            (t[5], TaskStatus::Pending),
            (t[2], TaskStatus::Pending),
            (t[4], TaskStatus::Pending)
        ],
        "the open tasks, in order"
    );
    let count = |status, count| TaskCount {
        job: "member".into(),
        status,
        count,
    };
    assert_eq!(
        aw.ended,
        [count(TaskStatus::Failed, 1), count(TaskStatus::Finished, 2)]
    );
    assert!(aw.live.is_empty());
    let ow = active.iter().find(|a| a.workflow.id == other.id).unwrap();
    assert_eq!((ow.tasks.len(), ow.ended.len()), (2, 0));

    s.apply(
        &[Change::SetWorkflow {
            workflow_id: w.id,
            status: WorkflowStatus::Failed,
            reason: None,
        }],
        5,
    )
    .await
    .unwrap();
    let active = s.active().await.unwrap();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].workflow.id, other.id);
}

#[tokio::test]
async fn active_lists_a_window_of_waiting_tasks_and_ends_the_rest_by_job() {
    let dir = Db::fresh().await;
    let s = open(&dir).await;
    let n = PENDING_WINDOW as u32 * 2 + 10;
    let mut w = workflow("ada", "physics", 0);
    w.tasks = array_then("member", n, "after", 2);
    s.create_workflow(&w, 1).await.unwrap();
    ready_nodes(&s).await;
    let t: Vec<Uuid> = w.tasks.iter().map(|t| t.id).collect();
    // Members 0 and 5 start; member 1 ends.
    let place = |task: Uuid| place(w.id, Uuid::new_v4(), task);
    s.apply(
        &[
            place(t[0]),
            place(t[5]),
            Change::EndTask {
                task_id: t[1],
                status: TaskStatus::Failed,
                reason: "no".into(),
            },
        ],
        2,
    )
    .await
    .unwrap();

    let active = s.active().await.unwrap();
    let aw = &active[0];
    let listed: Vec<(Option<u32>, TaskStatus)> =
        aw.tasks.iter().map(|t| (t.index, t.status)).collect();
    // The two started, the first PENDING_WINDOW waiting members by index, and `after`.
    let mut want = vec![(Some(0), TaskStatus::Started)];
    want.extend(
        (2..n)
            .filter(|&i| i != 5)
            .take(PENDING_WINDOW)
            .map(|i| (Some(i), TaskStatus::Pending)),
    );
    want.insert(4, (Some(5), TaskStatus::Started));
    want.push((None, TaskStatus::Pending));
    assert_eq!(listed, want);
    let pending = |job: &str, count| TaskCount {
        job: job.into(),
        status: TaskStatus::Pending,
        count,
    };
    assert_eq!(aw.pending, [pending("after", 1), pending("member", n - 3)]);

    // Ending what waits ends every waiting member, listed or not, each with its event.
    s.apply(
        &[Change::EndPending {
            workflow_id: w.id,
            job: "member".into(),
            status: TaskStatus::Stopped,
            reason: "workflow stopped before it ran".into(),
        }],
        3,
    )
    .await
    .unwrap();
    let tasks = s.tasks(w.id).await.unwrap();
    let stopped = tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Stopped)
        .count();
    assert_eq!(stopped as u32, n - 3);
    assert!(tasks.iter().any(|t| t.status == TaskStatus::Started));
    let aw = s.active().await.unwrap().remove(0);
    assert_eq!(aw.pending, [pending("after", 1)]);
    let events = s
        .events(&EventQuery {
            workflow_id: Some(w.id),
            node: None,
            after: 0,
            limit: 10_000,
        })
        .await
        .unwrap();
    let ended: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == "task.ended" && e.message.starts_with("STOPPED"))
        .filter_map(|e| e.task.as_deref())
        .collect();
    assert_eq!(ended.len() as u32, n - 3);
    assert!(ended.contains(&"member[2]") && ended.contains(&format!("member[{}]", n - 1).as_str()));
}

#[tokio::test]
async fn attempt_lifecycle_is_idempotent_and_ignores_stale_attempts() {
    let dir = Db::fresh().await;
    let (s, w, task) = one_task(&dir).await;
    let a1 = Uuid::new_v4();
    s.apply(&[place(w.id, a1, task)], 2).await.unwrap();
    assert_eq!(s.task(task).await.unwrap().status, TaskStatus::Started);
    assert!(s.attempt_running(a1, 3).await.unwrap());
    assert!(
        !s.attempt_running(a1, 3).await.unwrap(),
        "a repeated report changes nothing"
    );
    assert_eq!(s.task(task).await.unwrap().status, TaskStatus::Running);

    let end = AttemptEnd {
        attempt_id: a1,
        status: TaskStatus::Failed,
        cause: EndCause::Exit,
        exit_code: Some(1),
        reason: None,
        task: TaskNext::Retry {
            reason: "exited with code 1; retrying".into(),
            not_before: 1004,
        },
    };
    assert!(s.end_attempt(&end, 4).await.unwrap().is_ended());
    assert!(
        !s.end_attempt(&end, 5).await.unwrap().is_ended(),
        "a duplicate end changes nothing"
    );
    let t = s.task(task).await.unwrap();
    assert_eq!(t.status, TaskStatus::Pending);
    assert_eq!(t.attempts, 1);
    assert_eq!(
        t.not_before,
        Some(1004),
        "the retry's backoff is kept with the task"
    );

    // Second attempt, then a stale report from the first must not move the task.
    let a2 = Uuid::new_v4();
    s.apply(
        &[Change::CreateAttempt {
            attempt_id: a2,
            task_id: task,
            workflow_id: w.id,
            node: "n2".into(),
            assignment: "{}".into(),
            need: AttemptNeed::default(),
        }],
        6,
    )
    .await
    .unwrap();
    assert_eq!(s.attempt(a2).await.unwrap().number, 2);
    assert!(!s.attempt_running(a1, 7).await.unwrap());
    assert_eq!(s.task(task).await.unwrap().status, TaskStatus::Started);
    assert_eq!(
        s.end_attempt(
            &AttemptEnd {
                attempt_id: a2,
                status: TaskStatus::Finished,
                cause: EndCause::Exit,
                exit_code: Some(0),
                reason: None,
                task: TaskNext::Final {
                    status: TaskStatus::Finished,
                    reason: None,
                },
            },
            8,
        )
        .await
        .unwrap(),
        EndOutcome::Ended
    );
    set_status(&s, w.id, WorkflowStatus::Finished, 9).await;
    assert_eq!(
        s.workflow(w.id).await.unwrap().status,
        WorkflowStatus::Finished
    );
    assert!(s.active().await.unwrap().is_empty());

    let evs = s
        .events(&EventQuery {
            workflow_id: Some(w.id),
            node: None,
            after: 0,
            limit: 10_000,
        })
        .await
        .unwrap();
    let kinds: Vec<&str> = evs.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "workflow.submitted",
            "task.placed",
            "task.running",
            "attempt.ended",
            "task.status",
            "task.placed",
            "attempt.ended",
            "task.status",
            "workflow.status"
        ]
    );
}

#[tokio::test]
async fn everything_survives_reopening() {
    let dir = Db::fresh().await;
    let w = workflow("ada", "physics", 2);
    {
        let s = open(&dir).await;
        s.create_workflow(&w, 1).await.unwrap();
        s.request_stop(w.id, "ada", 2).await.unwrap();
        s.register_node(
            &NodeRegistration {
                name: "n1".into(),
                pool: "default".into(),
                capacity: "{}".into(),
                version: "0".into(),
                metrics_addr: None,
                node_exporter: None,
                ..Default::default()
            },
            3,
        )
        .await
        .unwrap();
    }
    let s = open(&dir).await;
    let got = s.workflow(w.id).await.unwrap();
    assert!(got.stop_requested);
    assert_eq!(s.tasks(w.id).await.unwrap().len(), 2);
    assert_eq!(s.node("n1").await.unwrap().state, NodeState::Ready);
    assert!(
        !s.request_stop(w.id, "ada", 4).await.unwrap(),
        "stop twice is one stop"
    );
}

#[tokio::test]
async fn an_unknown_node_alert_is_recorded_once_per_episode_and_status() {
    let dir = Db::fresh().await;
    let s = open(&dir).await;
    let alert = |fp: &str, starts: &str, status: &str| UnknownNodeAlert {
        fingerprint: fp.into(),
        episode: starts.into(),
        status: status.into(),
        event: NewEvent {
            workflow_id: None,
            node: Some("ghost".into()),
            task: None,
            kind: "alert.unknown_node".into(),
            message: format!("{fp} {starts} {status}"),
        },
    };
    let firing = alert("a1", "2026-11-30T10:00:00Z", "firing");
    // A post repeating one alert, then the same post again (an HA peer, a re-send).
    let post = vec![firing.clone(); 1001];
    assert_eq!(s.record_unknown_node_alerts(&post, 1).await.unwrap(), 1);
    assert_eq!(s.record_unknown_node_alerts(&post, 2).await.unwrap(), 0);
    // Its resolve, a next episode and another alert are each new.
    let more = vec![
        alert("a1", "2026-11-30T10:00:00Z", "resolved"),
        alert("a1", "2026-11-30T11:00:00Z", "firing"),
        alert("b2", "2026-11-30T10:00:00Z", "firing"),
        firing,
    ];
    assert_eq!(s.record_unknown_node_alerts(&more, 3).await.unwrap(), 3);
    let events = s
        .events(&EventQuery {
            node: Some("ghost".into()),
            limit: 10_000,
            ..Default::default()
        })
        .await
        .unwrap();
    let messages: Vec<&str> = events.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(
        messages,
        [
            "a1 2026-11-30T10:00:00Z firing",
            "a1 2026-11-30T10:00:00Z resolved",
            "a1 2026-11-30T11:00:00Z firing",
            "b2 2026-11-30T10:00:00Z firing",
        ]
    );
}

#[tokio::test]
async fn free_text_is_stored_capped_with_a_marker() {
    let dir = Db::fresh().await;
    let s = open(&dir).await;
    let summary = "ü".repeat(750_000); // a 1.5 MB alert summary
    let hold = HoldRow {
        id: Uuid::new_v4(),
        node: "n1".into(),
        pool: "default".into(),
        kind: HoldKind::Cordon,
        source: HoldSource::Monitoring,
        state: HoldStatus::Active,
        alertname: Some("A".repeat(100_000)),
        fingerprint: Some("f".into()),
        episode: Some("2026-11-30T10:00:00Z".into()),
        release_rule: ReleaseRule::Auto,
        reason: summary.clone(),
        created_by: "monitoring".into(),
        created_at: 1,
        activated_at: None,
        alert_resolved_at: None,
        released_by: None,
        released_at: None,
        release_reason: None,
    };
    s.apply_holds(&[HoldChange::Place(Box::new(hold.clone()))], 1)
        .await
        .unwrap();
    s.apply_holds(
        &[HoldChange::Release {
            id: hold.id,
            by: "root".into(),
            reason: "x".repeat(10_000),
        }],
        2,
    )
    .await
    .unwrap();
    s.record_event(
        &NewEvent {
            workflow_id: None,
            node: Some("n1".into()),
            task: None,
            kind: "test".into(),
            message: summary.clone(),
        },
        3,
    )
    .await
    .unwrap();
    let h = s.hold(hold.id).await.unwrap();
    let checks = [
        (h.reason.clone(), 1_500_000),
        (h.alertname.clone().unwrap(), 100_000),
        (h.release_reason.clone().unwrap(), 10_000),
    ];
    for (text, was) in checks {
        assert!(text.len() <= MAX_TEXT_BYTES, "{}", text.len());
        assert!(
            text.ends_with(&format!("… (truncated, {was} bytes)")),
            "{}",
            &text[text.len() - 60..]
        );
    }
    assert!(h.reason.starts_with("üü"));
    let events = s
        .events(&EventQuery {
            node: Some("n1".into()),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!events.is_empty());
    for e in &events {
        assert!(
            e.message.len() <= MAX_TEXT_BYTES,
            "{}: {}",
            e.kind,
            e.message.len()
        );
    }
    assert!(events
        .iter()
        .any(|e| e.message.ends_with("… (truncated, 1500000 bytes)")));
}

fn manifest(digest: &str, refs: &[&str]) -> NewManifest {
    NewManifest {
        digest: digest.into(),
        media_type: "application/vnd.oci.image.manifest.v1+json".into(),
        size: 10,
        refs: refs.iter().map(|r| r.to_string()).collect(),
    }
}

fn tag(repo: Repository<'_>, tag: &str, digest: &str) -> ImageRow {
    ImageRow {
        key: ImageKey {
            scope: repo.0.into(),
            owner: repo.1.into(),
            name: repo.2.into(),
            tag: tag.into(),
        },
        digest: digest.into(),
        media_type: "application/vnd.oci.image.manifest.v1+json".into(),
        size: 30,
        created_at: 1,
        last_used_at: 1,
        build_key: None,
    }
}

pub(crate) fn set(digests: &[&str]) -> std::collections::HashSet<String> {
    digests.iter().map(|d| d.to_string()).collect()
}

pub(crate) fn strings(digests: &[&str]) -> Vec<String> {
    digests.iter().map(|d| d.to_string()).collect()
}

#[tokio::test]
async fn blobs_belong_to_the_repositories_that_link_them() {
    let dir = Db::fresh().await;
    let s = open(&dir).await;
    let alice: Repository = ("user", "alice", "tool");
    let bob: Repository = ("user", "bob", "tool");
    let physics: Repository = ("group", "physics", "tool");
    let all = strings(&["config", "layer", "m"]);

    // An upload links the blob in its repository only.
    s.put_blob("config", 5, Some(alice), 1).await.unwrap();
    s.put_blob("layer", 7, Some(alice), 1).await.unwrap();
    assert_eq!(
        s.linked_blobs(alice, &all).await.unwrap(),
        set(&["config", "layer"])
    );
    assert!(s.linked_blobs(bob, &all).await.unwrap().is_empty());
    // A blob recorded without a link (a file whose row was lost) belongs to no one.
    s.put_blob("stray", 3, None, 1).await.unwrap();
    assert!(s
        .linked_blobs(alice, &strings(&["stray"]))
        .await
        .unwrap()
        .is_empty());

    // The same content uploaded again by another user: one blob row, a second link.
    s.put_blob("layer", 7, Some(bob), 2).await.unwrap();
    assert_eq!(s.blobs().await.unwrap().len(), 3);
    assert_eq!(s.linked_blobs(bob, &all).await.unwrap(), set(&["layer"]));

    // A manifest referencing what its repository does not link changes nothing.
    let m = manifest("m", &["config", "layer"]);
    let err = s
        .put_image(bob, &m, Some(&tag(bob, "1", "m")), "bob", 3)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Conflict(why) if why.contains("config") && !why.contains("layer")),
        "{err}"
    );
    assert!(s.manifest("m").await.unwrap().is_none());
    assert!(s.images(Some(bob)).await.unwrap().is_empty());
    assert!(s.blob("m").await.unwrap().is_none());

    // Where everything is linked it is pushed, and the manifest is linked there too.
    s.put_image(alice, &m, Some(&tag(alice, "1", "m")), "alice", 3)
        .await
        .unwrap();
    assert_eq!(
        s.linked_blobs(alice, &all).await.unwrap(),
        set(&["config", "layer", "m"])
    );
    assert_eq!(s.linked_blobs(bob, &all).await.unwrap(), set(&["layer"]));

    // A mount links only blobs that exist, once.
    assert_eq!(
        s.link_blobs(physics, &strings(&["config", "layer", "m", "nowhere"]), 4)
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        s.link_blobs(physics, &strings(&["layer"]), 5)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        s.linked_blobs(physics, &all).await.unwrap(),
        set(&["config", "layer", "m"])
    );
    // An index of a linked manifest, pushed by digest.
    s.put_blob("other", 1, Some(physics), 5).await.unwrap();
    s.put_image(physics, &manifest("idx", &["m", "other"]), None, "carol", 6)
        .await
        .unwrap();
    assert!(s
        .linked_blobs(physics, &strings(&["idx"]))
        .await
        .unwrap()
        .contains("idx"));

    // Removing an image keeps its blobs' links until the blobs are collected; collecting a
    // blob drops every repository's link to it.
    s.delete_images(&[tag(alice, "1", "m").key], "alice", "test", 7)
        .await
        .unwrap();
    assert_eq!(
        s.linked_blobs(alice, &all).await.unwrap(),
        set(&["config", "layer", "m"])
    );
    s.delete_blobs(&strings(&["layer"]), 8).await.unwrap();
    for repo in [alice, bob, physics] {
        assert!(!s.linked_blobs(repo, &all).await.unwrap().contains("layer"));
    }
    // Re-uploading it links it again.
    s.put_blob("layer", 7, Some(bob), 9).await.unwrap();
    assert_eq!(s.linked_blobs(bob, &all).await.unwrap(), set(&["layer"]));

    // Links survive reopening; a lookup of many digests is answered in pieces.
    drop(s);
    let s = open(&dir).await;
    assert_eq!(
        s.linked_blobs(physics, &all).await.unwrap(),
        set(&["config", "m"])
    );
    let many: Vec<String> = (0..1200).map(|i| format!("d{i}")).collect();
    for d in &many {
        s.put_blob(d, 1, None, 10).await.unwrap();
    }
    assert_eq!(s.link_blobs(bob, &many, 11).await.unwrap(), 1200);
    assert_eq!(s.linked_blobs(bob, &many).await.unwrap().len(), 1200);
}

#[tokio::test]
async fn a_volume_is_not_removed_while_a_live_workflow_mounts_it() {
    let dir = Db::fresh().await;
    let s = open(&dir).await;
    let vol = |name: &str| VolumeRow {
        id: Uuid::new_v4(),
        scope: VolumeScope::User,
        owner: "ada".into(),
        name: name.into(),
        storage: "default".into(),
        created_by: "ada".into(),
        created_at: 1,
    };
    let v = vol("results");
    s.create_volume(&v, 1).await.unwrap();
    assert!(matches!(
        s.create_volume(&vol("results"), 2).await,
        Err(StoreError::Conflict(_))
    ));
    // First use of an existing name returns the volume there is.
    assert_eq!(s.ensure_volume(&vol("results"), 2).await.unwrap().id, v.id);

    let mut w = workflow("ada", "lab", 1);
    w.volumes = vec![v.id];
    s.create_workflow(&w, 3).await.unwrap();
    assert_eq!(s.volume_users(v.id).await.unwrap(), [w.id]);
    let err = s.delete_volume(v.id, "ada", 4).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Conflict(m) if m.contains(&w.id.to_string())),
        "{err}"
    );
    set_status(&s, w.id, WorkflowStatus::Finished, 5).await;
    assert!(s.volume_users(v.id).await.unwrap().is_empty());
    s.delete_volume(v.id, "ada", 6).await.unwrap();
    assert!(s
        .volume(VolumeScope::User, "ada", "results")
        .await
        .unwrap()
        .is_none());

    // A workflow resolved against a volume removed meanwhile is not stored at all.
    let mut late = workflow("ada", "lab", 1);
    late.volumes = vec![v.id];
    assert!(matches!(
        s.create_workflow(&late, 7).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        s.workflow(late.id).await,
        Err(StoreError::NotFound)
    ));
}

#[tokio::test]
async fn a_node_keeps_the_address_exec_service_and_labels_of_its_last_hello() {
    let dir = Db::fresh().await;
    let s = open(&dir).await;
    let hello = |address: &str, labels: &[(&str, &str)]| NodeRegistration {
        name: "gpu1".into(),
        pool: "default".into(),
        capacity: "{}".into(),
        version: "0".into(),
        address: Some(address.into()),
        exec_addr: Some(format!("{address}:7070")),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let first = s
        .register_node(
            &hello("10.0.0.5", &[("nvidia.com/gpu.model", "NVIDIA L4")]),
            1,
        )
        .await
        .unwrap();
    assert_eq!(first.address.as_deref(), Some("10.0.0.5"));
    assert_eq!(first.exec_addr.as_deref(), Some("10.0.0.5:7070"));
    assert_eq!(first.labels["nvidia.com/gpu.model"], "NVIDIA L4");
    // The next hello says what the node is now: a label it no longer reports is gone.
    s.register_node(&hello("10.0.0.6", &[("rack", "b")]), 2)
        .await
        .unwrap();
    drop(s);
    let s = open(&dir).await;
    let n = s.node("gpu1").await.unwrap();
    assert_eq!(n.address.as_deref(), Some("10.0.0.6"));
    assert_eq!(n.exec_addr.as_deref(), Some("10.0.0.6:7070"));
    assert_eq!(
        n.labels.into_iter().collect::<Vec<_>>(),
        [("rack".to_string(), "b".to_string())]
    );
    let listed = s.nodes().await.unwrap();
    assert_eq!(listed[0].labels.len(), 1);
}

#[tokio::test]
async fn a_chore_keeps_its_kind_until_done() {
    let dir = Db::fresh().await;
    let s = open(&dir).await;
    let kind = gantry_api::agent::ChoreKind::RemoveVolume {
        path: "default/ephemeral/x".into(),
        root: None,
    };
    let id = Uuid::new_v4();
    s.add_chore(&ChoreRow {
        id,
        pool: "default".into(),
        kind: kind.clone(),
        created_at: 1,
        sent_to: None,
    })
    .await
    .unwrap();
    let pending = s.pending_chores().await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!((pending[0].id, &pending[0].kind), (id, &kind));
    s.chore_done(id, None, 2).await.unwrap();
    assert!(s.pending_chores().await.unwrap().is_empty());
}

/// The store's guards keep one live attempt per task, so an attempt that is live but not its
/// task's current one cannot be made through the `Store` trait (the testkit reaches only
/// `AlreadyEnded`). A database written before the placement guard can hold one, so this plants
/// it beside the store, as such a database would have it, and ends it: it ends (else it would
/// count on its node for ever) and says `NotCurrent`, and its task is left to the current one.
#[tokio::test]
async fn a_live_attempt_that_is_not_current_ends_without_moving_its_task() {
    let dir = Db::fresh().await;
    let (s, w, task) = one_task(&dir).await;
    let current = Uuid::new_v4();
    s.apply(&[place(w.id, current, task)], 2).await.unwrap();
    let orphan = Uuid::new_v4();
    dir.exec(&format!(
        "INSERT INTO attempts (id, task_id, workflow_id, number, node, status, assignment, created_at)
         VALUES ('{orphan}', '{task}', '{}', 0, 'n2', 'STARTED', '{{}}', 1)",
        w.id
    ))
    .await;
    let before = s.task(task).await.unwrap();
    let end = AttemptEnd {
        attempt_id: orphan,
        status: TaskStatus::Failed,
        cause: EndCause::Exit,
        exit_code: Some(3),
        reason: None,
        task: TaskNext::Final {
            status: TaskStatus::Failed,
            reason: None,
        },
    };
    assert_eq!(
        s.end_attempt(&end, 3).await.unwrap(),
        EndOutcome::NotCurrent
    );
    assert!(
        s.attempt(orphan).await.unwrap().ended_at.is_some(),
        "the orphan ended"
    );
    let after = s.task(task).await.unwrap();
    assert_eq!(after.status, before.status, "its task is left alone");
    assert_eq!(after.live_attempt, Some(current));
    assert_eq!(s.attempt(current).await.unwrap().ended_at, None);
    assert_eq!(
        s.end_attempt(&end, 4).await.unwrap(),
        EndOutcome::AlreadyEnded,
        "and only once"
    );
}
