//! The Fuzzfile v4 workflow file: types, parsing with positions, validation, the job graph.
