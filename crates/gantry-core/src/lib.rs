//! Gantry's decisions as pure functions: scheduler, workflow state machine, hold policy, and
//! the workflow plan (a workflow file compiled into what the controller runs, and what each
//! placed task's agent is told).
//!
//! Invariant: no I/O, no async, no clock reads. Time is passed in as [`engine::Millis`].

pub mod build;
pub mod engine;
pub mod holds;
pub mod plan;
pub mod scheduler;
pub mod takeover;
