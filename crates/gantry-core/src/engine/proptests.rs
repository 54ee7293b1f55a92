//! The gang rules under random sequences of member ends: reconcile and member_outcome driven
//! together as the server drives them (reconcile's actions applied, each end's outcome recorded
//! on its task), including two ends decided at once from the same view, lost nodes during a
//! stop, and the workflow's stop.

use super::tests::{member_mut, record_end};
use super::*;
use proptest::prelude::*;

/// How a live member's attempt ends, unless it was asked to stop (then it ends with the cause
/// asked for, the way the server records a stopped process, or its node is lost meanwhile).
#[derive(Debug, Clone, Copy)]
enum Kind {
    Exit(i32),
    StartError,
    NodeLost,
    Evicted,
}

#[derive(Debug, Clone)]
enum Event {
    /// A live member (`who`, modulo the live ones) ends.
    End(usize, Kind, bool),
    /// Two live members end, both decided from the view before either end is recorded.
    EndTwo((usize, Kind, bool), (usize, Kind, bool)),
    Wait(Millis),
    StopWorkflow,
}

fn arb_kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        3 => prop_oneof![Just(0), Just(1), Just(3)].prop_map(Kind::Exit),
        1 => Just(Kind::StartError),
        2 => Just(Kind::NodeLost),
        1 => Just(Kind::Evicted),
    ]
}

fn arb_end() -> impl Strategy<Value = (usize, Kind, bool)> {
    (
        0usize..8,
        arb_kind(),
        prop_oneof![4 => Just(true), 1 => Just(false)],
    )
}

fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => arb_end().prop_map(|(w, k, s)| Event::End(w, k, s)),
        2 => (arb_end(), arb_end()).prop_map(|(a, b)| Event::EndTwo(a, b)),
        3 => (0i64..3_000).prop_map(Event::Wait),
        1 => Just(Event::StopWorkflow),
    ]
}

const JOB: &str = "mpi";

struct Sim {
    wf: WorkflowView,
    now: Millis,
    next_attempt: u128,
    /// The head's attempt ended with exit code 0 on its own.
    head_exited_0: bool,
    job_end: Option<TaskStatus>,
    workflow_end: Option<WorkflowStatus>,
    /// A stop was asked for by the time the workflow ended.
    stopped_when_ended: bool,
}

impl Sim {
    fn new(size: u32, attempts: u32, retry_on: RetryOn, timeout_ms: Option<u64>) -> Sim {
        let tasks = (0..size)
            .map(|i| TaskView {
                id: Uuid::from_u128(i as u128 + 1),
                status: TaskStatus::Pending,
                attempts_made: 0,
                live: None,
                not_before: None,
                index: Some(i),
                reason: None,
            })
            // Listed in any order: the rules go by index.
            .rev()
            .collect();
        let job = JobView {
            name: JOB.into(),
            depends_on: vec![],
            service: None,
            concurrency: None,
            attempts,
            retry_on,
            timeout_ms,
            tasks,
            ended: Ended::default(),
            gang: Some(size),
            pending_unlisted: 0,
        };
        Sim {
            wf: WorkflowView {
                status: WorkflowStatus::Pending,
                stop_requested: false,
                jobs: vec![job],
            },
            now: 0,
            next_attempt: 1000,
            head_exited_0: false,
            job_end: None,
            workflow_end: None,
            stopped_when_ended: false,
        }
    }

    fn job(&self) -> &JobView {
        &self.wf.jobs[0]
    }

    fn members(&mut self) -> &mut Vec<TaskView> {
        &mut self.wf.jobs[0].tasks
    }

    /// Members with a live attempt, in index order.
    fn live(&self) -> Vec<u32> {
        let mut live: Vec<u32> = self
            .job()
            .tasks
            .iter()
            .filter(|t| t.live.is_some())
            .map(|t| t.index.unwrap())
            .collect();
        live.sort();
        live
    }

    fn member(&mut self, index: u32) -> &mut TaskView {
        member_mut(&mut self.wf.jobs[0], index)
    }

    fn member_ref(&self, index: u32) -> &TaskView {
        let t = self.job().tasks.iter().find(|t| t.index == Some(index));
        t.unwrap()
    }

    /// One reconcile, its actions applied; whether it did anything.
    fn reconcile(&mut self) -> Result<bool, TestCaseError> {
        let actions = reconcile(&self.wf, self.now);
        let acted = !actions.is_empty();
        for a in actions {
            match a {
                Action::PlaceGang { tasks } => {
                    let mut all: Vec<(u32, TaskId)> = self
                        .job()
                        .tasks
                        .iter()
                        .map(|t| (t.index.unwrap(), t.id))
                        .collect();
                    all.sort();
                    let all: Vec<TaskId> = all.into_iter().map(|(_, id)| id).collect();
                    prop_assert_eq!(&tasks, &all, "every member, head first");
                    for t in &self.job().tasks {
                        prop_assert!(
                            t.status == TaskStatus::Pending && t.live.is_none(),
                            "placed beside a member in play: {:?}",
                            t
                        );
                        prop_assert!(t.not_before.is_none_or(|at| at <= self.now));
                    }
                    let now = self.now;
                    for i in 0..all.len() {
                        self.next_attempt += 1;
                        let id = Uuid::from_u128(self.next_attempt);
                        let t = self.member(i as u32);
                        t.status = TaskStatus::Running;
                        t.attempts_made += 1;
                        t.not_before = None;
                        t.live = Some(LiveAttempt {
                            id,
                            status: TaskStatus::Running,
                            running_since: Some(now),
                            stop_sent: None,
                        });
                    }
                }
                Action::Place { task } => {
                    return Err(TestCaseError::fail(format!(
                        "a gang member placed alone: {task}"
                    )))
                }
                Action::EndPending { job, .. } => {
                    return Err(TestCaseError::fail(format!(
                        "no member of {job} is unlisted"
                    )))
                }
                Action::EndTask {
                    task,
                    status,
                    reason,
                } => {
                    let t = self.members().iter_mut().find(|t| t.id == task).unwrap();
                    prop_assert!(
                        t.live.is_none() && t.status == TaskStatus::Pending,
                        "ended twice or while in play: {:?}",
                        t
                    );
                    prop_assert!(status.is_terminal());
                    t.status = status;
                    t.reason = Some(reason);
                }
                Action::StopAttempt { attempt, cause } => {
                    let t = self
                        .members()
                        .iter_mut()
                        .find(|t| t.live.as_ref().is_some_and(|a| a.id == attempt));
                    let Some(a) = t.and_then(|t| t.live.as_mut()) else {
                        return Err(TestCaseError::fail("stop for no live attempt"));
                    };
                    prop_assert!(a.stop_sent.is_none(), "asked to stop twice");
                    a.stop_sent = Some(cause);
                }
                Action::SetWorkflow { status, .. } => {
                    prop_assert!(self.workflow_end.is_none(), "the workflow ended twice");
                    self.wf.status = status;
                    if status.is_terminal() {
                        self.workflow_end = Some(status);
                        self.stopped_when_ended = self.wf.stop_requested;
                    }
                }
            }
        }
        // Once a member is out of this run, every other one is on its way out.
        let tasks = &self.job().tasks;
        if tasks.iter().any(|t| t.live.is_none()) {
            for t in tasks {
                prop_assert!(
                    t.live.as_ref().is_none_or(|a| a.stop_sent.is_some()),
                    "a member runs on beside an ended one: {:?}",
                    tasks
                );
            }
        }
        Ok(acted)
    }

    /// The outcome of live member `index`'s end, decided from the view as it is now.
    fn decide(&self, index: u32, kind: Kind, as_asked: bool) -> (EndCause, Option<i32>, Outcome) {
        let t = self.member_ref(index);
        let asked = t.live.as_ref().unwrap().stop_sent;
        let (cause, code) = match (asked, kind) {
            (Some(c), _) if as_asked => (c, Some(143)),
            (_, Kind::Exit(code)) if asked.is_none() => (EndCause::Exit, Some(code)),
            (_, Kind::StartError) if asked.is_none() => (EndCause::StartError, None),
            (_, Kind::Evicted) => (EndCause::Evicted, None),
            _ => (EndCause::NodeLost, None),
        };
        let node = format!("n{index}");
        let outcome = member_outcome(
            self.job(),
            Some(index),
            t.attempts_made,
            code,
            cause,
            &node,
            self.now,
        );
        (cause, code, outcome)
    }

    fn record(&mut self, index: u32, (cause, code, outcome): (EndCause, Option<i32>, Outcome)) {
        if index == 0 && cause == EndCause::Exit && code == Some(0) {
            self.head_exited_0 = true;
        }
        record_end(self.member(index), outcome);
    }

    fn pick(&self, who: usize) -> Option<u32> {
        let live = self.live();
        (!live.is_empty()).then(|| live[who % live.len()])
    }

    fn event(&mut self, e: &Event) {
        match *e {
            Event::End(who, kind, as_asked) => {
                if let Some(i) = self.pick(who) {
                    let d = self.decide(i, kind, as_asked);
                    self.record(i, d);
                }
            }
            Event::EndTwo(a, b) => {
                let (Some(i), Some(j)) = (self.pick(a.0), self.pick(b.0)) else {
                    return;
                };
                if i == j {
                    return;
                }
                let (di, dj) = (self.decide(i, a.1, a.2), self.decide(j, b.1, b.2));
                self.record(i, di);
                self.record(j, dj);
            }
            Event::Wait(ms) => self.now += ms,
            Event::StopWorkflow => self.wf.stop_requested = true,
        }
    }

    /// What must hold after every step.
    fn check(&mut self) -> Result<(), TestCaseError> {
        let job = self.job();
        let counts: Vec<u32> = job.tasks.iter().map(|t| t.attempts_made).collect();
        let (lo, hi) = (*counts.iter().min().unwrap(), *counts.iter().max().unwrap());
        // One attempt of each member per run: never two runs at once.
        prop_assert_eq!(lo, hi, "members in different runs: {:?}", job.tasks);
        prop_assert!(hi <= job.attempts.max(1), "more runs than attempts");
        let status = job_status(job);
        if status == TaskStatus::Finished {
            prop_assert!(self.head_exited_0, "finished without its head exiting 0");
        }
        if status.is_terminal() {
            if let Some(before) = self.job_end {
                prop_assert_eq!(before, status, "the job ended twice");
            }
            self.job_end = Some(status);
        } else {
            prop_assert!(self.job_end.is_none(), "the job ended, then went on");
        }
        Ok(())
    }

    /// Ends whatever is still in play, the way it would end by itself: stopped members end as
    /// asked, a running head fails, waits pass.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..200 {
            if self.workflow_end.is_some() {
                return Ok(());
            }
            if self.reconcile()? {
                self.check()?;
                continue;
            }
            let live = self.live();
            let asked = live.iter().copied().find(|&i| {
                let a = self.member_ref(i).live.as_ref();
                a.is_some_and(|a| a.stop_sent.is_some())
            });
            if let Some(i) = asked.or(live.first().copied()) {
                let d = self.decide(i, Kind::Exit(1), true);
                self.record(i, d);
            } else {
                let wake = self.job().tasks.iter().filter_map(|t| t.not_before).max();
                match wake {
                    Some(at) if at > self.now => self.now = at,
                    _ => {
                        return Err(TestCaseError::fail(format!(
                            "stuck: {:?}",
                            self.job().tasks
                        )))
                    }
                }
            }
            self.check()?;
        }
        Err(TestCaseError::fail("did not end"))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn a_gang_runs_whole_and_ends_once(
        size in 1u32..5,
        attempts in 1u32..5,
        failure in any::<bool>(),
        node in any::<bool>(),
        timeout in prop::option::of(500u64..5_000),
        events in prop::collection::vec(arb_event(), 0..40),
    ) {
        let mut sim = Sim::new(size, attempts, RetryOn { failure, node }, timeout);
        for e in &events {
            if sim.workflow_end.is_some() {
                break;
            }
            sim.reconcile()?;
            sim.check()?;
            sim.event(e);
            sim.check()?;
        }
        sim.drain()?;
        let job = sim.job_end;
        prop_assert!(job.is_some(), "the workflow ended before its job");
        // The workflow ends as its only job did, unless it was stopped first.
        let expected = match job.unwrap() {
            _ if sim.stopped_when_ended => WorkflowStatus::Stopped,
            TaskStatus::Finished => WorkflowStatus::Finished,
            _ => WorkflowStatus::Failed,
        };
        prop_assert_eq!(sim.workflow_end, Some(expected));
    }
}
