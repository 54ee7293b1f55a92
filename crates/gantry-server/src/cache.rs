//! What the controller keeps between ticks (see [`Cache`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gantry_api::agent::{Assignment, Resources};
use gantry_core::scheduler::Res;
use gantry_store::{ActiveWorkflow, AttemptRow, WorkflowRow};
use uuid::Uuid;

use crate::plan::{WorkflowPlan, EXCLUSIVE};

/// What the controller keeps between ticks: only what never changes once written (a
/// workflow's plan, an attempt's assignment), parsed. So it cannot go stale, and the store
/// stays the truth: a restarted server starts with an empty cache and fills it from the store.
#[derive(Default)]
pub(crate) struct Cache {
    plans: Mutex<HashMap<Uuid, Arc<WorkflowPlan>>>,
    /// What each live attempt takes of its node; `None` when its assignment does not parse.
    usage: Mutex<HashMap<Uuid, Option<Usage>>>,
}

#[derive(Clone)]
pub(crate) struct Usage {
    pub(crate) res: Res,
    pub(crate) exclusive: bool,
}

impl Usage {
    /// What an assignment's resources take of its node.
    pub(crate) fn of(r: &Resources) -> Usage {
        let mut res = Res::default();
        add_used(&mut res, r);
        Usage {
            res,
            exclusive: r.devices.contains_key(EXCLUSIVE),
        }
    }

    /// The same as the store's fit check takes it: the exclusive marker a flag, not a device.
    pub(crate) fn need(&self) -> gantry_store::AttemptNeed {
        let mut devices = self.res.devices.clone();
        devices.remove(EXCLUSIVE);
        gantry_store::AttemptNeed {
            millicpus: self.res.millicpus,
            memory_bytes: self.res.memory_bytes,
            devices,
            exclusive: self.exclusive,
        }
    }
}

impl Cache {
    /// The compiled plan of the workflow with this id. Its row (with its file) is read only
    /// when the plan is not parsed yet.
    pub(crate) async fn plan_of(
        &self,
        store: &dyn gantry_store::Store,
        workflow: Uuid,
    ) -> anyhow::Result<Arc<WorkflowPlan>> {
        let cached = self.plans.lock().unwrap().get(&workflow).cloned();
        match cached {
            Some(p) => Ok(p),
            None => Ok(self.plan(&store.workflow(workflow).await?)?),
        }
    }

    /// The workflow's compiled plan.
    pub(crate) fn plan(&self, wf: &WorkflowRow) -> serde_json::Result<Arc<WorkflowPlan>> {
        if let Some(p) = self.plans.lock().unwrap().get(&wf.id) {
            return Ok(p.clone());
        }
        let plan = Arc::new(serde_json::from_str::<WorkflowPlan>(&wf.plan)?);
        self.plans.lock().unwrap().insert(wf.id, plan.clone());
        Ok(plan)
    }

    pub(crate) fn usage(&self, a: &AttemptRow) -> Option<Usage> {
        if let Some(u) = self.usage.lock().unwrap().get(&a.id) {
            return u.clone();
        }
        let u = serde_json::from_str::<Assignment>(&a.assignment)
            .ok()
            .map(|asg| Usage::of(&asg.resources));
        self.usage.lock().unwrap().insert(a.id, u.clone());
        u
    }

    /// Forgets workflows that ended and attempts that are no longer live.
    pub(crate) fn retain(&self, active: &[ActiveWorkflow]) {
        let wfs: std::collections::HashSet<Uuid> = active.iter().map(|a| a.workflow.id).collect();
        let live: std::collections::HashSet<Uuid> = active
            .iter()
            .flat_map(|a| a.live.iter().map(|l| l.id))
            .collect();
        self.plans.lock().unwrap().retain(|id, _| wfs.contains(id));
        self.usage.lock().unwrap().retain(|id, _| live.contains(id));
    }
}

fn add_used(used: &mut Res, r: &Resources) {
    used.millicpus += (r.cpus * 1000.0).round() as u64;
    used.memory_bytes += r.memory_bytes.unwrap_or(0);
    for (d, n) in &r.devices {
        *used.devices.entry(d.clone()).or_insert(0) += n;
    }
}
