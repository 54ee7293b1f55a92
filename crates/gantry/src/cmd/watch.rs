//! Following a workflow: progress on a terminal, events as lines, and job output streamed.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use futures_util::StreamExt;
use gantry_api::v1::{Event, WorkflowDetail};
use gantry_api::{TaskStatus, WorkflowStatus};
use indicatif::{ProgressBar, ProgressStyle};
use uuid::Uuid;

use crate::client::Client;
use crate::output::{json, Format};

pub fn exit_code(s: WorkflowStatus) -> ExitCode {
    if s == WorkflowStatus::Finished {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

pub fn event_line(e: &Event) -> String {
    let t = format!(
        "{:02}:{:02}:{:02}",
        e.time.hour(),
        e.time.minute(),
        e.time.second()
    );
    match &e.task {
        Some(task) => format!("{t} {task}: {}", e.message),
        None => format!("{t} {}", e.message),
    }
}

/// How a task is named to people: `job`, or `job[i]` for a task-array member and for member
/// `i` of a multinode job (whose hostname is `job-i`).
pub fn task_label(job: &str, index: Option<u32>) -> String {
    match index {
        Some(i) => format!("{job}[{i}]"),
        None => job.to_string(),
    }
}

/// Prints above the progress line, or plainly when there is no terminal to draw it on.
fn say(bar: &ProgressBar, line: String) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}

fn progress_line(d: &WorkflowDetail) -> String {
    // The counts cover every task; `d.tasks` is only the first page of a big array.
    let total: u64 = d.summary.counts.values().map(|&n| u64::from(n)).sum();
    let count = |s: TaskStatus| d.summary.counts.get(&s).copied().unwrap_or(0);
    // Running transfers say where they are.
    let moving: String = d
        .tasks
        .iter()
        .filter_map(|t| {
            let p = t.progress.as_ref()?;
            Some(format!(" · {}: {p}", t.job))
        })
        .collect();
    format!(
        "{} · {}/{} finished · {} running · {} starting · {} pending · {} failed{moving}",
        d.summary.status,
        count(TaskStatus::Finished),
        total,
        count(TaskStatus::Running),
        count(TaskStatus::Started),
        count(TaskStatus::Pending),
        count(TaskStatus::Failed)
    )
}

/// Follows a workflow until it ends, printing events; with `stream_logs`, also every job's
/// output prefixed by its task. Returns the final status.
pub async fn watch(client: &Client, id: &str, stream_logs: bool) -> anyhow::Result<WorkflowStatus> {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    let mut after = 0i64;
    let mut following: HashSet<Uuid> = HashSet::new();
    let mut log_tasks = Vec::new();
    // The reasons each job's waiting tasks have, as last printed: an array's or a gang's
    // members sharing one reason make one line.
    let mut waiting: HashMap<String, HashSet<String>> = HashMap::new();
    let status = loop {
        let d: WorkflowDetail = client.get(&format!("/workflows/{id}")).await?;
        let evs: Vec<Event> = client
            .send(
                client
                    .request(reqwest::Method::GET, &format!("/workflows/{id}/events"))
                    .query(&[("after", after)]),
            )
            .await?;
        for e in &evs {
            after = after.max(e.seq);
            say(&bar, event_line(e));
        }
        {
            // `--watch` follows image builds' progress; `gantry run` every step's output.
            for t in d
                .tasks
                .iter()
                .filter(|t| stream_logs || t.job.starts_with("build:"))
            {
                let Some(a) = t.attempts.last() else { continue };
                if !following.insert(a.id) {
                    continue;
                }
                let label = task_label(&t.job, t.index);
                let c = client.clone();
                let wid = d.summary.id.to_string();
                let job = t.job.clone();
                let (idx, num) = (t.index, a.number);
                log_tasks.push(tokio::spawn(async move {
                    let _ = print_logs(&c, &wid, &job, idx, Some(num), true, Some(&label)).await;
                }));
            }
        }
        for line in waiting_changes(&d, &mut waiting) {
            say(&bar, line);
        }
        bar.set_message(progress_line(&d));
        if d.summary.status.is_terminal() {
            break d.summary.status;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    for t in log_tasks {
        let _ = t.await;
    }
    // Events written as the workflow ended.
    let evs: Vec<Event> = client
        .send(
            client
                .request(reqwest::Method::GET, &format!("/workflows/{id}/events"))
                .query(&[("after", after)]),
        )
        .await?;
    for e in &evs {
        say(&bar, event_line(e));
    }
    bar.finish_and_clear();
    let d: WorkflowDetail = client.get(&format!("/workflows/{id}?limit=0")).await?;
    eprintln!(
        "workflow {} {}{}",
        d.summary.id,
        status,
        d.summary
            .reason
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    );
    Ok(status)
}

/// A line for each reason a job's waiting tasks newly have since `seen` (which is updated): one
/// line per job and distinct reason, naming the tasks that share it by index ranges
/// (`job[0-499] (500 tasks) waiting: ...`), so a 500-task array prints one line, not 500. A
/// reason no task has any more is forgotten, so one that comes back is said again.
fn waiting_changes(d: &WorkflowDetail, seen: &mut HashMap<String, HashSet<String>>) -> Vec<String> {
    // job -> reason -> (indexes, tasks without an index)
    let mut now: HashMap<&str, HashMap<String, (Vec<u32>, usize)>> = HashMap::new();
    for t in &d.tasks {
        // A service started but not ready says why its probe fails; the count of failed checks
        // is left out here, or each check would print a line.
        let why = match (t.status, &t.reason) {
            (TaskStatus::Pending, Some(why)) => Some(why.clone()),
            (TaskStatus::Started, _) => t
                .probe
                .as_ref()
                .map(|p| format!("readiness probe: {}", p.why)),
            _ => None,
        };
        if let Some(why) = why {
            let e = now
                .entry(t.job.as_str())
                .or_default()
                .entry(why)
                .or_default();
            match t.index {
                Some(i) => e.0.push(i),
                None => e.1 += 1,
            }
        }
    }
    seen.retain(|job, reasons| {
        let Some(n) = now.get(job.as_str()) else {
            return false;
        };
        reasons.retain(|r| n.contains_key(r.as_str()));
        true
    });
    let mut out = vec![];
    for (job, reasons) in now {
        let known = seen.entry(job.to_string()).or_default();
        for (why, (mut idx, plain)) in reasons {
            if !known.insert(why.to_string()) {
                continue;
            }
            idx.sort_unstable();
            idx.dedup();
            out.push(format!("{} waiting: {why}", group_label(job, &idx, plain)));
        }
    }
    out.sort();
    out
}

/// `job`, `job[3]`, or `job[0-3,7] (5 tasks)`.
fn group_label(job: &str, idx: &[u32], plain: usize) -> String {
    let n = idx.len() + plain;
    if idx.is_empty() {
        return job.to_string();
    }
    let mut ranges: Vec<String> = vec![];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && idx[j + 1] == idx[j] + 1 {
            j += 1;
        }
        ranges.push(if i == j {
            idx[i].to_string()
        } else {
            format!("{}-{}", idx[i], idx[j])
        });
        i = j + 1;
    }
    let label = format!("{job}[{}]", ranges.join(","));
    if n == 1 {
        label
    } else {
        format!("{label} ({n} tasks)")
    }
}

pub async fn follow_events(
    client: &Client,
    id: &str,
    format: Format,
) -> anyhow::Result<WorkflowStatus> {
    let mut after = 0i64;
    loop {
        let evs: Vec<Event> = client
            .send(
                client
                    .request(reqwest::Method::GET, &format!("/workflows/{id}/events"))
                    .query(&[("after", after)]),
            )
            .await?;
        for e in &evs {
            after = after.max(e.seq);
            if format == Format::Json {
                println!("{}", serde_json::to_string(e)?);
            } else {
                println!("{}", event_line(e));
            }
        }
        let d: WorkflowDetail = client.get(&format!("/workflows/{id}?limit=0")).await?;
        if d.summary.status.is_terminal() && evs.is_empty() {
            if format == Format::Json {
                json(&d.summary)?;
            }
            return Ok(d.summary.status);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Prints a job's stdout and stderr (to our stdout and stderr), optionally prefixed per line.
pub async fn print_logs(
    client: &Client,
    id: &str,
    job: &str,
    task: Option<u32>,
    attempt: Option<u32>,
    follow: bool,
    prefix: Option<&str>,
) -> anyhow::Result<()> {
    let one = |stream: &'static str| {
        let client = client.clone();
        let path = format!("/workflows/{id}/logs/{job}");
        let prefix = prefix.map(|p| format!("[{p}] "));
        async move {
            let mut out = Lines::new(stream, prefix);
            let mut q: Vec<(&str, String)> = vec![("stream", stream.to_string())];
            if let Some(t) = task {
                q.push(("task", t.to_string()));
            }
            if follow {
                // One reply streams the attempt's output until it ends, however long.
                if let Some(a) = attempt {
                    q.push(("attempt", a.to_string()));
                }
                q.push(("follow", "true".into()));
                let resp = client
                    .check(client.request(reqwest::Method::GET, &path).query(&q))
                    .await?;
                let mut body = resp.bytes_stream();
                while let Some(chunk) = body.next().await {
                    out.write(&chunk?);
                }
                out.finish();
                return anyhow::Ok(());
            }
            // Without follow a reply is one page (the server sends at most 8 MiB): go on from
            // the offset it names until a page is empty, pinned to the first page's attempt so
            // a retry starting meanwhile is not mixed in.
            let mut attempt = attempt;
            let mut offset: u64 = 0;
            loop {
                let mut page = q.clone();
                if let Some(a) = attempt {
                    page.push(("attempt", a.to_string()));
                }
                page.push(("offset", offset.to_string()));
                let resp = client
                    .check(client.request(reqwest::Method::GET, &path).query(&page))
                    .await?;
                let header = |name: &str| {
                    resp.headers()
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok())
                };
                let next = header("x-gantry-next-offset");
                if attempt.is_none() {
                    attempt = header("x-gantry-attempt")
                        .filter(|n| *n > 0)
                        .map(|n| n as u32);
                }
                let bytes = resp.bytes().await?;
                out.write(&bytes);
                match next {
                    Some(n) if !bytes.is_empty() && n > offset && attempt.is_some() => offset = n,
                    _ => break,
                }
            }
            out.finish();
            anyhow::Ok(())
        }
    };
    let (a, b) = tokio::join!(one("stdout"), one("stderr"));
    a?;
    b?;
    Ok(())
}

/// Output written as it comes, or with a prefix on each whole line (a line split across
/// chunks is held until its end).
struct Lines {
    stream: &'static str,
    prefix: Option<String>,
    pending: Vec<u8>,
}

impl Lines {
    fn new(stream: &'static str, prefix: Option<String>) -> Lines {
        Lines {
            stream,
            prefix,
            pending: Vec::new(),
        }
    }

    fn write(&mut self, chunk: &[u8]) {
        let Some(p) = &self.prefix else {
            write_out(self.stream, chunk);
            return;
        };
        self.pending.extend_from_slice(chunk);
        while let Some(nl) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=nl).collect();
            let mut out = p.as_bytes().to_vec();
            out.extend_from_slice(&line);
            write_out(self.stream, &out);
        }
    }

    fn finish(&mut self) {
        if let (Some(p), false) = (&self.prefix, self.pending.is_empty()) {
            let mut out = p.as_bytes().to_vec();
            out.append(&mut self.pending);
            out.push(b'\n');
            write_out(self.stream, &out);
        }
    }
}

fn write_out(stream: &str, data: &[u8]) {
    if stream == "stdout" {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(data);
        let _ = o.flush();
    } else {
        let mut o = std::io::stderr().lock();
        let _ = o.write_all(data);
        let _ = o.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail(tasks: &[(&str, Option<u32>, &str, Option<&str>)]) -> WorkflowDetail {
        let tasks: Vec<serde_json::Value> = tasks
            .iter()
            .map(|(job, index, status, reason)| {
                serde_json::json!({"id": Uuid::new_v4(), "job": job, "index": index,
                    "status": status, "reason": reason, "attempts": []})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "id": Uuid::new_v4(), "name": "w", "owner": "u", "group": "g",
            "status": "RUNNING", "created_at": "2026-01-01T00:00:00Z", "tasks": tasks
        }))
        .unwrap()
    }

    #[test]
    fn a_waiting_reason_is_printed_once_per_job_when_it_changes() {
        let mut seen = HashMap::new();
        let gang = |why: &str| {
            detail(&[
                ("mpi", Some(0), "PENDING", Some(why)),
                ("mpi", Some(1), "PENDING", Some(why)),
                ("one", None, "RUNNING", None),
            ])
        };
        assert_eq!(
            waiting_changes(&gang("needs 2 nodes"), &mut seen),
            ["mpi[0-1] (2 tasks) waiting: needs 2 nodes"]
        );
        assert!(waiting_changes(&gang("needs 2 nodes"), &mut seen).is_empty());
        assert_eq!(
            waiting_changes(&gang("no node has the label x=y"), &mut seen),
            ["mpi[0-1] (2 tasks) waiting: no node has the label x=y"]
        );
        // Placed, then waiting again for the same reason: said again.
        let placed = detail(&[("mpi", Some(0), "RUNNING", None)]);
        assert!(waiting_changes(&placed, &mut seen).is_empty());
        assert_eq!(
            waiting_changes(&gang("no node has the label x=y"), &mut seen).len(),
            1
        );
    }

    #[test]
    fn a_failing_probe_is_one_line_however_many_checks_fail() {
        let mut seen = HashMap::new();
        let why = "GET http://x/ answered 404";
        let probing = |count: u32| -> WorkflowDetail {
            let mut d = detail(&[("llm", None, "STARTED", Some("readiness probe: ..."))]);
            d.tasks[0].probe = Some(gantry_api::v1::ProbeFailing {
                why: why.into(),
                count,
            });
            d
        };
        assert_eq!(
            waiting_changes(&probing(1), &mut seen),
            [format!("llm waiting: readiness probe: {why}")]
        );
        assert!(waiting_changes(&probing(30), &mut seen).is_empty());
        // A started task whose probe does not fail (or has none) is not waiting.
        let plain = detail(&[("llm", None, "STARTED", Some("pulling"))]);
        assert!(waiting_changes(&plain, &mut seen).is_empty());
    }

    #[test]
    fn an_array_waiting_for_one_reason_is_one_line_and_distinct_reasons_one_each() {
        let mut seen = HashMap::new();
        let never = "never fits: needs 64 CPUs, the largest node has 2";
        let mut tasks: Vec<(&str, Option<u32>, &str, Option<&str>)> = (0..500)
            .map(|i| ("job", Some(i), "PENDING", Some(never)))
            .collect();
        assert_eq!(
            waiting_changes(&detail(&tasks), &mut seen),
            [format!("job[0-499] (500 tasks) waiting: {never}")]
        );
        assert!(waiting_changes(&detail(&tasks), &mut seen).is_empty());
        // Some members wait for something else: only the new reason is said, with its ranges.
        for i in [3u32, 4, 5, 9] {
            tasks[i as usize].3 = Some("waiting for a node to join");
        }
        assert_eq!(
            waiting_changes(&detail(&tasks), &mut seen),
            ["job[3-5,9] (4 tasks) waiting: waiting for a node to join"]
        );
        let single = detail(&[("one", None, "PENDING", Some(never))]);
        assert_eq!(
            waiting_changes(&single, &mut HashMap::new()),
            [format!("one waiting: {never}")]
        );
    }
}
