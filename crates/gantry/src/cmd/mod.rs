pub mod admin;
pub mod context;
pub mod endpoint;
pub mod example;
pub mod image;
pub mod mcp;
pub mod monitoring;
pub mod node;
pub mod secret;
pub mod up;
pub mod volume;
pub mod watch;
pub mod workflow;

/// Asks "y/N" on a terminal before something that stops serving; without a terminal, refuses
/// (a usage error, exit 2) and says to pass `--yes`, so a script never stops serving by
/// accident. Returns whether to go on.
pub fn confirm(what: &str) -> anyhow::Result<bool> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        return Err(crate::output::UsageError(format!(
            "{what}; pass --yes to confirm (stdin is not a terminal to ask on)"
        ))
        .into());
    }
    eprint!("{what}. Continue? [y/N] ");
    std::io::stderr().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let yes = matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes");
    if !yes {
        eprintln!("nothing done");
    }
    Ok(yes)
}
