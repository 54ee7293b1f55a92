//! `gantry-simagent`: the simulated fleet of `gantry_simagent` as a program, for
//! `bench/scale.sh`. See the library for what a simulated node does and what is printed.

use std::time::Duration;

use clap::Parser;
use gantry_simagent::{report, spawn, Args};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (stats, start) = spawn(args.clone());
    let mut every = tokio::time::interval(Duration::from_secs(args.report_secs.max(1)));
    every.tick().await;
    let until = args
        .duration_secs
        .map(|s| start + Duration::from_secs(s))
        .unwrap_or_else(|| start + Duration::from_secs(100 * 365 * 86_400));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = every.tick() => println!("{}", report(&stats, start, false)),
            _ = tokio::time::sleep_until(until) => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
        }
    }
    println!("{}", report(&stats, start, true));
    Ok(())
}
