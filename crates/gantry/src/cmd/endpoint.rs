use std::process::ExitCode;

use clap::Subcommand;
use gantry_api::v1::{
    CreateEndpoint, CreateEndpointToken, EndpointInfo, EndpointToken, TakeoverInfo,
};

use crate::output::{age, json, short_id, table, Format};
use crate::{Conn, OutputArg};

#[derive(Subcommand)]
pub enum EndpointCmd {
    /// Create a persistent endpoint: a URL that outlives the workflows serving it.
    Create {
        name: String,
        /// Who may call it: user (default), group, organization or public.
        #[arg(long, default_value = "user")]
        scope: String,
        /// when-ready (default: the old workflow serves until the new one is ready) or
        /// stop-first (stop the old one first, for sites without room for two copies).
        #[arg(long, default_value = "when-ready")]
        mode: String,
        /// How long requests in flight may finish on the old backend after a switch.
        #[arg(long, default_value = "5m")]
        drain_timeout: String,
        /// Every takeover waits for `gantry endpoint approve`.
        #[arg(long)]
        confirm: bool,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Endpoints you can see.
    List {
        #[command(flatten)]
        out: OutputArg,
    },
    /// One endpoint: what serves it, since when, and a takeover in progress.
    Show {
        name: String,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Delete an endpoint (its URL stops answering); asks first (or pass --yes).
    Delete {
        name: String,
        /// Delete without asking (required when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
    /// Every attach and switch of an endpoint.
    History {
        name: String,
        #[command(flatten)]
        out: OutputArg,
    },
    /// A token that lets a caller use the endpoint (printed once).
    Token {
        name: String,
        /// e.g. 24h; never expires when absent.
        #[arg(long)]
        expires: Option<String>,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Approve the takeover waiting for confirmation.
    Approve {
        name: String,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Reject the takeover waiting for confirmation (its workflow is stopped).
    Reject {
        name: String,
        #[command(flatten)]
        out: OutputArg,
    },
}

fn takeover_line(t: &TakeoverInfo) -> String {
    let from = t
        .from_workflow
        .map(|w| short_id(&w))
        .unwrap_or_else(|| "-".into());
    let mut s = format!(
        "{} {} -> {} ({}) {} by {} via {} {} ago",
        short_id(&t.id),
        from,
        short_id(&t.to_workflow),
        t.to_service,
        t.phase,
        t.requested_by,
        t.channel,
        age(t.created_at)
    );
    if let (Some(by), Some(via)) = (&t.confirmed_by, &t.confirmed_via) {
        s.push_str(&format!(", confirmed by {by} via {via}"));
    }
    if let Some(r) = &t.reason {
        s.push_str(&format!(": {r}"));
    }
    s
}

fn print_endpoint(e: &EndpointInfo) {
    println!("Endpoint: {}", e.name);
    println!("URL:      {}", e.url);
    println!("Host:     {}", e.host);
    match &e.reason {
        Some(r) => println!("Status:   {} ({r})", e.status),
        None => println!("Status:   {}", e.status),
    }
    println!(
        "Scope:    {} (owner {}, group {})",
        e.scope, e.owner, e.group
    );
    println!(
        "Mode:     {}, drain timeout {}s{}",
        e.mode,
        e.drain_timeout_secs,
        if e.confirm {
            ", takeovers need approval"
        } else {
            ""
        }
    );
    match (&e.workflow_id, &e.service) {
        (Some(w), Some(s)) => println!(
            "Serving:  {s} of workflow {w}{}",
            e.since
                .map(|t| format!(" since {} ago", age(t)))
                .unwrap_or_default()
        ),
        _ => println!("Serving:  nothing (requests get 503)"),
    }
    if let Some(t) = &e.takeover {
        println!("Takeover: {}", takeover_line(t));
    }
}

pub async fn run(cmd: EndpointCmd, conn: &Conn) -> anyhow::Result<ExitCode> {
    let client = conn.client()?;
    match cmd {
        EndpointCmd::Create {
            name,
            scope,
            mode,
            drain_timeout,
            confirm,
            out,
        } => {
            let e: EndpointInfo = client
                .post(
                    "/endpoints",
                    &CreateEndpoint {
                        name,
                        scope: Some(scope),
                        mode: Some(mode),
                        drain_timeout: Some(drain_timeout),
                        confirm,
                    },
                )
                .await?;
            if out.format == Format::Json {
                json(&e)?;
            } else {
                print_endpoint(&e);
            }
        }
        EndpointCmd::List { out } => {
            let list: Vec<EndpointInfo> = client.get("/endpoints").await?;
            if out.format == Format::Json {
                json(&list)?;
            } else {
                let rows: Vec<Vec<String>> = list
                    .iter()
                    .map(|e| {
                        vec![
                            e.name.clone(),
                            e.status.clone(),
                            e.scope.clone(),
                            e.url.clone(),
                            match (&e.workflow_id, &e.service) {
                                (Some(w), Some(s)) => format!("{}/{s}", short_id(w)),
                                _ => "-".into(),
                            },
                            e.takeover
                                .as_ref()
                                .map(|t| t.phase.clone())
                                .unwrap_or_else(|| "-".into()),
                        ]
                    })
                    .collect();
                table(
                    &["NAME", "STATUS", "SCOPE", "URL", "SERVING", "TAKEOVER"],
                    &rows,
                );
            }
        }
        EndpointCmd::Show { name, out } => {
            let e: EndpointInfo = client.get(&format!("/endpoints/{name}")).await?;
            if out.format == Format::Json {
                json(&e)?;
            } else {
                print_endpoint(&e);
            }
        }
        EndpointCmd::Delete { name, yes } => {
            if !yes {
                let e: EndpointInfo = client.get(&format!("/endpoints/{name}")).await?;
                let what = match (&e.workflow_id, &e.service) {
                    (Some(w), Some(s)) => format!(
                        "deleting endpoint {name} stops serving {s} of workflow {} at {}",
                        short_id(w),
                        e.url
                    ),
                    _ => format!("deleting endpoint {name} removes {}", e.url),
                };
                if !super::confirm(&what)? {
                    return Ok(ExitCode::from(1));
                }
            }
            client
                .check(client.request(reqwest::Method::DELETE, &format!("/endpoints/{name}")))
                .await?;
            eprintln!("deleted endpoint {name}");
        }
        EndpointCmd::History { name, out } => {
            let list: Vec<TakeoverInfo> = client.get(&format!("/endpoints/{name}/history")).await?;
            if out.format == Format::Json {
                json(&list)?;
            } else {
                for t in &list {
                    println!("{}", takeover_line(t));
                }
            }
        }
        EndpointCmd::Token { name, expires, out } => {
            let t: EndpointToken = client
                .post(
                    &format!("/endpoints/{name}/tokens"),
                    &CreateEndpointToken { expires },
                )
                .await?;
            if out.format == Format::Json {
                json(&t)?;
            } else {
                println!("{}", t.token);
            }
        }
        EndpointCmd::Approve { name, out } => decide(&client, &name, "approve", out).await?,
        EndpointCmd::Reject { name, out } => decide(&client, &name, "reject", out).await?,
    }
    Ok(ExitCode::SUCCESS)
}

async fn decide(
    client: &crate::client::Client,
    name: &str,
    verb: &str,
    out: OutputArg,
) -> anyhow::Result<()> {
    let t: TakeoverInfo = client
        .send(
            client
                .request(reqwest::Method::POST, &format!("/endpoints/{name}/{verb}"))
                .header("x-gantry-channel", "cli"),
        )
        .await?;
    if out.format == Format::Json {
        json(&t)?;
    } else {
        println!("{}", takeover_line(&t));
    }
    Ok(())
}
