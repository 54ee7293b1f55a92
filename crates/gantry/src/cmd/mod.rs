pub mod admin;
pub mod endpoint;
pub mod monitoring;
pub mod node;
pub mod secret;
pub mod up;
pub mod watch;
pub mod workflow;
