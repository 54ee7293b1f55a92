//! The endpoint takeover state machine: a new workflow's service takes a persistent endpoint
//! over from the one serving it. Pure: the server gathers the facts (the new service's status,
//! whether the old workflow has ended, whether the old backend has drained) and applies the
//! steps returned.
//!
//! `when-ready` (default): the old workflow keeps serving until the new service is ready; the
//! proxy switches atomically; requests in flight finish on the old backend until drained (or
//! the drain timeout), then the old workflow is stopped. `stop-first`: the old workflow is
//! stopped first (for sites without room for two copies of a model), then the new one is
//! switched in when ready. Either way, a takeover that needs a person's confirmation waits in
//! AWAITING_CONFIRMATION, and a new service that fails or stops before it is ready fails the
//! takeover while the old one keeps serving.

// The phases and modes are stored and shown as text, so they live with the API's vocabulary.
pub use gantry_api::{TakeoverMode as Mode, TakeoverPhase as Phase};

/// How the new service stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewService {
    /// Not ready yet (waiting for resources, pulling, or its probe not passed).
    Starting,
    /// Its readiness probe has passed.
    Ready,
    /// It failed, was stopped, or its workflow ended, before it was ready.
    Gone,
}

/// The facts a decision needs.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    pub phase: Phase,
    pub mode: Mode,
    /// A person must approve (the endpoint asks for it, or an MCP client asked for the
    /// takeover).
    pub needs_confirmation: bool,
    pub confirmed: bool,
    pub rejected: bool,
    /// Another workflow serves the endpoint now.
    pub has_old: bool,
    /// The old workflow has ended.
    pub old_ended: bool,
    pub new: NewService,
    /// Requests begun on the old backend have all finished.
    pub drained: bool,
    pub drain_deadline_passed: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Move the takeover to a phase.
    Enter(Phase, Option<String>),
    /// Point the endpoint at the new service.
    Switch,
    /// Stop the old workflow.
    StopOld,
    /// End the old backend's remaining streams (drain timeout).
    Cut,
    /// Stop the new workflow (the takeover was rejected).
    StopNew,
}

pub fn step(v: &View) -> Vec<Step> {
    use Step::*;
    if v.phase.is_terminal() {
        return vec![];
    }
    let before_switch = matches!(v.phase, Phase::WaitingReady | Phase::AwaitingConfirmation);
    if before_switch && v.rejected {
        return vec![StopNew, Enter(Phase::Cancelled, Some("rejected".into()))];
    }
    if before_switch && v.new == NewService::Gone {
        let why = if v.has_old && !v.old_ended {
            "the new service ended before it was ready; the old one keeps serving"
        } else {
            "the new service ended before it was ready"
        };
        return vec![Enter(Phase::Failed, Some(why.into()))];
    }
    let waiting_person = v.needs_confirmation && !v.confirmed && v.has_old;
    let switch = |has_old: bool| {
        if has_old && v.mode == Mode::WhenReady {
            vec![
                Enter(Phase::Switching, None),
                Switch,
                Enter(Phase::Draining, None),
            ]
        } else {
            vec![
                Enter(Phase::Switching, None),
                Switch,
                Enter(Phase::Done, None),
            ]
        }
    };
    let has_old = v.has_old && !v.old_ended;
    match v.phase {
        Phase::WaitingReady | Phase::AwaitingConfirmation => {
            if waiting_person {
                return if v.phase == Phase::AwaitingConfirmation {
                    vec![]
                } else if v.mode == Mode::StopFirst || v.new == NewService::Ready {
                    // stop-first asks before stopping anything; when-ready once the new one
                    // could take over.
                    vec![Enter(Phase::AwaitingConfirmation, None)]
                } else {
                    vec![]
                };
            }
            let mut out = vec![];
            if v.phase == Phase::AwaitingConfirmation {
                out.push(Enter(Phase::WaitingReady, Some("confirmed".into())));
            }
            if v.mode == Mode::StopFirst && has_old {
                out.push(StopOld);
                return out;
            }
            if v.new == NewService::Ready {
                out.extend(switch(has_old));
            }
            out
        }
        Phase::Switching => switch(has_old).into_iter().skip(1).collect(),
        Phase::Draining => {
            if v.drained || v.drain_deadline_passed || !has_old {
                let mut out = vec![];
                if !v.drained && v.drain_deadline_passed {
                    out.push(Cut);
                }
                if has_old {
                    out.push(StopOld);
                }
                out.push(Enter(Phase::Done, None));
                out
            } else {
                vec![]
            }
        }
        Phase::Done | Phase::Failed | Phase::Cancelled => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Step::*;

    fn view() -> View {
        View {
            phase: super::Phase::WaitingReady,
            mode: Mode::WhenReady,
            needs_confirmation: false,
            confirmed: false,
            rejected: false,
            has_old: true,
            old_ended: false,
            new: NewService::Starting,
            drained: false,
            drain_deadline_passed: false,
        }
    }

    #[test]
    fn the_old_one_serves_until_the_new_one_is_ready() {
        assert!(step(&view()).is_empty());
        let ready = View {
            new: NewService::Ready,
            ..view()
        };
        assert_eq!(
            step(&ready),
            vec![
                Enter(super::Phase::Switching, None),
                Switch,
                Enter(super::Phase::Draining, None)
            ]
        );
    }

    #[test]
    fn draining_ends_with_the_old_workflow_stopped() {
        let d = View {
            phase: super::Phase::Draining,
            new: NewService::Ready,
            ..view()
        };
        assert!(step(&d).is_empty(), "in flight: wait");
        let drained = View {
            drained: true,
            ..d.clone()
        };
        assert_eq!(
            step(&drained),
            vec![StopOld, Enter(super::Phase::Done, None)]
        );
        let late = View {
            drain_deadline_passed: true,
            ..d
        };
        assert_eq!(
            step(&late),
            vec![Cut, StopOld, Enter(super::Phase::Done, None)]
        );
    }

    #[test]
    fn a_first_attach_switches_without_draining_or_asking() {
        let first = View {
            has_old: false,
            needs_confirmation: true,
            new: NewService::Ready,
            ..view()
        };
        assert_eq!(
            step(&first),
            vec![
                Enter(super::Phase::Switching, None),
                Switch,
                Enter(super::Phase::Done, None)
            ]
        );
    }

    #[test]
    fn a_new_service_that_fails_before_ready_fails_the_takeover() {
        let gone = View {
            new: NewService::Gone,
            ..view()
        };
        let s = step(&gone);
        assert!(
            matches!(&s[..], [Enter(super::Phase::Failed, Some(r))] if r.contains("keeps serving"))
        );
        let after_switch = View {
            phase: super::Phase::Draining,
            new: NewService::Gone,
            ..view()
        };
        assert!(
            step(&after_switch).is_empty(),
            "once switched, draining goes on"
        );
    }

    #[test]
    fn confirmation_waits_for_a_person() {
        let ask = View {
            needs_confirmation: true,
            new: NewService::Ready,
            ..view()
        };
        assert_eq!(
            step(&ask),
            vec![Enter(super::Phase::AwaitingConfirmation, None)]
        );
        let waiting = View {
            phase: super::Phase::AwaitingConfirmation,
            ..ask.clone()
        };
        assert!(step(&waiting).is_empty());
        let yes = View {
            confirmed: true,
            ..waiting.clone()
        };
        assert_eq!(
            step(&yes),
            vec![
                Enter(super::Phase::WaitingReady, Some("confirmed".into())),
                Enter(super::Phase::Switching, None),
                Switch,
                Enter(super::Phase::Draining, None)
            ]
        );
        let no = View {
            rejected: true,
            ..waiting
        };
        assert_eq!(
            step(&no),
            vec![
                StopNew,
                Enter(super::Phase::Cancelled, Some("rejected".into()))
            ]
        );
        let not_ready_yet = View {
            needs_confirmation: true,
            ..view()
        };
        assert!(
            step(&not_ready_yet).is_empty(),
            "when-ready asks once the new one is ready"
        );
    }

    #[test]
    fn stop_first_stops_the_old_one_then_switches_when_ready() {
        let sf = View {
            mode: Mode::StopFirst,
            ..view()
        };
        assert_eq!(step(&sf), vec![StopOld]);
        let old_gone = View {
            old_ended: true,
            ..sf.clone()
        };
        assert!(step(&old_gone).is_empty(), "waiting for the new one");
        let ready = View {
            new: NewService::Ready,
            ..old_gone
        };
        assert_eq!(
            step(&ready),
            vec![
                Enter(super::Phase::Switching, None),
                Switch,
                Enter(super::Phase::Done, None)
            ]
        );
        let ask = View {
            needs_confirmation: true,
            ..sf
        };
        assert_eq!(
            step(&ask),
            vec![Enter(super::Phase::AwaitingConfirmation, None)],
            "asks before stopping anything"
        );
    }

    #[test]
    fn terminal_phases_do_nothing() {
        for p in [
            super::Phase::Done,
            super::Phase::Failed,
            super::Phase::Cancelled,
        ] {
            assert!(step(&View {
                phase: p,
                rejected: true,
                ..view()
            })
            .is_empty());
        }
    }
}
