//! Gantry's node agent: registration, runc runtime via shims, image pull and unpack.
