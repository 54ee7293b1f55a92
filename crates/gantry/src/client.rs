//! The API client the CLI verbs share, and where it finds the server: `--url`/`GANTRY_URL` and
//! `--token`/`GANTRY_TOKEN`, else the context `gantry up` wrote (in its data dir, and a copy
//! in the user's config dir).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use gantry_api::v1::ErrorBody;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientContext {
    pub url: String,
    pub token: String,
}

pub fn user_config_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("gantry"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/gantry"))
}

pub fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("gantry");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".local/share/gantry"),
        None => PathBuf::from("/var/lib/gantry"),
    }
}

pub fn write_context(path: &Path, ctx: &ClientContext) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // The token is a credential: only the owner may read it.
    write_private(path, toml::to_string(ctx)?.as_bytes())?;
    Ok(())
}

/// Writes a file only its owner may read (0600), whole: a token or another credential.
pub fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

fn read_context(path: &Path) -> anyhow::Result<Option<ClientContext>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(
            toml::from_str(&s).with_context(|| format!("reading {}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

#[derive(Clone)]
pub struct Client {
    pub base: String,
    token: String,
    http: reqwest::Client,
}

impl Client {
    pub fn new(url: &str, token: &str) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()?;
        Ok(Self {
            base: url.trim_end_matches('/').to_string(),
            token: token.to_string(),
            http,
        })
    }

    /// Resolves where to talk to, in the documented order.
    pub fn resolve(
        url: Option<String>,
        token: Option<String>,
        data_dir: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let mut ctx = None;
        let mut candidates = vec![];
        if let Some(d) = data_dir {
            candidates.push(d.join("context.toml"));
        }
        candidates.push(default_data_dir().join("context.toml"));
        if let Some(c) = user_config_dir() {
            candidates.push(c.join("context.toml"));
        }
        if url.is_none() || token.is_none() {
            for c in &candidates {
                if let Some(found) = read_context(c)? {
                    ctx = Some(found);
                    break;
                }
            }
        }
        let url = url.or_else(|| ctx.as_ref().map(|c| c.url.clone()));
        let token = token.or_else(|| ctx.as_ref().map(|c| c.token.clone()));
        match (url, token) {
            (Some(u), Some(t)) => Self::new(&u, &t),
            _ => bail!(
                "no Gantry server configured: start one with `gantry up`, or pass --url and --token \
                 (or set GANTRY_URL and GANTRY_TOKEN)"
            ),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.base)
    }

    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, self.url(path))
            .bearer_auth(&self.token)
    }

    /// A request to a path of the server outside `/api/v1` (`/mcp`), with the token.
    pub fn at(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    pub async fn send<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> anyhow::Result<T> {
        let resp = self.check(req).await?;
        resp.json().await.context("reading the server's reply")
    }

    /// Sends and turns an error status into the server's own message.
    pub async fn check(&self, req: reqwest::RequestBuilder) -> anyhow::Result<reqwest::Response> {
        let resp = req
            .send()
            .await
            .with_context(|| format!("cannot reach the Gantry server at {}", self.base))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        match serde_json::from_str::<ErrorBody>(&text) {
            Ok(body) => Err(ApiFailure {
                status: status.as_u16(),
                body,
            }
            .into()),
            Err(_) => bail!("the server answered {status}: {text}"),
        }
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.send(self.request(reqwest::Method::GET, path)).await
    }

    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> anyhow::Result<T> {
        self.send(self.request(reqwest::Method::POST, path).json(body))
            .await
    }
}

/// An error the API returned, with its diagnostics.
#[derive(Debug)]
pub struct ApiFailure {
    pub status: u16,
    pub body: ErrorBody,
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.body.error)
    }
}

impl std::error::Error for ApiFailure {}
