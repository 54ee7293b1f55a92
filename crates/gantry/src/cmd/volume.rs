use std::process::ExitCode;

use clap::Subcommand;
use gantry_api::v1::{AddStorage, CreateVolume, StorageInfo, VolumeInfo};

use crate::output::{age, json, table, time, Format};
use crate::{Conn, OutputArg};

#[derive(Subcommand)]
pub enum VolumeCmd {
    /// Make a persistent volume, for workflow files to mount with `use: persistent` and
    /// `name: NAME` (or `reference: volume://SCOPE/persistent/NAME`).
    Create {
        /// The new volume's name.
        name: String,
        /// user (yours) or group (your group's).
        #[arg(long, default_value = "user")]
        scope: String,
        /// The storage provisioner it lives on (`gantry admin storage list`).
        #[arg(long)]
        storage: Option<String>,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Your volumes and your group's.
    List {
        #[command(flatten)]
        out: OutputArg,
    },
    /// One volume, with the workflows not yet ended that mount it.
    Show {
        /// The volume's name (see `gantry volume list`).
        name: String,
        #[arg(long, default_value = "user")]
        scope: String,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Remove a volume and its files (refused while a workflow not yet ended mounts it).
    Rm {
        /// The volume's name (see `gantry volume list`).
        name: String,
        #[arg(long, default_value = "user")]
        scope: String,
    },
    /// The storage provisioners you may make volumes on.
    Storages {
        #[command(flatten)]
        out: OutputArg,
    },
}

#[derive(Subcommand)]
pub enum StorageCmd {
    /// Add a storage provisioner: a directory every node of the pool sees (a Lustre, GPFS or
    /// NFS mount).
    Add {
        /// The provisioner's name, for `gantry volume create --storage`.
        name: String,
        /// hostpath, the only driver so far.
        #[arg(long, default_value = "hostpath")]
        driver: String,
        /// The directory on the nodes.
        #[arg(long)]
        path: String,
        /// Only this pool's nodes see it: jobs mounting its volumes run there.
        #[arg(long)]
        pool: Option<String>,
        /// Only these groups may use it (comma-separated); every group when absent.
        #[arg(long, value_delimiter = ',')]
        groups: Option<Vec<String>>,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Every storage provisioner, the built-in `default` first.
    List {
        #[command(flatten)]
        out: OutputArg,
    },
    /// Remove a storage provisioner (refused while volumes live on it).
    Rm {
        /// The provisioner's name (see `gantry admin storage list`).
        name: String,
    },
}

fn volume_rows(list: &[VolumeInfo]) -> Vec<Vec<String>> {
    list.iter()
        .map(|v| {
            vec![
                v.uri.clone(),
                v.owner.clone(),
                v.storage.clone(),
                v.created_by.clone(),
                age(v.created_at),
            ]
        })
        .collect()
}

const VOLUME_HEADER: [&str; 5] = ["VOLUME", "OWNER", "STORAGE", "CREATED BY", "AGE"];

pub async fn run(cmd: VolumeCmd, conn: &Conn) -> anyhow::Result<ExitCode> {
    let client = conn.client()?;
    match cmd {
        VolumeCmd::Create {
            name,
            scope,
            storage,
            out,
        } => {
            let v: VolumeInfo = client
                .post(
                    "/volumes",
                    &CreateVolume {
                        name,
                        scope: Some(scope),
                        storage,
                    },
                )
                .await?;
            if out.format == Format::Json {
                json(&v)?;
            } else {
                eprintln!("created {} on storage {}", v.uri, v.storage);
            }
        }
        VolumeCmd::List { out } => {
            let list: Vec<VolumeInfo> = client.get("/volumes").await?;
            if out.format == Format::Json {
                json(&list)?;
            } else {
                table(&VOLUME_HEADER, &volume_rows(&list));
            }
        }
        VolumeCmd::Show { name, scope, out } => {
            let v: VolumeInfo = client.get(&format!("/volumes/{scope}/{name}")).await?;
            if out.format == Format::Json {
                json(&v)?;
            } else {
                println!("Volume:     {}", v.uri);
                println!("Owner:      {}", v.owner);
                println!("Storage:    {}", v.storage);
                println!("Created:    {} by {}", time(v.created_at), v.created_by);
                let by: Vec<String> = v.mounted_by.iter().map(|w| w.to_string()).collect();
                println!(
                    "Mounted by: {}",
                    if by.is_empty() {
                        "-".into()
                    } else {
                        by.join(", ")
                    }
                );
            }
        }
        VolumeCmd::Storages { out } => {
            let list: Vec<StorageInfo> = client.get("/storages").await?;
            storage_table(&list, out)?;
        }
        VolumeCmd::Rm { name, scope } => {
            client
                .check(client.request(reqwest::Method::DELETE, &format!("/volumes/{scope}/{name}")))
                .await?;
            eprintln!("removed volume://{scope}/persistent/{name}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn run_storage(cmd: StorageCmd, conn: &Conn) -> anyhow::Result<ExitCode> {
    let client = conn.client()?;
    match cmd {
        StorageCmd::Add {
            name,
            driver,
            path,
            pool,
            groups,
            out,
        } => {
            let s: StorageInfo = client
                .post(
                    "/admin/storages",
                    &AddStorage {
                        name,
                        driver,
                        path,
                        pool,
                        groups,
                    },
                )
                .await?;
            if out.format == Format::Json {
                json(&s)?;
            } else {
                eprintln!("added storage {} ({} at {})", s.name, s.driver, s.path);
            }
        }
        StorageCmd::List { out } => {
            let list: Vec<StorageInfo> = client.get("/admin/storages").await?;
            storage_table(&list, out)?;
        }
        StorageCmd::Rm { name } => {
            client
                .check(client.request(reqwest::Method::DELETE, &format!("/admin/storages/{name}")))
                .await?;
            eprintln!("removed storage {name}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn storage_table(list: &[StorageInfo], out: OutputArg) -> anyhow::Result<()> {
    if out.format == Format::Json {
        return json(&list);
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|s| {
            let path = if s.builtin {
                format!("<storage-root>/{}", s.path)
            } else {
                s.path.clone()
            };
            vec![
                s.name.clone(),
                s.driver.clone(),
                path,
                s.pool.clone().unwrap_or_else(|| "(all)".into()),
                s.groups
                    .as_ref()
                    .map_or_else(|| "(all)".into(), |g| g.join(",")),
            ]
        })
        .collect();
    table(&["STORAGE", "DRIVER", "PATH", "POOL", "GROUPS"], &rows);
    Ok(())
}
