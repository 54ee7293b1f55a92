//! Who calls: the registry takes Gantry tokens and asks the server who they name
//! ([`Authenticate`]), then applies its own rules (`names.rs`) to what it is told.

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

/// The server's token check.
#[async_trait]
pub trait Authenticate: Send + Sync {
    /// The caller a Gantry token names (the token alone, without `Bearer `).
    async fn authenticate(&self, token: &str) -> Result<Principal, AuthError>;
}
