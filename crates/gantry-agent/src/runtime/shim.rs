//! The agent's side of the shim (`shim/main.rs`, a static program of its own that the runtime
//! writes to `<state_dir>/shim`): its arguments, and what it leaves for the agent to read.

use std::fs;
use std::path::Path;

/// The arguments `Runtime::start` gives the shim.
pub(crate) fn shim_args(runc: &Path, runc_root: &Path, id: &str, dir: &Path) -> Vec<String> {
    vec![
        "--runc".into(),
        runc.to_string_lossy().into_owned(),
        "--runc-root".into(),
        runc_root.to_string_lossy().into_owned(),
        "--id".into(),
        id.into(),
        "--dir".into(),
        dir.to_string_lossy().into_owned(),
    ]
}

/// The last error runc logged (its log is JSON lines: `{"level":"error","msg":...}`).
pub(crate) fn runc_error(log: &Path) -> Option<String> {
    let text = fs::read_to_string(log).ok()?;
    text.lines().rev().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        let level = v["level"].as_str()?;
        (level == "error" || level == "fatal").then(|| v["msg"].as_str().map(str::to_owned))?
    })
}

/// The shim's program, compiled here as a module too, so its code is linted and unit tested
/// with the rest (the agent runs the static build `build.rs` makes).
#[cfg(test)]
#[allow(dead_code)]
#[path = "../../shim/main.rs"]
mod shim_program;

#[cfg(test)]
mod tests {
    use super::super::ExitRecord;
    use super::shim_program::exit_record;

    #[test]
    fn the_shims_exit_record_reads_as_the_agents() {
        let message = "could not run \"/no/runc\": bad\\path\n\ttab \u{1} ünïcode";
        let rec: ExitRecord = serde_json::from_str(&exit_record(127, None, Some(message))).unwrap();
        assert_eq!(rec.exit_code, 127);
        assert_eq!(rec.start_error.as_deref(), Some(message));
        let rec: ExitRecord = serde_json::from_str(&exit_record(143, Some(15), None)).unwrap();
        assert_eq!(
            (rec.exit_code, rec.signal, rec.start_error),
            (143, Some(15), None)
        );
        let rec: ExitRecord = serde_json::from_str(&exit_record(0, None, None)).unwrap();
        assert_eq!(
            (rec.exit_code, rec.signal, rec.start_error),
            (0, None, None)
        );
    }
}
