//! Why a registry could not be reached, from the error's chain of causes, and the hint that
//! fits that cause: a name that does not resolve, nothing listening, TLS spoken to a plain-HTTP
//! registry, a timeout. Refusals (401/403) and unknown manifests (404) are variants of
//! oci-client's error and have their own `OciError`s.

use std::error::Error as StdError;
use std::io;
use std::net::ToSocketAddrs;

/// What went wrong on the way to a registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The registry's host name does not resolve.
    Dns,
    /// Nothing listens at the registry's address.
    Refused,
    /// The TLS handshake failed: most often a registry that speaks plain HTTP.
    Tls,
    /// The registry did not answer in time.
    Timeout,
}

/// The cause of a failed request to `registry` (host or host:port), or `None` where the
/// chain holds none of those (then the error's own text is all there is).
pub fn classify(e: &(dyn StdError + 'static), registry: &str) -> Option<Cause> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(r) = c.downcast_ref::<reqwest::Error>() {
            if r.is_timeout() {
                return Some(Cause::Timeout);
            }
            if r.is_dns() {
                return Some(Cause::Dns);
            }
        }
        if c.downcast_ref::<rustls::Error>().is_some() {
            return Some(Cause::Tls);
        }
        if let Some(io) = c.downcast_ref::<io::Error>() {
            if let Some(found) = io_cause(io) {
                return Some(found);
            }
        }
        cur = c.source();
    }
    // A resolver error that comes untyped: asking the resolver again tells it apart, without
    // reading its message. Only on this error path, once per failed pull.
    if !resolves(registry) {
        return Some(Cause::Dns);
    }
    None
}

/// hyper and rustls wrap io::Errors in io::Errors (an io::Error's `source` skips the error it
/// wraps): the kind and the TLS error are found by unwrapping them.
fn io_cause(mut io: &io::Error) -> Option<Cause> {
    loop {
        match io.kind() {
            io::ErrorKind::ConnectionRefused => return Some(Cause::Refused),
            io::ErrorKind::TimedOut => return Some(Cause::Timeout),
            _ => {}
        }
        let inner = io.get_ref()?;
        if inner.downcast_ref::<rustls::Error>().is_some() {
            return Some(Cause::Tls);
        }
        io = inner.downcast_ref::<io::Error>()?;
    }
}

fn host_port(registry: &str) -> (&str, Option<u16>) {
    match registry.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || registry.starts_with('[') => match p.parse() {
            Ok(port) => (h, Some(port)),
            Err(_) => (registry, None),
        },
        _ => (registry, None),
    }
}

fn resolves(registry: &str) -> bool {
    let (host, port) = host_port(registry);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    // A lookup on the error path only, once per failed pull.
    (host, port.unwrap_or(443))
        .to_socket_addrs()
        .is_ok_and(|mut a| a.next().is_some())
}

/// The sentence to add to the error for this cause.
pub fn hint(cause: Cause, registry: &str, plain_http: bool) -> String {
    let (host, port) = host_port(registry);
    let port = port.unwrap_or(if plain_http { 80 } else { 443 });
    match cause {
        Cause::Dns => format!(
            "cannot resolve {host}: check the name or the node's DNS; offline? run the image \
             from an OCI layout (oci://DIR/NAME, with the agent's --oci-root) or pull through \
             a registry mirror (--registry-mirror)"
        ),
        Cause::Refused => format!("nothing listens on {host}:{port}; is the registry up?"),
        Cause::Tls if plain_http => format!("the TLS handshake with {registry} failed"),
        Cause::Tls => format!(
            "the TLS handshake with {registry} failed: a registry that speaks plain HTTP must \
             be listed in the agent's insecure registries (--insecure-registry {registry})"
        ),
        Cause::Timeout => format!(
            "{registry} did not answer in time: check the network path to it (a firewall or \
             a proxy?) or whether it is overloaded"
        ),
    }
}

/// The error's text with its causes, and the hint for its cause where there is one.
pub fn describe(e: &(dyn StdError + 'static), registry: &str, plain_http: bool) -> String {
    let mut detail = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let s = c.to_string();
        // reqwest and hyper repeat their causes' text in their own.
        if !detail.contains(&s) {
            detail.push_str(": ");
            detail.push_str(&s);
        }
        cause = c.source();
    }
    if let Some(c) = classify(e, registry) {
        detail.push_str(" (");
        detail.push_str(&hint(c, registry, plain_http));
        detail.push(')');
    }
    detail
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_client::client::{ClientConfig, ClientProtocol};
    use oci_client::secrets::RegistryAuth;
    use oci_client::{Client, Reference};

    /// A real pull of `registry/library/busybox:1`, for its real error.
    async fn pull_error(registry: &str, plain: bool) -> oci_client::errors::OciDistributionError {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = Client::new(ClientConfig {
            protocol: if plain {
                ClientProtocol::HttpsExcept(vec![registry.to_string()])
            } else {
                ClientProtocol::Https
            },
            connect_timeout: Some(std::time::Duration::from_secs(10)),
            ..Default::default()
        });
        let r: Reference = format!("{registry}/library/busybox:1").parse().unwrap();
        client
            .pull_image_manifest(&r, &RegistryAuth::Anonymous)
            .await
            .expect_err("the pull must fail")
    }

    fn closed_port() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
        // Dropped here: nothing listens on it any more.
    }

    #[tokio::test]
    async fn a_closed_port_is_refused() {
        let reg = format!("127.0.0.1:{}", closed_port());
        let e = pull_error(&reg, true).await;
        assert_eq!(classify(&e, &reg), Some(Cause::Refused), "{e:?}");
        let d = describe(&e, &reg, true);
        assert!(d.contains(&format!("nothing listens on {reg}")), "{d}");
        assert!(!d.contains("insecure"), "{d}");
    }

    #[tokio::test]
    async fn a_name_that_does_not_resolve_is_dns() {
        let reg = "nonexistent.invalid";
        let e = pull_error(reg, false).await;
        assert_eq!(classify(&e, reg), Some(Cause::Dns), "{e:?}");
        let d = describe(&e, reg, false);
        assert!(d.contains("cannot resolve nonexistent.invalid"), "{d}");
        assert!(d.contains("oci://"), "{d}");
        assert!(!d.contains("insecure"), "{d}");
    }

    /// The test registry (scripts/test-images.sh) speaks plain HTTP at 127.0.0.1:5055.
    #[tokio::test]
    async fn tls_to_a_plain_registry_says_insecure_registries() {
        let reg = std::env::var("GANTRY_TEST_REGISTRY").unwrap_or_else(|_| "127.0.0.1:5055".into());
        assert!(
            std::net::TcpStream::connect(&reg).is_ok(),
            "the test registry at {reg} is not running: run scripts/test-images.sh"
        );
        let e = pull_error(&reg, false).await;
        assert_eq!(classify(&e, &reg), Some(Cause::Tls), "{e:?}");
        let d = describe(&e, &reg, false);
        assert!(d.contains("insecure registries"), "{d}");
    }

    #[test]
    fn hosts_and_ports() {
        assert_eq!(host_port("127.0.0.1:5055"), ("127.0.0.1", Some(5055)));
        assert_eq!(host_port("index.docker.io"), ("index.docker.io", None));
        assert_eq!(host_port("[::1]:5000"), ("[::1]", Some(5000)));
        assert!(hint(Cause::Refused, "r.example", false).contains("r.example:443"));
    }
}
