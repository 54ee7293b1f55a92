//! The fields jobs and services share, gathered from the workflow, so the support checks, the
//! compile and the list of `oci://` images treat both kinds of step alike.

use std::collections::BTreeMap;

use gantry_spec::{Dependency, EnvVar, FileSource, ImageRef, Mount, Policy, Resource, Workflow};

/// The fields jobs and services share, so both compile through one path.
pub(super) struct Step<'a> {
    pub(super) name: &'a str,
    pub(super) kind: &'static str,
    pub(super) image: &'a ImageRef,
    pub(super) command: &'a [String],
    pub(super) script: Option<&'a str>,
    pub(super) args: &'a [String],
    pub(super) env: &'a [EnvVar],
    pub(super) cwd: Option<&'a str>,
    pub(super) mounts: &'a BTreeMap<String, Mount>,
    pub(super) files: &'a BTreeMap<String, FileSource>,
    pub(super) resource: &'a Resource,
    pub(super) depends_on: &'a [Dependency],
    pub(super) policy: &'a Policy,
    pub(super) multinode: Option<&'a gantry_spec::Multinode>,
    pub(super) job_network: Option<&'a gantry_spec::JobNetwork>,
    pub(super) preemptible: bool,
    pub(super) task_array: Option<&'a gantry_spec::TaskArray>,
    pub(super) service: Option<&'a gantry_spec::Service>,
}

impl Step<'_> {
    pub(super) fn at(&self) -> String {
        format!("{}.{}", self.kind, self.name)
    }

    /// Multinode members share their node's network as MPI under Apptainer does: ranks talk
    /// over the nodes' own interfaces.
    pub(super) fn host_network(&self) -> bool {
        self.multinode.is_some()
            || self.job_network.is_some_and(|n| n.host)
            || self.service.is_some_and(|s| s.network.host)
    }
}

pub(super) fn steps(wf: &Workflow) -> Vec<Step<'_>> {
    let jobs = wf.jobs.iter().map(|(name, j)| Step {
        name,
        kind: "jobs",
        image: &j.image,
        command: &j.command,
        script: j.script.as_deref(),
        args: &j.args,
        env: &j.env,
        cwd: j.cwd.as_deref(),
        mounts: &j.mounts,
        files: &j.files,
        resource: &j.resource,
        depends_on: &j.depends_on,
        policy: &j.policy,
        multinode: j.multinode.as_ref(),
        job_network: j.network.as_ref(),
        preemptible: j.preemptible.is_some(),
        task_array: j.task_array.as_ref(),
        service: None,
    });
    let services = wf.services.iter().map(|(name, s)| Step {
        name,
        kind: "services",
        image: &s.image,
        command: &s.command,
        script: s.script.as_deref(),
        args: &s.args,
        env: &s.env,
        cwd: s.cwd.as_deref(),
        mounts: &s.mounts,
        files: &s.files,
        resource: &s.resource,
        depends_on: &s.depends_on,
        policy: &s.policy,
        multinode: s.multinode.as_ref(),
        job_network: None,
        preemptible: s.preemptible.is_some(),
        task_array: None,
        service: Some(s),
    });
    jobs.chain(services).collect()
}
