//! Secrets: values that workflow files name as `secret://SCOPE/NAME` (registry credentials in
//! `image.secret`, environment values). Sealed with ChaCha20-Poly1305 under a key kept in the
//! data dir (never in the database) before they reach the store, bound to their scope, owner
//! and name so a sealed value cannot be moved to another secret. They are opened only to send
//! an assignment to an agent; the stored assignment keeps the `secret://` reference.

use std::path::Path;

use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use gantry_api::agent::{Assignment, RegistryCredential, TransferCredential};
use gantry_intake::requests::{self, SecretScope, SecretType, TypedSecret};
use gantry_store::{SecretKey, Store};

use crate::caller::Caller;
use crate::error::ApiError;

/// The sealing key, created on first start.
pub fn load_or_create_key(dir: &Path) -> anyhow::Result<[u8; 32]> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("secret.key");
    match std::fs::read(&path) {
        Ok(bytes) if bytes.len() == 32 => {
            let mut k = [0u8; 32];
            k.copy_from_slice(&bytes);
            Ok(k)
        }
        Ok(_) => anyhow::bail!("{} is not a 32-byte key", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut k = [0u8; 32];
            getrandom::fill(&mut k).map_err(|e| anyhow::anyhow!("random key: {e}"))?;
            let mut f = std::fs::OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o600)
                .open(&path)?;
            f.write_all(&k)?;
            f.sync_all()?;
            Ok(k)
        }
        Err(e) => Err(e.into()),
    }
}

fn aad(key: &SecretKey) -> String {
    format!("{}/{}/{}", key.scope, key.owner, key.name)
}

pub fn seal(master: &[u8; 32], key: &SecretKey, value: &str) -> Result<String, ApiError> {
    let cipher = ChaCha20Poly1305::new(Key::from_slice(master));
    let mut nonce = [0u8; 12];
    getrandom::fill(&mut nonce).map_err(|e| ApiError::Internal(e.to_string()))?;
    let aad = aad(key);
    let ct = cipher
        .encrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: value.as_bytes(),
                aad: aad.as_bytes(),
            },
        )
        .map_err(|_| ApiError::Internal("sealing failed".into()))?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&ct);
    Ok(base64::engine::general_purpose::STANDARD.encode(out))
}

pub fn open(master: &[u8; 32], key: &SecretKey, sealed: &str) -> Result<String, String> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(sealed)
        .map_err(|_| "a stored secret is corrupt".to_string())?;
    if raw.len() < 12 {
        return Err("a stored secret is corrupt".into());
    }
    let cipher = ChaCha20Poly1305::new(Key::from_slice(master));
    let aad = aad(key);
    let pt = cipher
        .decrypt(
            Nonce::from_slice(&raw[..12]),
            Payload {
                msg: &raw[12..],
                aad: aad.as_bytes(),
            },
        )
        .map_err(|_| "a stored secret cannot be opened with this server's key".to_string())?;
    String::from_utf8(pt).map_err(|_| "a stored secret is not UTF-8".into())
}

/// `secret://SCOPE/NAME` seen from a workflow owned by `user` of `group`.
pub fn parse_ref(uri: &str, user: &str, group: &str) -> Result<SecretKey, String> {
    let (scope, name) = requests::secret_ref(uri)?;
    Ok(key_of(scope, user, group, name))
}

/// A secret's key: its scope, the owner that scope means for this user, and its name.
pub(crate) fn key_of(scope: SecretScope, user: &str, group: &str, name: &str) -> SecretKey {
    let owner = match scope {
        SecretScope::User => user.to_string(),
        SecretScope::Group => group.to_string(),
        SecretScope::Organization => String::new(),
    };
    SecretKey {
        scope,
        owner,
        name: name.into(),
    }
}

async fn reveal(
    store: &dyn Store,
    sealing_key: &[u8; 32],
    key: &SecretKey,
) -> Result<TypedSecret, String> {
    let stored = store
        .secret(key)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("secret://{}/{} does not exist", key.scope, key.name))?;
    let value = open(sealing_key, key, &stored.sealed)?;
    TypedSecret::parse(stored.kind, &value)
        .map_err(|e| format!("secret://{}/{}: {e}", key.scope, key.name))
}

/// A secret's value as an environment variable takes it: a typed secret's JSON object as
/// stored.
fn env_value(secret: TypedSecret) -> String {
    match secret {
        TypedSecret::Value(v) => v,
        TypedSecret::S3(s) => serde_json::to_string(&s).unwrap_or_default(),
        TypedSecret::Http(h) => serde_json::to_string(&h).unwrap_or_default(),
        TypedSecret::Image(i) => serde_json::to_string(&i).unwrap_or_default(),
    }
}

/// Checks at submit that every secret a workflow names exists, and that the ones with a
/// purpose have a type that serves it, so it fails there, not later.
pub async fn check_refs(
    store: &dyn Store,
    plan: &crate::plan::WorkflowPlan,
    user: &str,
    group: &str,
) -> Result<(), ApiError> {
    let mut problems = vec![];
    for uri in plan.secret_refs() {
        match parse_ref(&uri, user, group) {
            Ok(key) => match store.secret(&key).await? {
                None => problems.push(format!(
                    "{uri} does not exist: create it with `gantry secret set {} --scope {}`",
                    key.name, key.scope
                )),
                Some(found) => {
                    let as_image = plan
                        .jobs
                        .iter()
                        .any(|j| j.image_secret.as_ref() == Some(&uri));
                    if as_image && !matches!(found.kind, SecretType::Value | SecretType::Image) {
                        problems.push(format!(
                            "{uri} is an {} secret; image.secret takes an image secret \
                             (`gantry secret set {} --type image`)",
                            found.kind, key.name
                        ));
                    }
                    for (url, want) in transfer_uses(plan, &uri) {
                        if found.kind != want {
                            problems.push(format!(
                                "{uri} is a {} secret; {url} takes a {want} secret \
                                 (`gantry secret set {} --type {want}`)",
                                found.kind, key.name
                            ));
                        }
                    }
                }
            },
            Err(e) => problems.push(e),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApiError::BadRequest(problems.join("\n")))
    }
}

/// The remote ends of transfers that name `uri` as their secret, with the secret type each
/// needs.
fn transfer_uses(plan: &crate::plan::WorkflowPlan, uri: &str) -> Vec<(String, SecretType)> {
    plan.jobs
        .iter()
        .filter_map(|j| j.transfer.as_ref())
        .flat_map(|t| {
            let ingress = t.direction == "ingress";
            t.items
                .iter()
                .filter(move |i| i.secret.as_deref() == Some(uri))
                .map(move |i| {
                    let remote = if ingress { &i.source } else { &i.destination };
                    let kind = if remote.starts_with("s3://") {
                        SecretType::S3
                    } else {
                        SecretType::Http
                    };
                    (remote.clone(), kind)
                })
        })
        .collect()
}

/// A registry credential from a secret's value: `USER:PASSWORD` is basic auth, anything else
/// a bearer token.
fn credential(value: &str) -> RegistryCredential {
    match value.split_once(':') {
        Some((u, p)) if !u.is_empty() => RegistryCredential::Basic {
            username: u.into(),
            password: p.into(),
        },
        _ => RegistryCredential::Bearer {
            token: value.trim().into(),
        },
    }
}

/// Fills in the secrets an assignment refers to, just before it goes to an agent.
pub async fn resolve(
    store: &dyn Store,
    sealing_key: &[u8; 32],
    asg: &mut Assignment,
    user: &str,
    group: &str,
) -> Result<(), String> {
    if let Some(uri) = asg.image.secret.clone() {
        let key = parse_ref(&uri, user, group)?;
        asg.image.credential = Some(match reveal(store, sealing_key, &key).await? {
            TypedSecret::Value(v) => credential(&v),
            TypedSecret::Image(i) => {
                let host = requests::image_registry_host(&asg.image.uri);
                if !requests::trusted_host(&i.trusted_domains, &host) {
                    return Err(format!(
                        "{uri} is trusted only for {}, not for the registry {host}",
                        i.trusted_domains.join(", ")
                    ));
                }
                RegistryCredential::Basic {
                    username: i.username,
                    password: i.password,
                }
            }
            _ => return Err(format!("{uri} is not an image secret")),
        });
    }
    if let Some(t) = asg.transfer.as_mut() {
        for item in t.items.iter_mut() {
            let Some(uri) = item.secret.clone() else {
                continue;
            };
            let key = parse_ref(&uri, user, group)?;
            item.credential = Some(match reveal(store, sealing_key, &key).await? {
                TypedSecret::S3(s) => TransferCredential::S3(s),
                TypedSecret::Http(h) => TransferCredential::Http(h),
                _ => return Err(format!("{uri} is not an s3 or http secret")),
            });
        }
    }
    for kv in asg.env.iter_mut() {
        let Some((k, v)) = kv.split_once('=') else {
            continue;
        };
        if v.starts_with("secret://") {
            let key = parse_ref(v, user, group)?;
            *kv = format!("{k}={}", env_value(reveal(store, sealing_key, &key).await?));
        }
    }
    Ok(())
}

/// Who may write (and see) secrets of a scope: the user their own, a group member the
/// group's, an administrator the organization's.
pub(crate) fn owner_for(c: &Caller, scope: SecretScope, name: &str) -> Result<SecretKey, ApiError> {
    if scope == SecretScope::Organization {
        c.require_admin()?;
    }
    Ok(key_of(scope, &c.user.name, &c.user.group, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> SecretKey {
        SecretKey {
            scope: SecretScope::User,
            owner: "ada".into(),
            name: name.into(),
        }
    }

    #[test]
    fn sealed_values_open_only_as_the_same_secret() {
        let master = [7u8; 32];
        let sealed = seal(&master, &key("a"), "s3cret").unwrap();
        assert!(!sealed.contains("s3cret"));
        assert_eq!(open(&master, &key("a"), &sealed).unwrap(), "s3cret");
        assert!(
            open(&master, &key("b"), &sealed).is_err(),
            "bound to its name"
        );
        assert!(
            open(&[8u8; 32], &key("a"), &sealed).is_err(),
            "bound to the key"
        );
    }

    #[test]
    fn references_resolve_against_the_workflow_owner() {
        assert_eq!(
            parse_ref("secret://user/T", "ada", "phys").unwrap().owner,
            "ada"
        );
        let g = parse_ref("secret://account/T", "ada", "phys").unwrap();
        assert_eq!((g.scope.as_str(), g.owner.as_str()), ("group", "phys"));
        assert!(parse_ref("secret://user/../x", "ada", "phys").is_err());
        assert!(parse_ref("secret://nope/x", "ada", "phys").is_err());
        assert!(parse_ref("https://x", "ada", "phys").is_err());
    }

    #[test]
    fn credentials_from_values() {
        assert!(matches!(
            credential("u:p"),
            RegistryCredential::Basic { .. }
        ));
        assert!(matches!(
            credential("tok"),
            RegistryCredential::Bearer { .. }
        ));
    }
}
