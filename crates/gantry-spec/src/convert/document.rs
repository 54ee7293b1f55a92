//! The document: `version`, the names collected before anything is converted, `defaults`, and
//! each top-level section handed to its converter.

use std::collections::BTreeMap;

use crate::diag::Pos;
use crate::model::*;
use crate::yaml::{Kind, Node};

use super::prim::{child, index, Fields};
use super::schema::{DEFAULTS, DEFAULTS_JOB, DEFAULTS_SERVICE, TOP};
use super::steps::PDefaults;
use super::Cx;

impl Cx<'_> {
    pub(super) fn workflow(&mut self, root: &Node) -> Option<Workflow> {
        if !matches!(root.kind, Kind::Map(_)) {
            let msg = format!(
                "a workflow file is a mapping that starts with `version: v4`; found {}",
                root.describe()
            );
            self.err(root.pos, "", msg);
            return None;
        }
        let f = self.fields(root, "", root.pos, &TOP)?;

        // A file of another version would drown in unrelated errors; its
        // version is the one thing worth saying.
        let version = match f.get("version") {
            None => {
                self.err(
                    root.pos,
                    "",
                    "missing `version`; a workflow file starts with `version: v4`",
                );
                String::from("v4")
            }
            Some(node) => {
                let v = self.string(node, "version")?;
                match v.as_str() {
                    "v4" => v,
                    "v2" | "v3" => {
                        let msg = format!(
                            "version `{v}` is not supported; Gantry reads `version: v4` (and v1). In v4, mounts are \
                             keyed by container path (`/data: {{volume: NAME}}` instead of \
                             `NAME: {{location: /data}}`), an endpoint names its port with `port-name` \
                             instead of `port`, and volumes use `use: ephemeral|persistent` (legacy \
                             `reference: volume://...` still works)"
                        );
                        self.err(node.pos, "version", msg);
                        return None;
                    }
                    _ => {
                        let msg = format!("unsupported version `{v}`; write `version: v4`");
                        self.err(node.pos, "version", msg);
                        return None;
                    }
                }
            }
        };

        // Names first, so references can be checked where they are written.
        for (key, set) in [
            ("files", 0usize),
            ("volumes", 1),
            ("images", 2),
            ("jobs", 3),
            ("services", 4),
        ] {
            let Some(node) = f.get(key) else { continue };
            if let Kind::Map(entries) = &node.kind {
                for e in entries {
                    let target = match set {
                        0 => &mut self.names.files,
                        1 => &mut self.names.volumes,
                        2 => &mut self.names.images,
                        3 => &mut self.names.jobs,
                        _ => &mut self.names.services,
                    };
                    target.insert(e.key.clone());
                }
            }
        }

        let annotations = f
            .get("annotations")
            .map(|n| self.string_map(n, "annotations"))
            .unwrap_or_default();
        let preemptible = f
            .get("preemptible")
            .and_then(|n| self.boolean(n, "preemptible"));
        let files = f
            .get("files")
            .map(|n| self.string_map(n, "files"))
            .unwrap_or_default();

        let (top, djob, dservice) = match f.get("defaults") {
            Some(n) => self.defaults(n, f.key_pos("defaults")),
            None => Default::default(),
        };

        let mut volumes = BTreeMap::new();
        if let Some(n) = f.get("volumes") {
            for e in self.map_entries(n, "volumes") {
                let path = child("volumes", &e.key);
                if let Some(v) = self.volume(e, &path) {
                    volumes.insert(e.key.clone(), v);
                }
            }
        }

        let mut images = BTreeMap::new();
        if let Some(n) = f.get("images") {
            for e in self.map_entries(n, "images") {
                let path = child("images", &e.key);
                if let Some(v) = self.image_recipe(e, &path) {
                    images.insert(e.key.clone(), v);
                }
            }
        }

        let mut jobs = BTreeMap::new();
        if let Some(n) = f.get("jobs") {
            for e in self.map_entries(n, "jobs") {
                let path = child("jobs", &e.key);
                if let Some(job) = self.job(e, &path, &top, &djob) {
                    jobs.insert(e.key.clone(), job);
                }
            }
        }

        let mut services = BTreeMap::new();
        if let Some(n) = f.get("services") {
            for e in self.map_entries(n, "services") {
                let path = child("services", &e.key);
                if self.names.jobs.contains(&e.key) {
                    let msg = format!(
                        "a job is also named `{}`; names must be unique across jobs and services",
                        e.key
                    );
                    self.err(e.key_pos, &path, msg);
                }
                if let Some(svc) = self.service(e, &path, &top, &dservice) {
                    services.insert(e.key.clone(), svc);
                }
            }
        }

        // Two endpoints of one workflow taking over the same persistent
        // endpoint would race for it.
        let mut attached: BTreeMap<&str, Pos> = BTreeMap::new();
        for (sname, svc) in &services {
            for (i, ep) in svc.network.endpoints.iter().enumerate() {
                let Some(target) = ep.attach.as_deref() else {
                    continue;
                };
                match attached.get(target) {
                    Some(first) => {
                        let path = index(
                            &format!("{}.network.endpoints", child("services", sname)),
                            i,
                        );
                        let msg = format!(
                            "persistent endpoint `{target}` is already attached at {first}; attach it once"
                        );
                        self.err(ep.pos, &path, msg);
                    }
                    None => {
                        attached.insert(target, ep.pos);
                    }
                }
            }
        }

        if self.names.jobs.is_empty() && self.names.services.is_empty() {
            self.err(
                root.pos,
                "",
                "the workflow has no `jobs` and no `services`; it needs at least one",
            );
        }

        Some(Workflow {
            version,
            upgraded_from: None,
            annotations,
            preemptible,
            files,
            volumes,
            jobs,
            services,
            images,
        })
    }

    pub(super) fn defaults(
        &mut self,
        node: &Node,
        owner: Pos,
    ) -> (PDefaults, PDefaults, PDefaults) {
        let mut top = PDefaults::default();
        let mut job = PDefaults::default();
        let mut service = PDefaults::default();
        let Some(f) = self.fields(node, "defaults", owner, &DEFAULTS) else {
            return (top, job, service);
        };
        self.defaults_layer(&f, &mut top);
        if let Some(n) = f.get("job") {
            if let Some(jf) = self.fields(n, "defaults.job", f.key_pos("job"), &DEFAULTS_JOB) {
                self.defaults_layer(&jf, &mut job);
            }
        }
        if let Some(n) = f.get("service") {
            if let Some(sf) = self.fields(
                n,
                "defaults.service",
                f.key_pos("service"),
                &DEFAULTS_SERVICE,
            ) {
                self.defaults_layer(&sf, &mut service);
            }
        }
        (top, job, service)
    }

    pub(super) fn defaults_layer(&mut self, f: &Fields, out: &mut PDefaults) {
        if let Some(n) = f.get("env") {
            out.env = self.env(n, &f.child("env"));
        }
        if let Some(n) = f.get("mounts") {
            out.mounts = self.mounts(n, &f.child("mounts"));
        }
        if let Some(n) = f.get("resource") {
            out.resource = self.resource(n, &f.child("resource"), f.key_pos("resource"));
        }
        if let Some(n) = f.get("policy") {
            out.policy = self.policy(n, &f.child("policy"), f.key_pos("policy"));
        }
    }
}
