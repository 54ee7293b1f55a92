//! Gantry's decisions as pure functions: scheduler, workflow state machine, hold policy.
//!
//! Invariant: no I/O, no async, no clock reads. Time is passed in as [`engine::Millis`].

pub mod build;
pub mod engine;
pub mod holds;
pub mod scheduler;
pub mod takeover;
