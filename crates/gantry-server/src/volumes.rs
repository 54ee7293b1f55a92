//! Persistent volumes and the storage provisioners they live on. A volume is scoped to a user
//! or a group, like images and secrets: someone outside its scope is told "not found". Its
//! directory is `<storage>/<id>` (the built-in `default` storage: `persistent/<id>` beneath each
//! agent's storage root), so a name never becomes a path on a node. Workflows name volumes by
//! `use: persistent` + `name:` (must exist) or a legacy `volume://SCOPE/persistent[/NAME]`
//! (made on first use, as Fuzzball v3 did); the server resolves them at submit and the plan
//! carries where each lives.

use crate::plan::{ResolvedVolume, WorkflowPlan};
use gantry_api::v1::{StorageInfo, VolumeInfo};
use gantry_intake::requests::DEFAULT_STORAGE;
use gantry_store::{StorageDriver, StorageRow, Store, VolumeRow, VolumeScope};
use uuid::Uuid;

use crate::caller::Caller;
use crate::clock::now_ms;
use crate::error::ApiError;

/// Where the built-in storage keeps volumes, beneath each agent's `--storage-root`.
const DEFAULT_DIR: &str = "persistent";

pub(crate) fn builtin() -> StorageInfo {
    StorageInfo {
        name: DEFAULT_STORAGE.into(),
        driver: StorageDriver::HostPath.to_string(),
        path: DEFAULT_DIR.into(),
        pool: None,
        groups: None,
        builtin: true,
    }
}

pub(crate) fn info(s: StorageRow) -> StorageInfo {
    StorageInfo {
        name: s.name,
        driver: s.driver.to_string(),
        path: s.path,
        pool: s.pool,
        groups: s.groups,
        builtin: false,
    }
}

/// The storage of that name, when the caller's group may use it. One the caller may not use
/// is not found, like anything else outside their reach.
pub(crate) async fn usable_storage(
    store: &dyn Store,
    c: &Caller,
    name: &str,
) -> Result<StorageInfo, ApiError> {
    if name == DEFAULT_STORAGE {
        return Ok(builtin());
    }
    let s = store
        .storages()
        .await?
        .into_iter()
        .find(|s| s.name == name)
        .filter(|s| may_use(c, s))
        .ok_or_else(|| ApiError::NotFound(format!("no storage {name}")))?;
    Ok(info(s))
}

pub(crate) fn may_use(c: &Caller, s: &StorageRow) -> bool {
    c.is_admin() || s.groups.as_ref().is_none_or(|g| g.contains(&c.user.group))
}

pub(crate) fn resolved(v: &VolumeRow, s: &StorageInfo) -> ResolvedVolume {
    if s.builtin {
        ResolvedVolume {
            id: v.id,
            root: None,
            dir: format!("{DEFAULT_DIR}/{}", v.id),
            pool: None,
        }
    } else {
        ResolvedVolume {
            id: v.id,
            root: Some(s.path.clone()),
            dir: v.id.to_string(),
            pool: s.pool.clone(),
        }
    }
}

pub(crate) fn owner_of(c: &Caller, scope: VolumeScope) -> String {
    if scope == VolumeScope::Group {
        c.user.group.clone()
    } else {
        c.user.name.clone()
    }
}

pub(crate) fn volume_info(v: VolumeRow, mounted_by: Vec<Uuid>) -> VolumeInfo {
    VolumeInfo {
        id: v.id,
        uri: format!("volume://{}/persistent/{}", v.scope, v.name),
        scope: v.scope.to_string(),
        owner: v.owner,
        name: v.name,
        storage: v.storage,
        created_by: v.created_by,
        created_at: crate::clock::ts(v.created_at),
        mounted_by,
    }
}

/// The volumes the caller sees: their own and their group's.
pub(crate) fn owners(c: &Caller) -> Vec<(VolumeScope, String)> {
    vec![
        (VolumeScope::User, c.user.name.clone()),
        (VolumeScope::Group, c.user.group.clone()),
    ]
}

/// Finds each persistent volume the plan mounts among the submitter's, checks the storage it
/// is on may be used, and records where it lives. A legacy reference to a volume that does not
/// exist yet gets a new one planned; [`make_on_first_use`] makes it when the workflow is stored.
/// Nothing is written here: a refused submit changes nothing.
pub async fn resolve(
    store: &dyn Store,
    c: &Caller,
    plan: &mut WorkflowPlan,
) -> Result<(), ApiError> {
    let mut problems = vec![];
    for (key, p) in plan.persistent.iter_mut() {
        let scopes: Vec<VolumeScope> = match p.scope {
            Some(s) => vec![s],
            None => vec![VolumeScope::User, VolumeScope::Group],
        };
        let mut found = vec![];
        for &scope in &scopes {
            if let Some(v) = store.volume(scope, &owner_of(c, scope), &p.name).await? {
                found.push(v);
            }
        }
        let v = match (found.len(), p.made_on_use) {
            (1, _) => found.pop().expect("one"),
            (0, true) => VolumeRow {
                id: Uuid::new_v4(),
                scope: scopes[0],
                owner: owner_of(c, scopes[0]),
                name: p.name.clone(),
                storage: p.storage.clone().unwrap_or_else(|| DEFAULT_STORAGE.into()),
                created_by: c.user.name.clone(),
                created_at: 0,
            },
            (0, false) => {
                problems.push(format!(
                    "volumes.{key}: persistent volume {:?} does not exist: create it with `gantry volume create {}`{}",
                    p.name,
                    p.name,
                    p.storage.as_ref().map(|s| format!(" --storage {s}")).unwrap_or_default()
                ));
                continue;
            }
            _ => {
                problems.push(format!(
                    "volumes.{key}: both you and your group have a volume {:?}: say which with `reference: volume://user/persistent/{}` or `volume://group/persistent/{}`",
                    p.name, p.name, p.name
                ));
                continue;
            }
        };
        if let Some(want) = &p.storage {
            if *want != v.storage {
                problems.push(format!(
                    "volumes.{key}: volume {:?} is on storage {}, not {want}",
                    p.name, v.storage
                ));
                continue;
            }
        }
        match usable_storage(store, c, &v.storage).await {
            Ok(s) => p.resolved = Some(resolved(&v, &s)),
            Err(ApiError::NotFound(_)) => problems.push(format!(
                "volumes.{key}: no storage {} (or your group may not use it)",
                v.storage
            )),
            Err(e) => return Err(e),
        }
    }
    for j in &plan.jobs {
        let pools: std::collections::BTreeSet<&str> = j
            .mounts
            .iter()
            .filter_map(|(_, vol)| plan.persistent.get(vol)?.resolved.as_ref()?.pool.as_deref())
            .collect();
        if pools.len() > 1 {
            problems.push(format!(
                "{}: its volumes live in different pools ({}): no node sees them all",
                j.name,
                pools.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApiError::BadRequest(problems.join("\n")))
    }
}

/// Makes the volumes [`resolve`] planned for legacy references, as the workflow is stored. One
/// made meanwhile (a second workflow submitted at once) is used instead.
pub async fn make_on_first_use(
    store: &dyn Store,
    c: &Caller,
    plan: &mut WorkflowPlan,
) -> Result<(), ApiError> {
    for p in plan.persistent.values_mut() {
        let (Some(r), Some(scope)) = (p.resolved.as_mut(), p.scope) else {
            continue;
        };
        if !p.made_on_use {
            continue;
        }
        let want = VolumeRow {
            id: r.id,
            scope,
            owner: owner_of(c, scope),
            name: p.name.clone(),
            storage: p.storage.clone().unwrap_or_else(|| DEFAULT_STORAGE.into()),
            created_by: c.user.name.clone(),
            created_at: now_ms(),
        };
        let got = store.ensure_volume(&want, now_ms()).await?;
        if got.id != r.id {
            let s = usable_storage(store, c, &got.storage).await?;
            *r = resolved(&got, &s);
        }
    }
    Ok(())
}

pub(crate) async fn visible_volume(
    store: &dyn Store,
    c: &Caller,
    scope: &str,
    name: &str,
) -> Result<VolumeRow, ApiError> {
    let missing = || ApiError::NotFound(format!("no volume {scope}/{name}"));
    let Ok(scope) = scope.parse() else {
        return Err(missing());
    };
    store
        .volume(scope, &owner_of(c, scope), name)
        .await?
        .ok_or_else(missing)
}

/// A removed persistent volume's directory goes too, by a live agent of each pool that sees
/// its storage.
pub(crate) async fn remove_persistent(
    store: &dyn Store,
    v: &crate::plan::ResolvedVolume,
) -> anyhow::Result<()> {
    let pools: std::collections::BTreeSet<String> = match &v.pool {
        Some(p) => [p.clone()].into(),
        None => store.nodes().await?.into_iter().map(|n| n.pool).collect(),
    };
    let kind = gantry_api::agent::ChoreKind::RemoveVolume {
        path: v.dir.clone(),
        root: v.root.clone(),
    };
    for pool in pools {
        store
            .add_chore(&gantry_store::ChoreRow {
                id: Uuid::new_v4(),
                pool,
                kind: kind.clone(),
                created_at: now_ms(),
                sent_to: None,
            })
            .await?;
    }
    Ok(())
}
