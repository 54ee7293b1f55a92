//! Any UTF-8 text must give a workflow or diagnostics, never a panic; and a
//! workflow that parses must satisfy what `parse` promises.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match gantry_spec::parse(text) {
        Ok(wf) => {
            let order = wf.topo_order();
            assert_eq!(order.len(), wf.jobs.len() + wf.services.len());
            // Every step comes after what it depends on.
            for (i, step) in order.iter().enumerate() {
                for dep in wf.dependencies_of(step) {
                    let at = order.iter().position(|s| *s == dep.name);
                    assert!(at.is_some_and(|at| at < i), "{step} before {}", dep.name);
                }
            }
        }
        Err(diags) => {
            assert!(!diags.is_empty());
            assert!(
                diags.windows(2).all(|w| w[0] <= w[1]),
                "diagnostics unsorted"
            );
            // YAML breaks lines at `\r\n`, `\r` and `\n`; a position may be
            // just past the last line (the end-of-file marker).
            let lines = text
                .replace("\r\n", "\n")
                .replace('\r', "\n")
                .split('\n')
                .count();
            for d in &diags {
                assert!(d.line >= 1 && d.line <= lines && d.column >= 1, "{d:?}");
                assert!(!d.message.is_empty());
            }
        }
    }
});
