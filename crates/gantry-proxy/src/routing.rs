//! Which endpoint a request is for: `/e/NAME/...` or `Host: NAME.<endpoint domain>`.

use std::borrow::Cow;

/// Persistent endpoints' paths start with this, then the name.
pub const PATH_PREFIX: &str = "/e/";

/// `/e/NAME/rest?q` -> `(NAME, "/rest?q")`. The rest is what follows the name: empty for
/// `/e/NAME`, `?q` for `/e/NAME?q` (the backend gets `/` and `/?q` then). `None` when the path
/// is not an endpoint path or the name is empty.
pub fn split_path(path_and_query: &str) -> Option<(&str, &str)> {
    let after = path_and_query.strip_prefix(PATH_PREFIX)?;
    let end = after.find(['/', '?']).unwrap_or(after.len());
    let (name, rest) = after.split_at(end);
    if name.is_empty() {
        return None;
    }
    Some((name, rest))
}

/// `NAME.<domain>[:port]` -> NAME, lower-cased. Case-insensitive, a trailing dot allowed, the
/// port ignored; only a single label under `domain` is an endpoint (`a.b.<domain>` is not).
pub fn host_endpoint<'h>(host: &'h str, domain: &str) -> Option<Cow<'h, str>> {
    let domain = domain.trim_start_matches('.').trim_end_matches('.');
    if domain.is_empty() || host.starts_with('[') {
        return None; // no domain configured; an IPv6 literal names no endpoint
    }
    let host = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.len() <= domain.len() + 1 {
        return None;
    }
    let at = host.len() - domain.len() - 1;
    if !host.is_char_boundary(at) {
        return None;
    }
    let (label, rest) = host.split_at(at);
    let rest = rest.strip_prefix('.')?;
    if !rest.eq_ignore_ascii_case(domain) || label.is_empty() || label.contains('.') {
        return None;
    }
    if label.bytes().any(|b| b.is_ascii_uppercase()) {
        Some(Cow::Owned(label.to_ascii_lowercase()))
    } else {
        Some(Cow::Borrowed(label))
    }
}
