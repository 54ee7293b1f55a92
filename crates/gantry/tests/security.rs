//! Tenant isolation, tried as an attacker would: a normal user of another group, against a
//! real embedded cluster (`gantry up`: real agents, runc, the object cache's registry, the
//! node's bridges and firewall). Every attack is next to the legitimate use it resembles, and
//! each test asserts both that the attack fails and that the legitimate use still works.
//!
//! One module per class of attack, in `tests/security/` (a test crate's root looks for its
//! modules beside itself, hence the `#[path]`s).

mod common;
#[path = "security/fuzz.rs"]
mod fuzz;
#[path = "security/holes.rs"]
mod holes;
#[path = "security/multinode.rs"]
mod multinode;
#[path = "security/network.rs"]
mod network;
#[path = "security/paths.rs"]
mod paths;
#[path = "security/registry.rs"]
mod registry;
#[path = "security/sif.rs"]
mod sif;
#[path = "security/transfer.rs"]
mod transfer;
#[path = "security/volumes.rs"]
mod volumes;
