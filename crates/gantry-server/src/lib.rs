//! Gantry's control plane: HTTP API, auth, controllers, agent protocol.
