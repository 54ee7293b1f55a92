use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use gantry_api::v1::{Event, SubmitWorkflow, WorkflowCreated, WorkflowDetail, WorkflowSummary};
use gantry_api::TaskStatus;

use super::watch;
use crate::output::{self, age, json, short_id, table, Format, UsageError};
use crate::{Conn, OutputArg};

#[derive(Subcommand)]
pub enum WorkflowCmd {
    /// Submit a workflow file.
    Start {
        /// The workflow file (YAML, `version: v4`), or `-` for standard input.
        file: PathBuf,
        /// Follow progress until the workflow ends; exit 0 FINISHED, 1 FAILED/STOPPED.
        #[arg(long)]
        watch: bool,
        /// A name for listings (default: the file's name).
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        out: OutputArg,
    },
    /// List workflows you may see.
    List {
        /// Only this status (PENDING, RUNNING, FINISHED, FAILED, STOPPED).
        #[arg(long)]
        status: Option<String>,
        #[command(flatten)]
        out: OutputArg,
    },
    /// A workflow's status.
    Status {
        /// The workflow's id, or its first 8 characters or more (see `gantry workflow list`).
        id: String,
        #[command(flatten)]
        out: OutputArg,
    },
    /// A workflow's tasks, attempts, and why anything waits or failed.
    Describe {
        /// The workflow's id, or its first 8 characters or more (see `gantry workflow list`).
        id: String,
        /// Only tasks of these statuses (PENDING, STARTED, RUNNING, FINISHED, FAILED, STOPPED;
        /// any case; repeat or separate with commas).
        #[arg(long, value_delimiter = ',')]
        status: Vec<String>,
        /// Show at most this many tasks (a page; at most 10000).
        #[arg(long, default_value_t = 1000)]
        limit: u32,
        /// Show the tasks after this one (the task id the previous page ended with).
        #[arg(long)]
        after: Option<String>,
        #[command(flatten)]
        out: OutputArg,
    },
    /// A workflow's events.
    Events {
        /// The workflow's id, or its first 8 characters or more (see `gantry workflow list`).
        id: String,
        /// Keep printing new events until the workflow ends.
        #[arg(long, short = 'f')]
        follow: bool,
        #[command(flatten)]
        out: OutputArg,
    },
    /// A job's output: stdout to stdout, stderr to stderr.
    Log {
        /// The workflow's id, or its first 8 characters or more (see `gantry workflow list`).
        id: String,
        /// The job's name (see `gantry workflow describe`).
        job: String,
        /// Task-array index (which task of an array or multinode job).
        #[arg(long)]
        task: Option<u32>,
        /// Attempt number (default: the latest).
        #[arg(long)]
        attempt: Option<u32>,
        /// Keep streaming until the attempt ends.
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// Stop a workflow: SIGTERM, a grace period, then SIGKILL; it ends STOPPED.
    Stop {
        /// The workflow's id, or its first 8 characters or more (see `gantry workflow list`).
        id: String,
        /// Stop it even when it serves persistent endpoints (asked on a terminal otherwise).
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Check a workflow file without submitting it.
    Validate {
        /// The workflow file.
        file: PathBuf,
        #[command(flatten)]
        out: OutputArg,
    },
    /// Print a `version: v1` file in v4 form (a v4 file as it is).
    Upgrade {
        /// The workflow file.
        file: PathBuf,
        #[command(flatten)]
        out: OutputArg,
    },
}

/// A workflow file, or standard input for `-` (`gantry example pipeline | gantry workflow
/// start -`).
fn read_file(file: &Path) -> anyhow::Result<String> {
    let text = if file == Path::new("-") {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| UsageError(format!("cannot read the standard input: {e}")))?;
        s
    } else {
        std::fs::read_to_string(file)
            .map_err(|e| UsageError(format!("cannot read {}: {e}", file.display())))?
    };
    // Said here rather than after sending it all: a server stops reading a body past its limit,
    // and the connection it closes would read as "cannot reach the server".
    let max = gantry_api::v1::MAX_WORKFLOW_FILE_BYTES;
    if text.len() > max {
        return Err(UsageError(format!(
            "{}: the workflow file is {}; the server takes at most {}",
            file.display(),
            output::bytes(text.len() as u64),
            output::bytes(max as u64)
        ))
        .into());
    }
    Ok(text)
}

/// Validates locally so problems carry the file's name; true when valid. `warn` prints what
/// the file's reading warns about (a submit leaves that to the server's answer).
fn check(file: &Path, text: &str, format: Format, warn: bool) -> anyhow::Result<bool> {
    let name = file.display().to_string();
    match gantry_spec::parse(text) {
        Ok(wf) => {
            let warnings: Vec<String> = gantry_spec::upgrade_warning(&wf).into_iter().collect();
            if format == Format::Json {
                json(
                    &serde_json::json!({"file": name, "valid": true, "diagnostics": [], "warnings": warnings}),
                )?;
            } else if warn {
                for w in &warnings {
                    eprintln!("{name}: warning: {w}");
                }
            }
            Ok(true)
        }
        Err(ds) => {
            report_problems(&name, &ds, format)?;
            Ok(false)
        }
    }
}

fn report_problems(
    name: &str,
    ds: &[gantry_spec::Diagnostic],
    format: Format,
) -> anyhow::Result<()> {
    if format == Format::Json {
        let list: Vec<_> = ds
            .iter()
            .map(|d| serde_json::json!({"line": d.line, "column": d.column, "message": d.message}))
            .collect();
        json(&serde_json::json!({"file": name, "valid": false, "diagnostics": list}))?;
    } else {
        for d in ds {
            eprintln!("{}", d.render(name));
        }
        eprintln!("{name}: {} problem(s)", ds.len());
    }
    Ok(())
}

pub async fn submit(
    conn: &Conn,
    file: &Path,
    name: Option<String>,
) -> anyhow::Result<WorkflowCreated> {
    let text = read_file(file)?;
    if !check(file, &text, Format::Text, false)? {
        return Err(UsageError(format!("{} is not a valid workflow file", file.display())).into());
    }
    let name = name.or_else(|| {
        (file != Path::new("-"))
            .then(|| file.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .flatten()
    });
    let client = conn.client()?;
    let created: WorkflowCreated = client
        .send(
            client
                .request(reqwest::Method::POST, "/workflows")
                .header("x-gantry-channel", "cli")
                .json(&SubmitWorkflow { spec: text, name }),
        )
        .await?;
    for w in &created.warnings {
        eprintln!("warning: {w}");
    }
    Ok(created)
}

pub async fn run(cmd: WorkflowCmd, conn: &Conn) -> anyhow::Result<ExitCode> {
    match cmd {
        WorkflowCmd::Validate { file, out } => {
            let text = read_file(&file)?;
            Ok(if check(&file, &text, out.format, true)? {
                if out.format == Format::Text {
                    println!("{}: valid", file.display());
                }
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            })
        }
        WorkflowCmd::Upgrade { file, out } => {
            let text = read_file(&file)?;
            let name = file.display().to_string();
            let from = gantry_spec::parse(&text)
                .ok()
                .and_then(|wf| wf.upgraded_from);
            match gantry_spec::upgrade(&text) {
                Ok(v4) => {
                    if out.format == Format::Json {
                        json(
                            &serde_json::json!({"file": name, "from": from.as_deref().unwrap_or("v4"), "spec": v4}),
                        )?;
                    } else {
                        if from.is_none() {
                            eprintln!("{name}: already v4; printed as it is");
                        }
                        print!("{v4}");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(ds) => {
                    report_problems(&name, &ds, out.format)?;
                    Ok(ExitCode::from(2))
                }
            }
        }
        WorkflowCmd::Start {
            file,
            watch: follow,
            name,
            out,
        } => {
            let created = submit(conn, &file, name).await?;
            if out.format == Format::Json && !follow {
                json(&created)?;
                return Ok(ExitCode::SUCCESS);
            }
            if out.format == Format::Text {
                println!("{}", created.id);
            }
            if !follow {
                return Ok(ExitCode::SUCCESS);
            }
            let client = conn.client()?;
            let status = watch::watch(&client, &created.id.to_string(), false).await?;
            if out.format == Format::Json {
                let s: WorkflowSummary = client.get(&format!("/workflows/{}", created.id)).await?;
                json(&s)?;
            }
            Ok(watch::exit_code(status))
        }
        WorkflowCmd::List { status, out } => {
            let client = conn.client()?;
            let mut req = client.request(reqwest::Method::GET, "/workflows");
            if let Some(s) = &status {
                req = req.query(&[("status", s)]);
            }
            let list: Vec<WorkflowSummary> = client.send(req).await?;
            if out.format == Format::Json {
                json(&list)?;
            } else {
                let rows: Vec<Vec<String>> = list
                    .iter()
                    .map(|w| {
                        vec![
                            short_id(&w.id),
                            w.name.clone(),
                            w.status.to_string(),
                            counts(w),
                            w.owner.clone(),
                            age(w.created_at),
                        ]
                    })
                    .collect();
                table(&["ID", "NAME", "STATUS", "TASKS", "OWNER", "AGE"], &rows);
            }
            Ok(ExitCode::SUCCESS)
        }
        WorkflowCmd::Status { id, out } => {
            let client = conn.client()?;
            // The counts alone: no task is read.
            let d: WorkflowDetail = client.get(&format!("/workflows/{id}?limit=0")).await?;
            if out.format == Format::Json {
                json(&d.summary)?;
            } else {
                let w = &d.summary;
                println!("{} {} {}", w.id, w.name, w.status);
                if let Some(r) = &w.reason {
                    println!("reason: {r}");
                }
                println!("tasks: {}", counts(w));
            }
            Ok(ExitCode::SUCCESS)
        }
        WorkflowCmd::Describe {
            id,
            status,
            limit,
            after,
            out,
        } => {
            let wanted = task_statuses(&status)?;
            let client = conn.client()?;
            let mut path = format!("/workflows/{id}?limit={limit}");
            if !wanted.is_empty() {
                let names: Vec<&str> = wanted.iter().map(|s| s.as_str()).collect();
                path.push_str(&format!("&status={}", names.join(",")));
            }
            if let Some(a) = &after {
                let a: uuid::Uuid = a
                    .parse()
                    .map_err(|_| UsageError(format!("--after takes a task id, not {a:?}")))?;
                path.push_str(&format!("&after={a}"));
            }
            let d: WorkflowDetail = client.get(&path).await?;
            if out.format == Format::Json {
                json(&d)?;
                return Ok(ExitCode::SUCCESS);
            }
            let w = &d.summary;
            println!("Workflow: {} ({})", w.name, w.id);
            println!("Status:   {}", w.status);
            if let Some(r) = &w.reason {
                println!("Reason:   {r}");
            }
            println!("Owner:    {} (group {})", w.owner, w.group);
            println!("Created:  {}", output::time(w.created_at));
            if let Some(e) = w.ended_at {
                println!("Ended:    {}", output::time(e));
            }
            println!();
            let now = time::OffsetDateTime::now_utc();
            let rows: Vec<Vec<String>> = d
                .tasks
                .iter()
                .map(|t| {
                    let name = watch::task_label(&t.job, t.index);
                    // A running transfer says where it is.
                    let why = match (t.status, &t.reason, t.exit_code) {
                        _ if t.progress.is_some() => {
                            t.progress.iter().map(ToString::to_string).collect()
                        }
                        (_, Some(r), _) => r.clone(),
                        (TaskStatus::Finished, None, _) => String::new(),
                        (_, None, Some(c)) => format!("exit code {c}"),
                        _ => String::new(),
                    };
                    let (start, end, took) = span(t, now);
                    vec![
                        name,
                        t.status.to_string(),
                        t.node.clone().unwrap_or_else(|| "-".into()),
                        t.attempts.len().to_string(),
                        start,
                        end,
                        took,
                        why,
                    ]
                })
                .collect();
            if rows.is_empty() && !wanted.is_empty() {
                println!("no tasks with status {}", status.join(", "));
                return Ok(ExitCode::SUCCESS);
            }
            table(
                &[
                    "TASK", "STATUS", "NODE", "ATTEMPTS", "START", "END", "DURATION", "REASON",
                ],
                &rows,
            );
            if let Some(next) = d.next {
                let mut more = format!("gantry workflow describe {id} --after {next}");
                if !status.is_empty() {
                    more.push_str(&format!(" --status {}", status.join(",")));
                }
                eprintln!(
                    "{} of {} tasks shown; the next page: {more}",
                    d.tasks.len(),
                    d.tasks_total
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        WorkflowCmd::Events { id, follow, out } => {
            let client = conn.client()?;
            if follow {
                let status = watch::follow_events(&client, &id, out.format).await?;
                return Ok(watch::exit_code(status));
            }
            let evs: Vec<Event> = client.get(&format!("/workflows/{id}/events")).await?;
            if out.format == Format::Json {
                json(&evs)?;
            } else {
                for e in &evs {
                    println!("{}", watch::event_line(e));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        WorkflowCmd::Log {
            id,
            job,
            task,
            attempt,
            follow,
        } => {
            let client = conn.client()?;
            watch::print_logs(&client, &id, &job, task, attempt, follow, None).await?;
            Ok(ExitCode::SUCCESS)
        }
        WorkflowCmd::Stop { id, yes, out } => {
            let client = conn.client()?;
            if !yes {
                let d: WorkflowDetail = client.get(&format!("/workflows/{id}?limit=0")).await?;
                let list: Vec<gantry_api::v1::EndpointInfo> = client.get("/endpoints").await?;
                let serving: Vec<String> = list
                    .into_iter()
                    .filter(|e| e.workflow_id == Some(d.summary.id))
                    .map(|e| e.name)
                    .collect();
                // A workflow that serves nothing stops at once, as scripts expect.
                if !serving.is_empty() {
                    let what = format!(
                        "stopping workflow {} ({}) stops serving endpoint(s) {}",
                        d.summary.id,
                        d.summary.name,
                        serving.join(", ")
                    );
                    if !super::confirm(&what)? {
                        return Ok(ExitCode::from(1));
                    }
                }
            }
            let s: WorkflowSummary = client
                .send(client.request(reqwest::Method::POST, &format!("/workflows/{id}/stop")))
                .await
                .context("stopping")?;
            if out.format == Format::Json {
                json(&s)?;
            } else {
                println!("stopping {} ({})", s.id, s.name);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `--status` values, any case; an unknown one is named with the valid ones.
fn task_statuses(given: &[String]) -> anyhow::Result<Vec<TaskStatus>> {
    given
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<TaskStatus>().map_err(|_| {
                UsageError(format!(
                    "unknown task status {s:?}: use {}",
                    TaskStatus::ALL
                        .iter()
                        .map(|t| t.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
                .into()
            })
        })
        .collect()
}

/// A task's start (its first attempt's), end (its last attempt's, once the task ended) and
/// duration between them, or how long it has run so far.
fn span(t: &gantry_api::v1::TaskInfo, now: time::OffsetDateTime) -> (String, String, String) {
    let (Some(first), Some(last)) = (t.attempts.first(), t.attempts.last()) else {
        return ("-".into(), "-".into(), "-".into());
    };
    let start = first.created_at;
    let end = last.ended_at.filter(|_| t.status.is_terminal());
    let took = |to: time::OffsetDateTime| {
        gantry_spec::format_duration(std::time::Duration::from_secs(
            (to - start).whole_seconds().max(0) as u64,
        ))
    };
    match end {
        Some(e) => (output::time(start), output::time(e), took(e)),
        None if last.ended_at.is_some() => (
            output::time(start),
            "-".into(),
            format!("waiting to retry ({} so far)", took(now)),
        ),
        None => (
            output::time(start),
            "-".into(),
            format!("running for {}", took(now)),
        ),
    }
}

pub fn counts(w: &WorkflowSummary) -> String {
    let total: u32 = w.counts.values().sum();
    let done = w.counts.get(&TaskStatus::Finished).copied().unwrap_or(0);
    let mut s = format!("{done}/{total}");
    for (st, n) in &w.counts {
        if *st != TaskStatus::Finished {
            s.push_str(&format!(" {n} {st}"));
        }
    }
    s
}
