//! The dependency graph over jobs and services.

use crate::convert::child;
use crate::diag::Diags;
use crate::model::{Dependency, StepKind, Workflow};
use std::collections::{BTreeMap, BTreeSet, HashMap};

impl Workflow {
    /// Whether `name` is a job or a service.
    pub fn step_kind(&self, name: &str) -> Option<StepKind> {
        if self.jobs.contains_key(name) {
            Some(StepKind::Job)
        } else if self.services.contains_key(name) {
            Some(StepKind::Service)
        } else {
            None
        }
    }

    /// Every job and service name, sorted.
    pub fn step_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .jobs
            .keys()
            .chain(self.services.keys())
            .map(String::as_str)
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// What `name` waits for; empty for an unknown name.
    pub fn dependencies_of(&self, name: &str) -> &[Dependency] {
        if let Some(j) = self.jobs.get(name) {
            &j.depends_on
        } else if let Some(s) = self.services.get(name) {
            &s.depends_on
        } else {
            &[]
        }
    }

    /// The steps that wait for `name`, sorted.
    pub fn dependents_of(&self, name: &str) -> Vec<&str> {
        self.step_names()
            .into_iter()
            .filter(|s| self.dependencies_of(s).iter().any(|d| d.name == name))
            .collect()
    }

    /// Jobs and services, every one after all it depends on; ties are broken
    /// by name so the order is stable. A validated workflow has no cycle; if
    /// one were there, its steps would come last, by name.
    pub fn topo_order(&self) -> Vec<String> {
        let names = self.step_names();
        let mut waiting: BTreeMap<&str, usize> = BTreeMap::new();
        let mut dependents: HashMap<&str, Vec<&str>> = HashMap::new();
        for &n in &names {
            let deps: BTreeSet<&str> = self
                .dependencies_of(n)
                .iter()
                .map(|d| d.name.as_str())
                .filter(|d| *d != n && self.step_kind(d).is_some())
                .collect();
            waiting.insert(n, deps.len());
            for d in deps {
                dependents.entry(d).or_default().push(n);
            }
        }
        let mut ready: BTreeSet<&str> = waiting
            .iter()
            .filter(|(_, c)| **c == 0)
            .map(|(n, _)| *n)
            .collect();
        let mut out = Vec::with_capacity(names.len());
        while let Some(n) = ready.pop_first() {
            out.push(n.to_string());
            waiting.remove(n);
            for d in dependents.get(n).map(Vec::as_slice).unwrap_or(&[]) {
                if let Some(c) = waiting.get_mut(d) {
                    *c -= 1;
                    if *c == 0 {
                        ready.insert(d);
                    }
                }
            }
        }
        out.extend(waiting.keys().map(|n| n.to_string()));
        out
    }

    /// The images (of the `images` section) in the order they are first
    /// needed by `topo_order`.
    pub fn builds_in_order(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for step in self.topo_order() {
            let image = match self.jobs.get(&step) {
                Some(j) => &j.image,
                None => match self.services.get(&step) {
                    Some(s) => &s.image,
                    None => continue,
                },
            };
            if let Some(b) = image.build_name() {
                if !out.iter().any(|x| x == b) {
                    out.push(b.to_string());
                }
            }
        }
        out
    }
}

fn step_path(wf: &Workflow, name: &str) -> String {
    match wf.step_kind(name) {
        Some(StepKind::Service) => child("services", name),
        _ => child("jobs", name),
    }
}

/// Reports each dependency cycle once, at the dependency that closes it.
/// Iterative, so a long chain of steps cannot exhaust the stack.
pub(crate) fn check_cycles(wf: &Workflow, diags: &mut Diags) {
    #[derive(Clone, Copy, PartialEq)]
    enum Color {
        White,
        Gray,
        Black,
    }
    let names = wf.step_names();
    let mut color: HashMap<&str, Color> = names.iter().map(|n| (*n, Color::White)).collect();
    let mut reported: BTreeSet<Vec<&str>> = BTreeSet::new();
    for &start in &names {
        if color[start] != Color::White {
            continue;
        }
        // (step, index of the next dependency to visit)
        let mut stack: Vec<(&str, usize)> = vec![(start, 0)];
        color.insert(start, Color::Gray);
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let deps = wf.dependencies_of(node);
            if *next >= deps.len() {
                color.insert(node, Color::Black);
                stack.pop();
                continue;
            }
            let dep = &deps[*next];
            *next += 1;
            let target = dep.name.as_str();
            match color.get(target).copied() {
                Some(Color::White) => {
                    color.insert(target, Color::Gray);
                    stack.push((target, 0));
                }
                Some(Color::Gray) if target != node => {
                    let from = stack.iter().position(|(n, _)| *n == target).unwrap_or(0);
                    let cycle: Vec<&str> = stack[from..].iter().map(|(n, _)| *n).collect();
                    let mut key = cycle.clone();
                    key.sort_unstable();
                    if reported.insert(key) {
                        let mut text = cycle.join(" -> ");
                        text.push_str(" -> ");
                        text.push_str(target);
                        diags.err(
                            dep.pos,
                            &step_path(wf, node),
                            format!("dependency cycle: {text}; a step cannot wait for itself"),
                        );
                    }
                }
                _ => {}
            }
        }
    }
}
