//! A node's graphs of the last hour (CPU, memory, running tasks), from the Prometheus the
//! `monitoring.prometheus_url` setting names (`gantry up --monitoring` sets it), drawn
//! server-side as SVG polylines. No setting, no graphs; a Prometheus that does not answer is
//! said in place of them, and the rest of the page is served all the same.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::state::AppState;

/// The hour shown, and the distance between its points.
const WINDOW_S: i64 = 3600;
const STEP_S: i64 = 15;
/// The node page waits at most this long for Prometheus.
const TIMEOUT: Duration = Duration::from_secs(3);
/// The drawing's size (its viewBox; CSS scales it).
const W: f64 = 360.0;
const H: f64 = 90.0;

#[derive(Clone)]
pub struct NodeGraph {
    /// `cpu`, `memory` or `running`.
    pub id: &'static str,
    pub title: &'static str,
    /// The polyline's points, "x,y x,y ..."; empty without samples.
    pub points: String,
    /// Where the last sample is drawn, for its dot.
    pub last_x: String,
    pub last_y: String,
    /// The newest value and the top of the scale, as read.
    pub now: String,
    pub top: String,
    pub samples: usize,
}

#[derive(Clone)]
pub struct NodeGraphs {
    pub graphs: Vec<NodeGraph>,
    /// Why there is nothing to draw (Prometheus did not answer); empty when it did.
    pub error: String,
    pub source: String,
}

#[derive(Deserialize)]
struct RangeReply {
    status: String,
    #[serde(default)]
    data: Option<RangeData>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct RangeData {
    #[serde(default)]
    result: Vec<Series>,
}

#[derive(Deserialize)]
struct Series {
    #[serde(default)]
    values: Vec<(f64, String)>,
}

/// A label value inside a PromQL string.
fn quoted(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn queries(node: &str) -> [(&'static str, &'static str, String); 3] {
    let n = quoted(node);
    [
        (
            "cpu",
            "CPU busy",
            format!(
                "100 * (1 - avg(rate(node_cpu_seconds_total{{mode=\"idle\",node=\"{n}\"}}[1m])))"
            ),
        ),
        (
            "memory",
            "Memory in use",
            format!(
                "sum(node_memory_MemTotal_bytes{{node=\"{n}\"}} - node_memory_MemAvailable_bytes{{node=\"{n}\"}})"
            ),
        ),
        (
            "running",
            "Running tasks",
            format!("sum(gantry_agent_running_jobs{{node=\"{n}\"}})"),
        ),
    ]
}

fn value_text(id: &str, v: f64) -> String {
    match id {
        "cpu" => format!("{v:.0} %"),
        "memory" => super::bytes(v.max(0.0) as u64),
        _ => format!("{v:.0}"),
    }
}

/// Scales samples (time, value) of `[start, end]` into the drawing.
fn draw(
    id: &'static str,
    title: &'static str,
    samples: &[(f64, f64)],
    start: f64,
    end: f64,
) -> NodeGraph {
    let max = samples.iter().map(|s| s.1).fold(0.0, f64::max);
    let top = match id {
        "cpu" => 100.0,
        "running" => max.ceil().max(1.0),
        _ => (max * 1.1).max(1.0),
    };
    let xy = |(t, v): (f64, f64)| {
        let x = (t - start) / (end - start).max(1.0) * W;
        let y = H - (v / top).clamp(0.0, 1.0) * H;
        (x, y)
    };
    let points: Vec<String> = samples
        .iter()
        .map(|s| {
            let (x, y) = xy(*s);
            format!("{x:.1},{y:.1}")
        })
        .collect();
    let (lx, ly) = samples.last().map(|s| xy(*s)).unwrap_or((W, H));
    NodeGraph {
        id,
        title,
        points: points.join(" "),
        last_x: format!("{lx:.1}"),
        last_y: format!("{ly:.1}"),
        now: samples
            .last()
            .map(|s| value_text(id, s.1))
            .unwrap_or_default(),
        top: value_text(id, top),
        samples: samples.len(),
    }
}

async fn range(
    client: &reqwest::Client,
    base: &str,
    query: &str,
    start: i64,
    end: i64,
) -> Result<Vec<(f64, f64)>, String> {
    let url = format!("{}/api/v1/query_range", base.trim_end_matches('/'));
    let reply: RangeReply = client
        .get(&url)
        .query(&[
            ("query", query.to_string()),
            ("start", start.to_string()),
            ("end", end.to_string()),
            ("step", STEP_S.to_string()),
        ])
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    if reply.status != "success" {
        return Err(reply.error.unwrap_or(reply.status));
    }
    // A sum() is one series; several would be summed the same way.
    let mut out: Vec<(f64, f64)> = vec![];
    for s in reply.data.map(|d| d.result).unwrap_or_default() {
        for (t, v) in s.values {
            let Ok(v) = v.parse::<f64>() else { continue };
            if !v.is_finite() {
                continue;
            }
            match out.iter_mut().find(|p| p.0 == t) {
                Some(p) => p.1 += v,
                None => out.push((t, v)),
            }
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(out)
}

/// Graphs drawn in the last step, by Prometheus and node: the node page refreshes itself every
/// few seconds, and a new point comes only every step.
type Drawn = HashMap<(String, String), (Instant, NodeGraphs)>;
static RECENT: LazyLock<Mutex<Drawn>> = LazyLock::new(Mutex::default);

/// The node's graphs, or None when no Prometheus is configured.
pub async fn for_node(st: &AppState, node: &str) -> Option<NodeGraphs> {
    let base = crate::services::nodes::prometheus_url(st).await?;
    let key = (base.clone(), node.to_string());
    let fresh = Duration::from_secs(STEP_S as u64);
    if let Some((at, g)) = RECENT.lock().ok()?.get(&key) {
        if at.elapsed() < fresh {
            return Some(g.clone());
        }
    }
    let g = query(&base, node).await;
    // A graph still waiting for its first samples is asked again at once.
    let complete = g.graphs.iter().all(|gr| gr.samples > 0);
    if let (true, Ok(mut m)) = (complete, RECENT.lock()) {
        m.retain(|_, (at, _)| at.elapsed() < fresh);
        m.insert(key, (Instant::now(), g.clone()));
    }
    Some(g)
}

async fn query(base: &str, node: &str) -> NodeGraphs {
    let base = base.to_string();
    let client = match reqwest::Client::builder().timeout(TIMEOUT).build() {
        Ok(c) => c,
        Err(e) => {
            return NodeGraphs {
                graphs: vec![],
                error: e.to_string(),
                source: base,
            }
        }
    };
    let end = time::OffsetDateTime::now_utc().unix_timestamp();
    let start = end - WINDOW_S;
    let mut graphs = vec![];
    for (id, title, q) in queries(node) {
        match range(&client, &base, &q, start, end).await {
            Ok(samples) => graphs.push(draw(id, title, &samples, start as f64, end as f64)),
            Err(e) => {
                return NodeGraphs {
                    graphs: vec![],
                    error: format!("Prometheus did not answer: {e}"),
                    source: base,
                }
            }
        }
    }
    NodeGraphs {
        graphs,
        error: String::new(),
        source: base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_scaled_into_the_drawing() {
        let g = draw(
            "cpu",
            "CPU",
            &[(0.0, 0.0), (50.0, 50.0), (100.0, 100.0)],
            0.0,
            100.0,
        );
        assert_eq!(g.points, "0.0,90.0 180.0,45.0 360.0,0.0");
        assert_eq!(g.now, "100 %");
        assert_eq!(g.samples, 3);
        let r = draw("running", "Running", &[(0.0, 0.0)], 0.0, 100.0);
        assert_eq!(r.top, "1", "an idle node's scale still has a top");
        assert_eq!(r.last_y, "90.0");
    }

    #[test]
    fn node_names_cannot_break_out_of_the_query() {
        let q = &queries("a\"}) or vector(1) #")[2].2;
        assert!(q.contains("node=\"a\\\"}) or vector(1) #\""), "{q}");
    }
}
