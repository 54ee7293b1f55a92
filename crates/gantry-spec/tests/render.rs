//! How problems are reported as a whole: all at once, sorted, rendered as
//! `FILE:LINE:COL: message`.

use gantry_spec::{parse, parse_file, render_all, Diagnostic};

const BROKEN: &str = "\
version: v4
volumes:
  scratch: {}
jobs:
  train:
    image: {uri: docker://pytorch/pytorch:2.4}
    depends-on: [{name: prep}]
    mounts:
      /scratch: {volume: scrach}
    resource:
      memory: {size: 16GB}
      cpu: {cores: 0}
    policy:
      timeout: {execute: 2days}
  eval:
    image: {uri: docker://python:3.12}
    comand: [python, eval.py]
";

#[test]
fn golden_render() {
    let diags = parse(BROKEN).unwrap_err();
    let want = "\
wf.yaml:7:25: jobs.train.depends-on[0].name: `prep` is not a job or service of this workflow; jobs: `eval`, `train`; services: (none)
wf.yaml:9:26: jobs.train.mounts[\"/scratch\"].volume: volume `scrach` is not defined under `volumes` (did you mean `scratch`?); volumes: `scratch`
wf.yaml:12:20: jobs.train.resource.cpu.cores: 0 is out of range; it must be at least 1
wf.yaml:14:26: jobs.train.policy.timeout.execute: unknown unit `days` in duration `2days`; use ns, us, ms, s, m or h
wf.yaml:17:5: jobs.eval: unknown key `comand`; did you mean `command`?
";
    assert_eq!(render_all("wf.yaml", &diags), want);
    assert_eq!(diags[0].render("wf.yaml"), want.lines().next().unwrap());
    assert_eq!(
        diags[2].to_string(),
        "12:20: jobs.train.resource.cpu.cores: 0 is out of range; it must be at least 1"
    );
}

#[test]
fn problems_are_sorted_by_position() {
    let diags = parse(BROKEN).unwrap_err();
    let positions: Vec<(usize, usize)> = diags.iter().map(|d| (d.line, d.column)).collect();
    let mut sorted = positions.clone();
    sorted.sort();
    assert_eq!(positions, sorted);
}

#[test]
fn unreadable_file_is_one_problem_at_zero() {
    let path = std::path::Path::new("/nonexistent/gantry/wf.yaml");
    let diags = parse_file(path).unwrap_err();
    assert_eq!(diags.len(), 1);
    let Diagnostic {
        line,
        column,
        message,
    } = &diags[0];
    assert_eq!((*line, *column), (0, 0));
    assert!(
        message.starts_with("cannot read /nonexistent/gantry/wf.yaml: "),
        "{message}"
    );
}

#[test]
fn positions_stay_inside_the_text() {
    // The scanner marks this error past the end of a file with no final
    // newline; it is reported at the end of the last line instead.
    let diags = parse("%v").unwrap_err();
    assert_eq!((diags[0].line, diags[0].column), (1, 3));
    // `\r` alone breaks lines in YAML.
    let diags = parse("version: v4\rjobs:\r  a: {imag: 1}\r").unwrap_err();
    assert_eq!(
        diags[0].to_string(),
        "3:3: jobs.a: missing `image`; every job needs `image: {uri: docker://...}`"
    );
}

#[test]
fn byte_order_mark_does_not_shift_columns() {
    let diags = parse("\u{feff}version: v3\n").unwrap_err();
    assert_eq!((diags[0].line, diags[0].column), (1, 10));
}
