use std::process::ExitCode;

use clap::Subcommand;
use gantry_api::v1::{NodeDetail, NodeInfo};

use crate::output::{age, bytes, json, table, Format};
use crate::{Conn, OutputArg};

#[derive(Subcommand)]
pub enum NodeCmd {
    /// Every node with its state and what runs there.
    List {
        #[command(flatten)]
        out: OutputArg,
    },
    /// One node and its history.
    Show {
        name: String,
        #[command(flatten)]
        out: OutputArg,
    },
}

pub async fn run(cmd: NodeCmd, conn: &Conn) -> anyhow::Result<ExitCode> {
    let client = conn.client()?;
    match cmd {
        NodeCmd::List { out } => {
            let nodes: Vec<NodeInfo> = client.get("/nodes").await?;
            if out.format == Format::Json {
                json(&nodes)?;
            } else {
                let rows: Vec<Vec<String>> = nodes
                    .iter()
                    .map(|n| {
                        vec![
                            n.name.clone(),
                            n.pool.clone(),
                            n.state.to_string(),
                            if n.connected {
                                "yes".into()
                            } else {
                                "no".into()
                            },
                            format!("{}/{}", n.allocated.cpus, n.capacity.cpus),
                            format!(
                                "{}/{}",
                                bytes(n.allocated.memory_bytes),
                                bytes(n.capacity.memory_bytes)
                            ),
                            n.running.to_string(),
                            n.last_seen.map(age).unwrap_or_else(|| "-".into()),
                        ]
                    })
                    .collect();
                table(
                    &[
                        "NAME",
                        "POOL",
                        "STATE",
                        "CONNECTED",
                        "CPUS",
                        "MEMORY",
                        "RUNNING",
                        "SEEN",
                    ],
                    &rows,
                );
            }
        }
        NodeCmd::Show { name, out } => {
            let d: NodeDetail = client.get(&format!("/nodes/{name}")).await?;
            if out.format == Format::Json {
                json(&d)?;
            } else {
                let n = &d.node;
                println!("Node:      {} ({})", n.name, n.id);
                println!("Pool:      {}", n.pool);
                println!("State:     {}", n.state);
                println!("Connected: {}", if n.connected { "yes" } else { "no" });
                println!(
                    "CPUs:      {} of {} allocated",
                    n.allocated.cpus, n.capacity.cpus
                );
                println!(
                    "Memory:    {} of {} allocated",
                    bytes(n.allocated.memory_bytes),
                    bytes(n.capacity.memory_bytes)
                );
                println!("Running:   {}", n.running);
                if let Some(v) = &n.version {
                    println!("Version:   {v}");
                }
                println!("\nHistory:");
                for e in &d.events {
                    println!("  {}", super::watch::event_line(e));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
