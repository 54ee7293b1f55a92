//! `gantry image`: what the object cache holds (the images you and your group may use).

use std::process::ExitCode;

use clap::Subcommand;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::output::{age, bytes, json, table, Format, UsageError};
use crate::{Conn, OutputArg};

#[derive(Subcommand)]
pub enum ImageCmd {
    /// Images in the object cache that you may use: yours and your group's.
    List {
        #[command(flatten)]
        out: OutputArg,
    },
    /// One repository (user/NAME/IMAGE or group/NAME/IMAGE, optionally :TAG): its tags and
    /// layers.
    Show {
        /// The repository, optionally :TAG (see `gantry image list`).
        reference: String,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Remove a tag (REPOSITORY:TAG), or every tag of a repository with --all. Blobs nothing
    /// else uses are deleted.
    Rm {
        /// REPOSITORY:TAG, or REPOSITORY with --all (see `gantry image list`).
        reference: String,
        /// Remove every tag of the repository.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ImageInfo {
    repository: String,
    scope: String,
    owner: String,
    name: String,
    tag: Option<String>,
    digest: String,
    media_type: String,
    size: i64,
    #[serde(with = "time::serde::rfc3339")]
    created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    last_used_at: OffsetDateTime,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    build_key: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct BlobInfo {
    digest: String,
    media_type: String,
    size: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ManifestInfo {
    digest: String,
    media_type: String,
    size: i64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    platform: Option<Value>,
    config: Option<BlobInfo>,
    layers: Vec<BlobInfo>,
    manifests: Vec<ManifestInfo>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct RepositoryDetail {
    repository: String,
    scope: String,
    owner: String,
    name: String,
    tags: Vec<ImageInfo>,
    manifests: Vec<ManifestInfo>,
}

#[derive(Debug, Clone, Deserialize)]
struct Deleted {
    repository: String,
    deleted: Vec<String>,
}

/// A reference as users write it: `[HOST/]SCOPE/OWNER/IMAGE[:TAG]`.
#[derive(Debug, PartialEq)]
struct Ref {
    scope: String,
    owner: String,
    name: String,
    tag: Option<String>,
}

fn parse_ref(s: &str) -> Result<Ref, UsageError> {
    let bad = || {
        UsageError(format!(
            "{s:?} is not an image reference: use user/NAME/IMAGE[:TAG] or \
             group/NAME/IMAGE[:TAG]"
        ))
    };
    let mut rest = s.trim();
    // A registry host in front (as pushed: 10.0.0.1:8080/user/alice/x:1) is dropped.
    if let Some((first, after)) = rest.split_once('/') {
        if !matches!(first, "user" | "group")
            && (first.contains('.') || first.contains(':') || first == "localhost")
        {
            rest = after;
        }
    }
    if rest.contains('@') {
        return Err(UsageError(format!(
            "{s:?}: name a tag, not a digest (see `gantry image show`)"
        )));
    }
    let (path, tag) = match rest.rsplit_once(':') {
        Some((p, t)) if !t.contains('/') => (p, Some(t.to_string())),
        _ => (rest, None),
    };
    let mut parts = path.splitn(3, '/');
    let (scope, owner, name) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    if !matches!(scope, "user" | "group") || owner.is_empty() || name.is_empty() {
        return Err(bad());
    }
    if tag.as_deref() == Some("") {
        return Err(bad());
    }
    Ok(Ref {
        scope: scope.into(),
        owner: owner.into(),
        name: name.into(),
        tag,
    })
}

fn short_digest(d: &str) -> String {
    let hex = d.strip_prefix("sha256:").unwrap_or(d);
    hex.chars().take(12).collect()
}

fn tag_of(i: &ImageInfo) -> String {
    i.tag.clone().unwrap_or_else(|| "<none>".into())
}

fn print_manifest(m: &ManifestInfo, indent: usize) {
    let pad = " ".repeat(indent);
    let platform = m
        .platform
        .as_ref()
        .map(|p| {
            let os = p.get("os").and_then(Value::as_str).unwrap_or("?");
            let arch = p.get("architecture").and_then(Value::as_str).unwrap_or("?");
            match p.get("variant").and_then(Value::as_str) {
                Some(v) => format!(" {os}/{arch}/{v}"),
                None => format!(" {os}/{arch}"),
            }
        })
        .unwrap_or_default();
    println!("{pad}{}{platform}  {}", m.digest, m.media_type);
    if let Some(c) = &m.config {
        println!(
            "{pad}  config  {}  {}",
            c.digest,
            bytes(c.size.max(0) as u64)
        );
    }
    for l in &m.layers {
        println!(
            "{pad}  layer   {}  {}  {}",
            l.digest,
            bytes(l.size.max(0) as u64),
            l.media_type
        );
    }
    for child in &m.manifests {
        print_manifest(child, indent + 2);
    }
}

pub async fn run(cmd: ImageCmd, conn: &Conn) -> anyhow::Result<ExitCode> {
    let client = conn.client()?;
    match cmd {
        ImageCmd::List { out } => {
            let list: Vec<ImageInfo> = client.get("/images").await?;
            if out.format == Format::Json {
                json(&list)?;
            } else {
                let rows: Vec<Vec<String>> = list
                    .iter()
                    .map(|i| {
                        vec![
                            i.repository.clone(),
                            tag_of(i),
                            short_digest(&i.digest),
                            bytes(i.size.max(0) as u64),
                            age(i.created_at),
                            age(i.last_used_at),
                        ]
                    })
                    .collect();
                table(
                    &[
                        "REPOSITORY",
                        "TAG",
                        "DIGEST",
                        "SIZE",
                        "CREATED",
                        "LAST USED",
                    ],
                    &rows,
                );
            }
        }
        ImageCmd::Show { reference, out } => {
            let r = parse_ref(&reference)?;
            let mut d: RepositoryDetail = client
                .get(&format!("/images/{}/{}/{}", r.scope, r.owner, r.name))
                .await?;
            if let Some(tag) = &r.tag {
                d.tags.retain(|i| i.tag.as_deref() == Some(tag.as_str()));
                if d.tags.is_empty() {
                    anyhow::bail!("no image {}:{tag}", d.repository);
                }
                let digests: Vec<&str> = d.tags.iter().map(|i| i.digest.as_str()).collect();
                d.manifests.retain(|m| digests.contains(&m.digest.as_str()));
            }
            if out.format == Format::Json {
                json(&d)?;
            } else {
                println!("Repository: {}", d.repository);
                let rows: Vec<Vec<String>> = d
                    .tags
                    .iter()
                    .map(|i| {
                        vec![
                            tag_of(i),
                            short_digest(&i.digest),
                            bytes(i.size.max(0) as u64),
                            age(i.created_at),
                            age(i.last_used_at),
                            i.build_key.clone().unwrap_or_else(|| "-".into()),
                        ]
                    })
                    .collect();
                table(
                    &["TAG", "DIGEST", "SIZE", "CREATED", "LAST USED", "BUILD KEY"],
                    &rows,
                );
                for m in &d.manifests {
                    println!();
                    print_manifest(m, 0);
                }
            }
        }
        ImageCmd::Rm { reference, all } => {
            let r = parse_ref(&reference)?;
            let path = format!("/images/{}/{}/{}", r.scope, r.owner, r.name);
            let req = match (&r.tag, all) {
                (Some(_), true) => {
                    return Err(UsageError(
                        "give either REPOSITORY:TAG or REPOSITORY --all, not both".into(),
                    )
                    .into())
                }
                (None, false) => {
                    return Err(UsageError(format!(
                        "{reference:?} names no tag: give REPOSITORY:TAG, or --all to remove \
                         every tag"
                    ))
                    .into())
                }
                (Some(tag), false) => client
                    .request(reqwest::Method::DELETE, &path)
                    .query(&[("tag", tag)]),
                (None, true) => client.request(reqwest::Method::DELETE, &path),
            };
            let d: Deleted = client.send(req).await?;
            for t in &d.deleted {
                if t.contains(':') {
                    eprintln!("removed {}@{t}", d.repository);
                } else {
                    eprintln!("removed {}:{t}", d.repository);
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        let r = parse_ref("user/alice/busybox:1").unwrap();
        assert_eq!(
            r,
            Ref {
                scope: "user".into(),
                owner: "alice".into(),
                name: "busybox".into(),
                tag: Some("1".into())
            }
        );
        let r = parse_ref("127.0.0.1:8080/group/physics/ml/trainer").unwrap();
        assert_eq!((r.scope.as_str(), r.name.as_str()), ("group", "ml/trainer"));
        assert_eq!(r.tag, None);
        let r = parse_ref("gantry.example.org/user/a/b:v2").unwrap();
        assert_eq!(r.tag.as_deref(), Some("v2"));
        for bad in [
            "busybox",
            "user/alice",
            "library/busybox:1",
            "user/alice/x:",
            "user/a/b@sha256:00",
        ] {
            assert!(parse_ref(bad).is_err(), "{bad}");
        }
    }
}
