//! The example workflow files shipped in the binary: `gantry example` prints them and the MCP
//! server offers them as resources, so a first run needs no checkout of the repository. The
//! repository's `examples/` directory is the one source; a test checks that each validates.

pub struct Example {
    /// What `gantry example NAME` takes.
    pub name: &'static str,
    /// The file's name in the repository (and the MCP resource's).
    pub file: &'static str,
    pub title: &'static str,
    /// One line, for `gantry example` and the MCP listing.
    pub description: &'static str,
    pub text: &'static str,
}

pub const EXAMPLES: &[Example] = &[
    Example {
        name: "pipeline",
        file: "pipeline.yaml",
        title: "Example: a pipeline",
        description: "A DAG of three jobs, a four-task array, a shared ephemeral volume, an \
                      injected file and environment.",
        text: include_str!("../../../examples/pipeline.yaml"),
    },
    Example {
        name: "service-endpoint",
        file: "service-endpoint.yaml",
        title: "Example: a service behind a persistent endpoint",
        description: "A long-running service with a readiness probe attached to the persistent \
                      endpoint \"chat\"; starting a new version takes the endpoint over.",
        text: include_str!("../../../examples/service-endpoint.yaml"),
    },
];

/// The example of this name (`pipeline`), also found by its file name (`pipeline.yaml`).
pub fn find(name: &str) -> Option<&'static Example> {
    EXAMPLES.iter().find(|e| e.name == name || e.file == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_example_validates() {
        assert!(!EXAMPLES.is_empty());
        for e in EXAMPLES {
            if let Err(ds) = gantry_spec::parse(e.text) {
                panic!("{}: {}", e.file, gantry_spec::render_all(e.file, &ds));
            }
        }
    }

    /// Every file of the repository's examples/ is shipped, so none is forgotten here.
    #[test]
    fn every_repository_example_is_shipped() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        for f in std::fs::read_dir(dir).expect("examples/") {
            let name = f.unwrap().file_name().to_string_lossy().into_owned();
            if name.ends_with(".yaml") {
                assert!(find(&name).is_some(), "examples/{name} is not in EXAMPLES");
            }
        }
        assert_eq!(find("pipeline").map(|e| e.file), Some("pipeline.yaml"));
        assert!(find("nope").is_none());
    }
}
