//! Gantry's persistence: one trait, SQLite (embedded default), migrations.
