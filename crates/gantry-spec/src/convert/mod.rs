//! From the positioned YAML tree to the typed workflow, checking as it goes.
//!
//! Every check records a diagnostic and carries on, so one pass reports all
//! problems. Names that other entries refer to (files, volumes, images,
//! jobs, services) are collected before anything is converted, so references
//! are checked where they are written.

mod document;
mod images;
mod prim;
mod schema;
mod services;
mod steps;
mod volumes;

use std::collections::BTreeSet;

use crate::diag::{Diags, Pos};
use crate::model::*;
use crate::yaml::Node;

pub(crate) use prim::child;

pub(crate) struct Cx<'d> {
    d: &'d mut Diags,
    names: Names,
}

/// Names defined in the file, collected before conversion.
#[derive(Default)]
struct Names {
    files: BTreeSet<String>,
    volumes: BTreeSet<String>,
    images: BTreeSet<String>,
    jobs: BTreeSet<String>,
    services: BTreeSet<String>,
}

/// Every task of a workflow is stored when it is submitted, so a file may ask for at most
/// this many, in one task array and in all.
pub const MAX_TASKS: u64 = 1_000_000;

/// The most nodes one multinode job may span. A gang is placed whole or not at all, so the
/// controller must see every waiting member at once: its snapshot lists up to 64 waiting tasks
/// of a job (the store's `PENDING_WINDOW`, which a server test holds this to).
pub const MAX_MULTINODE_NODES: u32 = 64;

/// The workflow's tasks in all (one per job or service, or per task-array member) within
/// [`MAX_TASKS`]; past it, the job that crosses the limit, in file order, is named.
pub(crate) fn check_task_total(wf: &Workflow, diags: &mut Diags) {
    let mut steps: Vec<(Pos, &str, Option<u64>)> = wf
        .jobs
        .values()
        .map(|j| {
            (
                j.pos,
                j.name.as_str(),
                j.task_array
                    .as_ref()
                    .map(TaskArray::len)
                    .or(j.multinode.as_ref().map(|m| u64::from(m.nodes))),
            )
        })
        .collect();
    let services = wf.services.len() as u64;
    let total = services + steps.iter().map(|s| s.2.unwrap_or(1)).sum::<u64>();
    if total <= MAX_TASKS {
        return;
    }
    steps.sort();
    let mut so_far = services;
    for (pos, name, array) in steps {
        so_far += array.unwrap_or(1);
        if so_far > MAX_TASKS {
            let (path, with) = match array {
                Some(n) => (
                    child(&child("jobs", name), "task-array"),
                    format!("its {n} tasks"),
                ),
                None => (child("jobs", name), "it".to_string()),
            };
            let msg = format!(
                "with {with}, the workflow makes {total} tasks; a workflow runs at most {MAX_TASKS} in all"
            );
            diags.err(pos, &path, msg);
            return;
        }
    }
}

/// Converts and checks a loaded document. Returns the workflow when the
/// document is usable at all; the caller decides by the diagnostics whether
/// it is valid.
pub(crate) fn convert(root: &Node, diags: &mut Diags) -> Option<Workflow> {
    let mut cx = Cx {
        d: diags,
        names: Names::default(),
    };
    cx.workflow(root)
}
