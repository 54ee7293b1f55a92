//! The Fuzzfile v4 workflow file: types, parsing with positions, validation,
//! the job graph.
//!
//! [`parse`] reads a whole file and reports every problem at once, each with
//! its `line:column` and field path; a [`Workflow`] it returns is valid:
//! references resolve, the dependency graph has no cycle, and `defaults` are
//! merged into every job and service.

mod convert;
mod diag;
mod graph;
mod model;
pub mod names;
mod suggest;
mod units;
mod v1;
mod yaml;

pub use convert::{MAX_MULTINODE_NODES, MAX_TASKS};
pub use diag::{render_all, Diagnostic, Pos};
pub use model::*;
pub use units::{format_duration, parse_duration, parse_size};

use std::path::Path;

/// Parses and validates a workflow file. On failure, every problem found,
/// sorted by position.
pub fn parse(source: &str) -> Result<Workflow, Vec<Diagnostic>> {
    // A byte-order mark would shift every column of the first line.
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    let mut diags = diag::Diags::default();
    let Some(mut root) = yaml::load(source, &mut diags) else {
        return Err(finish(diags.into_sorted(), source));
    };
    let from_v1 = v1::upgrade(&mut root, &mut diags);
    let mut workflow = convert::convert(&root, &mut diags);
    if let Some(wf) = &mut workflow {
        if from_v1 {
            wf.upgraded_from = Some("v1".into());
        }
        graph::check_cycles(wf, &mut diags);
        convert::check_task_total(wf, &mut diags);
    }
    match workflow {
        Some(wf) if diags.is_empty() => Ok(wf),
        _ => {
            let mut list = diags.into_sorted();
            if list.is_empty() {
                list.push(Diagnostic::new(
                    Pos::new(1, 1),
                    "the file is not a workflow",
                ));
            }
            Err(finish(list, source))
        }
    }
}

/// The warning a file read as v4 from an older version deserves, for the
/// CLI and the server to show.
pub fn upgrade_warning(wf: &Workflow) -> Option<String> {
    wf.upgraded_from.as_ref().map(|v| {
        format!(
            "the file is `version: {v}`; it was read as v4 (mounts keyed by path, volume `name` \
             dropped); `gantry workflow upgrade FILE` prints the v4 form"
        )
    })
}

/// The v4 text of a workflow file: a valid v1 file rewritten (its comments
/// are not kept: the text is printed from the parsed tree), a v4 file as it
/// is. A file that is not valid gets its diagnostics, at positions in the
/// original text.
pub fn upgrade(source: &str) -> Result<String, Vec<Diagnostic>> {
    let wf = parse(source)?;
    if wf.upgraded_from.is_none() {
        return Ok(source.to_string());
    }
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    let mut diags = diag::Diags::default();
    let mut root = yaml::load(source, &mut diags).expect("the file parsed a moment ago");
    v1::upgrade(&mut root, &mut diags);
    let mut out = String::new();
    let mut emitter = yaml_rust2::YamlEmitter::new(&mut out);
    emitter.multiline_strings(true);
    if let Err(e) = emitter.dump(&root.to_yaml()) {
        return Err(vec![Diagnostic::new(
            Pos::new(0, 0),
            format!("cannot print the upgraded file: {e}"),
        )]);
    }
    // The emitter opens with a document marker and ends without a newline.
    let body = out.strip_prefix("---\n").unwrap_or(&out);
    Ok(format!("{body}\n"))
}

/// The YAML scanner may report an error on the line after the last one of a
/// file without a final newline; such positions move to the end of the last
/// line so that every position points into the text.
fn finish(mut list: Vec<Diagnostic>, source: &str) -> Vec<Diagnostic> {
    let normalized = source.replace("\r\n", "\n").replace('\r', "\n");
    let lines: Vec<&str> = normalized.split('\n').collect();
    let last = lines.len();
    for d in list.iter_mut() {
        if d.line > last {
            d.line = last;
            d.column = lines[last - 1].chars().count() + 1;
        }
        d.line = d.line.max(1);
        d.column = d.column.max(1);
    }
    list.sort();
    list
}

/// [`parse`] on a file's contents; a file that cannot be read is one
/// diagnostic at `0:0`.
pub fn parse_file(path: &Path) -> Result<Workflow, Vec<Diagnostic>> {
    match std::fs::read_to_string(path) {
        Ok(source) => parse(&source),
        Err(e) => Err(vec![Diagnostic::new(
            Pos::new(0, 0),
            format!("cannot read {}: {e}", path.display()),
        )]),
    }
}
