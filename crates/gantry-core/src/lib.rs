//! Gantry's decisions as pure functions: scheduler, workflow state machine, hold policy.
