//! `gantry context list|use|delete`: the user's named contexts (`contexts.toml` in the config
//! dir), each a server URL and a token. `gantry up` writes one; `--context`/`GANTRY_CONTEXT`
//! picks one for a single command.

use std::process::ExitCode;

use clap::Subcommand;

use crate::client::{check_context_name, Contexts};
use crate::output::{self, Format};
use crate::{Conn, OutputArg};

#[derive(Subcommand, Debug)]
pub enum ContextCmd {
    /// The contexts: name, server, user; the current one is marked `*`.
    List {
        #[command(flatten)]
        out: OutputArg,
    },
    /// Make NAME the current context: the one the client verbs use.
    Use {
        /// The context's name (see `gantry context list`).
        name: String,
    },
    /// Forget a context (its token too).
    Delete {
        /// The context's name (see `gantry context list`).
        name: String,
    },
}

pub fn run(cmd: ContextCmd, conn: &Conn) -> anyhow::Result<ExitCode> {
    let mut all = Contexts::load()?;
    match cmd {
        ContextCmd::List { out } => {
            // `--context`/GANTRY_CONTEXT is the current one for this command too.
            let current = conn.context.clone().or(all.current.clone());
            if out.format == Format::Json {
                let list: Vec<_> = all
                    .contexts
                    .iter()
                    .map(|(n, c)| {
                        serde_json::json!({
                            "name": n,
                            "server": c.url,
                            "user": c.user,
                            "current": current.as_deref() == Some(n),
                        })
                    })
                    .collect();
                output::json(&list)?;
                return Ok(ExitCode::SUCCESS);
            }
            if all.contexts.is_empty() {
                println!("no contexts yet: `gantry up` creates one");
                return Ok(ExitCode::SUCCESS);
            }
            let rows: Vec<Vec<String>> = all
                .contexts
                .iter()
                .map(|(n, c)| {
                    vec![
                        if current.as_deref() == Some(n) {
                            "*"
                        } else {
                            ""
                        }
                        .to_string(),
                        n.clone(),
                        c.url.clone(),
                        c.user.clone().unwrap_or_else(|| "-".into()),
                    ]
                })
                .collect();
            output::table(&["CURRENT", "NAME", "SERVER", "USER"], &rows);
        }
        ContextCmd::Use { name } => {
            check_context_name(&name)?;
            let url = all.get(&name)?.url.clone();
            all.current = Some(name.clone());
            all.save()?;
            println!("context {name} ({url}) is now the current one");
        }
        ContextCmd::Delete { name } => {
            check_context_name(&name)?;
            all.get(&name)?;
            all.contexts.remove(&name);
            if all.current.as_deref() == Some(&name) {
                all.current = None;
            }
            all.save()?;
            println!("deleted context {name}");
            if all.current.is_none() && !all.contexts.is_empty() {
                eprintln!(
                    "note: {name} was the current context: pick another with `gantry context use NAME`"
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
