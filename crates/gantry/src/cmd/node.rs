use std::process::ExitCode;

use clap::Subcommand;
use gantry_api::v1::{HoldInfo, NodeDetail, NodeInfo, PlaceHold, ReleaseHolds};

use crate::output::{age, bytes, json, table, Format};
use crate::{Conn, OutputArg};

#[derive(Subcommand)]
pub enum NodeCmd {
    /// Every node with its state and what runs there.
    List {
        /// Only the nodes of this pool.
        #[arg(long)]
        pool: Option<String>,
        /// Only the nodes in this state (READY, CORDONED, EVICTING, DOWN, ...).
        #[arg(long)]
        state: Option<String>,
        /// At most this many nodes (by name).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
        #[command(flatten)]
        out: OutputArg,
    },
    /// One node, its holds and its newest events (oldest of them first).
    Show {
        /// The node's name (see `gantry node list`).
        name: String,
        /// How many of the newest events to show.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
        /// Only events since then: a duration back from now (1h, 30m) or an RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Take a node out of service (administrators): cordon stops new work; evict also takes
    /// running work off (SIGTERM, grace, SIGKILL). `drain` is accepted as Slurm's word for a
    /// cordon (no new work; running work finishes).
    Hold {
        /// The node's name (see `gantry node list`).
        name: String,
        /// cordon (no new work), drain (the same as cordon, as Slurm says it) or evict (also
        /// stop running work).
        #[arg(long = "type", value_parser = ["cordon", "drain", "evict"])]
        kind: String,
        /// Why: shown with the hold, to users whose work waits too.
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Release a node's holds (administrators): one with --hold, else all of them.
    Release {
        /// The node's name (see `gantry node list`).
        name: String,
        /// A hold's id (or a unique prefix).
        #[arg(long)]
        hold: Option<String>,
        /// Why the node may work again: recorded with who released it and when.
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        out: OutputArg,
    },
}

/// A node's event with the workflow and task it concerns: `workflow train (86ec1234)
/// task prep[3]`.
fn node_event_line(e: &gantry_api::v1::Event) -> String {
    let mut about = String::new();
    if let Some(id) = e.workflow_id {
        let short = &id.to_string()[..8];
        match &e.workflow_name {
            Some(n) => about.push_str(&format!(" workflow {n} ({short})")),
            None => about.push_str(&format!(" workflow {short}")),
        }
    }
    if let Some(t) = &e.task {
        about.push_str(&format!(" task {t}"));
    }
    format!(
        "{} {}{about}: {}",
        crate::output::time(e.time),
        e.kind,
        e.message
    )
}

fn hold_line(h: &HoldInfo) -> String {
    let by = match (&h.source[..], &h.alertname) {
        ("monitoring", Some(a)) => format!("monitoring/{a}"),
        _ => h.created_by.clone(),
    };
    let mut s = format!(
        "{} {} {} by {} {} ago: {}",
        &h.id.to_string()[..8],
        h.kind,
        h.state,
        by,
        age(h.created_at),
        h.reason
    );
    if h.release == "admin" && h.state != "RELEASED" {
        s.push_str(if h.alert_resolved_at.is_some() {
            " (alert resolved; an administrator must release)"
        } else {
            " (release: admin)"
        });
    }
    if let (Some(by), Some(at)) = (&h.released_by, h.released_at) {
        s.push_str(&format!(
            "; released by {by} {} ago{}",
            age(at),
            h.release_reason
                .as_ref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ));
    }
    s
}

pub async fn run(cmd: NodeCmd, conn: &Conn) -> anyhow::Result<ExitCode> {
    let client = conn.client()?;
    match cmd {
        NodeCmd::List {
            pool,
            state,
            limit,
            out,
        } => {
            // Filtered on the server: a fleet of thousands is not sent whole to show a few.
            let mut req = client.request(reqwest::Method::GET, "/nodes");
            if let Some(p) = &pool {
                req = req.query(&[("pool", p)]);
            }
            if let Some(s) = &state {
                req = req.query(&[("state", s)]);
            }
            if let Some(n) = limit {
                req = req.query(&[("limit", n.to_string())]);
            }
            let nodes: Vec<NodeInfo> = client.send(req).await?;
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
                            n.holds
                                .iter()
                                .map(|h| {
                                    let who =
                                        h.alertname.clone().unwrap_or_else(|| h.created_by.clone());
                                    let deferred = if h.state == "DEFERRED" {
                                        " DEFERRED"
                                    } else {
                                        ""
                                    };
                                    format!("{}({who}){deferred}", h.kind)
                                })
                                .collect::<Vec<_>>()
                                .join(","),
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
                        "HOLDS",
                    ],
                    &rows,
                );
            }
        }
        NodeCmd::Show {
            name,
            limit,
            since,
            out,
        } => {
            let mut req = client
                .request(reqwest::Method::GET, &format!("/nodes/{name}"))
                .query(&[("limit", limit.to_string())]);
            if let Some(s) = &since {
                req = req.query(&[("since", s)]);
            }
            let d: NodeDetail = client.send(req).await?;
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
                if let Some(a) = &n.address {
                    println!("Address:   {a}");
                }
                println!("\nLabels:");
                if n.labels.is_empty() {
                    println!("  none");
                }
                for (k, v) in &n.labels {
                    println!("  {k}={v}");
                }
                println!("\nHolds:");
                if d.hold_history.is_empty() {
                    println!("  none");
                }
                for h in &d.hold_history {
                    println!("  {}", hold_line(h));
                }
                println!("\nEvents:");
                if d.more_events {
                    println!(
                        "  (older events left out: see more with --limit {} or --since)",
                        limit.saturating_mul(2).min(10_000)
                    );
                }
                if d.events.is_empty() {
                    println!("  none");
                }
                for e in &d.events {
                    println!("  {}", node_event_line(e));
                }
            }
        }
        NodeCmd::Hold {
            name,
            kind,
            reason,
            out,
        } => {
            let h: HoldInfo = client
                .post(&format!("/nodes/{name}/holds"), &PlaceHold { kind, reason })
                .await?;
            if out.format == Format::Json {
                json(&h)?;
            } else {
                println!("{}", hold_line(&h));
            }
        }
        NodeCmd::Release {
            name,
            hold,
            reason,
            out,
        } => {
            let released: Vec<HoldInfo> = client
                .post(
                    &format!("/nodes/{name}/release"),
                    &ReleaseHolds {
                        hold,
                        reason: Some(reason),
                    },
                )
                .await?;
            if out.format == Format::Json {
                json(&released)?;
            } else {
                for h in &released {
                    println!("{}", hold_line(h));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
