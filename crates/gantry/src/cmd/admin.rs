use std::process::ExitCode;

use clap::Subcommand;
use gantry_api::v1::{CreateUser, Role, Setting, UserCreated};

use crate::output::{json, table, Format, UsageError};
use crate::{Conn, OutputArg};

#[derive(Subcommand)]
pub enum AdminCmd {
    /// Users and their tokens.
    #[command(subcommand)]
    User(UserCmd),
    /// Cluster settings.
    #[command(subcommand)]
    Settings(SettingsCmd),
    /// Storage provisioners that persistent volumes live on.
    #[command(subcommand)]
    Storage(super::volume::StorageCmd),
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
                    },
                )
                .await?;
            if out.format == Format::Json {
                json(&u)?;
            } else {
                eprintln!(
                    "created {} {} in group {}; the token (shown once):",
                    u.role.as_str(),
                    u.name,
                    u.group
                );
                println!("{}", u.token);
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
