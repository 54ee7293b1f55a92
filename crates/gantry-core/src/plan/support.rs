//! What a workflow file asks for that Gantry cannot do yet, checked before it is compiled.

use gantry_spec::{EndpointProtocol, ImageRef, MultinodeImpl, ProbeKind, VolumeKind, Workflow};

use super::steps::steps;

/// What the file asks for that Gantry cannot do yet (the submit is refused, naming each), and
/// hints it accepts but does not act on (reported as warnings).
#[derive(Debug, Default)]
pub struct Support {
    pub unsupported: Vec<String>,
    pub ignored: Vec<String>,
}

pub fn support(wf: &Workflow) -> Support {
    let mut s = Support::default();
    for (name, v) in &wf.volumes {
        match &v.kind {
            VolumeKind::Ephemeral => {}
            VolumeKind::Persistent { .. } => {}
            VolumeKind::Host { .. } => s
                .unsupported
                .push(format!("volumes.{name}: host volumes are not supported")),
        }
        // No driver here has quotas, and there is one storage to choose from per name.
        if v.size.is_some() {
            s.ignored
                .push(format!("volumes.{name}.size: not acted on (no quotas)"));
        }
        if !v.annotations.is_empty() {
            s.ignored.push(format!(
                "volumes.{name}.annotations: not acted on (storage is chosen by `use:`)"
            ));
        }
        if v.provisioner.is_some() && v.kind == VolumeKind::Ephemeral {
            s.unsupported.push(format!(
                "volumes.{name}: ephemeral volumes live beneath each node's storage root; a storage provisioner holds persistent volumes only (give the volume a `name`)"
            ));
        }
        for (i, t) in v.ingress.iter().enumerate() {
            let at = format!("volumes.{name}.ingress[{i}]");
            transfer_support(&mut s, &at, &t.source, "source", INGRESS_SOURCES);
            transfer_support(&mut s, &at, &t.destination, "destination", &["file"]);
        }
        for (i, t) in v.egress.iter().enumerate() {
            let at = format!("volumes.{name}.egress[{i}]");
            transfer_support(&mut s, &at, &t.source, "source", &["file"]);
            transfer_support(
                &mut s,
                &at,
                &t.destination,
                "destination",
                EGRESS_DESTINATIONS,
            );
        }
    }
    for st in steps(wf) {
        let at = st.at();
        match st.image {
            ImageRef::Uri {
                uri,
                secret,
                secrets,
                decryption_secret,
                ..
            } => {
                if let Some(rest) = uri.strip_prefix("oras://") {
                    // Apptainer's rule: an oras:// image has no default registry.
                    let host = rest.split('/').next().unwrap_or("");
                    if !rest.contains('/')
                        || !(host.contains('.') || host.contains(':') || host == "localhost")
                    {
                        s.unsupported.push(format!(
                            "{at}.image.uri: {uri:?}: an oras:// image names its registry (oras://REGISTRY/REPO:TAG)"
                        ));
                    }
                } else if !(uri.starts_with("docker://") || uri.starts_with("oci://")) {
                    s.unsupported.push(format!(
                        "{at}.image.uri: {uri:?}: only docker://, oras:// and oci:// images are supported"
                    ));
                }
                if !secrets.is_empty() {
                    s.unsupported.push(format!(
                        "{at}.image.secrets: `secrets` is not supported yet (`secret` is)"
                    ));
                }
                if decryption_secret.is_some() {
                    s.unsupported.push(format!(
                        "{at}.image.decryption-secret: encrypted SIF images are not supported yet"
                    ));
                }
                if let Some(sec) = secret {
                    if !sec.starts_with("secret://") {
                        s.unsupported.push(format!(
                            "{at}.image.secret: {sec:?} is not a secret:// reference"
                        ));
                    }
                }
            }
            ImageRef::Build(_) => {}
        }
        if let Some(m) = st.multinode {
            if st.service.is_some() {
                s.unsupported.push(format!(
                    "{at}.multinode: a service runs on one node; multinode is for jobs (move the step under `jobs`)"
                ));
            } else if m.implementation == MultinodeImpl::Gasnet {
                s.unsupported.push(format!(
                    "{at}.multinode.implementation: gasnet multinode jobs are not supported: Gantry \
                     launches openmpi, mpich and generic; use `implementation: generic` and \
                     GASNet's ssh spawner with GASNET_SSH_CMD=$MULTINODE_SSH_WRAPPER"
                ));
            }
        }
        if let Some(n) = st.job_network {
            if n.isolated || !n.expose_tcp.is_empty() || !n.expose_udp.is_empty() {
                s.unsupported.push(format!(
                    "{at}.network: isolated job networks and `expose-tcp`/`expose-udp` are not \
                     supported yet; `network.host: true` is (the job uses its node's network), \
                     or make the step a service with `network.ports`"
                ));
            }
        }
        if st.policy.restart.is_some() {
            s.ignored.push(format!("{at}.policy.restart: not acted on"));
        }
        let c = &st.resource.cpu;
        if c.affinity.is_some() || c.threads || c.sockets.is_some() {
            s.ignored.push(format!(
                "{at}.resource.cpu: affinity, threads and sockets are not acted on"
            ));
        }
        if st.preemptible {
            s.ignored.push(format!("{at}.preemptible: not acted on"));
        }
    }
    for (name, svc) in &wf.services {
        let at = format!("services.{name}");
        if svc.autoscaler.is_some() {
            s.unsupported
                .push(format!("{at}.autoscaler: autoscaling is not supported yet"));
        }
        if svc.dynamic_config.is_some() {
            s.unsupported.push(format!(
                "{at}.dynamic-config: dynamic configuration is not supported yet"
            ));
        }
        for e in &svc.network.endpoints {
            if e.protocol != EndpointProtocol::Http {
                s.unsupported.push(format!(
                    "{at}.network.endpoints.{}: only http endpoints are supported yet",
                    e.name
                ));
            }
        }
        if let Some(ProbeKind::Grpc { .. }) = svc.readiness_probe.as_ref().map(|p| &p.kind) {
            s.unsupported.push(format!(
                "{at}.readiness-probe.grpc: gRPC probes are not supported yet"
            ));
        }
    }
    if wf.preemptible.is_some() {
        s.ignored.push("preemptible: not acted on".into());
    }
    s
}

/// Where ingress reads from and egress writes to (the volume's side is always `file://`).
const INGRESS_SOURCES: &[&str] = &["s3", "http", "https", "file"];
const EGRESS_DESTINATIONS: &[&str] = &["s3"];

fn transfer_support(
    s: &mut Support,
    at: &str,
    u: &gantry_spec::UriSpec,
    side: &str,
    schemes: &[&str],
) {
    let scheme = u.uri.split_once("://").map_or("", |(s, _)| s);
    if !schemes.contains(&scheme) {
        let known = if schemes.is_empty() {
            "none yet".to_string()
        } else {
            schemes
                .iter()
                .map(|s| format!("{s}://"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        s.unsupported.push(format!(
            "{at}.{side}.uri: {:?}: this side of a transfer takes {known}",
            u.uri
        ));
    }
    if scheme == "s3" && u.secret.is_none() {
        s.unsupported.push(format!(
            "{at}.{side}.secret: {:?} needs an s3 secret (`secret: secret://SCOPE/NAME`, made with \
             `gantry secret set NAME --type s3`)",
            u.uri
        ));
    }
    if let Some(sec) = &u.secret {
        if !sec.starts_with("secret://") {
            s.unsupported.push(format!(
                "{at}.{side}.secret: {sec:?} is not a secret:// reference"
            ));
        }
    }
    if !u.secrets.is_empty() || u.decryption_secret.is_some() {
        s.unsupported.push(format!(
            "{at}.{side}: `secrets` and `decryption-secret` are not supported yet (`secret` is)"
        ));
    }
    if u.cache.is_some() || u.cache_ttl.is_some() {
        s.ignored.push(format!(
            "{at}.{side}: `cache` is not acted on (every run transfers again)"
        ));
    }
}

/// Every `oci://` image the workflow names, with where: steps' `image.uri` and image
/// recipes' `from`.
pub fn layouts(wf: &Workflow) -> Vec<(String, &str)> {
    let mut out: Vec<(String, &str)> = steps(wf)
        .into_iter()
        .filter_map(|st| match st.image {
            ImageRef::Uri { uri, .. } if uri.starts_with("oci://") => {
                Some((format!("{}.image.uri", st.at()), uri.as_str()))
            }
            _ => None,
        })
        .collect();
    for (name, r) in &wf.images {
        if r.from.starts_with("oci://") {
            out.push((format!("images.{name}.from"), r.from.as_str()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oras_images_are_supported_when_they_name_a_registry_and_are_not_encrypted() {
        let wf = |image: &str| {
            gantry_spec::parse(&format!(
                "version: v4\njobs:\n  a:\n    image: {image}\n    command: [true]\n"
            ))
            .unwrap()
        };
        assert!(support(&wf("{uri: oras://ghcr.io/org/app:1}"))
            .unsupported
            .is_empty());
        assert_eq!(
            support(&wf("{uri: oras://org/app:1}")).unsupported,
            ["jobs.a.image.uri: \"oras://org/app:1\": an oras:// image names its registry (oras://REGISTRY/REPO:TAG)"]
        );
        assert_eq!(
            support(&wf(
                "{uri: oras://ghcr.io/org/app:1, decryption-secret: secret://user/key}"
            ))
            .unsupported,
            ["jobs.a.image.decryption-secret: encrypted SIF images are not supported yet"]
        );
    }

    #[test]
    fn gasnet_multinode_services_and_isolated_job_networks_are_refused_precisely() {
        let wf = gantry_spec::parse(
            r#"version: v4
jobs:
  gas:
    image: {uri: docker://alpine}
    multinode: {nodes: 2, implementation: gasnet}
  iso:
    image: {uri: docker://alpine}
    network: {isolated: true, expose-tcp: [80]}
services:
  svc:
    image: {uri: docker://alpine}
    multinode: {nodes: 2, implementation: openmpi}
"#,
        )
        .unwrap();
        let s = support(&wf).unsupported;
        assert_eq!(s.len(), 3, "{s:?}");
        assert!(s[0].starts_with("jobs.gas.multinode.implementation: gasnet multinode jobs are not supported: Gantry launches openmpi, mpich and generic; use `implementation: generic`"), "{}", s[0]);
        assert!(s[0].contains("$MULTINODE_SSH_WRAPPER"), "{}", s[0]);
        assert!(
            s[1].starts_with("jobs.iso.network: isolated job networks"),
            "{}",
            s[1]
        );
        assert!(s[1].contains("`network.host: true` is"), "{}", s[1]);
        assert!(
            s[2].starts_with("services.svc.multinode: a service runs on one node"),
            "{}",
            s[2]
        );
    }
}
