//! Checks every `*.yaml` of a directory given by `GANTRY_FUZZFILES`, for
//! running by hand against real-world files that cannot ship with the repo:
//!
//! ```sh
//! GANTRY_FUZZFILES=../shared/reference/fuzzfiles \
//!     cargo test -p gantry-spec --test reference_dir -- --ignored
//! ```

#[test]
#[ignore = "needs GANTRY_FUZZFILES pointing at a directory of workflow files"]
fn every_file_in_directory_parses_clean() {
    let dir = std::env::var("GANTRY_FUZZFILES").expect("set GANTRY_FUZZFILES to a directory");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .expect("readable directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    entries.sort();
    assert!(!entries.is_empty(), "no .yaml files in {dir}");
    let mut failures = Vec::new();
    for path in &entries {
        if let Err(diags) = gantry_spec::parse_file(path) {
            failures.push(gantry_spec::render_all(&path.display().to_string(), &diags));
        }
    }
    assert!(failures.is_empty(), "{}", failures.concat());
    eprintln!("{} files parse clean", entries.len());
}
