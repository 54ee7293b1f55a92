pub mod admin;
pub mod node;
pub mod secret;
pub mod up;
pub mod watch;
pub mod workflow;
