//! `gantry example [NAME]`: the example workflow files shipped in the binary, so a first run
//! needs nothing but the binary (`gantry example pipeline | gantry workflow start - --watch`).

use std::process::ExitCode;

use clap::Args;
use gantry_server::examples::{find, EXAMPLES};

use crate::output::{self, Format, UsageError};
use crate::OutputArg;

#[derive(Args, Debug)]
pub struct ExampleArgs {
    /// The example to print (its file, to stdout); without one, the list.
    name: Option<String>,
    #[command(flatten)]
    out: OutputArg,
}

pub fn run(a: ExampleArgs) -> anyhow::Result<ExitCode> {
    match a.name {
        Some(name) => {
            let e = find(&name).ok_or_else(|| {
                let names: Vec<&str> = EXAMPLES.iter().map(|e| e.name).collect();
                UsageError(format!(
                    "no example {name:?}; there are: {}",
                    names.join(", ")
                ))
            })?;
            print!("{}", e.text);
        }
        None if a.out.format == Format::Json => {
            let list: Vec<_> = EXAMPLES
                .iter()
                .map(|e| serde_json::json!({"name": e.name, "file": e.file, "description": e.description}))
                .collect();
            output::json(&list)?;
        }
        None => {
            let rows: Vec<Vec<String>> = EXAMPLES
                .iter()
                .map(|e| vec![e.name.to_string(), e.description.to_string()])
                .collect();
            output::table(&["NAME", "DESCRIPTION"], &rows);
            println!();
            println!("Print one with `gantry example NAME`; run it with");
            println!("  gantry example pipeline | gantry workflow start - --watch");
        }
    }
    Ok(ExitCode::SUCCESS)
}
