//! The Alertmanager webhook's payload (version 4), read into the alerts core's hold policy
//! decides on. Everything here happens before the server takes the holds lock: decoding, and
//! each entry's labels read on its own, so one bad entry never spoils the rest of a post.

use std::collections::BTreeMap;

use gantry_core::holds::{Alert, HoldType, Release};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The part of Alertmanager's post Gantry reads; the rest (`groupKey`, `commonLabels`, ...)
/// is ignored.
#[derive(Debug, Deserialize)]
pub struct Payload {
    pub alerts: Vec<AmAlert>,
}

#[derive(Debug, Deserialize)]
pub struct AmAlert {
    pub status: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(rename = "startsAt", default)]
    pub starts_at: String,
    #[serde(default)]
    pub fingerprint: Option<String>,
}

/// A body that is not a payload can never be accepted (Alertmanager should not retry it).
pub fn decode(body: &[u8]) -> Result<Payload, String> {
    crate::json(body).map_err(|e| {
        format!("not an Alertmanager webhook payload (version 4, with an `alerts` list): {e}")
    })
}

/// Alertmanager's fingerprint is stable per label set; derive one the same way when a sender
/// leaves it out.
pub fn fingerprint(labels: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    for (k, v) in labels {
        h.update(k.as_bytes());
        h.update([0xff]);
        h.update(v.as_bytes());
        h.update([0xff]);
    }
    hex::encode(&h.finalize()[..8])
}

/// One alert entry after its labels were read.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertEntry {
    pub alert: Alert,
    pub alertname: String,
    pub summary: String,
}

/// An alert that names a node Gantry does not know: recorded as an event on that name, once
/// per episode (`fingerprint`, `episode`) and status.
#[derive(Debug, Clone, PartialEq)]
pub struct UnknownNode {
    pub node: String,
    pub fingerprint: String,
    /// The episode's `startsAt`, checked like a known node's.
    pub episode: String,
    pub status: String,
    pub message: String,
}

/// What a post's entries say, each entry in exactly one of `entries`, `ignored` (with why;
/// the unknown nodes among them are in `unknown` too), `refused` (with why) or `watchdogs`.
#[derive(Debug, Default)]
pub struct Reading {
    pub entries: Vec<AlertEntry>,
    pub unknown: Vec<UnknownNode>,
    pub ignored: Vec<String>,
    /// Entries that can never be accepted (no real `startsAt`, a malformed fingerprint):
    /// nothing of them may be stored.
    pub refused: Vec<String>,
    /// Watchdog entries only show that the alerting pipeline works.
    pub watchdogs: usize,
    /// Some watchdog entry fires: the pipeline is alive now.
    pub watchdog_firing: bool,
}

/// An episode's `startsAt` as a key: it must be an RFC 3339 time after the Unix epoch. An
/// empty or zero one (Go's `0001-01-01T00:00:00Z`, what a sender leaves unset) would make every
/// episode of its fingerprint one and the same, so one bad post could hold a node for good or
/// end every later episode before it began.
pub fn episode_start(starts_at: &str) -> Result<(), String> {
    use time::format_description::well_known::Rfc3339;
    match time::OffsetDateTime::parse(starts_at, &Rfc3339) {
        Ok(t) if t.unix_timestamp() > 0 => Ok(()),
        Ok(_) => Err(format!(
            "startsAt {starts_at:?} is not a real start (zero or before 1970)"
        )),
        Err(_) if starts_at.is_empty() => Err("no startsAt".into()),
        Err(e) => Err(format!(
            "startsAt {:?} is not an RFC 3339 time ({e})",
            cut(starts_at)
        )),
    }
}

/// Alertmanager's fingerprints are 16 hex digits; anything short, plain and printable is taken.
pub fn valid_fingerprint(f: &str) -> bool {
    !f.is_empty()
        && f.len() <= 64
        && f.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// At most 64 characters of what a sender sent, for a reply.
fn cut(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Reads every entry of a post; `known` says whether a node name is one of Gantry's.
pub fn read(payload: &Payload, known: impl Fn(&str) -> bool) -> Reading {
    let mut out = Reading::default();
    for a in &payload.alerts {
        let name = a
            .labels
            .get("alertname")
            .cloned()
            .unwrap_or_else(|| "unnamed alert".into());
        if a.labels.get("gantry_watchdog").is_some_and(|v| v == "true") {
            out.watchdog_firing |= a.status == "firing";
            out.watchdogs += 1;
            continue;
        }
        let firing = match a.status.as_str() {
            "firing" => true,
            "resolved" => false,
            other => {
                out.ignored
                    .push(format!("{name}: unknown status {other:?}"));
                continue;
            }
        };
        let Some(node) = a.labels.get("node").filter(|n| !n.is_empty()) else {
            out.ignored.push(format!("{name}: no `node` label"));
            continue;
        };
        let kind = match a.labels.get("gantry_hold").map(String::as_str) {
            Some("cordon") => HoldType::Cordon,
            Some("evict") => HoldType::Evict,
            Some(other) => {
                out.ignored.push(format!(
                    "{name} on {node}: gantry_hold must be cordon or evict, not {other:?}"
                ));
                continue;
            }
            None => {
                out.ignored.push(format!(
                    "{name} on {node}: no `gantry_hold` label, so Gantry does not act on it"
                ));
                continue;
            }
        };
        let release = match a.labels.get("gantry_release").map(String::as_str) {
            Some("admin") => Release::Admin,
            None | Some("auto") => Release::Auto,
            Some(other) => {
                out.ignored.push(format!(
                    "{name} on {node}: gantry_release must be auto or admin, not {other:?}"
                ));
                continue;
            }
        };
        let fp = match a.fingerprint.as_deref().filter(|f| !f.is_empty()) {
            Some(f) if valid_fingerprint(f) => f.to_string(),
            Some(f) => {
                out.refused.push(format!(
                    "{} on {}: fingerprint {:?} is not 1-64 letters, digits, '-' or '_'",
                    cut(&name),
                    cut(node),
                    cut(f)
                ));
                continue;
            }
            None => fingerprint(&a.labels),
        };
        if let Err(why) = episode_start(&a.starts_at) {
            out.refused
                .push(format!("{} on {}: {why}", cut(&name), cut(node)));
            continue;
        }
        if !known(node) {
            out.unknown.push(UnknownNode {
                node: node.clone(),
                fingerprint: fp,
                episode: a.starts_at.clone(),
                status: a.status.clone(),
                message: format!(
                    "{name} ({}) names node {node}, which Gantry does not know",
                    a.status
                ),
            });
            out.ignored
                .push(format!("{name}: node {node} is not known to Gantry"));
            continue;
        }
        out.entries.push(AlertEntry {
            alert: Alert {
                fingerprint: fp,
                starts_at: a.starts_at.clone(),
                firing,
                node: node.clone(),
                kind,
                release,
            },
            summary: a
                .annotations
                .get("summary")
                .cloned()
                .filter(|s| !s.trim().is_empty())
                .unwrap_or_else(|| format!("{name} on {node}")),
            alertname: name,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(alerts: &str) -> Payload {
        decode(format!(r#"{{"version":"4","alerts":[{alerts}]}}"#).as_bytes()).unwrap()
    }

    #[test]
    fn each_entry_is_read_on_its_own() {
        let p = post(
            r#"{"status":"firing","labels":{"alertname":"DiskFull","node":"n1","gantry_hold":"evict","gantry_release":"admin"},
                "annotations":{"summary":"scratch full"},"startsAt":"2026-01-01T00:00:00Z","fingerprint":"f1"},
               {"status":"firing","labels":{"alertname":"Other","node":"n1"}},
               {"status":"firing","labels":{"alertname":"Far","node":"n9","gantry_hold":"cordon"},
                "startsAt":"2026-01-01T00:00:00Z"},
               {"status":"pending","labels":{"node":"n1","gantry_hold":"cordon"}},
               {"status":"firing","labels":{"gantry_watchdog":"true"}}"#,
        );
        let r = read(&p, |n| n == "n1");
        assert_eq!(r.entries.len(), 1);
        let e = &r.entries[0];
        assert_eq!(
            (e.alert.kind, e.alert.release, e.alert.firing),
            (HoldType::Evict, Release::Admin, true)
        );
        assert_eq!(
            (e.alert.fingerprint.as_str(), e.summary.as_str()),
            ("f1", "scratch full")
        );
        assert_eq!(r.ignored.len(), 3, "{:?}", r.ignored);
        assert!(r.ignored[2].contains("unknown status \"pending\""));
        assert_eq!(r.unknown.len(), 1);
        assert_eq!(
            (r.unknown[0].node.as_str(), r.unknown[0].episode.as_str()),
            ("n9", "2026-01-01T00:00:00Z")
        );
        assert_eq!(r.unknown[0].fingerprint.len(), 16);
        assert!(r.refused.is_empty());
        assert_eq!((r.watchdogs, r.watchdog_firing), (1, true));
    }

    #[test]
    fn a_missing_fingerprint_is_derived_from_the_labels() {
        let one = r#"{"status":"resolved","labels":{"node":"n1","gantry_hold":"cordon","a":"1"},
                      "startsAt":"2026-01-01T00:00:00Z"}"#;
        let a = read(&post(one), |_| true);
        let b = read(&post(one), |_| true);
        assert_eq!(a.entries[0].alert.fingerprint.len(), 16);
        assert_eq!(
            a.entries[0].alert.fingerprint,
            b.entries[0].alert.fingerprint
        );
        assert_eq!(a.entries[0].summary, "unnamed alert on n1");
    }

    #[test]
    fn entries_without_a_real_start_or_with_a_bad_fingerprint_are_refused() {
        let entry = |starts: &str, fp: &str| {
            format!(
                r#"{{"status":"firing","labels":{{"alertname":"A","node":"n1","gantry_hold":"cordon"}},
                    "startsAt":{starts:?},"fingerprint":{fp:?}}}"#
            )
        };
        let bad = [
            entry("", "f1"),
            entry("0001-01-01T00:00:00Z", "f1"),
            entry("1969-12-31T23:59:59Z", "f1"),
            entry("yesterday", "f1"),
            entry("2026-01-01T00:00:00Z", "f 1"),
            entry("2026-01-01T00:00:00Z", &"f".repeat(65)),
        ];
        for (known, what) in [(true, "a known node"), (false, "an unknown node")] {
            let r = read(&post(&bad.join(",")), |_| known);
            assert_eq!(r.refused.len(), bad.len(), "{what}: {:?}", r.refused);
            assert!(r.entries.is_empty() && r.unknown.is_empty() && r.ignored.is_empty());
        }
        let r = read(&post(&bad.join(",")), |_| true);
        for (why, says) in r.refused.iter().zip([
            "no startsAt",
            "not a real start",
            "not a real start",
            "not an RFC 3339 time",
            "fingerprint \"f 1\"",
            "fingerprint",
        ]) {
            assert!(why.starts_with("A on n1: ") && why.contains(says), "{why}");
        }
        // The same entry with a real start and Alertmanager's own fingerprint is taken.
        let good = read(
            &post(&entry("2026-01-01T00:00:00Z", "0123456789abcdef")),
            |_| true,
        );
        assert!(good.refused.is_empty());
        assert_eq!(good.entries[0].alert.fingerprint, "0123456789abcdef");
        assert_eq!(good.entries[0].alert.starts_at, "2026-01-01T00:00:00Z");
    }

    #[test]
    fn what_is_not_a_payload_is_refused() {
        assert!(decode(b"{}").is_err());
        assert!(decode(br#"{"alerts":[]} trailing"#).is_err());
        assert!(
            decode(br#"{"alerts":[{"labels":{}}]}"#).is_err(),
            "status is required"
        );
    }
}
