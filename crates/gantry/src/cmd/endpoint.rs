use std::process::ExitCode;

use clap::Subcommand;
use gantry_api::v1::{
    CreateEndpoint, CreateEndpointToken, EndpointInfo, EndpointToken, EndpointTokenInfo,
    TakeoverInfo,
};

use crate::output::{age, expiry, json, short_id, table, time, Format, UsageError};
use crate::{Conn, OutputArg};

#[derive(Subcommand)]
pub enum EndpointTokenCmd {
    /// Make a token for the endpoint (printed once).
    Create {
        /// The endpoint's name (see `gantry endpoint list`).
        name: String,
        /// 30d, 24h or never (default: the tokens.default_expiry setting, 90d).
        #[arg(long)]
        expires: Option<String>,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Tokens of one endpoint, or of every endpoint you manage (ids, never secrets).
    List {
        /// The endpoint's name; every endpoint you manage when absent.
        name: Option<String>,
        #[command(flatten)]
        out: OutputArg,
    },
    /// The token stops working at once.
    Revoke {
        /// The token's id (see `gantry endpoint token list`).
        id: String,
        #[command(flatten)]
        out: OutputArg,
    },
}

#[derive(Subcommand)]
pub enum EndpointCmd {
    /// Create a persistent endpoint: a URL that outlives the workflows serving it.
    Create {
        /// The endpoint's name (see `gantry endpoint list`).
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
        /// The endpoint's name (see `gantry endpoint list`).
        name: String,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Delete an endpoint (its URL stops answering); asks first (or pass --yes).
    Delete {
        /// The endpoint's name (see `gantry endpoint list`).
        name: String,
        /// Delete without asking (required when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
    /// Every attach and switch of an endpoint.
    History {
        /// The endpoint's name (see `gantry endpoint list`).
        name: String,
        #[command(flatten)]
        out: OutputArg,
    },
    /// A token that lets a caller use the endpoint (printed once): `token NAME` (short for
    /// `token create NAME`), `token list [NAME]`, `token revoke ID`.
    #[command(args_conflicts_with_subcommands = true)]
    Token {
        #[command(subcommand)]
        cmd: Option<EndpointTokenCmd>,
        /// The endpoint's name (see `gantry endpoint list`).
        name: Option<String>,
        /// 30d, 24h or never (default: the tokens.default_expiry setting, 90d).
        #[arg(long)]
        expires: Option<String>,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Approve the takeover waiting for confirmation.
    Approve {
        /// The endpoint's name (see `gantry endpoint list`).
        name: String,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Reject the takeover waiting for confirmation (its workflow is stopped).
    Reject {
        /// The endpoint's name (see `gantry endpoint list`).
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
        EndpointCmd::Token {
            cmd,
            name,
            expires,
            out,
        } => {
            let cmd = match (cmd, name) {
                (Some(c), _) => c,
                (None, Some(name)) => EndpointTokenCmd::Create { name, expires, out },
                (None, None) => {
                    return Err(UsageError(
                        "name an endpoint (`gantry endpoint token NAME`), or list or revoke".into(),
                    )
                    .into())
                }
            };
            run_token(&client, cmd).await?;
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

async fn run_token(client: &crate::client::Client, cmd: EndpointTokenCmd) -> anyhow::Result<()> {
    match cmd {
        EndpointTokenCmd::Create { name, expires, out } => {
            let t: EndpointToken = client
                .post(
                    &format!("/endpoints/{name}/tokens"),
                    &CreateEndpointToken { expires },
                )
                .await?;
            if out.format == Format::Json {
                json(&t)?;
            } else {
                let until = t
                    .expires_at
                    .map_or("never expires".into(), |at| format!("expires {}", time(at)));
                eprintln!("token {} for {} ({until}; shown once):", t.id, t.endpoint);
                println!("{}", t.token);
            }
        }
        EndpointTokenCmd::List { name, out } => {
            let path = match &name {
                Some(n) => format!("/endpoints/{n}/tokens"),
                None => "/endpoint-tokens".into(),
            };
            let list: Vec<EndpointTokenInfo> = client.get(&path).await?;
            if out.format == Format::Json {
                json(&list)?;
            } else {
                let rows: Vec<Vec<String>> = list
                    .iter()
                    .map(|t| {
                        let expires = expiry(t.expires_at, t.expired);
                        vec![
                            t.id.clone(),
                            t.endpoint.clone(),
                            t.created_by.clone(),
                            time(t.created_at),
                            expires,
                        ]
                    })
                    .collect();
                table(&["ID", "ENDPOINT", "BY", "CREATED", "EXPIRES"], &rows);
            }
        }
        EndpointTokenCmd::Revoke { id, out } => {
            let t: EndpointTokenInfo = client
                .send(client.request(reqwest::Method::DELETE, &format!("/endpoint-tokens/{id}")))
                .await?;
            if out.format == Format::Json {
                json(&t)?;
            } else {
                eprintln!("revoked token {} of endpoint {}", t.id, t.endpoint);
            }
        }
    }
    Ok(())
}
