//! `gantry`: one binary for the control plane (`server`, `up`), the node agent (`agent`, `shim`)
//! and the client verbs.

mod client;
mod cmd;
mod output;
mod usage;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::output::Format;

#[derive(Parser)]
#[command(
    name = "gantry",
    version,
    about = "Workflows for HPC and AI clusters",
    propagate_version = true
)]
struct Cli {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: Command,
}

/// The heading of the options every verb takes, so that a verb's own options read first.
const GLOBAL: &str = "Global options";

/// Where the client verbs find the server.
#[derive(Args, Clone, Debug)]
pub struct Conn {
    /// Server URL (default: the context `gantry up` wrote).
    #[arg(long, global = true, env = "GANTRY_URL", help_heading = GLOBAL)]
    url: Option<String>,
    /// Bearer token.
    #[arg(long, global = true, env = "GANTRY_TOKEN", hide_env_values = true, help_heading = GLOBAL)]
    token: Option<String>,
    /// The data dir whose context.toml to use.
    #[arg(long, global = true, env = "GANTRY_DATA_DIR", help_heading = GLOBAL)]
    data_dir: Option<PathBuf>,
    /// The named context to use (`gantry context list`) instead of the current one.
    #[arg(long, global = true, env = "GANTRY_CONTEXT")]
    context: Option<String>,
}

impl Conn {
    pub fn client(&self) -> anyhow::Result<client::Client> {
        client::Client::resolve(
            self.url.clone(),
            self.token.clone(),
            self.data_dir.as_deref(),
            self.context.as_deref(),
        )
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run a server and local agents in one process on an embedded store (one machine).
    Up(cmd::up::UpArgs),
    /// Run one workflow on an embedded cluster and exit with its status.
    Run(cmd::up::RunArgs),
    /// Run the control plane.
    Server(cmd::up::ServerArgs),
    /// Run a node agent.
    Agent(cmd::up::AgentArgs),
    /// Hold one container's process (started by the agent; not for direct use).
    #[command(hide = true)]
    Shim {
        /// What the agent passes.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Submit, watch and control workflows.
    #[command(subcommand)]
    Workflow(cmd::workflow::WorkflowCmd),
    /// Nodes and their state.
    #[command(subcommand)]
    Node(cmd::node::NodeCmd),
    /// Persistent endpoints: URLs that survive replacing the model behind them.
    #[command(subcommand)]
    Endpoint(cmd::endpoint::EndpointCmd),
    /// Secrets that workflow files name as secret://SCOPE/NAME.
    #[command(subcommand)]
    Secret(cmd::secret::SecretCmd),
    /// Persistent volumes: directories that outlive the workflows that mount them.
    #[command(subcommand)]
    Volume(cmd::volume::VolumeCmd),
    /// The object cache: images built or pushed for you and your group.
    #[command(subcommand)]
    Image(cmd::image::ImageCmd),
    /// Node-health files (Prometheus, Alertmanager, Grafana) for a stack you run yourself.
    #[command(subcommand)]
    Monitoring(cmd::monitoring::MonitoringCmd),
    /// Users, tokens and cluster settings (administrators).
    #[command(subcommand)]
    Admin(cmd::admin::AdminCmd),
    /// The example workflow files shipped in this binary: lists them, or prints one
    /// (`gantry example pipeline > pipeline.yaml`).
    Example(cmd::example::ExampleArgs),
    /// Named contexts: which server and token the client verbs use.
    #[command(subcommand)]
    Context(cmd::context::ContextCmd),
    /// The MCP server over stdio, for AI clients that start a command: relays to the server's
    /// /mcp as the user of this context.
    Mcp,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(
        cli.command,
        Command::Up(_)
            | Command::Run(_)
            | Command::Server(_)
            | Command::Agent(_)
            | Command::Shim { .. }
            | Command::Mcp
    ) {
        // A client verb is a Unix filter: when the reader of its output goes (`| head`), it
        // ends quietly by SIGPIPE as `cat` does, rather than panicking on EPIPE (Rust ignores
        // SIGPIPE by default). Daemons keep ignoring it: a peer that hangs up is an error to
        // handle there, not a reason to die.
        // SAFETY: restoring a signal's default disposition, before any other thread exists.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    init_tracing(matches!(
        cli.command,
        Command::Server(_) | Command::Agent(_) | Command::Up(_)
    ));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            output::print_error(&e);
            ExitCode::from(if output::is_usage_error(&e) { 2 } else { 1 })
        }
    }
}

fn init_tracing(daemon: bool) {
    let default = if daemon { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("GANTRY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let conn = cli.conn;
    match cli.command {
        Command::Up(a) => cmd::up::up(a, &conn).await,
        Command::Run(a) => cmd::up::run(a).await,
        Command::Server(a) => cmd::up::server(a).await,
        Command::Agent(a) => cmd::up::agent(a).await,
        Command::Shim { .. } => unreachable!("handled before parsing"),
        Command::Workflow(c) => cmd::workflow::run(c, &conn).await,
        Command::Node(c) => cmd::node::run(c, &conn).await,
        Command::Admin(c) => cmd::admin::run(c, &conn).await,
        Command::Secret(c) => cmd::secret::run(c, &conn).await,
        Command::Endpoint(c) => cmd::endpoint::run(c, &conn).await,
        Command::Image(c) => cmd::image::run(c, &conn).await,
        Command::Volume(c) => cmd::volume::run(c, &conn).await,
        Command::Mcp => cmd::mcp::run(&conn).await,
        Command::Example(a) => cmd::example::run(a),
        Command::Context(c) => cmd::context::run(c, &conn),
        Command::Monitoring(c) => cmd::monitoring::run(c),
    }
}

/// `-o json` on every read verb.
#[derive(Args, Clone, Copy, Debug)]
pub struct OutputArg {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse()
        .map_err(|e| format!("{s:?} is not an address like 127.0.0.1:8080: {e}"))
}

#[cfg(test)]
mod help_tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every positional argument of every verb says what it is, and the connection options sit
    /// under their own heading in every verb's help.
    #[test]
    fn every_positional_has_help_and_globals_have_a_heading() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in cmd.get_positionals() {
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} <{}>", a.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut cmd = Cli::command();
        cmd.build();
        let mut missing = vec![];
        walk(&cmd, "gantry", &mut missing);
        assert!(missing.is_empty(), "positionals without help: {missing:?}");

        let start = cmd
            .find_subcommand_mut("workflow")
            .and_then(|w| w.find_subcommand_mut("start"))
            .expect("workflow start")
            .render_long_help()
            .to_string();
        let global = start
            .find("Global options:")
            .expect("a Global options heading");
        let url = start.find("--url").expect("--url is listed");
        let watch = start.find("--watch").expect("--watch is listed");
        assert!(
            watch < global && global < url,
            "the verb's own options come first, the global ones under their heading:\n{start}"
        );
    }
}
