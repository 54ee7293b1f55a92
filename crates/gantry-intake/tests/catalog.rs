//! The vendor catalog's applications (rendered) through what `gantry workflow start` checks
//! before it submits: each file parses and validates, and Gantry can run all of it
//! (`plan::support`, the function the server calls).
//!
//! The vendor's files are not ours to ship, so they are read where the reference material keeps
//! them: `$GANTRY_CATALOG`, else `../shared/reference/fuzzfiles` beside the repository. Where
//! neither exists the vendor files are not checked (said on stderr); Gantry's own v1 file in
//! `tests/catalog/` always is.
//!
//! Each file states the refusals that remain expected (none now): a refusal that disappears,
//! or a new one, fails the test.

use gantry_core::plan;
use gantry_intake::requests;
use std::collections::BTreeMap;

/// Per file, what `support` refuses today. A file not listed must pass: since issue 15
/// (multinode, host networking) none of the vendor's files is refused.
const EXPECTED: &[(&str, &[&str])] = &[];

/// The multinode and host-network applications issue 15 makes runnable: each must be in the
/// catalog and pass.
const ISSUE_15: &[&str] = &[
    "lammps_cpu.yaml",
    "openfoam_motorbike.yaml",
    "llm_client_server.yaml",
    "nim_flux_webui.yaml",
];

#[test]
fn every_catalog_file_passes_start_checks_but_for_its_stated_refusals() {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let yaml = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        v.sort();
        v
    };
    let mut files = yaml(&manifest.join("tests/catalog"));
    let vendor = std::env::var_os("GANTRY_CATALOG")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| manifest.join("../../../shared/reference/fuzzfiles"));
    if vendor.is_dir() {
        let found = yaml(&vendor);
        assert!(
            found.len() >= 21,
            "{} holds {} files",
            vendor.display(),
            found.len()
        );
        files.extend(found);
    } else {
        assert!(
            std::env::var_os("GANTRY_CATALOG").is_none(),
            "GANTRY_CATALOG={} is not a directory",
            vendor.display()
        );
        eprintln!(
            "the vendor catalog is not at {}: only Gantry's own files are checked",
            vendor.display()
        );
    }
    let expected: BTreeMap<&str, &[&str]> = EXPECTED.iter().copied().collect();
    let mut wrong = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap().to_str().unwrap();
        let text = std::fs::read_to_string(path).unwrap();
        let got: Vec<String> = match requests::parse_spec(&text) {
            Ok(wf) => plan::support(&wf).unsupported,
            Err(r) => vec![format!("invalid: {r:?}")],
        };
        let want: Vec<String> = expected
            .get(name)
            .map(|w| w.iter().map(|s| s.to_string()).collect())
            .unwrap_or_default();
        if got != want {
            wrong.push(format!("    (\"{name}\", &{got:#?}),"));
        }
    }
    if vendor.is_dir() {
        for name in expected.keys().chain(ISSUE_15) {
            assert!(
                files.iter().any(|p| p.ends_with(name)),
                "{name} is not in {}",
                vendor.display()
            );
        }
    }
    assert!(
        wrong.is_empty(),
        "refusals differ from the table; what the files get now:\n{}",
        wrong.join("\n")
    );
}
