//! The error of bad input, below both the client and the output (the client refuses a bad
//! context name with it; the output gives it exit code 2).

/// An error for bad input (exit 2) rather than a failed operation (exit 1).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}
