//! Readiness probes for services, with Kubernetes' semantics for the parts that matter here:
//! wait `initial_delay_seconds`, then every `period_seconds` run the check with
//! `timeout_seconds`; `success_threshold` passes in a row make the service ready.
//!
//! - `http-get`: a GET to `scheme://<container address>:<port><path>` with the given headers;
//!   a status of 200-399 passes (redirects are not followed). HTTPS does not verify the
//!   certificate, as in Kubernetes.
//! - `tcp-socket`: a TCP connection to `<container address>:<port>` opens.
//! - `exec`: the command, run in the container with `runc exec`, exits 0.
//!
//! A container without an address of its own (no network) is probed at 127.0.0.1 inside its
//! own network namespace.
//!
//! Readiness is reported once, so probing stops when the service is ready; nothing marks a
//! ready service unready again, and `failure_threshold` is not used.

mod http;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gantry_api::agent::{Probe, ProbeCheck};

use crate::runtime::{ContainerState, Runtime};

/// What a probe checks: one container.
#[derive(Debug, Clone)]
pub struct Target {
    pub runtime: Runtime,
    /// The container's id in the runtime.
    pub id: String,
    /// Its address on the node's bridge; `None` probes 127.0.0.1 in its namespace.
    pub address: Option<IpAddr>,
}

/// How [`wait_ready`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// `success_threshold` checks passed in a row.
    Ready,
    /// The container stopped running, or the caller no longer wants it, first.
    Gone,
}

/// A probe's timing, with Kubernetes' defaults for zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
}

impl Timing {
    pub fn of(p: &Probe) -> Self {
        let or = |v: u32, default: u32| if v == 0 { default } else { v };
        Timing {
            initial_delay: Duration::from_secs(p.initial_delay_seconds.into()),
            period: Duration::from_secs(or(p.period_seconds, 10).into()),
            timeout: Duration::from_secs(or(p.timeout_seconds, 1).into()),
            success_threshold: or(p.success_threshold, 1),
        }
    }
}

/// Runs one check. `Err` says why it did not pass.
pub async fn check(check: &ProbeCheck, target: &Target, timeout: Duration) -> Result<(), String> {
    match check {
        ProbeCheck::Exec { command } => {
            if command.is_empty() {
                return Err("the exec probe has no command".into());
            }
            let (rt, id, argv) = (target.runtime.clone(), target.id.clone(), command.clone());
            let out = tokio::task::spawn_blocking(move || rt.exec(&id, &argv, timeout))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            match out.exit_code {
                Some(0) => Ok(()),
                Some(code) => Err(format!(
                    "`{}` exited with {code}: {}",
                    command.join(" "),
                    out.output.trim()
                )),
                None => Err(format!(
                    "`{}` did not finish within {} s",
                    command.join(" "),
                    timeout.as_secs_f64()
                )),
            }
        }
        ProbeCheck::TcpSocket { port } => {
            network_check(target, *port, move |addr| {
                TcpStream::connect_timeout(&addr, timeout)
                    .map(drop)
                    .map_err(|e| format!("connecting to {addr}: {e}"))
            })
            .await
        }
        ProbeCheck::HttpGet {
            path,
            port,
            scheme,
            headers,
        } => {
            let req = http::Request {
                scheme: scheme.clone(),
                path: path.clone(),
                headers: headers.clone(),
                timeout,
            };
            network_check(target, *port, move |addr| {
                let status = req.get(addr)?;
                if (200..400).contains(&status) {
                    Ok(())
                } else {
                    Err(format!("GET {} answered {status}", req.url(addr)))
                }
            })
            .await
        }
    }
}

/// Runs `f` against the container's address and `port`, from the host when it has an address
/// of its own, else inside its network namespace at 127.0.0.1.
async fn network_check(
    target: &Target,
    port: u16,
    f: impl FnOnce(SocketAddr) -> Result<(), String> + Send + 'static,
) -> Result<(), String> {
    let netns: Option<PathBuf> = match target.address {
        Some(_) => None,
        None => {
            let pid = target
                .runtime
                .pid(&target.id)
                .ok_or_else(|| format!("container {} has no process", target.id))?;
            Some(PathBuf::from(format!("/proc/{pid}/ns/net")))
        }
    };
    let ip = target.address.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let addr = SocketAddr::new(ip, port);
    tokio::task::spawn_blocking(move || match netns {
        None => f(addr),
        Some(ns) => crate::net::netns::run_in(&ns, move || f(addr))
            .map_err(|e| format!("entering {}: {e}", ns.display()))?,
    })
    .await
    .map_err(|e| e.to_string())?
}

async fn running(target: &Target) -> bool {
    let (rt, id) = (target.runtime.clone(), target.id.clone());
    tokio::task::spawn_blocking(move || rt.status(&id) == ContainerState::Running)
        .await
        .unwrap_or(false)
}

/// Sleeps until `until`, waking every second to see whether it is still wanted.
async fn pause(until: Instant, target: &Target, wanted: &mut impl FnMut() -> bool) -> bool {
    loop {
        let now = Instant::now();
        if now >= until {
            return true;
        }
        tokio::time::sleep((until - now).min(Duration::from_secs(1))).await;
        if !wanted() || !running(target).await {
            return false;
        }
    }
}

/// Probes until the service is ready or gone. `wanted` is asked between checks; returning
/// false ends the wait (the attempt is being stopped or forgotten).
pub async fn wait_ready(probe: &Probe, target: &Target, wanted: impl FnMut() -> bool) -> Readiness {
    wait_ready_reporting(probe, target, wanted, |_, _| {}).await
}

/// [`wait_ready`], telling `failed` of each failed check: why, and how many checks in a row
/// have failed so (1 when the outcome is new), so that a person can see why a service is not
/// ready without the agent's log.
pub async fn wait_ready_reporting(
    probe: &Probe,
    target: &Target,
    mut wanted: impl FnMut() -> bool,
    mut failed: impl FnMut(&str, u32),
) -> Readiness {
    let t = Timing::of(probe);
    let mut last: Option<(String, u32)> = None;
    if !pause(Instant::now() + t.initial_delay, target, &mut wanted).await {
        return Readiness::Gone;
    }
    let mut passes = 0;
    loop {
        if !wanted() || !running(target).await {
            return Readiness::Gone;
        }
        let started = Instant::now();
        match check(&probe.check, target, t.timeout).await {
            Ok(()) => {
                passes += 1;
                last = None;
                if passes >= t.success_threshold {
                    return Readiness::Ready;
                }
            }
            Err(why) => {
                passes = 0;
                tracing::debug!(container = %target.id, "readiness probe failed: {why}");
                let count = match &last {
                    Some((w, n)) if *w == why => n + 1,
                    _ => 1,
                };
                failed(&why, count);
                last = Some((why, count));
            }
        }
        if !pause(started + t.period, target, &mut wanted).await {
            return Readiness::Gone;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_take_kubernetes_defaults() {
        let p = Probe {
            check: ProbeCheck::TcpSocket { port: 1 },
            initial_delay_seconds: 0,
            period_seconds: 0,
            timeout_seconds: 0,
            success_threshold: 0,
            failure_threshold: 0,
        };
        let t = Timing::of(&p);
        assert_eq!(t.initial_delay, Duration::ZERO);
        assert_eq!(t.period, Duration::from_secs(10));
        assert_eq!(t.timeout, Duration::from_secs(1));
        assert_eq!(t.success_threshold, 1);
    }
}
