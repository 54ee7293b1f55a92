//! Text tables for people, JSON for scripts, and errors that say what to do.

use clap::ValueEnum;
use serde::Serialize;
use time::OffsetDateTime;

use crate::client::ApiFailure;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

pub fn json<T: Serialize>(v: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Prints rows under a header, columns padded to their widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        println!("{}", s.trim_end());
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}

/// "3m ago", "2h ago": ages for listings.
pub fn age(t: OffsetDateTime) -> String {
    let secs = (OffsetDateTime::now_utc() - t).whole_seconds().max(0);
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

pub fn time(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.to_string())
}

/// A token's EXPIRES column: its time, `expired TIME` once past, or `never`.
pub fn expiry(at: Option<OffsetDateTime>, expired: bool) -> String {
    match at {
        Some(at) if expired => format!("expired {}", time(at)),
        Some(at) => time(at),
        None => "never".into(),
    }
}

pub fn short_id(id: &uuid::Uuid) -> String {
    id.to_string()[..8].to_string()
}

pub use gantry_api::v1::iec_bytes as bytes;

pub use crate::usage::UsageError;

pub fn is_usage_error(e: &anyhow::Error) -> bool {
    e.downcast_ref::<UsageError>().is_some()
        || e.downcast_ref::<ApiFailure>()
            .is_some_and(|f| f.status == 400)
}

pub fn print_error(e: &anyhow::Error) {
    if let Some(f) = e.downcast_ref::<ApiFailure>() {
        eprintln!("error: {}", f.body.error);
        for d in &f.body.diagnostics {
            eprintln!("  {}:{}: {}", d.line, d.column, d.message);
        }
        return;
    }
    eprintln!("error: {e}");
    for cause in e.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
}
