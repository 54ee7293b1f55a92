//! Gantry's node agent: registration, runc runtime via shims, image pull and unpack.

pub mod image;
pub mod node;
pub mod runtime;
