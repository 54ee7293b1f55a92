//! A workflow's volumes in its plan: the persistent ones the server resolves at submit, the
//! transfer steps that move a volume's data in and out, and where each volume lives on a node.

use std::collections::BTreeMap;

use gantry_api::agent::{TransferItem, TransferSpec};
use gantry_api::VolumeScope;
use gantry_spec::{Scope, VolumeKind, Workflow};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::b64;
use super::{DepPlan, JobPlan, WorkflowPlan};

/// A persistent volume a workflow mounts: what the file asks for, and (filled in by the server
/// at submit) the volume it is.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PersistentPlan {
    /// `None` (v4 `use: persistent`): whichever of the user's and the group's holds `name`.
    pub scope: Option<VolumeScope>,
    pub name: String,
    /// A storage provisioner the file names (`use: S` or `volume://SCOPE/S/NAME`).
    pub storage: Option<String>,
    /// A legacy `reference:` makes the volume on first use; v4 `use:`/`name:` needs it made.
    pub made_on_use: bool,
    #[serde(default)]
    pub resolved: Option<ResolvedVolume>,
}

/// Where a persistent volume lives, for the agents.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResolvedVolume {
    pub id: Uuid,
    /// The storage's directory; `None`: the agent's storage root.
    pub root: Option<String>,
    /// The volume's directory beneath it.
    pub dir: String,
    /// The only pool whose nodes see the storage; `None`: every pool.
    #[serde(default)]
    pub pool: Option<String>,
}

/// The persistent volumes a workflow mounts, by its volume name; ephemeral ones stay out.
pub(super) fn persistent(wf: &Workflow) -> BTreeMap<String, PersistentPlan> {
    wf.volumes
        .iter()
        .filter_map(|(name, v)| match &v.kind {
            VolumeKind::Persistent { scope, name: vol } => Some((
                name.clone(),
                PersistentPlan {
                    scope: match (v.made_on_use, scope) {
                        (false, _) => None,
                        (true, Scope::Group) => Some(VolumeScope::Group),
                        (true, _) => Some(VolumeScope::User),
                    },
                    name: vol.clone(),
                    storage: v.provisioner.clone(),
                    made_on_use: v.made_on_use,
                    resolved: None,
                },
            )),
            _ => None,
        })
        .collect()
}

/// A transfer task: the one step that moves a volume's data in one direction.
fn transfer_job(name: String, volume: &str, direction: &str, items: Vec<TransferItem>) -> JobPlan {
    JobPlan {
        // Named so the controller places its volume, and cleans it up, like a job's.
        mounts: vec![("/".into(), volume.into())],
        transfer: Some(TransferSpec {
            volume: volume.into(),
            root: None,
            direction: direction.into(),
            items,
        }),
        ..JobPlan::internal(name, String::new())
    }
}

fn transfer_items(
    wf: &Workflow,
    list: &[gantry_spec::Transfer],
    ingress: bool,
) -> Vec<TransferItem> {
    list.iter()
        .map(|t| {
            let remote = if ingress { &t.source } else { &t.destination };
            let content = t
                .source
                .uri
                .strip_prefix("file://")
                .filter(|_| ingress)
                .map(|name| b64(wf.files.get(name).map(String::as_str).unwrap_or_default()));
            let policy = t.policy.clone().unwrap_or_default();
            TransferItem {
                source: t.source.uri.clone(),
                destination: t.destination.uri.clone(),
                content,
                secret: remote.secret.clone(),
                credential: None,
                timeout_ms: policy.timeout_execute.map(|d| d.as_millis() as u64),
                attempts: policy.retry.attempts.max(1),
            }
        })
        .collect()
}

/// Adds a volume's transfers as steps: `ingress:VOLUME` before every step that mounts the
/// volume, `egress:VOLUME` after all of them have FINISHED.
pub(super) fn attach_transfers(wf: &Workflow, jobs: &mut Vec<JobPlan>) {
    let mut first = vec![];
    for (vol, v) in &wf.volumes {
        let users: Vec<String> = jobs
            .iter()
            .filter(|j| j.mounts.iter().any(|(_, m)| m == vol))
            .map(|j| j.name.clone())
            .collect();
        if !v.ingress.is_empty() {
            let name = format!("ingress:{vol}");
            for j in jobs.iter_mut().filter(|j| users.contains(&j.name)) {
                j.depends_on.push(DepPlan {
                    name: name.clone(),
                    running: false,
                });
            }
            first.push(transfer_job(
                name,
                vol,
                "ingress",
                transfer_items(wf, &v.ingress, true),
            ));
        }
        if !v.egress.is_empty() {
            let mut job = transfer_job(
                format!("egress:{vol}"),
                vol,
                "egress",
                transfer_items(wf, &v.egress, false),
            );
            job.depends_on = users
                .into_iter()
                .map(|name| DepPlan {
                    name,
                    running: false,
                })
                .collect();
            jobs.push(job);
        }
    }
    jobs.splice(0..0, first);
}

/// Where a workflow's volume lives on a node: a persistent one in its storage (resolved at
/// submit), an ephemeral one beneath the storage root, per workflow.
pub fn volume_dir(
    plan: &WorkflowPlan,
    pool: &str,
    wf: Uuid,
    volume: &str,
) -> (String, Option<String>) {
    match plan
        .persistent
        .get(volume)
        .and_then(|v| v.resolved.as_ref())
    {
        Some(r) => (r.dir.clone(), r.root.clone()),
        None => (format!("{pool}/ephemeral/{wf}/{volume}"), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{compile, support};

    #[test]
    fn persistent_volumes_compile_into_what_the_server_resolves() {
        let wf = gantry_spec::parse(
            r#"version: v4
volumes:
  named: {use: persistent, name: results, size: 1GB}
  home: {reference: volume://user/persistent}
  team: {reference: volume://group/lustre/models}
  fds: {name: fds, reference: volume://user/ephemeral}
  odd: {use: lustre}
jobs:
  j:
    image: {uri: docker://alpine}
    command: ["true"]
    mounts: {/a: named, /b: home, /c: team, /d: fds}
"#,
        )
        .unwrap();
        let s = support(&wf);
        assert_eq!(
            s.unsupported,
            ["volumes.odd: ephemeral volumes live beneath each node's storage root; a storage provisioner holds persistent volumes only (give the volume a `name`)"]
        );
        assert_eq!(s.ignored, ["volumes.named.size: not acted on (no quotas)"]);
        let p = compile(&wf).persistent;
        assert_eq!(
            p.keys().collect::<Vec<_>>(),
            ["home", "named", "team"],
            "the ephemeral ones stay out"
        );
        let want =
            |scope: Option<&str>, name: &str, storage: Option<&str>, made: bool| PersistentPlan {
                scope: scope.map(|s| s.parse().expect("a scope's word")),
                name: name.into(),
                storage: storage.map(str::to_string),
                made_on_use: made,
                resolved: None,
            };
        assert_eq!(p["named"], want(None, "results", None, false));
        assert_eq!(p["home"], want(Some("user"), "default", None, true));
        assert_eq!(
            p["team"],
            want(Some("group"), "models", Some("lustre"), true)
        );
    }
}
