//! Repository names, references and who may use them.
//!
//! Names are `user/<user>/<image>` or `group/<group>/<image>`; `<image>` is one or more path
//! components in the distribution spec's grammar (lower case). Users read and push their own
//! and their group's repositories; agents and administrators every repository.

use std::fmt;

use gantry_api::v1::Role;

use super::auth::Principal;
use super::errors::OciError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    User,
    Group,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Group => "group",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "user" => Some(Scope::User),
            "group" => Some(Scope::Group),
            _ => None,
        }
    }
}

/// A repository of the object cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    pub scope: Scope,
    pub owner: String,
    pub name: String,
}

impl fmt::Display for Repo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.scope.as_str(), self.owner, self.name)
    }
}

impl Repo {
    /// Parses `user/<owner>/<image...>` or `group/<owner>/<image...>`.
    pub fn parse(full: &str) -> Result<Repo, OciError> {
        let bad = |why: &str| {
            OciError::name_invalid(format!(
                "repository name {full:?} is not valid: {why}; use user/<user>/<image> or \
                 group/<group>/<image>"
            ))
        };
        if full.len() > 255 {
            return Err(bad("it is longer than 255 characters"));
        }
        let mut parts = full.splitn(3, '/');
        let scope = parts.next().unwrap_or_default();
        let owner = parts.next().unwrap_or_default();
        let name = parts.next().unwrap_or_default();
        let scope = Scope::parse(scope).ok_or_else(|| bad("it must start with user/ or group/"))?;
        if !valid_owner(owner) {
            return Err(bad("the user or group name is missing or not valid"));
        }
        if name.is_empty() {
            return Err(bad("the image name is missing"));
        }
        if !name.split('/').all(valid_component) {
            return Err(bad(
                "image path components are lower-case letters and digits, separated by '.', \
                 '_', '__' or dashes",
            ));
        }
        Ok(Repo {
            scope,
            owner: owner.to_string(),
            name: name.to_string(),
        })
    }

    /// Whether this caller may pull from and push to it.
    pub fn allows(&self, c: &Principal) -> bool {
        match c.role {
            Role::Admin | Role::Agent => true,
            Role::User => match self.scope {
                Scope::User => c.user == self.owner,
                Scope::Group => c.group == self.owner,
            },
            Role::Monitoring => false,
        }
    }

    /// Whether everyone who may use this repository may also read `from`, so that linking
    /// `from`'s blobs here shows them to no one new: a user's repositories take from the
    /// user's others and from the user's group's (`owner_group`), a group's from the group's.
    pub fn may_take_from(&self, from: &Repo, owner_group: Option<&str>) -> bool {
        match (self.scope, from.scope) {
            (Scope::User, Scope::User) | (Scope::Group, Scope::Group) => self.owner == from.owner,
            (Scope::User, Scope::Group) => owner_group == Some(from.owner.as_str()),
            (Scope::Group, Scope::User) => false,
        }
    }

    /// The repository as the store names it.
    pub fn stored(&self) -> gantry_store::Repository<'_> {
        (self.scope.as_str(), &self.owner, &self.name)
    }

    pub fn key(&self, tag: &str) -> gantry_store::ImageKey {
        gantry_store::ImageKey {
            scope: self.scope.as_str().into(),
            owner: self.owner.clone(),
            name: self.name.clone(),
            tag: tag.into(),
        }
    }
}

/// User and group names as Gantry makes them.
pub fn valid_owner(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
pub fn valid_component(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let mut sep = String::new();
    let mut first = true;
    for c in s.chars() {
        if alnum(c) {
            if !sep.is_empty() {
                let ok = sep == "." || sep == "_" || sep == "__" || sep.chars().all(|c| c == '-');
                if !ok {
                    return false;
                }
                sep.clear();
            }
            first = false;
        } else if matches!(c, '.' | '_' | '-') {
            if first {
                return false;
            }
            sep.push(c);
        } else {
            return false;
        }
    }
    !first && sep.is_empty()
}

/// `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`
pub fn valid_tag(s: &str) -> bool {
    let mut chars = s.chars();
    let Some(c0) = chars.next() else {
        return false;
    };
    s.len() <= 128
        && (c0.is_ascii_alphanumeric() || c0 == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// The hex of a `sha256:<64 lower-case hex>` digest; other algorithms are not supported.
pub fn sha256_hex(digest: &str) -> Result<&str, OciError> {
    let Some((alg, hex)) = digest.split_once(':') else {
        return Err(OciError::digest_invalid(format!(
            "{digest:?} is not a digest: use sha256:<64 hex digits>"
        )));
    };
    if alg != "sha256" {
        return Err(OciError::digest_invalid(format!(
            "digest algorithm {alg:?} is not supported: use sha256"
        )));
    }
    if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(OciError::digest_invalid(format!(
            "{digest:?} is not a sha256 digest: it needs 64 lower-case hex digits"
        )));
    }
    Ok(hex)
}

/// A manifest reference: a tag or a digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    Tag(String),
    Digest(String),
}

impl Reference {
    pub fn parse(s: &str) -> Result<Reference, OciError> {
        if s.contains(':') {
            sha256_hex(s)?;
            Ok(Reference::Digest(s.to_string()))
        } else if valid_tag(s) {
            Ok(Reference::Tag(s.to_string()))
        } else {
            Err(OciError::new(
                axum::http::StatusCode::BAD_REQUEST,
                "TAG_INVALID",
                format!(
                    "tag {s:?} is not valid: 1-128 letters, digits, '_', '.' or '-', not \
                     starting with '.' or '-'"
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_names() {
        let r = Repo::parse("user/alice/busybox").unwrap();
        assert_eq!(
            (r.scope, r.owner.as_str(), r.name.as_str()),
            (Scope::User, "alice", "busybox")
        );
        let r = Repo::parse("group/physics/ml/trainer-2").unwrap();
        assert_eq!(r.name, "ml/trainer-2");
        assert_eq!(r.to_string(), "group/physics/ml/trainer-2");
        for bad in [
            "",
            "library/busybox",
            "user/alice",
            "user//busybox",
            "user/alice/",
            "user/alice/BusyBox",
            "user/alice/a//b",
            "user/alice/-a",
            "user/al ice/a",
            "org/x/y",
        ] {
            assert!(Repo::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn what_a_repository_may_take_from() {
        let r = |s: &str| Repo::parse(s).unwrap();
        let alice = r("user/alice/tool");
        let physics = r("group/physics/tool");
        assert!(alice.may_take_from(&r("user/alice/base"), Some("physics")));
        assert!(alice.may_take_from(&r("group/physics/base"), Some("physics")));
        assert!(!alice.may_take_from(&r("group/chem/base"), Some("physics")));
        assert!(!alice.may_take_from(&r("group/physics/base"), None));
        assert!(!alice.may_take_from(&r("user/bob/base"), Some("physics")));
        assert!(physics.may_take_from(&r("group/physics/base"), None));
        assert!(!physics.may_take_from(&r("group/chem/base"), None));
        // A member's own repository is not the whole group's to read.
        assert!(!physics.may_take_from(&r("user/alice/base"), Some("physics")));
    }

    #[test]
    fn components() {
        for good in ["a", "a0", "a.b", "a_b", "a__b", "a-b", "a---b", "a.b-c__d"] {
            assert!(valid_component(good), "{good}");
        }
        for bad in [
            "", ".a", "a.", "a..b", "a___b", "a._b", "A", "a-", "a/b", "_a",
        ] {
            assert!(!valid_component(bad), "{bad}");
        }
    }

    #[test]
    fn tags_and_digests() {
        assert!(valid_tag("1"));
        assert!(valid_tag("v1.2_rc-3"));
        assert!(valid_tag("_x"));
        assert!(!valid_tag(""));
        assert!(!valid_tag(".x"));
        assert!(!valid_tag("-x"));
        assert!(!valid_tag(&"x".repeat(129)));
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(Reference::parse(&d).unwrap(), Reference::Digest(d.clone()));
        assert_eq!(
            Reference::parse("latest").unwrap(),
            Reference::Tag("latest".into())
        );
        assert!(Reference::parse("sha512:abc").is_err());
        assert!(Reference::parse(&format!("sha256:{}", "A".repeat(64))).is_err());
        assert!(sha256_hex("sha256:abc").is_err());
    }
}
