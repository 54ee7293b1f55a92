use serde::{Deserialize, Serialize};
use std::fmt;

/// A 1-based position in the workflow file. `0:0` means "no position" (the
/// file could not be read, say).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

impl Pos {
    pub fn new(line: usize, column: usize) -> Pos {
        Pos { line, column }
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// One problem found in a workflow file. The message starts with the field
/// path (`jobs.train.resource.cpu.cores: ...`) so it stands on its own.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Diagnostic {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl Diagnostic {
    pub fn new(pos: Pos, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            line: pos.line,
            column: pos.column,
            message: message.into(),
        }
    }

    pub fn pos(&self) -> Pos {
        Pos::new(self.line, self.column)
    }

    /// `FILE:LINE:COL: message`, the shape editors and CI logs link to.
    pub fn render(&self, file: &str) -> String {
        format!("{}:{}:{}: {}", file, self.line, self.column, self.message)
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

impl std::error::Error for Diagnostic {}

/// Renders every diagnostic on its own line, for a CLI to print.
pub fn render_all(file: &str, diagnostics: &[Diagnostic]) -> String {
    let mut out = String::new();
    for d in diagnostics {
        out.push_str(&d.render(file));
        out.push('\n');
    }
    out
}

/// Collects diagnostics while a file is converted; everything is reported at
/// once rather than stopping at the first problem.
#[derive(Default)]
pub(crate) struct Diags {
    list: Vec<Diagnostic>,
}

impl Diags {
    pub fn err(&mut self, pos: Pos, path: &str, message: impl AsRef<str>) {
        let message = if path.is_empty() {
            message.as_ref().to_string()
        } else {
            format!("{}: {}", path, message.as_ref())
        };
        self.list.push(Diagnostic::new(pos, message));
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn into_sorted(mut self) -> Vec<Diagnostic> {
        self.list.sort();
        self.list.dedup();
        self.list
    }
}
