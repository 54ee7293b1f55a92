//! Image builds as steps of a workflow: at submit, each recipe's base is resolved to a manifest
//! digest and its cache keys computed (`gantry_core::build`); the build becomes a task
//! (`build:NAME`) that the jobs using the image depend on, unless the object cache already
//! holds its result, in which case no build runs at all.

use crate::plan::builds::{step_key, BuildPlan, PLATFORM};
use base64::Engine;
use gantry_api::agent::{BuildFile, BuildStep, ImageSource};
use gantry_core::build::{self as keys, FileInput, Step};
use gantry_spec::{ImageScope, Workflow};
use gantry_store::Store;
use sha2::{Digest, Sha256};
use std::path::Path;

use crate::error::ApiError;
use crate::ServerConfig;

/// How the reason of a build task that a cache hit ended begins: the submit writes it, and its
/// log shows it in place of output that never was.
pub(crate) const CACHE_HIT: &str = "cache hit: ";

/// `docker://host/repo:tag` -> `docker://host/repo@digest`, so every node builds on exactly the
/// base the keys name. Layouts (`oci://`) are kept as they are: their digest is their content.
fn pin(uri: &str, digest: &str) -> String {
    let Some(rest) = uri.strip_prefix("docker://") else {
        return uri.to_string();
    };
    let rest = rest.split('@').next().unwrap_or(rest);
    let name = match rest.rfind(':') {
        Some(i) if !rest[i..].contains('/') => &rest[..i],
        _ => rest,
    };
    format!("docker://{name}@{digest}")
}

/// Resolves bases and computes keys for every recipe of a workflow.
pub async fn plan(
    config: &ServerConfig,
    wf: &Workflow,
    c: &crate::caller::Caller,
) -> Result<Vec<BuildPlan>, ApiError> {
    let (owner, group) = (&c.user.name, &c.user.group);
    let mut out = vec![];
    for (name, r) in &wf.images {
        // The agent pulls the base with its own token and may link the base's layers into the
        // build's repository from the base's, so a base in the object cache must be one the
        // submitter may use; checked before anything is asked of it.
        may_use(
            &r.from,
            &config.registry_host(),
            c,
            &format!("images.{name}.from"),
        )?;
        let src = ImageSource {
            uri: r.from.clone(),
            credential: None,
            secret: None,
        };
        let digest = gantry_oci::resolve_digest(&src, &config.pull, config.read_layout)
            .await
            .map_err(|e| {
                ApiError::BadRequest(format!(
                    "images.{name}.from: cannot resolve {}: {e}",
                    r.from
                ))
            })?;
        let mut steps = vec![];
        let mut inputs = vec![];
        if !r.files.is_empty() {
            let mut files = vec![];
            let mut ins = vec![];
            for (target, file) in &r.files {
                let content = wf.files.get(file).cloned().unwrap_or_default();
                ins.push(FileInput {
                    path: target.clone(),
                    mode: 0o644,
                    uid: 0,
                    gid: 0,
                    digest: format!("sha256:{}", hex::encode(Sha256::digest(content.as_bytes()))),
                });
                files.push(BuildFile {
                    target: target.clone(),
                    content: base64::engine::general_purpose::STANDARD.encode(content.as_bytes()),
                    mode: 0o644,
                });
            }
            inputs.push(Step::Files(ins));
            steps.push(BuildStep::Files {
                key: String::new(),
                files,
            });
        }
        for cmd in &r.run {
            inputs.push(Step::Run {
                command: cmd.clone(),
                env: r.env.clone(),
                workdir: "/".into(),
                network: "none".into(),
            });
            steps.push(BuildStep::Run {
                key: String::new(),
                command: cmd.clone(),
                env: r.env.clone(),
                workdir: None,
            });
        }
        for (step, key) in steps
            .iter_mut()
            .zip(keys::chain(PLATFORM, &digest, &inputs))
        {
            match step {
                BuildStep::Files { key: k, .. } | BuildStep::Run { key: k, .. } => *k = key,
            }
        }
        let repository = match r.scope {
            ImageScope::User => format!("user/{owner}/{name}"),
            ImageScope::Group => format!("group/{group}/{name}"),
        };
        out.push(BuildPlan {
            name: name.clone(),
            repository,
            base: pin(&r.from, &digest),
            base_digest: digest,
            steps,
            env: r.env.clone(),
        });
    }
    Ok(out)
}

/// Turns the recipes into tasks: each build becomes a job `build:NAME` placed before the
/// others, and each step that runs in a built image pulls it from the object cache and waits
/// for its build.
pub fn attach(plan: &mut crate::plan::WorkflowPlan, builds: Vec<BuildPlan>, registry: &str) {
    use crate::plan::{DepPlan, JobPlan};
    for job in plan.jobs.iter_mut() {
        let Some(name) = job.image_build.clone() else {
            continue;
        };
        let Some(b) = builds.iter().find(|b| b.name == name) else {
            continue;
        };
        job.image = format!("docker://{registry}/{}:{}", b.repository, b.final_key());
        job.depends_on.push(DepPlan {
            name: b.task_name(),
            running: false,
        });
    }
    let tasks: Vec<JobPlan> = builds
        .iter()
        .map(|b| JobPlan {
            build: Some(b.name.clone()),
            ..JobPlan::internal(b.task_name(), b.base.clone())
        })
        .collect();
    plan.jobs.splice(0..0, tasks);
    plan.builds = builds;
}

fn repo_parts(repository: &str) -> Option<(&str, &str, &str)> {
    let mut it = repository.splitn(3, '/');
    Some((it.next()?, it.next()?, it.next()?))
}

/// Whether the object cache holds the result of this build already: then no build runs.
pub async fn cached(store: &dyn Store, b: &BuildPlan) -> Result<Option<String>, ApiError> {
    let Some((scope, owner, name)) = repo_parts(&b.repository) else {
        return Ok(None);
    };
    let key = gantry_store::ImageKey {
        scope: scope.into(),
        owner: owner.into(),
        name: name.into(),
        tag: b.final_key(),
    };
    Ok(store.image(&key).await?.map(|i| i.digest))
}

/// A blob of the object cache. The registry keeps them at this path, content-addressed.
async fn read_blob(data_dir: &Path, digest: &str) -> Option<Vec<u8>> {
    let hex = digest.strip_prefix("sha256:")?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    tokio::fs::read(data_dir.join("objects/blobs/sha256").join(hex))
        .await
        .ok()
}

/// Fills in `build.cached`: the layers the object cache already holds for the build's first
/// steps (earlier builds of the same repository annotate each layer with its step's key), so
/// the agent resumes after them. Done when the assignment is sent, so it sees the latest cache.
pub async fn fill_cached(
    store: &dyn Store,
    data_dir: &Path,
    asg: &mut gantry_api::agent::Assignment,
) {
    use gantry_api::agent::{CachedLayer, BUILD_KEY_ANNOTATION};
    let Some(spec) = asg.build.as_mut() else {
        return;
    };
    // The administrator's network policy for builds, as it is when the build is sent.
    if let Ok(Some(net)) = store.setting("builds.network").await {
        if net == "bridge" || net == "none" {
            spec.network = net;
        }
    }
    let Some((scope, owner, name)) = repo_parts(&spec.repository) else {
        return;
    };
    let Ok(images) = store.images(Some((scope, owner, name))).await else {
        return;
    };
    let mut known: std::collections::HashMap<String, CachedLayer> = Default::default();
    let mut newest: Vec<&gantry_store::ImageRow> = images.iter().collect();
    newest.sort_by_key(|i| std::cmp::Reverse(i.created_at));
    for img in newest {
        let Some(bytes) = read_blob(data_dir, &img.digest).await else {
            continue;
        };
        let Ok(m) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
            continue;
        };
        let Some(config) = m["config"]["digest"].as_str() else {
            continue;
        };
        let Some(cfg) = read_blob(data_dir, config).await else {
            continue;
        };
        let Ok(cfg) = serde_json::from_slice::<serde_json::Value>(&cfg) else {
            continue;
        };
        let diff_ids = cfg["rootfs"]["diff_ids"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let layers = m["layers"].as_array().cloned().unwrap_or_default();
        for (i, l) in layers.iter().enumerate() {
            let Some(key) = l["annotations"][BUILD_KEY_ANNOTATION].as_str() else {
                continue;
            };
            let (Some(digest), Some(diff_id)) = (
                l["digest"].as_str(),
                diff_ids.get(i).and_then(|d| d.as_str()),
            ) else {
                continue;
            };
            known.entry(key.to_string()).or_insert_with(|| CachedLayer {
                key: key.to_string(),
                digest: digest.to_string(),
                diff_id: diff_id.to_string(),
                size: l["size"].as_u64().unwrap_or(0),
                media_type: l["mediaType"].as_str().unwrap_or_default().to_string(),
            });
        }
    }
    let keys: Vec<String> = spec.steps.iter().map(step_key).collect();
    let n = keys::cached_prefix(&keys, |k| known.contains_key(k));
    spec.cached = keys[..n].iter().filter_map(|k| known.remove(k)).collect();
}

/// Jobs may name images of this server's object cache directly (`docker://<server>/...`);
/// agents can pull anything, so the submitter's right to each is checked here.
pub fn check_image_access(
    plan: &crate::plan::WorkflowPlan,
    registry: &str,
    c: &crate::caller::Caller,
) -> Result<(), ApiError> {
    for j in plan
        .jobs
        .iter()
        .filter(|j| j.build.is_none() && j.image_build.is_none())
    {
        may_use(&j.image, registry, c, &format!("jobs.{}.image.uri", j.name))?;
    }
    Ok(())
}

/// Refuses an image of the object cache that the caller may not use; `field` says where the
/// workflow file names it. Other images are not the cache's to judge.
fn may_use(
    uri: &str,
    registry: &str,
    c: &crate::caller::Caller,
    field: &str,
) -> Result<(), ApiError> {
    let Some(rest) = uri.strip_prefix(&format!("docker://{registry}/")) else {
        return Ok(());
    };
    let repo = rest.split(['@', ':']).next().unwrap_or(rest);
    let ok = c.is_admin()
        || match repo_parts(repo) {
            Some(("user", owner, _)) => owner == c.user.name,
            Some(("group", group, _)) => group == c.user.group,
            _ => false,
        };
    if ok {
        Ok(())
    } else {
        Err(ApiError::BadRequest(format!(
            "{field}: no image {repo} in this cluster's object cache that you may use"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_are_pinned_to_their_digest() {
        assert_eq!(
            pin("docker://127.0.0.1:5055/library/busybox:1", "sha256:ab"),
            "docker://127.0.0.1:5055/library/busybox@sha256:ab"
        );
        assert_eq!(
            pin("docker://busybox", "sha256:ab"),
            "docker://busybox@sha256:ab"
        );
        assert_eq!(
            pin("docker://h/r@sha256:00", "sha256:ab"),
            "docker://h/r@sha256:ab"
        );
        assert_eq!(pin("oci:///x/layout:1", "sha256:ab"), "oci:///x/layout:1");
    }
}
