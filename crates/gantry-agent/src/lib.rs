//! Gantry's node agent: registration, runc runtime via shims, image pull and unpack, and the
//! node's Prometheus exporter.

pub mod image;
pub mod metrics;
pub mod node;
pub mod runtime;
