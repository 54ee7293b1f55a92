use std::process::ExitCode;

use clap::Subcommand;
use gantry_api::v1::{
    CreateUser, Role, RotateToken, Setting, TokenInfo, TokenRotated, UserCreated, UserDetail,
    UserInfo,
};

use crate::output::{expiry, json, table, time, Format, UsageError};
use crate::{Conn, OutputArg};

#[derive(Subcommand)]
pub enum AdminCmd {
    /// Users and their tokens.
    #[command(subcommand)]
    User(UserCmd),
    /// API tokens of every user: list, revoke, rotate (never their secrets).
    #[command(subcommand)]
    Token(TokenCmd),
    /// Cluster settings.
    #[command(subcommand)]
    Settings(SettingsCmd),
    /// Storage provisioners that persistent volumes live on.
    #[command(subcommand)]
    Storage(super::volume::StorageCmd),
    /// Which server runs the controller (of several replicas on one PostgreSQL), under which
    /// lease, and whether the one answering is it.
    Controller {
        #[command(flatten)]
        out: OutputArg,
    },
}

#[derive(Subcommand)]
pub enum UserCmd {
    /// Create a user and print their token (shown once).
    Create {
        /// The user's name.
        name: String,
        /// The user's group (default: a group of their own name).
        #[arg(long)]
        group: Option<String>,
        /// Make them an administrator.
        #[arg(long, conflicts_with = "agent")]
        admin: bool,
        /// A token for node agents only.
        #[arg(long, conflicts_with = "monitoring")]
        agent: bool,
        /// A token for Alertmanager's webhook and Prometheus' service discovery only.
        #[arg(long, conflicts_with = "admin")]
        monitoring: bool,
        /// When the token expires: 30d, 12h, or never (default: the tokens.default_expiry
        /// setting, 90d).
        #[arg(long)]
        expires: Option<String>,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Every user: group, role, disabled or not, tokens.
    List {
        #[command(flatten)]
        out: OutputArg,
    },
    /// One user and their tokens (ids, never secrets).
    Show {
        /// The user's name (see `gantry admin user list`).
        name: String,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Every token of the user stops working at once; their running workflows go on.
    Disable {
        /// The user's name (see `gantry admin user list`).
        name: String,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Undo `disable`: their tokens work again (unless expired).
    Enable {
        /// The user's name (see `gantry admin user list`).
        name: String,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Delete a user and revoke their tokens. Refused for the last administrator, and while
    /// they own workflows that have not ended unless --force (which leaves those running).
    Delete {
        /// The user's name (see `gantry admin user list`).
        name: String,
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand)]
pub enum TokenCmd {
    /// Tokens: id, user, role, purpose, created, expires.
    List {
        /// Only this user's.
        #[arg(long)]
        user: Option<String>,
        #[command(flatten)]
        out: OutputArg,
    },
    /// The token stops working at once.
    Revoke {
        /// The token's id (see `gantry admin token list`).
        id: String,
        #[command(flatten)]
        out: OutputArg,
    },
    /// A new secret for the token (printed once); the old one stops at once. Same id, user and
    /// role.
    Rotate {
        /// The token's id (see `gantry admin token list`).
        id: String,
        /// As for `admin user create`.
        #[arg(long)]
        expires: Option<String>,
        #[command(flatten)]
        out: OutputArg,
    },
}

#[derive(Subcommand)]
pub enum SettingsCmd {
    /// Show one setting, or all.
    Get {
        /// The setting (all of them when absent).
        key: Option<String>,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Change a setting: KEY=VALUE.
    Set {
        /// KEY=VALUE.
        assignment: String,
    },
}

pub async fn run(cmd: AdminCmd, conn: &Conn) -> anyhow::Result<ExitCode> {
    let client = conn.client()?;
    match cmd {
        AdminCmd::Storage(c) => return super::volume::run_storage(c, conn).await,
        AdminCmd::User(UserCmd::Create {
            name,
            group,
            admin,
            agent,
            monitoring,
            expires,
            out,
        }) => {
            let role = if admin {
                Role::Admin
            } else if monitoring {
                Role::Monitoring
            } else if agent {
                Role::Agent
            } else {
                Role::User
            };
            let u: UserCreated = client
                .post(
                    "/admin/users",
                    &CreateUser {
                        name,
                        group,
                        role: Some(role),
                        expires,
                    },
                )
                .await?;
            if out.format == Format::Json {
                json(&u)?;
            } else {
                eprintln!(
                    "created {} {} in group {}; the token ({}; shown once):",
                    u.role.as_str(),
                    u.name,
                    u.group,
                    expires_phrase(u.expires_at)
                );
                println!("{}", u.token);
            }
        }
        AdminCmd::User(UserCmd::List { out }) => {
            let list: Vec<UserInfo> = client.get("/admin/users").await?;
            if out.format == Format::Json {
                json(&list)?;
            } else {
                let rows: Vec<Vec<String>> = list.iter().map(user_row).collect();
                table(
                    &["NAME", "GROUP", "ROLE", "DISABLED", "CREATED", "TOKENS"],
                    &rows,
                );
            }
        }
        AdminCmd::User(UserCmd::Show { name, out }) => {
            let d: UserDetail = client.get(&format!("/admin/users/{name}")).await?;
            if out.format == Format::Json {
                json(&d)?;
            } else {
                let u = &d.user;
                println!("name:     {}", u.name);
                println!("group:    {}", u.group);
                println!("role:     {}", u.role);
                println!("created:  {}", time(u.created_at));
                match u.disabled_at {
                    Some(t) => println!("disabled: since {}", time(t)),
                    None => println!("disabled: no"),
                }
                println!("tokens:");
                token_table(&d.tokens);
            }
        }
        AdminCmd::User(UserCmd::Disable { name, out }) => {
            let u: UserInfo = client
                .send(client.request(
                    reqwest::Method::POST,
                    &format!("/admin/users/{name}/disable"),
                ))
                .await?;
            if out.format == Format::Json {
                json(&u)?;
            } else {
                eprintln!(
                    "disabled {name}: every token of theirs is refused from now on; their \
                     running workflows are left alone (`gantry workflow stop` ends them)"
                );
            }
        }
        AdminCmd::User(UserCmd::Enable { name, out }) => {
            let u: UserInfo = client
                .send(client.request(
                    reqwest::Method::POST,
                    &format!("/admin/users/{name}/enable"),
                ))
                .await?;
            if out.format == Format::Json {
                json(&u)?;
            } else {
                eprintln!("enabled {name}: their tokens work again (those not expired)");
            }
        }
        AdminCmd::User(UserCmd::Delete { name, force }) => {
            let mut req = client.request(reqwest::Method::DELETE, &format!("/admin/users/{name}"));
            if force {
                req = req.query(&[("force", "true")]);
            }
            client.check(req).await?;
            eprintln!("deleted user {name} and revoked their tokens");
        }
        AdminCmd::Token(TokenCmd::List { user, out }) => {
            let mut req = client.request(reqwest::Method::GET, "/admin/tokens");
            if let Some(u) = &user {
                req = req.query(&[("user", u)]);
            }
            let list: Vec<TokenInfo> = client.send(req).await?;
            if out.format == Format::Json {
                json(&list)?;
            } else {
                token_table(&list);
            }
        }
        AdminCmd::Token(TokenCmd::Revoke { id, out }) => {
            let t: TokenInfo = client
                .send(client.request(reqwest::Method::DELETE, &format!("/admin/tokens/{id}")))
                .await?;
            if out.format == Format::Json {
                json(&t)?;
            } else {
                eprintln!("revoked token {} of {}", t.id, t.user);
            }
        }
        AdminCmd::Token(TokenCmd::Rotate { id, expires, out }) => {
            let t: TokenRotated = client
                .post(
                    &format!("/admin/tokens/{id}/rotate"),
                    &RotateToken { expires },
                )
                .await?;
            if out.format == Format::Json {
                json(&t)?;
            } else {
                eprintln!(
                    "rotated token {} of {}; the old secret no longer works. The new one ({}; shown once):",
                    t.info.id,
                    t.info.user,
                    expires_phrase(t.info.expires_at)
                );
                println!("{}", t.token);
            }
        }
        AdminCmd::Controller { out } => {
            let c: gantry_api::v1::ControllerInfo = client.get("/admin/controller").await?;
            if out.format == Format::Json {
                json(&c)?;
            } else {
                let opt = |t: Option<time::OffsetDateTime>| t.map(time).unwrap_or_default();
                table(
                    &[
                        "HOLDER",
                        "TOKEN",
                        "SINCE",
                        "EXPIRES",
                        "ANSWERED BY",
                        "LEADS",
                    ],
                    &[vec![
                        c.holder.clone().unwrap_or_else(|| "(none yet)".into()),
                        c.token.map(|t| t.to_string()).unwrap_or_default(),
                        opt(c.since),
                        opt(c.expires_at),
                        c.this_server.clone(),
                        c.this_server_leads.to_string(),
                    ]],
                );
            }
        }
        AdminCmd::Settings(SettingsCmd::Get { key, out }) => {
            let list: Vec<Setting> = match key {
                Some(k) => vec![client.get(&format!("/admin/settings/{k}")).await?],
                None => client.get("/admin/settings").await?,
            };
            if out.format == Format::Json {
                json(&list)?;
            } else {
                let rows: Vec<Vec<String>> = list
                    .iter()
                    .map(|s| vec![s.key.clone(), s.value.clone()])
                    .collect();
                table(&["KEY", "VALUE"], &rows);
            }
        }
        AdminCmd::Settings(SettingsCmd::Set { assignment }) => {
            let Some((k, v)) = assignment.split_once('=') else {
                return Err(UsageError(format!("expected KEY=VALUE, got {assignment:?}")).into());
            };
            let s: Setting = client
                .send(
                    client
                        .request(reqwest::Method::PUT, &format!("/admin/settings/{k}"))
                        .json(&Setting {
                            key: k.into(),
                            value: v.into(),
                        }),
                )
                .await?;
            println!("{}={}", s.key, s.value);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn expires_phrase(at: Option<time::OffsetDateTime>) -> String {
    match at {
        Some(t) => format!("expires {}", time(t)),
        None => "never expires".into(),
    }
}

fn user_row(u: &UserInfo) -> Vec<String> {
    vec![
        u.name.clone(),
        u.group.clone(),
        u.role.clone(),
        if u.disabled { "yes" } else { "no" }.into(),
        time(u.created_at),
        u.tokens.to_string(),
    ]
}

fn token_table(list: &[TokenInfo]) {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|t| {
            let expires = expiry(t.expires_at, t.expired);
            vec![
                t.id.clone(),
                t.user.clone(),
                t.role.clone(),
                t.purpose.clone(),
                time(t.created_at),
                expires,
            ]
        })
        .collect();
    table(
        &["ID", "USER", "ROLE", "PURPOSE", "CREATED", "EXPIRES"],
        &rows,
    );
}
