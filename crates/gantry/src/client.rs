//! The API client the CLI verbs share, and where it finds the server: `--url`/`GANTRY_URL` and
//! `--token`/`GANTRY_TOKEN`, else the named context `--context`/`GANTRY_CONTEXT` picks, else
//! the context file of `--data-dir`/`GANTRY_DATA_DIR`, else the current one of the user's
//! named contexts (`contexts.toml` in the user's config dir, which `gantry up` updates), else
//! the default data dir's context file.

use std::collections::BTreeMap;
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

/// The user's named contexts: `contexts.toml` in the user's config dir.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Contexts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
    #[serde(default)]
    pub contexts: BTreeMap<String, NamedContext>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedContext {
    pub url: String,
    pub token: String,
    /// Whose token it is, where known (`gantry up` knows: its administrator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// The name a migrated single-context file gets.
pub const MIGRATED: &str = "default";

impl Contexts {
    pub fn path() -> Option<PathBuf> {
        user_config_dir().map(|d| d.join("contexts.toml"))
    }

    /// The user's contexts. Before named contexts there was one file, `context.toml` beside
    /// where `contexts.toml` goes: it reads as the context `default` (the current one), and
    /// becomes part of `contexts.toml` on the next save.
    pub fn load() -> anyhow::Result<Self> {
        let Some(path) = Self::path() else {
            return Ok(Self::default());
        };
        match std::fs::read_to_string(&path) {
            Ok(s) => {
                return toml::from_str(&s).with_context(|| format!("reading {}", path.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
        let mut out = Self::default();
        if let Some(old) = read_context(&path.with_file_name("context.toml"))? {
            out.contexts.insert(
                MIGRATED.into(),
                NamedContext {
                    url: old.url,
                    token: old.token,
                    user: None,
                },
            );
            out.current = Some(MIGRATED.into());
        }
        Ok(out)
    }

    pub fn save(&self) -> anyhow::Result<()> {
        let Some(path) = Self::path() else {
            bail!("no config dir for contexts: set HOME or XDG_CONFIG_HOME");
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        // Tokens are credentials: only the owner may read them.
        write_private(&path, toml::to_string(self)?.as_bytes())
            .with_context(|| format!("writing {}", path.display()))
    }

    /// The context of this name, or an error that lists the names there are.
    pub fn get(&self, name: &str) -> anyhow::Result<&NamedContext> {
        self.contexts.get(name).ok_or_else(|| {
            let names: Vec<&str> = self.contexts.keys().map(String::as_str).collect();
            crate::usage::UsageError(if names.is_empty() {
                format!("no context {name:?}: there are none yet (`gantry up` creates one)")
            } else {
                format!("no context {name:?}; there are: {}", names.join(", "))
            })
            .into()
        })
    }
}

/// A context's name: what `gantry context use` takes, so nothing a shell or TOML key mangles.
pub fn check_context_name(name: &str) -> Result<(), crate::usage::UsageError> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(crate::usage::UsageError(format!(
            "{name:?} is not a context name: use 1-64 letters, digits, '-', '_' or '.'"
        )));
    }
    Ok(())
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
    /// The server's URL (the first, when several are given).
    pub base: String,
    /// More URLs of the same cluster (replicas), tried in turn when one does not answer.
    others: Vec<String>,
    token: String,
    http: reqwest::Client,
    /// The named context this client came from, for saying which server is down.
    pub context: Option<String>,
}

impl Client {
    pub fn new(url: &str, token: &str) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()?;
        // Several replicas' URLs, comma-separated.
        let mut urls = url
            .split(',')
            .map(|u| u.trim().trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty());
        Ok(Self {
            base: urls.next().unwrap_or_default(),
            others: urls.collect(),
            token: token.to_string(),
            http,
            context: None,
        })
    }

    /// Resolves where to talk to, in the documented order.
    pub fn resolve(
        url: Option<String>,
        token: Option<String>,
        data_dir: Option<&Path>,
        context: Option<&str>,
    ) -> anyhow::Result<Self> {
        let mut ctx: Option<ClientContext> = None;
        let mut name = None;
        if url.is_none() || token.is_none() {
            if let Some(n) = context {
                let found = Contexts::load()?.get(n)?.clone();
                ctx = Some(ClientContext {
                    url: found.url,
                    token: found.token,
                });
                name = Some(n.to_string());
            } else if let Some(found) = data_dir.map(|d| d.join("context.toml")) {
                ctx = read_context(&found)?;
            }
            if ctx.is_none() {
                let all = Contexts::load()?;
                if let Some(n) = &all.current {
                    if let Some(found) = all.contexts.get(n) {
                        ctx = Some(ClientContext {
                            url: found.url.clone(),
                            token: found.token.clone(),
                        });
                        name = Some(n.clone());
                    }
                }
            }
            if ctx.is_none() {
                ctx = read_context(&default_data_dir().join("context.toml"))?;
            }
        }
        // A context's name only says where the URL came from.
        if url.is_some() {
            name = None;
        }
        let url = url.or_else(|| ctx.as_ref().map(|c| c.url.clone()));
        let token = token.or_else(|| ctx.as_ref().map(|c| c.token.clone()));
        match (url, token) {
            (Some(u), Some(t)) => {
                let mut c = Self::new(&u, &t)?;
                c.context = name;
                Ok(c)
            }
            _ => bail!(
                "no Gantry server configured: start one with `gantry up`, or pass --url and --token \
                 (or set GANTRY_URL and GANTRY_TOKEN)"
            ),
        }
    }

    /// What to say when the server does not answer: which context points at it, so that a
    /// context left pointing at a stopped server reads as that, not as a socket error.
    pub fn not_answering(&self) -> String {
        match &self.context {
            Some(n) => format!(
                "the server of context {n} ({}) is not answering: is it running? \
                 (`gantry context list`)",
                self.base
            ),
            None => format!(
                "the Gantry server at {} is not answering: is it running?",
                self.base
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
        let resp = match self.send_any(req).await {
            Ok(r) => r,
            Err(e) if e.is_connect() || e.is_timeout() => {
                return Err(anyhow::Error::new(e).context(self.not_answering()))
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot reach the Gantry server at {}", self.base))
            }
        };
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

    /// Sends to the first server URL that answers: with replicas' URLs given, a connection
    /// refused or timed out moves on to the next (a request whose body streams cannot be sent
    /// twice, and goes to the first alone).
    async fn send_any(&self, req: reqwest::RequestBuilder) -> reqwest::Result<reqwest::Response> {
        if self.others.is_empty() {
            return req.send().await;
        }
        let mut attempt = req.build()?;
        let mut from = self.base.as_str();
        for next in &self.others {
            let spare = attempt.try_clone();
            match self.http.execute(attempt).await {
                Err(e) if e.is_connect() || e.is_timeout() => {
                    let Some(mut again) = spare else {
                        return Err(e);
                    };
                    let Some(rest) = again.url().as_str().strip_prefix(from).map(str::to_string)
                    else {
                        return Err(e);
                    };
                    match reqwest::Url::parse(&format!("{next}{rest}")) {
                        Ok(u) => *again.url_mut() = u,
                        Err(_) => return Err(e),
                    }
                    attempt = again;
                    from = next;
                }
                r => return r,
            }
        }
        self.http.execute(attempt).await
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
