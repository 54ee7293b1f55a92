use std::io::Read;
use std::process::ExitCode;

use clap::Subcommand;
use gantry_api::v1::{PutSecret, SecretInfo};

use crate::output::{age, json, table, Format, UsageError};
use crate::{Conn, OutputArg};

#[derive(Subcommand)]
pub enum SecretCmd {
    /// Store a secret for workflow files to name as secret://SCOPE/NAME. The value is read from
    /// standard input unless --value is given (which leaves it in your shell history). Typed
    /// secrets take a JSON object: s3 {accessKeyId, secretAccessKey, region, endpoint,
    /// sessionToken?}, http {username?, password?, token?, trustedDomains?}, image {username,
    /// password, trustedDomains?}.
    Set {
        /// The secret's name, as secret://SCOPE/NAME names it.
        name: String,
        /// user (yours), group (your group's) or organization (administrators).
        #[arg(long, default_value = "user")]
        scope: String,
        /// value (an opaque string), s3, http or image.
        #[arg(long = "type", default_value = "value")]
        kind: String,
        #[arg(long)]
        value: Option<String>,
    },
    /// Secrets you can use (never their values).
    List {
        #[command(flatten)]
        out: OutputArg,
    },
    /// Delete a secret.
    Rm {
        /// The secret's name (see `gantry secret list`).
        name: String,
        #[arg(long, default_value = "user")]
        scope: String,
    },
}

pub async fn run(cmd: SecretCmd, conn: &Conn) -> anyhow::Result<ExitCode> {
    let client = conn.client()?;
    match cmd {
        SecretCmd::Set {
            name,
            scope,
            kind,
            value,
        } => {
            let value = match value {
                Some(v) => v,
                None => {
                    let mut s = String::new();
                    std::io::stdin().read_to_string(&mut s)?;
                    // A trailing newline from `echo` or a file is not part of the secret.
                    s.strip_suffix('\n').map(str::to_string).unwrap_or(s)
                }
            };
            if value.is_empty() {
                return Err(UsageError("the secret's value is empty".into()).into());
            }
            client
                .check(
                    client
                        .request(reqwest::Method::PUT, &format!("/secrets/{scope}/{name}"))
                        .json(&PutSecret {
                            value,
                            kind: Some(kind),
                        }),
                )
                .await?;
            eprintln!("stored secret://{scope}/{name}");
        }
        SecretCmd::List { out } => {
            let list: Vec<SecretInfo> = client.get("/secrets").await?;
            if out.format == Format::Json {
                json(&list)?;
            } else {
                let rows: Vec<Vec<String>> = list
                    .iter()
                    .map(|s| {
                        vec![
                            s.uri.clone(),
                            s.kind.clone(),
                            s.scope.clone(),
                            s.owner.clone(),
                            s.updated_by.clone(),
                            age(s.updated_at),
                        ]
                    })
                    .collect();
                table(
                    &["SECRET", "TYPE", "SCOPE", "OWNER", "UPDATED BY", "AGE"],
                    &rows,
                );
            }
        }
        SecretCmd::Rm { name, scope } => {
            client
                .check(client.request(reqwest::Method::DELETE, &format!("/secrets/{scope}/{name}")))
                .await?;
            eprintln!("deleted secret://{scope}/{name}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
