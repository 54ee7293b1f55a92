//! Sign-in sessions and CSRF protection for the web UI.
//!
//! A session is a cookie the server sealed (ChaCha20-Poly1305, under a key derived from the
//! server's secrets key): the hash of the token the user signed in with, an expiry, a random
//! session id and a random CSRF token. Nothing is stored server-side, so sessions survive a
//! restart at no cost, and every request looks the token hash up again: a revoked or expired
//! token ends its sessions at once. The cookie is `HttpOnly` and `SameSite=Lax` (`Secure` when
//! the public URL is https); links from elsewhere open signed in, while every state change is a
//! POST that must carry the session's CSRF token and come from this origin.
//!
//! Signing out forgets the session id until the session would have expired, in memory: a copy
//! of the cookie taken before sign-out would work again after a server restart, until then.

use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts, Query, Request, State};
use axum::http::header::{COOKIE, HOST, ORIGIN, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{page, Ctx, WebError};
use crate::caller;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::{now_ms, AppState};

const SESSION_COOKIE: &str = "gantry_session";
/// The sign-in form's own CSRF token (double submit: cookie and form field must match).
const SIGNIN_COOKIE: &str = "gantry_signin";
const LIFETIME_MS: i64 = 12 * 3600 * 1000;
/// Forms are small; anything larger is not ours.
const FORM_LIMIT: usize = 64 << 10;

#[derive(Serialize, Deserialize)]
struct Sealed {
    /// Session id: what sign-out forgets.
    sid: String,
    /// SHA-256 of the user's token, as the store keeps it.
    th: String,
    /// Expiry, ms since the epoch.
    exp: i64,
    csrf: String,
}

/// The web UI's keys and the sessions signed out since the server started.
pub struct Sessions {
    cipher: ChaCha20Poly1305,
    secure: bool,
}

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).expect("the OS random source is available");
    hex::encode(b)
}

/// Compares secrets in time independent of where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Sessions {
    pub fn new(st: &AppState) -> Sessions {
        // A key of its own, derived, so that a sealed cookie can never be opened as a secret.
        let key = Sha256::new()
            .chain_update(b"gantry web session key v1\0")
            .chain_update(st.secret_key.as_slice())
            .finalize();
        Sessions {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
            secure: st.config.url().starts_with("https://"),
        }
    }

    fn seal(&self, s: &Sealed) -> String {
        let mut nonce = [0u8; 12];
        getrandom::fill(&mut nonce).expect("the OS random source is available");
        let json = serde_json::to_vec(s).expect("a session serialises");
        let ct = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: &json,
                    aad: SESSION_COOKIE.as_bytes(),
                },
            )
            .expect("sealing a small message succeeds");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ct);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(out)
    }

    fn open(&self, cookie: &str) -> Option<Sealed> {
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(cookie)
            .ok()?;
        if raw.len() < 12 {
            return None;
        }
        let pt = self
            .cipher
            .decrypt(
                Nonce::from_slice(&raw[..12]),
                Payload {
                    msg: &raw[12..],
                    aad: SESSION_COOKIE.as_bytes(),
                },
            )
            .ok()?;
        let s: Sealed = serde_json::from_slice(&pt).ok()?;
        let now = now_ms();
        (s.exp > now).then_some(s)
    }

    fn cookie(&self, name: &str, value: &str, path: &str, max_age_s: i64) -> HeaderValue {
        let secure = if self.secure { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{name}={value}; Path={path}; Max-Age={max_age_s}; HttpOnly; SameSite=Lax{secure}"
        ))
        .expect("cookie values are base64 or hex")
    }
}

/// A cookie's value from the request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn sessions(parts: &Parts) -> Result<Arc<Sessions>, WebError> {
    parts
        .extensions
        .get::<Arc<Sessions>>()
        .cloned()
        .ok_or_else(|| WebError::Api(ApiError::Internal("web sessions are not set up".into())))
}

/// Where to go after signing in: only a path on this server.
fn local_path(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.into(),
        _ => "/workflows".into(),
    }
}

/// A signed-in user of the web UI, as the API would see them.
pub struct Web {
    pub caller: Caller,
    csrf: String,
    sid: String,
}

impl Web {
    /// The template context of a page in area `nav`.
    pub fn ctx(&self, nav: &'static str) -> Ctx {
        Ctx {
            user: self.caller.user.name.clone(),
            group: self.caller.user.group.clone(),
            admin: self.caller.is_admin(),
            csrf: self.csrf.clone(),
            nav,
            ..Ctx::default()
        }
    }
}

impl FromRequestParts<AppState> for Web {
    type Rejection = WebError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, WebError> {
        let sessions = sessions(parts)?;
        let sign_in = || WebError::SignIn {
            next: parts
                .uri
                .path_and_query()
                .map(|p| p.as_str().to_string())
                .unwrap_or_else(|| "/".into()),
        };
        let Some(s) = cookie(&parts.headers, SESSION_COOKIE).and_then(|c| sessions.open(c)) else {
            return Err(sign_in());
        };
        // Signed out on any server replica: the store says so to every one.
        if st
            .store
            .session_signed_out(&s.sid, now_ms())
            .await
            .map_err(ApiError::from)?
        {
            return Err(sign_in());
        }
        let caller = match crate::caller::caller_by_hash(st.store.as_ref(), &s.th).await {
            Ok(c) => c.user_only()?,
            // The token was revoked or expired since: sign in again.
            Err(ApiError::Unauthorized) => return Err(sign_in()),
            Err(e) => return Err(e.into()),
        };
        Ok(Web {
            caller,
            csrf: s.csrf,
            sid: s.sid,
        })
    }
}

/// A form post from a signed-in user: the session's CSRF token was sent with it and it came
/// from this origin. Every POST of the UI goes through this (or the sign-in form's own check).
pub struct WebForm<T, const LIMIT: usize = FORM_LIMIT> {
    pub web: Web,
    pub form: T,
}

/// Refuses requests a browser marks as sent from another site (`Sec-Fetch-Site`), or whose
/// `Origin` is neither this request's host nor the public URL.
fn same_origin(st: &AppState, headers: &HeaderMap) -> Result<(), WebError> {
    let header = |n| headers.get(n).and_then(|v: &HeaderValue| v.to_str().ok());
    if matches!(header("sec-fetch-site"), Some("cross-site" | "same-site")) {
        return Err(WebError::Csrf);
    }
    if let Some(origin) = header(ORIGIN.as_str()) {
        let host = origin.split_once("://").map(|(_, h)| h);
        let ok =
            host.is_some_and(|h| Some(h) == header(HOST.as_str())) || origin == st.config.url();
        if !ok {
            return Err(WebError::Csrf);
        }
    }
    Ok(())
}

async fn form_fields(body: axum::body::Body, limit: usize) -> Result<axum::body::Bytes, WebError> {
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| WebError::Api(ApiError::BadRequest("the form is too large".into())))
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WebError> {
    serde_urlencoded::from_bytes(bytes)
        .map_err(|e| WebError::Api(ApiError::BadRequest(format!("a field of the form: {e}"))))
}

#[derive(Deserialize)]
struct CsrfField {
    #[serde(default)]
    csrf: String,
}

impl<T: DeserializeOwned, const LIMIT: usize> FromRequest<AppState> for WebForm<T, LIMIT> {
    type Rejection = WebError;

    async fn from_request(req: Request, st: &AppState) -> Result<Self, WebError> {
        let (mut parts, body) = req.into_parts();
        same_origin(st, &parts.headers)?;
        let web = Web::from_request_parts(&mut parts, st).await?;
        let bytes = form_fields(body, LIMIT).await?;
        let sent: CsrfField = decode(&bytes)?;
        if !same_secret(&sent.csrf, &web.csrf) {
            return Err(WebError::Csrf);
        }
        Ok(WebForm {
            web,
            form: decode(&bytes)?,
        })
    }
}

#[derive(askama::Template)]
#[template(path = "web/signin.html")]
struct SignInPage {
    ctx: Ctx,
    next: String,
    error: Option<String>,
}

#[derive(Deserialize)]
pub struct NextQuery {
    next: Option<String>,
}

/// The sign-in form, with a fresh double-submit token in a cookie and a hidden field.
fn sign_in_page(sessions: &Sessions, next: String, error: Option<String>) -> Response {
    let token = random_hex(16);
    let ctx = Ctx {
        csrf: token.clone(),
        nav: "signin",
        ..Ctx::default()
    };
    let status = if error.is_some() {
        axum::http::StatusCode::UNAUTHORIZED
    } else {
        axum::http::StatusCode::OK
    };
    let mut resp = page(status, &SignInPage { ctx, next, error });
    resp.headers_mut().append(
        SET_COOKIE,
        sessions.cookie(SIGNIN_COOKIE, &token, "/signin", 3600),
    );
    resp
}

pub async fn sign_in_form(
    State(st): State<AppState>,
    Extension(sessions): Extension<Arc<Sessions>>,
    Query(q): Query<NextQuery>,
    req: Request,
) -> Response {
    let next = local_path(q.next.as_deref());
    // Already signed in: straight on.
    let (mut parts, _) = req.into_parts();
    if Web::from_request_parts(&mut parts, &st).await.is_ok() {
        return Redirect::to(&next).into_response();
    }
    sign_in_page(&sessions, next, None)
}

#[derive(Deserialize)]
pub struct SignInForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    next: Option<String>,
}

pub async fn sign_in(
    State(st): State<AppState>,
    Extension(sessions): Extension<Arc<Sessions>>,
    req: Request,
) -> Result<Response, WebError> {
    let (parts, body) = req.into_parts();
    same_origin(&st, &parts.headers)?;
    let form: SignInForm = decode(&form_fields(body, FORM_LIMIT).await?)?;
    let expected = cookie(&parts.headers, SIGNIN_COOKIE).unwrap_or("");
    if expected.is_empty() || !same_secret(&form.csrf, expected) {
        return Err(WebError::Csrf);
    }
    let next = local_path(form.next.as_deref());
    let token = form.token.trim();
    let refused = |why: &str| Ok(sign_in_page(&sessions, next.clone(), Some(why.into())));
    if token.is_empty() {
        return refused("Paste your Gantry token to sign in.");
    }
    let caller = match crate::caller::authenticate(
        st.store.as_ref(),
        Some(&format!("Bearer {token}")),
    )
    .await
    {
        Ok(c) => c,
        Err(ApiError::Unauthorized) => {
            return refused("That token is not valid. `gantry admin user create` prints one.")
        }
        Err(ApiError::TokenRefused(why)) => return refused(&why),
        Err(e) => return Err(e.into()),
    };
    if caller.clone().user_only().is_err() {
        return refused("Agent and monitoring tokens cannot sign in; use a user's token.");
    }
    let s = Sealed {
        sid: random_hex(16),
        th: caller::hash_token(token),
        exp: now_ms() + LIFETIME_MS,
        csrf: random_hex(32),
    };
    let mut resp = Redirect::to(&next).into_response();
    let h = resp.headers_mut();
    h.append(
        SET_COOKIE,
        sessions.cookie(SESSION_COOKIE, &sessions.seal(&s), "/", LIFETIME_MS / 1000),
    );
    h.append(SET_COOKIE, sessions.cookie(SIGNIN_COOKIE, "", "/signin", 0));
    tracing::info!("web: {} signed in", caller.user.name);
    Ok(resp)
}

#[derive(Deserialize)]
pub struct Nothing {}

pub async fn sign_out(
    State(st): State<AppState>,
    Extension(sessions): Extension<Arc<Sessions>>,
    WebForm { web, .. }: WebForm<Nothing>,
) -> Result<Response, WebError> {
    let now = now_ms();
    st.store
        .sign_out_session(&web.sid, now + LIFETIME_MS, now)
        .await
        .map_err(ApiError::from)?;
    let mut resp = Redirect::to("/signin").into_response();
    resp.headers_mut()
        .append(SET_COOKIE, sessions.cookie(SESSION_COOKIE, "", "/", 0));
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_followed_after_sign_in() {
        assert_eq!(local_path(Some("/nodes?x=1")), "/nodes?x=1");
        for bad in [
            "//evil.example/",
            "https://evil.example/",
            "/\\evil",
            "nodes",
        ] {
            assert_eq!(local_path(Some(bad)), "/workflows", "{bad}");
        }
        assert_eq!(local_path(None), "/workflows");
    }

    #[test]
    fn secrets_compare_equal_only_when_equal() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
        assert!(!same_secret("", "a"));
    }

    fn sessions(key: u8) -> Sessions {
        Sessions {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&[key; 32])),
            secure: false,
        }
    }

    fn sealed(exp: i64) -> Sealed {
        Sealed {
            sid: "s1".into(),
            th: "hash".into(),
            exp,
            csrf: "c1".into(),
        }
    }

    #[test]
    fn a_session_opens_only_untouched_unexpired_under_its_key() {
        let s = sessions(1);
        let later = now_ms() + 60_000;
        let cookie = s.seal(&sealed(later));
        let opened = s.open(&cookie).expect("opens");
        assert_eq!((opened.th.as_str(), opened.csrf.as_str()), ("hash", "c1"));
        assert!(sessions(2).open(&cookie).is_none(), "another server's key");
        let mut raw = cookie.into_bytes();
        let last = raw.len() - 2;
        raw[last] = if raw[last] == b'A' { b'B' } else { b'A' };
        assert!(
            s.open(&String::from_utf8(raw).unwrap()).is_none(),
            "tampered"
        );
        assert!(s.open(&s.seal(&sealed(now_ms() - 1))).is_none(), "expired");
        assert!(s.open("").is_none() && s.open("not base64!").is_none());
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(COOKIE, HeaderValue::from_static("a=1; gantry_session=xyz"));
        h.append(COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(cookie(&h, "gantry_session"), Some("xyz"));
        assert_eq!(cookie(&h, "b"), Some("2"));
        assert_eq!(cookie(&h, "c"), None);
    }
}
