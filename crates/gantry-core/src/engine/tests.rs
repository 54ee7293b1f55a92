use super::*;

fn id(n: u128) -> TaskId {
    Uuid::from_u128(n)
}

fn task(n: u128, status: TaskStatus) -> TaskView {
    TaskView {
        id: id(n),
        status,
        attempts_made: 0,
        live: None,
        not_before: None,
        index: None,
        reason: None,
    }
}

fn live(n: u128, a: u128, status: TaskStatus, since: Option<Millis>) -> TaskView {
    TaskView {
        id: id(n),
        status,
        attempts_made: 1,
        live: Some(LiveAttempt {
            id: id(a),
            status,
            running_since: since,
            stop_sent: None,
        }),
        not_before: None,
        index: None,
        reason: None,
    }
}

fn job(name: &str, deps: &[&str], tasks: Vec<TaskView>) -> JobView {
    JobView {
        name: name.into(),
        depends_on: deps.iter().map(|s| Dependency::finished(s)).collect(),
        service: None,
        concurrency: None,
        attempts: 1,
        retry_on: RetryOn {
            failure: true,
            node: false,
        },
        timeout_ms: None,
        tasks,
        ended: Ended::default(),
        gang: None,
        pending_unlisted: 0,
    }
}

fn wf(status: WorkflowStatus, jobs: Vec<JobView>) -> WorkflowView {
    WorkflowView {
        status,
        stop_requested: false,
        jobs,
    }
}

#[test]
fn roots_are_placed_and_dependants_wait() {
    let w = wf(
        WorkflowStatus::Pending,
        vec![
            job("a", &[], vec![task(1, TaskStatus::Pending)]),
            job("b", &["a"], vec![task(2, TaskStatus::Pending)]),
        ],
    );
    assert_eq!(reconcile(&w, 0), vec![Action::Place { task: id(1) }]);
}

#[test]
fn dependant_is_placed_once_dependency_finished() {
    let w = wf(
        WorkflowStatus::Running,
        vec![
            job("a", &[], vec![task(1, TaskStatus::Finished)]),
            job("b", &["a"], vec![task(2, TaskStatus::Pending)]),
        ],
    );
    assert_eq!(reconcile(&w, 0), vec![Action::Place { task: id(2) }]);
}

#[test]
fn failed_dependency_fails_dependants_and_the_workflow() {
    let w = wf(
        WorkflowStatus::Running,
        vec![
            job("a", &[], vec![task(1, TaskStatus::Failed)]),
            job("b", &["a"], vec![task(2, TaskStatus::Pending)]),
        ],
    );
    let acts = reconcile(&w, 0);
    assert_eq!(
        acts[0],
        Action::EndTask {
            task: id(2),
            status: TaskStatus::Failed,
            reason: "dependency a ended FAILED".into()
        }
    );
    assert_eq!(
        acts[1],
        Action::SetWorkflow {
            status: WorkflowStatus::Failed,
            reason: Some("failed: a, b".into())
        }
    );
}

#[test]
fn all_finished_finishes_the_workflow() {
    let w = wf(
        WorkflowStatus::Running,
        vec![job("a", &[], vec![task(1, TaskStatus::Finished)])],
    );
    assert_eq!(
        reconcile(&w, 0),
        vec![Action::SetWorkflow {
            status: WorkflowStatus::Finished,
            reason: None
        }]
    );
}

#[test]
fn terminal_workflow_does_nothing() {
    let w = wf(
        WorkflowStatus::Finished,
        vec![job("a", &[], vec![task(1, TaskStatus::Pending)])],
    );
    assert!(reconcile(&w, 0).is_empty());
}

#[test]
fn concurrency_limits_task_array_members() {
    let mut j = job(
        "arr",
        &[],
        vec![
            live(1, 11, TaskStatus::Running, Some(0)),
            task(2, TaskStatus::Pending),
            task(3, TaskStatus::Pending),
            task(4, TaskStatus::Pending),
        ],
    );
    j.concurrency = Some(2);
    let w = wf(WorkflowStatus::Running, vec![j]);
    assert_eq!(reconcile(&w, 0), vec![Action::Place { task: id(2) }]);
}

#[test]
fn timeout_stops_the_attempt_once() {
    let mut j = job(
        "a",
        &[],
        vec![live(1, 11, TaskStatus::Running, Some(1_000))],
    );
    j.timeout_ms = Some(5_000);
    let w = wf(WorkflowStatus::Running, vec![j.clone()]);
    assert!(reconcile(&w, 5_999).is_empty());
    assert_eq!(
        reconcile(&w, 6_000),
        vec![Action::StopAttempt {
            attempt: id(11),
            cause: EndCause::Timeout
        }]
    );
    j.tasks[0].live.as_mut().unwrap().stop_sent = Some(EndCause::Timeout);
    let w = wf(WorkflowStatus::Running, vec![j]);
    assert!(reconcile(&w, 60_000).is_empty());
}

#[test]
fn timeout_counts_from_running_not_from_placement() {
    let mut j = job("a", &[], vec![live(1, 11, TaskStatus::Started, None)]);
    j.timeout_ms = Some(1);
    let w = wf(WorkflowStatus::Running, vec![j]);
    assert!(reconcile(&w, 1_000_000).is_empty());
}

#[test]
fn stop_stops_live_attempts_then_ends_stopped() {
    let mut w = wf(
        WorkflowStatus::Running,
        vec![
            job("a", &[], vec![live(1, 11, TaskStatus::Running, Some(0))]),
            job("b", &["a"], vec![task(2, TaskStatus::Pending)]),
        ],
    );
    w.stop_requested = true;
    let acts = reconcile(&w, 0);
    assert!(acts.contains(&Action::StopAttempt {
        attempt: id(11),
        cause: EndCause::Stopped
    }));
    assert!(acts.iter().any(
        |a| matches!(a, Action::EndTask { task, status: TaskStatus::Stopped, .. } if *task == id(2))
    ));
    assert!(!acts.iter().any(|a| matches!(a, Action::SetWorkflow { .. })));

    w.jobs[0].tasks[0] = task(1, TaskStatus::Stopped);
    w.jobs[1].tasks[0] = task(2, TaskStatus::Stopped);
    assert_eq!(
        reconcile(&w, 0),
        vec![Action::SetWorkflow {
            status: WorkflowStatus::Stopped,
            reason: Some("stopped by request".into())
        }]
    );
}

#[test]
fn placed_task_moves_workflow_to_running() {
    let w = wf(
        WorkflowStatus::Pending,
        vec![job("a", &[], vec![live(1, 11, TaskStatus::Started, None)])],
    );
    assert_eq!(
        reconcile(&w, 0),
        vec![Action::SetWorkflow {
            status: WorkflowStatus::Running,
            reason: None
        }]
    );
}

#[test]
fn job_status_summarises_tasks() {
    let j = |ts: Vec<TaskStatus>| {
        job(
            "x",
            &[],
            ts.into_iter()
                .enumerate()
                .map(|(i, s)| task(i as u128, s))
                .collect(),
        )
    };
    use TaskStatus::*;
    assert_eq!(job_status(&j(vec![Finished, Finished])), Finished);
    assert_eq!(job_status(&j(vec![Finished, Failed])), Failed);
    assert_eq!(job_status(&j(vec![Finished, Pending])), Started);
    assert_eq!(job_status(&j(vec![Running, Pending])), Running);
    assert_eq!(job_status(&j(vec![Pending, Pending])), Pending);
    assert_eq!(job_status(&j(vec![Failed, Running])), Running);
}

fn retry_job(attempts: u32, failure: bool, node: bool) -> JobView {
    let mut j = job("a", &[], vec![]);
    j.attempts = attempts;
    j.retry_on = RetryOn { failure, node };
    j
}

#[test]
fn outcome_success_is_finished() {
    assert_eq!(
        attempt_outcome(
            &retry_job(3, true, true),
            1,
            Some(0),
            EndCause::Exit,
            "n1",
            0
        ),
        Outcome::Final {
            status: TaskStatus::Finished,
            reason: None
        }
    );
}

#[test]
fn outcome_failure_retries_while_attempts_remain() {
    let j = retry_job(2, true, false);
    assert!(matches!(
        attempt_outcome(&j, 1, Some(3), EndCause::Exit, "n1", 0),
        Outcome::Retry { .. }
    ));
    assert_eq!(
        attempt_outcome(&j, 2, Some(3), EndCause::Exit, "n1", 0),
        Outcome::Final {
            status: TaskStatus::Failed,
            reason: Some("exited with code 3".into())
        }
    );
}

#[test]
fn outcome_timeout_is_a_failure_with_reason_timeout() {
    assert_eq!(
        attempt_outcome(
            &retry_job(1, true, false),
            1,
            Some(137),
            EndCause::Timeout,
            "n1",
            0
        ),
        Outcome::Final {
            status: TaskStatus::Failed,
            reason: Some("timeout".into())
        }
    );
}

#[test]
fn outcome_node_loss_retries_only_with_retry_on_node() {
    let no = retry_job(3, true, false);
    let yes = retry_job(3, false, true);
    assert_eq!(
        attempt_outcome(&no, 1, None, EndCause::NodeLost, "n7", 0),
        Outcome::Final {
            status: TaskStatus::Failed,
            reason: Some("node n7 was lost".into())
        }
    );
    assert!(matches!(
        attempt_outcome(&yes, 1, None, EndCause::Evicted, "n7", 0),
        Outcome::Retry { .. }
    ));
    // A failure exit does not retry when only `node` is listed.
    assert!(matches!(
        attempt_outcome(&yes, 1, Some(1), EndCause::Exit, "n7", 0),
        Outcome::Final {
            status: TaskStatus::Failed,
            ..
        }
    ));
}

#[test]
fn outcome_stopped_is_stopped_never_retried() {
    assert_eq!(
        attempt_outcome(
            &retry_job(5, true, true),
            1,
            Some(143),
            EndCause::Stopped,
            "n1",
            0
        ),
        Outcome::Final {
            status: TaskStatus::Stopped,
            reason: Some("stopped".into())
        }
    );
}

fn service(name: &str, persist: bool, tasks: Vec<TaskView>) -> JobView {
    let mut j = job(name, &[], tasks);
    j.service = Some(ServiceView { persist });
    j
}

#[test]
fn a_running_dependency_waits_for_the_service_to_be_ready() {
    let mut client = job("client", &[], vec![task(2, TaskStatus::Pending)]);
    client.depends_on = vec![Dependency {
        name: "web".into(),
        running: true,
    }];
    let starting = wf(
        WorkflowStatus::Running,
        vec![
            service("web", false, vec![live(1, 11, TaskStatus::Started, None)]),
            client.clone(),
        ],
    );
    assert!(
        reconcile(&starting, 0).is_empty(),
        "STARTED is not ready yet"
    );
    let ready = wf(
        WorkflowStatus::Running,
        vec![
            service(
                "web",
                false,
                vec![live(1, 11, TaskStatus::Running, Some(0))],
            ),
            client,
        ],
    );
    assert_eq!(reconcile(&ready, 0), vec![Action::Place { task: id(2) }]);
}

#[test]
fn services_are_stopped_once_the_jobs_are_done_and_the_workflow_finishes() {
    let w = wf(
        WorkflowStatus::Running,
        vec![
            service(
                "web",
                false,
                vec![live(1, 11, TaskStatus::Running, Some(0))],
            ),
            job("client", &[], vec![task(2, TaskStatus::Finished)]),
        ],
    );
    assert_eq!(
        reconcile(&w, 0),
        vec![Action::StopAttempt {
            attempt: id(11),
            cause: EndCause::Stopped
        }]
    );
    let done = wf(
        WorkflowStatus::Running,
        vec![
            service("web", false, vec![task(1, TaskStatus::Stopped)]),
            job("client", &[], vec![task(2, TaskStatus::Finished)]),
        ],
    );
    assert_eq!(
        reconcile(&done, 0),
        vec![Action::SetWorkflow {
            status: WorkflowStatus::Finished,
            reason: None
        }]
    );
}

#[test]
fn a_persistent_service_keeps_the_workflow_running() {
    let w = wf(
        WorkflowStatus::Running,
        vec![
            service(
                "model",
                true,
                vec![live(1, 11, TaskStatus::Running, Some(0))],
            ),
            job("warmup", &[], vec![task(2, TaskStatus::Finished)]),
        ],
    );
    assert!(reconcile(&w, 0).is_empty());
}

mod counted {
    //! A controller may count ended tasks instead of listing them ([`JobView::ended`]): any
    //! workflow, with any of its ended tasks counted, must decide exactly as when listed.

    use super::*;
    use proptest::prelude::*;

    const STATUSES: [TaskStatus; 6] = [
        TaskStatus::Pending,
        TaskStatus::Started,
        TaskStatus::Running,
        TaskStatus::Finished,
        TaskStatus::Failed,
        TaskStatus::Stopped,
    ];

    /// (status, has a live attempt, running since, stop sent, counted if it ended)
    type TaskSeed = (usize, bool, Option<i64>, bool, bool);

    fn arb_task() -> impl Strategy<Value = TaskSeed> {
        (
            0..STATUSES.len(),
            any::<bool>(),
            prop::option::of(0i64..100),
            prop_oneof![3 => Just(false), 1 => Just(true)],
            any::<bool>(),
        )
    }

    /// (depends on earlier jobs (bits), on them running, service, persist, concurrency,
    /// timeout, tasks)
    type JobSeed = (
        u8,
        bool,
        bool,
        bool,
        Option<u32>,
        Option<u64>,
        Vec<TaskSeed>,
    );

    fn arb_job() -> impl Strategy<Value = JobSeed> {
        (
            any::<u8>(),
            any::<bool>(),
            prop_oneof![4 => Just(false), 1 => Just(true)],
            any::<bool>(),
            prop::option::of(1u32..3),
            prop::option::of(1u64..80),
            prop::collection::vec(arb_task(), 0..6),
        )
    }

    fn build(seeds: &[JobSeed]) -> (Vec<JobView>, Vec<JobView>) {
        let mut listed = Vec::new();
        let mut counted = Vec::new();
        let mut n = 0u128;
        for (i, (deps, dep_running, svc, persist, conc, timeout, tasks)) in seeds.iter().enumerate()
        {
            let mut j = job(&format!("j{i}"), &[], vec![]);
            j.depends_on = (0..i)
                .filter(|d| deps & (1 << d) != 0)
                .map(|d| Dependency {
                    name: format!("j{d}"),
                    running: *dep_running,
                })
                .collect();
            j.service = svc.then_some(ServiceView { persist: *persist });
            j.concurrency = *conc;
            j.timeout_ms = *timeout;
            let mut c = j.clone();
            for &(s, has_live, since, stop, fold) in tasks {
                n += 1;
                let status = STATUSES[s];
                // As in the store: only a task in play has a live attempt.
                let live = (has_live
                    && matches!(status, TaskStatus::Started | TaskStatus::Running))
                .then(|| LiveAttempt {
                    id: id(1000 + n),
                    status,
                    running_since: since,
                    stop_sent: stop.then_some(EndCause::Stopped),
                });
                let t = TaskView {
                    id: id(n),
                    status,
                    attempts_made: 1,
                    live,
                    not_before: None,
                    index: None,
                    reason: None,
                };
                if status.is_terminal() && fold {
                    c.ended.add(status, 1);
                } else {
                    c.tasks.push(t.clone());
                }
                j.tasks.push(t);
            }
            listed.push(j);
            counted.push(c);
        }
        (listed, counted)
    }

    proptest! {
        #[test]
        fn counting_ended_tasks_decides_as_listing_them(
            jobs in prop::collection::vec(arb_job(), 1..5),
            running in any::<bool>(),
            stop in prop_oneof![5 => Just(false), 1 => Just(true)],
            now in 0i64..200,
        ) {
            let (listed, counted) = build(&jobs);
            for (l, c) in listed.iter().zip(&counted) {
                prop_assert_eq!(job_status(l), job_status(c));
            }
            let status = if running { WorkflowStatus::Running } else { WorkflowStatus::Pending };
            let view = |jobs: Vec<JobView>| WorkflowView { status, stop_requested: stop, jobs };
            prop_assert_eq!(reconcile(&view(listed), now), reconcile(&view(counted), now));
        }

        #[test]
        fn listing_the_first_pending_tasks_decides_as_listing_them_all(
            jobs in prop::collection::vec(arb_job(), 1..5),
            running in any::<bool>(),
            stop in prop_oneof![5 => Just(false), 1 => Just(true)],
            now in 0i64..200,
            window in 0usize..3,
        ) {
            let (all, _) = build(&jobs);
            // Each job lists its first `window` PENDING tasks and counts the others.
            let mut unlisted: HashMap<TaskId, String> = HashMap::new();
            let windowed: Vec<JobView> = all
                .iter()
                .map(|j| {
                    let mut w = j.clone();
                    let mut seen = 0;
                    w.tasks.retain(|t| {
                        if t.status != TaskStatus::Pending {
                            return true;
                        }
                        seen += 1;
                        if seen > window {
                            unlisted.insert(t.id, j.name.clone());
                        }
                        seen <= window
                    });
                    w.pending_unlisted = (seen.saturating_sub(window)) as u32;
                    w
                })
                .collect();
            for (a, w) in all.iter().zip(&windowed) {
                prop_assert_eq!(job_status(a), job_status(w));
            }
            let status = if running { WorkflowStatus::Running } else { WorkflowStatus::Pending };
            let view = |jobs: Vec<JobView>| WorkflowView { status, stop_requested: stop, jobs };
            let full = reconcile(&view(all), now);
            let part = reconcile(&view(windowed), now);
            // The same actions, less those for unlisted tasks: a task placed must be listed,
            // and the unlisted ones a full view would end are ended by job, alike.
            let mut expected: Vec<Action> = Vec::new();
            for a in &full {
                match a {
                    Action::Place { task } if unlisted.contains_key(task) => {}
                    Action::EndTask { task, status, reason } if unlisted.contains_key(task) => {
                        let e = Action::EndPending {
                            job: unlisted[task].clone(),
                            status: *status,
                            reason: reason.clone(),
                        };
                        if !expected.contains(&e) {
                            expected.push(e);
                        }
                    }
                    other => expected.push(other.clone()),
                }
            }
            let key = |a: &Action| format!("{a:?}");
            let mut part_sorted = part.clone();
            part_sorted.sort_by_key(key);
            expected.sort_by_key(key);
            prop_assert_eq!(part_sorted, expected);
            // The workflow's own status comes last, after what it depends on.
            prop_assert_eq!(
                full.iter().find(|a| matches!(a, Action::SetWorkflow { .. })),
                part.last().filter(|a| matches!(a, Action::SetWorkflow { .. }))
            );
        }
    }
}

#[test]
fn a_retry_waits_out_a_doubling_backoff() {
    assert_eq!(retry_backoff(1), RETRY_BACKOFF_BASE_MS);
    assert_eq!(retry_backoff(2), 2 * RETRY_BACKOFF_BASE_MS);
    assert_eq!(retry_backoff(3), 4 * RETRY_BACKOFF_BASE_MS);
    assert_eq!(retry_backoff(u32::MAX), RETRY_BACKOFF_MAX_MS);
    let j = retry_job(4, true, false);
    let Outcome::Retry { reason, not_before } =
        attempt_outcome(&j, 2, Some(1), EndCause::Exit, "n1", 50_000)
    else {
        panic!("attempts remain: a retry");
    };
    assert_eq!(not_before, 52_000);
    assert_eq!(
        reason,
        "exited with code 1; attempt 3 of 4 starts after a 2s backoff"
    );
    let Outcome::Retry { reason, .. } = attempt_outcome(
        &retry_job(100, true, false),
        9,
        Some(1),
        EndCause::Exit,
        "n1",
        0,
    ) else {
        panic!("attempts remain: a retry");
    };
    assert!(
        reason.ends_with("attempt 10 of 100 starts after a 4m16s backoff"),
        "{reason}"
    );
}

#[test]
fn a_task_backing_off_is_placed_only_once_its_wait_is_over() {
    let mut t = task(1, TaskStatus::Pending);
    t.attempts_made = 1;
    t.not_before = Some(10_000);
    let w = wf(WorkflowStatus::Running, vec![job("a", &[], vec![t])]);
    assert!(
        reconcile(&w, 9_999).is_empty(),
        "{:?}",
        reconcile(&w, 9_999)
    );
    assert_eq!(reconcile(&w, 10_000), vec![Action::Place { task: id(1) }]);
    // A stop does not wait for the backoff.
    let mut stopped = w.clone();
    stopped.stop_requested = true;
    assert!(reconcile(&stopped, 0)
        .iter()
        .any(|a| matches!(a, Action::EndTask { task, .. } if *task == id(1))));
}

mod backoff_props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Waits never shrink from one attempt to the next, never exceed the cap, and each is
        /// at least the base: attempts of one task are never back to back.
        #[test]
        fn waits_grow_and_stay_bounded(n in 1u32..200) {
            let (a, b) = (retry_backoff(n), retry_backoff(n + 1));
            prop_assert!(a >= RETRY_BACKOFF_BASE_MS);
            prop_assert!(b >= a);
            prop_assert!(b <= RETRY_BACKOFF_MAX_MS);
            prop_assert!(b == RETRY_BACKOFF_MAX_MS || b == 2 * a);
        }

        /// Whatever the attempt, the cause and the time, a retry starts no earlier than one
        /// backoff after the end, and reconcile holds the task back until exactly then.
        #[test]
        fn a_retried_task_starts_no_earlier_than_its_backoff(
            made in 1u32..50,
            extra in 1u32..50,
            ended in 0i64..1_000_000_000,
            cause in prop_oneof![
                Just(EndCause::Exit),
                Just(EndCause::Timeout),
                Just(EndCause::StartError),
                Just(EndCause::NodeLost),
                Just(EndCause::Evicted),
            ],
            probe in 0i64..400_000,
        ) {
            let j = retry_job(made + extra, true, true);
            let outcome = attempt_outcome(&j, made, Some(1), cause, "n1", ended);
            let Outcome::Retry { not_before, .. } = outcome else {
                return Err(TestCaseError::fail(format!("attempts remain: {outcome:?}")));
            };
            prop_assert_eq!(not_before, ended + retry_backoff(made));
            let mut t = task(1, TaskStatus::Pending);
            t.attempts_made = made;
            t.not_before = Some(not_before);
            let w = wf(WorkflowStatus::Running, vec![job("a", &[], vec![t])]);
            let now = ended + probe;
            let placed = reconcile(&w, now).contains(&Action::Place { task: id(1) });
            prop_assert_eq!(placed, now >= not_before);
        }
    }
}

/// Gang member `index` of the job.
pub(super) fn member_mut(j: &mut JobView, index: u32) -> &mut TaskView {
    j.tasks.iter_mut().find(|t| t.index == Some(index)).unwrap()
}

/// Records an attempt's end on its task, as the store does: no longer live, and as the outcome
/// says (back to PENDING until `not_before`, or ended), with its reason.
pub(super) fn record_end(t: &mut TaskView, outcome: Outcome) {
    t.live = None;
    match outcome {
        Outcome::Retry { reason, not_before } => {
            t.status = TaskStatus::Pending;
            t.reason = Some(reason);
            t.not_before = Some(not_before);
        }
        Outcome::Final { status, reason } => {
            t.status = status;
            t.reason = reason;
        }
    }
}

mod gang {
    //! The rules of a multinode job's members: placed all together, one fate per run.

    use super::*;

    const JOB: &str = "run-lammps";

    /// Member `i` of the gang: task `i + 1`, its attempt `101 + i` when live.
    fn member(i: u32, status: TaskStatus) -> TaskView {
        let mut t = task(i as u128 + 1, status);
        t.index = Some(i);
        if matches!(status, TaskStatus::Started | TaskStatus::Running) {
            t.live = Some(LiveAttempt {
                id: attempt(i),
                status,
                running_since: (status == TaskStatus::Running).then_some(0),
                stop_sent: None,
            });
        }
        t.attempts_made = u32::from(status != TaskStatus::Pending);
        t
    }

    fn attempt(i: u32) -> TaskId {
        id(101 + i as u128)
    }

    fn gang_job(members: Vec<TaskView>, attempts: u32, retry_on: RetryOn) -> JobView {
        let mut j = job(JOB, &[], members);
        j.gang = Some(j.tasks.len() as u32);
        j.attempts = attempts;
        j.retry_on = retry_on;
        j
    }

    fn running(n: u32) -> Vec<TaskView> {
        (0..n).map(|i| member(i, TaskStatus::Running)).collect()
    }

    const NO_RETRY: RetryOn = RetryOn {
        failure: false,
        node: false,
    };
    const ON_NODE: RetryOn = RetryOn {
        failure: false,
        node: true,
    };

    /// Records member `i`'s end as the server does: its task takes the outcome.
    fn apply(j: &mut JobView, i: u32, outcome: Outcome) {
        record_end(member_mut(j, i), outcome);
    }

    fn end(j: &JobView, i: u32, exit_code: Option<i32>, cause: EndCause, now: Millis) -> Outcome {
        let node = format!("n{i}");
        member_outcome(j, Some(i), 1, exit_code, cause, &node, now)
    }

    fn gang_stops(acts: &[Action]) -> Vec<TaskId> {
        acts.iter()
            .filter_map(|a| match a {
                Action::StopAttempt {
                    attempt,
                    cause: EndCause::Gang,
                } => Some(*attempt),
                _ => None,
            })
            .collect()
    }

    fn running_wf(j: JobView) -> WorkflowView {
        wf(WorkflowStatus::Running, vec![j])
    }

    #[test]
    fn a_gang_is_placed_whole_head_first_never_member_by_member() {
        // Listed in any order, placed in member order.
        let members = vec![
            member(2, TaskStatus::Pending),
            member(0, TaskStatus::Pending),
            member(1, TaskStatus::Pending),
        ];
        let mut j = gang_job(members, 1, NO_RETRY);
        // A member limit of task arrays does not apply: the gang needs all its nodes at once.
        j.concurrency = Some(1);
        assert_eq!(
            reconcile(&wf(WorkflowStatus::Pending, vec![j]), 0),
            vec![Action::PlaceGang {
                tasks: vec![id(1), id(2), id(3)]
            }]
        );
    }

    #[test]
    fn a_gang_waits_for_every_member_its_dependencies_and_its_backoff() {
        let pending = || (0..3).map(|i| member(i, TaskStatus::Pending)).collect();
        let placed = |j: JobView, now| {
            reconcile(&running_wf(j), now)
                .iter()
                .any(|a| matches!(a, Action::PlaceGang { .. } | Action::Place { .. }))
        };
        assert!(placed(gang_job(pending(), 1, NO_RETRY), 0));

        // A member not listed (counted as waiting) keeps the gang back: never partly placed.
        let mut j = gang_job(pending(), 1, NO_RETRY);
        j.tasks.pop();
        j.pending_unlisted = 1;
        j.gang = Some(3);
        assert!(!placed(j, 0));
        let mut j = gang_job(pending(), 1, NO_RETRY);
        j.tasks.pop();
        j.gang = Some(3);
        assert!(!placed(j, 0), "a member missing from the view");

        // One member still backing off holds back all of them, until its wait is over.
        let mut j = gang_job(pending(), 2, ON_NODE);
        for t in &mut j.tasks {
            t.attempts_made = 1;
            t.not_before = Some(5_000);
        }
        j.tasks[2].not_before = Some(7_000);
        assert!(!placed(j.clone(), 6_999));
        assert!(placed(j, 7_000));

        // A dependency not done yet.
        let mut j = gang_job(pending(), 1, NO_RETRY);
        j.depends_on = vec![Dependency::finished("mesh")];
        let w = wf(
            WorkflowStatus::Running,
            vec![
                job("mesh", &[], vec![live(9, 19, TaskStatus::Running, Some(0))]),
                j,
            ],
        );
        assert!(reconcile(&w, 0).is_empty());
    }

    #[test]
    fn a_failed_dependency_ends_every_waiting_member() {
        let mut j = gang_job(
            (0..2).map(|i| member(i, TaskStatus::Pending)).collect(),
            1,
            NO_RETRY,
        );
        j.depends_on = vec![Dependency::finished("mesh")];
        let w = wf(
            WorkflowStatus::Running,
            vec![job("mesh", &[], vec![task(9, TaskStatus::Failed)]), j],
        );
        let acts = reconcile(&w, 0);
        for t in [id(1), id(2)] {
            assert!(acts.contains(&Action::EndTask {
                task: t,
                status: TaskStatus::Failed,
                reason: "dependency mesh ended FAILED".into()
            }));
        }
        assert_eq!(
            acts.last(),
            Some(&Action::SetWorkflow {
                status: WorkflowStatus::Failed,
                reason: Some(format!("failed: mesh, {JOB}"))
            })
        );
    }

    #[test]
    fn the_head_finishing_finishes_the_job_and_its_members() {
        let mut j = gang_job(running(3), 3, ON_NODE);
        let head = end(&j, 0, Some(0), EndCause::Exit, 10);
        assert_eq!(
            head,
            Outcome::Final {
                status: TaskStatus::Finished,
                reason: None
            }
        );
        apply(&mut j, 0, head);
        let acts = reconcile(&running_wf(j.clone()), 10);
        assert_eq!(gang_stops(&acts), vec![attempt(1), attempt(2)]);
        assert_eq!(acts.len(), 2, "{acts:?}");
        for i in [1, 2] {
            let o = end(&j, i, Some(143), EndCause::Gang, 11);
            assert_eq!(
                o,
                Outcome::Final {
                    status: TaskStatus::Finished,
                    reason: Some(format!("its head {JOB}-0 finished"))
                }
            );
            apply(&mut j, i, o);
        }
        assert_eq!(job_status(&j), TaskStatus::Finished);
        assert_eq!(
            reconcile(&running_wf(j), 12),
            vec![Action::SetWorkflow {
                status: WorkflowStatus::Finished,
                reason: None
            }]
        );
    }

    #[test]
    fn a_member_ending_after_its_head_finished_still_finishes() {
        // The head is done; a peer's node going before its stop arrives changes nothing.
        let mut j = gang_job(running(2), 1, NO_RETRY);
        let head = end(&j, 0, Some(0), EndCause::Exit, 10);
        apply(&mut j, 0, head);
        let o = end(&j, 1, None, EndCause::NodeLost, 11);
        assert_eq!(
            o,
            Outcome::Final {
                status: TaskStatus::Finished,
                reason: Some(format!("its head {JOB}-0 finished"))
            }
        );
    }

    #[test]
    fn a_lost_member_without_retry_on_node_fails_the_gang() {
        let mut j = gang_job(
            running(3),
            3,
            RetryOn {
                failure: true,
                node: false,
            },
        );
        let lost = end(&j, 1, None, EndCause::NodeLost, 10);
        let own = format!("member {JOB}-1 on node n1 was lost");
        assert_eq!(
            lost,
            Outcome::Final {
                status: TaskStatus::Failed,
                reason: Some(own.clone())
            }
        );
        apply(&mut j, 1, lost);
        let acts = reconcile(&running_wf(j.clone()), 10);
        assert_eq!(gang_stops(&acts), vec![attempt(0), attempt(2)]);
        // Asked once: the next pass, with the stops sent, asks nothing more.
        let mut sent = j.clone();
        for t in &mut sent.tasks {
            if let Some(a) = &mut t.live {
                a.stop_sent = Some(EndCause::Gang);
            }
        }
        assert!(reconcile(&running_wf(sent), 11).is_empty());

        for i in [0, 2] {
            let o = end(&j, i, Some(137), EndCause::Gang, 12);
            assert_eq!(
                o,
                Outcome::Final {
                    status: TaskStatus::Failed,
                    reason: Some(format!("the gang failed: {own}"))
                }
            );
            apply(&mut j, i, o);
        }
        // Quoted from the member whose end decided it, not from a member that mirrored it.
        assert_eq!(
            j.tasks[2].reason.as_deref(),
            Some(format!("the gang failed: {own}").as_str())
        );
        assert_eq!(job_status(&j), TaskStatus::Failed);
        assert_eq!(
            reconcile(&running_wf(j), 13),
            vec![Action::SetWorkflow {
                status: WorkflowStatus::Failed,
                reason: Some(format!("failed: {JOB}"))
            }]
        );
    }

    #[test]
    fn a_lost_member_with_retry_on_node_reruns_the_whole_gang_in_lockstep() {
        let mut j = gang_job(running(3), 3, ON_NODE);
        let lost = end(&j, 1, None, EndCause::NodeLost, 10_000);
        let own = format!(
            "member {JOB}-1 on node n1 was lost; the gang restarts: attempt 2 of 3 starts after a 1s backoff"
        );
        assert_eq!(
            lost,
            Outcome::Retry {
                reason: own.clone(),
                not_before: 11_000
            }
        );
        apply(&mut j, 1, lost);
        // Not placed again while the others still run: they are stopped first.
        let acts = reconcile(&running_wf(j.clone()), 20_000);
        assert_eq!(gang_stops(&acts), vec![attempt(0), attempt(2)]);
        assert_eq!(acts.len(), 2, "{acts:?}");

        for (i, at) in [(2, 10_400), (0, 10_500)] {
            let o = end(&j, i, Some(143), EndCause::Gang, at);
            assert_eq!(
                o,
                Outcome::Retry {
                    reason: format!("stopped: {own}"),
                    not_before: 11_000
                },
                "member {i}"
            );
            apply(&mut j, i, o);
        }
        assert!(j.tasks.iter().all(|t| t.attempts_made == 1));
        assert!(reconcile(&running_wf(j.clone()), 10_999).is_empty());
        assert_eq!(
            reconcile(&running_wf(j), 11_000),
            vec![Action::PlaceGang {
                tasks: vec![id(1), id(2), id(3)]
            }]
        );
    }

    #[test]
    fn a_mirror_names_the_member_even_when_its_reason_is_not_known() {
        let mut j = gang_job(running(3), 1, NO_RETRY);
        let failed_2 = Outcome::Final {
            status: TaskStatus::Failed,
            reason: None,
        };
        apply(&mut j, 2, failed_2);
        assert_eq!(
            end(&j, 0, Some(143), EndCause::Gang, 0),
            Outcome::Final {
                status: TaskStatus::Failed,
                reason: Some(format!("the gang failed: member {JOB}-2 ended FAILED"))
            }
        );
        // With two failed, the one whose own end is on record tells the story, not a mirror.
        let own = format!("member {JOB}-2 on node n2 exited with code 4");
        j.tasks[2].reason = Some(own.clone());
        j.tasks[1].live = None;
        j.tasks[1].status = TaskStatus::Failed;
        j.tasks[1].reason = Some("the gang failed: something else".into());
        assert_eq!(
            end(&j, 0, Some(143), EndCause::Gang, 0),
            Outcome::Final {
                status: TaskStatus::Failed,
                reason: Some(format!("the gang failed: {own}"))
            }
        );
    }

    #[test]
    fn an_evicted_member_names_its_node() {
        let j = gang_job(running(2), 1, ON_NODE);
        assert_eq!(
            end(&j, 1, None, EndCause::Evicted, 0),
            Outcome::Final {
                status: TaskStatus::Failed,
                reason: Some(format!("member {JOB}-1 was evicted from node n1"))
            }
        );
        assert_eq!(
            end(&j, 1, None, EndCause::StartError, 0),
            Outcome::Final {
                status: TaskStatus::Failed,
                reason: Some(format!("member {JOB}-1 could not start on node n1"))
            }
        );
    }

    #[test]
    fn a_member_exiting_on_its_own_fails_the_gang_whatever_its_code() {
        let j = gang_job(running(2), 2, NO_RETRY);
        assert_eq!(
            end(&j, 1, Some(0), EndCause::Exit, 0),
            Outcome::Final {
                status: TaskStatus::Failed,
                reason: Some(format!(
                    "member {JOB}-1 on node n1 exited with code 0 before its head finished"
                ))
            }
        );
        assert_eq!(
            end(&j, 1, Some(3), EndCause::Exit, 0),
            Outcome::Final {
                status: TaskStatus::Failed,
                reason: Some(format!("member {JOB}-1 on node n1 exited with code 3"))
            }
        );
        // The head's failure too; `retry.on: failure` reruns the gang.
        let retried = gang_job(
            running(2),
            2,
            RetryOn {
                failure: true,
                node: false,
            },
        );
        assert_eq!(
            end(&retried, 0, Some(2), EndCause::Exit, 0),
            Outcome::Retry {
                reason: format!(
                    "member {JOB}-0 on node n0 exited with code 2; the gang restarts: attempt 2 of 2 starts after a 1s backoff"
                ),
                not_before: 1_000
            }
        );
        assert!(matches!(
            end(&retried, 1, Some(0), EndCause::Exit, 0),
            Outcome::Retry { .. }
        ));
    }

    #[test]
    fn a_gang_times_out_by_its_head_and_the_others_follow() {
        let mut j = gang_job(running(3), 1, NO_RETRY);
        j.timeout_ms = Some(5_000);
        // A member that started running earlier does not start the job's clock.
        j.tasks[2].live.as_mut().unwrap().running_since = Some(-10_000);
        j.tasks[0].live.as_mut().unwrap().running_since = Some(1_000);
        assert!(reconcile(&running_wf(j.clone()), 5_999).is_empty());
        assert_eq!(
            reconcile(&running_wf(j.clone()), 6_000),
            vec![Action::StopAttempt {
                attempt: attempt(0),
                cause: EndCause::Timeout
            }]
        );
        let o = end(&j, 0, Some(143), EndCause::Timeout, 6_100);
        let own = format!("member {JOB}-0 on node n0 timed out");
        assert_eq!(
            o,
            Outcome::Final {
                status: TaskStatus::Failed,
                reason: Some(own.clone())
            }
        );
        apply(&mut j, 0, o);
        assert_eq!(
            gang_stops(&reconcile(&running_wf(j.clone()), 6_100)),
            vec![attempt(1), attempt(2)]
        );
        assert_eq!(
            end(&j, 2, Some(143), EndCause::Gang, 6_200),
            Outcome::Final {
                status: TaskStatus::Failed,
                reason: Some(format!("the gang failed: {own}"))
            }
        );
    }

    #[test]
    fn members_ending_at_once_with_mixed_outcomes_settle_on_one_fate() {
        // Member 1 was retried and member 2 failed, each decided before the other's end was
        // recorded: the gang fails, and the head still running is stopped.
        let mut j = gang_job(
            running(3),
            3,
            RetryOn {
                failure: true,
                node: true,
            },
        );
        let failed_2 = format!("member {JOB}-2 on node n2 exited with code 9");
        apply(
            &mut j,
            1,
            Outcome::Retry {
                reason: "retried".into(),
                not_before: 5_000,
            },
        );
        apply(
            &mut j,
            2,
            Outcome::Final {
                status: TaskStatus::Failed,
                reason: Some(failed_2.clone()),
            },
        );
        let acts = reconcile(&running_wf(j.clone()), 6_000);
        assert_eq!(
            acts,
            vec![
                Action::StopAttempt {
                    attempt: attempt(0),
                    cause: EndCause::Gang
                },
                Action::EndTask {
                    task: id(2),
                    status: TaskStatus::Failed,
                    reason: format!("the gang failed: {failed_2}")
                },
            ]
        );
        // A member retried beside a failure is not: it fails with its own reason.
        let mut later = gang_job(running(3), 3, ON_NODE);
        apply(
            &mut later,
            2,
            Outcome::Final {
                status: TaskStatus::Failed,
                reason: Some(failed_2.clone()),
            },
        );
        assert_eq!(
            end(&later, 1, None, EndCause::NodeLost, 0),
            Outcome::Final {
                status: TaskStatus::Failed,
                reason: Some(format!("member {JOB}-1 on node n1 was lost"))
            }
        );

        // The head finished while a member was sent back: the job is done, the member too.
        let mut done = gang_job(running(2), 3, ON_NODE);
        let head = end(&done, 0, Some(0), EndCause::Exit, 0);
        apply(&mut done, 0, head);
        apply(
            &mut done,
            1,
            Outcome::Retry {
                reason: "retried".into(),
                not_before: 5_000,
            },
        );
        assert_eq!(
            reconcile(&running_wf(done), 6_000),
            vec![
                Action::EndTask {
                    task: id(2),
                    status: TaskStatus::Finished,
                    reason: format!("its head {JOB}-0 finished")
                },
                Action::SetWorkflow {
                    status: WorkflowStatus::Finished,
                    reason: None
                },
            ]
        );
    }

    #[test]
    fn stopping_the_workflow_stops_every_member() {
        let mut j = gang_job(running(3), 3, ON_NODE);
        apply(
            &mut j,
            1,
            Outcome::Retry {
                reason: "retried".into(),
                not_before: 5_000,
            },
        );
        j.tasks[2].live.as_mut().unwrap().stop_sent = Some(EndCause::Gang);
        let mut w = running_wf(j);
        w.stop_requested = true;
        assert_eq!(
            reconcile(&w, 0),
            vec![
                Action::StopAttempt {
                    attempt: attempt(0),
                    cause: EndCause::Stopped
                },
                Action::EndTask {
                    task: id(2),
                    status: TaskStatus::Stopped,
                    reason: "workflow stopped before it ran".into()
                },
            ]
        );
        let j = &mut w.jobs[0];
        let o = end(j, 0, Some(143), EndCause::Stopped, 1);
        assert_eq!(o, stopped());
        apply(j, 0, o);
        apply(j, 1, stopped());
        // The member stopped for its gang before the workflow's stop ends with the gang.
        let o = end(j, 2, Some(143), EndCause::Gang, 2);
        assert_eq!(
            o,
            Outcome::Final {
                status: TaskStatus::Stopped,
                reason: Some(format!("stopped: member {JOB}-0 ended STOPPED"))
            }
        );
        apply(j, 2, o);
        assert_eq!(
            reconcile(&w, 3),
            vec![Action::SetWorkflow {
                status: WorkflowStatus::Stopped,
                reason: Some("stopped by request".into())
            }]
        );
    }

    #[test]
    fn a_task_that_is_no_member_decides_as_before() {
        let causes = [
            (Some(0), EndCause::Exit),
            (Some(3), EndCause::Exit),
            (None, EndCause::Timeout),
            (None, EndCause::StartError),
            (None, EndCause::NodeLost),
            (None, EndCause::Evicted),
            (None, EndCause::Stopped),
            (None, EndCause::DependencyFailed),
            (None, EndCause::Gang),
        ];
        let plain = retry_job(3, true, false);
        for (code, cause) in causes {
            let before = attempt_outcome(&plain, 1, code, cause, "n1", 0);
            assert_eq!(
                member_outcome(&plain, Some(4), 1, code, cause, "n1", 0),
                before
            );
            assert_eq!(
                member_outcome(&plain, None, 1, code, cause, "n1", 0),
                before
            );
        }
        assert_eq!(
            attempt_outcome(&plain, 1, None, EndCause::Gang, "n1", 0),
            Outcome::Final {
                status: TaskStatus::Failed,
                reason: Some("another member of its multinode job ended".into())
            }
        );
    }
}
