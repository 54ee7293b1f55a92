//! Resources: what an agent reads to write valid workflow files, the reference and examples.
//! The examples are `crate::examples` (a unit test there checks that each validates; one here
//! that every complete file in the reference does).

use rmcp::model::{ErrorData, ReadResourceResult, Resource, ResourceContents};

struct Doc {
    uri: &'static str,
    name: &'static str,
    title: &'static str,
    description: &'static str,
    mime: &'static str,
    text: &'static str,
}

const DOCS: &[Doc] = &[Doc {
    uri: "gantry://docs/workflow-file",
    name: "workflow-file",
    title: "Workflow file reference",
    description: "The workflow file format (Fuzzfile v4) as Gantry reads it: jobs, services, \
                      persistent endpoints, volumes, files, image builds, retries, statuses, and \
                      what Gantry refuses or ignores.",
    mime: "text/markdown",
    text: include_str!("workflow-file.md"),
}];

const EXAMPLE_MIME: &str = "application/yaml";

/// The examples are `crate::examples`' (what `gantry example` prints too), at
/// `gantry://examples/FILE`.
fn example_uri(e: &crate::examples::Example) -> String {
    format!("gantry://examples/{}", e.file)
}

pub fn list() -> Vec<Resource> {
    let docs = DOCS.iter().map(|d| {
        Resource::new(d.uri, d.name)
            .with_title(d.title)
            .with_description(d.description)
            .with_mime_type(d.mime)
    });
    let examples = crate::examples::EXAMPLES.iter().map(|e| {
        Resource::new(example_uri(e), e.file)
            .with_title(e.title)
            .with_description(e.description)
            .with_mime_type(EXAMPLE_MIME)
    });
    docs.chain(examples).collect()
}

pub fn read(uri: &str) -> Result<ReadResourceResult, ErrorData> {
    if let Some(d) = DOCS.iter().find(|d| d.uri == uri) {
        return Ok(ReadResourceResult::new(vec![ResourceContents::text(
            d.text, d.uri,
        )
        .with_mime_type(d.mime)]));
    }
    let e = uri
        .strip_prefix("gantry://examples/")
        .and_then(crate::examples::find)
        .filter(|e| example_uri(e) == uri)
        .ok_or_else(|| ErrorData::resource_not_found(format!("no resource {uri}"), None))?;
    Ok(ReadResourceResult::new(vec![ResourceContents::text(
        e.text, uri,
    )
    .with_mime_type(EXAMPLE_MIME)]))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(read("gantry://examples/pipeline.yaml").is_ok());
        assert!(read("gantry://examples/pipeline").is_err());
    }
}
