//! The HTTP(S) GET of an `http-get` probe: one request on a fresh connection, and only the
//! status line of the answer is read. Blocking; sockets carry the probe's timeout.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The most of an answer read while looking for the status line.
const MAX_HEAD: usize = 8 << 10;

#[derive(Debug, Clone)]
pub struct Request {
    /// `http` or `https`.
    pub scheme: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
}

impl Request {
    fn path(&self) -> String {
        if self.path.starts_with('/') {
            self.path.clone()
        } else {
            format!("/{}", self.path)
        }
    }

    pub fn url(&self, addr: SocketAddr) -> String {
        format!("{}://{addr}{}", self.scheme, self.path())
    }

    /// The request's bytes. Refuses what would break the request's framing.
    fn bytes(&self, addr: SocketAddr) -> Result<Vec<u8>, String> {
        let path = self.path();
        if path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            return Err(format!("path {path:?} has spaces or control characters"));
        }
        let mut head: Vec<(String, String)> = vec![
            ("Host".into(), addr.to_string()),
            (
                "User-Agent".into(),
                format!("gantry-probe/{}", env!("CARGO_PKG_VERSION")),
            ),
            ("Accept".into(), "*/*".into()),
        ];
        for (name, value) in &self.headers {
            let token = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                return Err(format!("header name {name:?} is not valid"));
            }
            if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(format!("header {name} has a line break in its value"));
            }
            // The probe's own headers win over the defaults (a Host of the service's choice).
            match head.iter_mut().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
                Some(slot) if !name.eq_ignore_ascii_case("connection") => {
                    *slot = (name.clone(), value.clone())
                }
                _ => head.push((name.clone(), value.clone())),
            }
        }
        head.retain(|(n, _)| !n.eq_ignore_ascii_case("connection"));
        head.push(("Connection".into(), "close".into()));
        let mut out = format!("GET {path} HTTP/1.1\r\n");
        for (n, v) in head {
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        out.push_str("\r\n");
        Ok(out.into_bytes())
    }

    /// Sends the GET and returns the answer's status code.
    pub fn get(&self, addr: SocketAddr) -> Result<u16, String> {
        let req = self.bytes(addr)?;
        let deadline = Instant::now() + self.timeout;
        let url = self.url(addr);
        let fail = |e: std::io::Error| format!("GET {url}: {e}");
        let stream = TcpStream::connect_timeout(&addr, self.timeout).map_err(fail)?;
        stream.set_read_timeout(Some(self.timeout)).map_err(fail)?;
        stream.set_write_timeout(Some(self.timeout)).map_err(fail)?;
        let _ = stream.set_nodelay(true);
        match self.scheme.to_ascii_lowercase().as_str() {
            "http" => exchange(stream, &req, deadline).map_err(fail),
            "https" => {
                let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
                let conn = rustls::ClientConnection::new(tls_config()?, name)
                    .map_err(|e| format!("GET {url}: TLS: {e}"))?;
                exchange(rustls::StreamOwned::new(conn, stream), &req, deadline).map_err(fail)
            }
            other => Err(format!("scheme `{other}` is not http or https")),
        }
    }
}

fn exchange(mut s: impl Read + Write, req: &[u8], deadline: Instant) -> std::io::Result<u16> {
    s.write_all(req)?;
    s.flush()?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            return parse_status(&buf[..end]);
        }
        if buf.len() >= MAX_HEAD || Instant::now() > deadline {
            break;
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    if buf.is_empty() {
        return Err(std::io::Error::other(
            "the connection closed without an answer",
        ));
    }
    parse_status(&buf)
}

fn parse_status(line: &[u8]) -> std::io::Result<u16> {
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let version = words.next().unwrap_or("");
    match words.next().and_then(|c| c.parse::<u16>().ok()) {
        Some(code) if version.starts_with("HTTP/") && (100..600).contains(&code) => Ok(code),
        _ => Err(std::io::Error::other(format!(
            "not an HTTP answer: {:?}",
            line.chars().take(80).collect::<String>()
        ))),
    }
}

/// A TLS client that accepts any certificate (a probe checks liveness, not identity; Kubernetes
/// does the same), with ring as its crypto provider.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
}

#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn req(headers: Vec<(String, String)>) -> Request {
        Request {
            scheme: "http".into(),
            path: "healthz?x=1".into(),
            headers,
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn request_head_has_defaults_and_overrides() {
        let addr: SocketAddr = "10.1.2.3:8080".parse().unwrap();
        let r = req(vec![
            ("host".into(), "web.svc".into()),
            ("X-Probe".into(), "1".into()),
            ("Connection".into(), "keep-alive".into()),
        ]);
        let text = String::from_utf8(r.bytes(addr).unwrap()).unwrap();
        assert!(text.starts_with("GET /healthz?x=1 HTTP/1.1\r\n"), "{text}");
        assert!(
            text.contains("host: web.svc\r\n") && !text.contains("Host: 10.1.2.3"),
            "{text}"
        );
        assert!(text.contains("X-Probe: 1\r\n"), "{text}");
        assert!(text.ends_with("Connection: close\r\n\r\n"), "{text}");
        assert!(!text.contains("keep-alive"), "{text}");
        assert!(req(vec![("Bad Name".into(), "x".into())])
            .bytes(addr)
            .is_err());
        assert!(req(vec![("X".into(), "a\r\nInjected: 1".into())])
            .bytes(addr)
            .is_err());
        assert_eq!(r.url(addr), "http://10.1.2.3:8080/healthz?x=1");
    }

    /// A one-shot server answering with `answer`; returns its address.
    fn serve(answer: &'static [u8]) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(answer);
            }
        });
        addr
    }

    #[test]
    fn status_codes_come_back() {
        let r = req(vec![]);
        assert_eq!(
            r.get(serve(b"HTTP/1.1 204 No Content\r\n\r\n")).unwrap(),
            204
        );
        assert_eq!(
            r.get(serve(b"HTTP/1.0 503 Service Unavailable\r\nX: y\r\n\r\n"))
                .unwrap(),
            503
        );
        assert!(r.get(serve(b"SSH-2.0-OpenSSH\r\n")).is_err());
        assert!(r.get(serve(b"")).is_err());
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        assert!(r.get(closed).is_err());
    }
}
