//! What a request and a response become on their way through: the backend's URI, hop-by-hop
//! headers removed, `X-Forwarded-*` set.

use std::error::Error as StdError;
use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::request::Parts;
use axum::http::uri::{self, Authority, PathAndQuery, Scheme, Uri};
use axum::http::Version;
use hyper::body::Bytes;
use hyper::upgrade::OnUpgrade;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PREFIX: HeaderName = HeaderName::from_static("x-forwarded-prefix");
const FORWARDED: HeaderName = HeaderName::from_static("forwarded");

/// Headers that describe one connection, not the message (RFC 9110 7.6.1), plus the
/// non-standard ones that clients still send.
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

pub(super) struct Forwarding<'a> {
    pub(super) authority: &'a Authority,
    pub(super) strip_authorization: bool,
    pub(super) prefix: Option<HeaderValue>,
    pub(super) trust_forwarded: bool,
    pub(super) default_proto: &'a HeaderValue,
}

/// `uri`'s path without `prefix` (which must be followed by `/`, the query or nothing), with
/// its query; `/` when nothing is left. `None` when the path is not under `prefix`.
pub(super) fn strip_prefix(uri: &Uri, prefix: &str) -> Option<PathAndQuery> {
    let prefix = prefix.trim_end_matches('/');
    let rest = uri.path().strip_prefix(prefix)?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    let query = uri.query();
    let mut pq = String::with_capacity(1 + rest.len() + query.map_or(0, |q| q.len() + 1));
    pq.push_str(if rest.is_empty() { "/" } else { rest });
    if let Some(q) = query {
        pq.push('?');
        pq.push_str(q);
    }
    PathAndQuery::from_maybe_shared(Bytes::from(pq)).ok()
}

/// Whether a `Connection` header lists `token`.
fn connection_has(headers: &HeaderMap, token: &str) -> bool {
    headers.get_all(header::CONNECTION).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    })
}

fn remove_hop_by_hop(headers: &mut HeaderMap) {
    if headers.contains_key(header::CONNECTION) {
        // Headers the sender named in `Connection` are hop-by-hop too.
        let mut named = Vec::new();
        for value in headers.get_all(header::CONNECTION) {
            let Ok(value) = value.to_str() else { continue };
            for token in value.split(',').map(str::trim) {
                let plain = ["keep-alive", "close", "upgrade", ""]
                    .iter()
                    .any(|t| token.eq_ignore_ascii_case(t));
                if !plain {
                    if let Ok(name) = HeaderName::from_bytes(token.as_bytes()) {
                        named.push(name);
                    }
                }
            }
        }
        for name in named {
            headers.remove(name);
        }
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Turns a request as the client sent it into the request for the backend. Returns the
/// client's side of an upgrade (WebSocket) when the request asks for one.
pub(super) fn prepare_request(parts: &mut Parts, fwd: &Forwarding<'_>) -> Option<OnUpgrade> {
    let headers = &mut parts.headers;
    let on_upgrade = parts.extensions.remove::<OnUpgrade>();
    let upgrade = match on_upgrade {
        Some(_) if connection_has(headers, "upgrade") => headers.get(header::UPGRADE).cloned(),
        _ => None,
    };
    remove_hop_by_hop(headers);
    if let Some(protocol) = &upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, protocol.clone());
    }
    if fwd.strip_authorization {
        headers.remove(header::AUTHORIZATION);
    }

    let host = headers.get(header::HOST).cloned().or_else(|| {
        parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    });
    let proto = match parts.uri.scheme_str() {
        Some("https") => HeaderValue::from_static("https"),
        Some("http") => HeaderValue::from_static("http"),
        _ => fwd.default_proto.clone(),
    };
    let client = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    if fwd.trust_forwarded {
        if let Some(ip) = client {
            let mut chain = String::new();
            for v in headers.get_all(&X_FORWARDED_FOR) {
                if let Ok(v) = v.to_str() {
                    chain.push_str(v.trim());
                    chain.push_str(", ");
                }
            }
            chain.push_str(&ip.to_string());
            if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(chain)) {
                headers.insert(X_FORWARDED_FOR, v);
            }
        }
        if !headers.contains_key(&X_FORWARDED_PROTO) {
            headers.insert(X_FORWARDED_PROTO, proto);
        }
        if let (false, Some(host)) = (headers.contains_key(&X_FORWARDED_HOST), host) {
            headers.insert(X_FORWARDED_HOST, host);
        }
        if let Some(prefix) = &fwd.prefix {
            // Under a prefix another proxy stripped already: the app's public prefix is both.
            let outer = headers
                .get(&X_FORWARDED_PREFIX)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim_end_matches('/').to_string());
            let value = match outer {
                Some(outer) if !outer.is_empty() => {
                    HeaderValue::from_str(&format!("{outer}{}", prefix.to_str().unwrap_or("")))
                        .unwrap_or_else(|_| prefix.clone())
                }
                _ => prefix.clone(),
            };
            headers.insert(X_FORWARDED_PREFIX, value);
        }
    } else {
        // Whatever the client claims about the way here is not trusted.
        for name in [
            &X_FORWARDED_FOR,
            &X_FORWARDED_PROTO,
            &X_FORWARDED_HOST,
            &X_FORWARDED_PREFIX,
            &FORWARDED,
        ] {
            headers.remove(name);
        }
        if let Some(ip) = client {
            if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(ip.to_string())) {
                headers.insert(X_FORWARDED_FOR, v);
            }
        }
        headers.insert(X_FORWARDED_PROTO, proto);
        if let Some(host) = host {
            headers.insert(X_FORWARDED_HOST, host);
        }
        if let Some(prefix) = &fwd.prefix {
            headers.insert(X_FORWARDED_PREFIX, prefix.clone());
        }
    }

    let mut target = uri::Parts::default();
    target.scheme = Some(Scheme::HTTP);
    target.authority = Some(fwd.authority.clone());
    target.path_and_query = Some(
        parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/")),
    );
    parts.uri = Uri::from_parts(target).expect("scheme, authority and path make a URI");
    // The backend client speaks HTTP/1.1 whatever the client spoke.
    parts.version = Version::HTTP_11;
    if upgrade.is_some() {
        on_upgrade
    } else {
        None
    }
}

/// Removes the backend's hop-by-hop headers; keeps `Connection: upgrade` and `Upgrade` on a
/// switch of protocols that is passed through.
pub(super) fn prepare_response(headers: &mut HeaderMap, upgraded: bool) {
    let protocol = if upgraded {
        headers.get(header::UPGRADE).cloned()
    } else {
        None
    };
    remove_hop_by_hop(headers);
    if let Some(protocol) = protocol {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, protocol);
    }
}

/// An error and its causes on one line, without the client's generic outer wrapper.
pub(super) fn error_chain(e: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    if parts.len() > 1 {
        parts.remove(0);
    }
    parts.join(": ")
}
