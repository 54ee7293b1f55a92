//! Gantry's node agent: registration, runc runtime via shims, image pull and unpack, container
//! networking (CNI) and readiness probes, image builds, and the node's Prometheus exporter.

pub mod build;
pub mod image;
pub mod metrics;
pub mod net;
pub mod node;
pub mod probe;
pub mod runtime;
