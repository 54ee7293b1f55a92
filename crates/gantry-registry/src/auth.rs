//! What the registry asks of the server besides the image index ([`Site`]): who a Gantry
//! token names (the registry then applies its own rules, `names.rs`, to what it is told), a
//! user's group, and the administrator's bound on the cache.

use async_trait::async_trait;
use gantry_api::v1::Role;

/// A caller as the registry's rules see it: users use their own and their group's
/// repositories, agents and administrators every repository, monitoring tokens none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The user's name: what they push is recorded as theirs, and only they may go on with
    /// an upload they began.
    pub user: String,
    pub group: String,
    pub role: Role,
}

/// Why a token was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// No such token, or one refused (expired, its user disabled): 401 with a challenge.
    Refused,
    /// The check itself failed (the store): 503, with this message.
    Failed(String),
}

/// The server, as far as the registry needs it.
#[async_trait]
pub trait Site: Send + Sync {
    /// The caller a Gantry token names (the token alone, without `Bearer `).
    async fn authenticate(&self, token: &str) -> Result<Principal, AuthError>;
    /// The group of a user, for what an agent may mount into that user's repository; `None`
    /// for no such user.
    async fn group_of(&self, user: &str) -> gantry_store::Result<Option<String>>;
    /// The administrator's bound on the cache, in bytes; `None` when none is set (the
    /// registry then keeps [`super::DEFAULT_CACHE_BYTES`]).
    async fn cache_limit(&self) -> gantry_store::Result<Option<u64>>;
}
