//! Resources: what an agent reads to write valid workflow files, the reference and examples.
//! The examples are the repository's own files, and a unit test checks that each validates
//! (and that every complete file in the reference does).

use rmcp::model::{ErrorData, ReadResourceResult, Resource, ResourceContents};

struct Doc {
    uri: &'static str,
    name: &'static str,
    title: &'static str,
    description: &'static str,
    mime: &'static str,
    text: &'static str,
}

const DOCS: &[Doc] = &[
    Doc {
        uri: "gantry://docs/workflow-file",
        name: "workflow-file",
        title: "Workflow file reference",
        description: "The workflow file format (Fuzzfile v4) as Gantry reads it: jobs, services, \
                      persistent endpoints, volumes, files, image builds, retries, statuses, and \
                      what Gantry refuses or ignores.",
        mime: "text/markdown",
        text: include_str!("workflow-file.md"),
    },
    Doc {
        uri: "gantry://examples/pipeline.yaml",
        name: "pipeline.yaml",
        title: "Example: a pipeline",
        description: "A DAG of three jobs, a four-task array, a shared ephemeral volume, an \
                      injected file and environment.",
        mime: "application/yaml",
        text: include_str!("../../../../examples/pipeline.yaml"),
    },
    Doc {
        uri: "gantry://examples/service-endpoint.yaml",
        name: "service-endpoint.yaml",
        title: "Example: a service behind a persistent endpoint",
        description: "A long-running service with a readiness probe attached to the persistent \
                      endpoint \"chat\"; starting a new version takes the endpoint over.",
        mime: "application/yaml",
        text: include_str!("../../../../examples/service-endpoint.yaml"),
    },
];

pub fn list() -> Vec<Resource> {
    DOCS.iter()
        .map(|d| {
            Resource::new(d.uri, d.name)
                .with_title(d.title)
                .with_description(d.description)
                .with_mime_type(d.mime)
        })
        .collect()
}

pub fn read(uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let d = DOCS
        .iter()
        .find(|d| d.uri == uri)
        .ok_or_else(|| ErrorData::resource_not_found(format!("no resource {uri}"), None))?;
    Ok(ReadResourceResult::new(vec![ResourceContents::text(
        d.text, d.uri,
    )
    .with_mime_type(d.mime)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_validate() {
        for d in DOCS.iter().filter(|d| d.mime == "application/yaml") {
            if let Err(ds) = gantry_spec::parse(d.text) {
                panic!("{}: {}", d.uri, gantry_spec::render_all(d.uri, &ds));
            }
        }
    }

    /// Every YAML block of the reference validates as a file (with `version: v4` put first
    /// where the block leaves it out), except the outline whose values are `...`.
    #[test]
    fn reference_blocks_validate() {
        let text = include_str!("workflow-file.md");
        let mut checked = 0;
        for block in text.split("```yaml\n").skip(1) {
            let body = block.split("```").next().unwrap_or_default();
            if body.contains("...") {
                continue;
            }
            let file = if body.starts_with("version:") {
                body.to_string()
            } else {
                format!("version: v4\n{body}")
            };
            if let Err(ds) = gantry_spec::parse(&file) {
                panic!("{}", gantry_spec::render_all("reference", &ds));
            }
            checked += 1;
        }
        assert!(checked >= 2, "the reference's examples were not found");
    }

    #[test]
    fn every_resource_reads() {
        for r in list() {
            let got = read(&r.uri).expect("listed resources read");
            assert_eq!(got.contents.len(), 1);
        }
        assert!(read("gantry://nope").is_err());
    }
}
