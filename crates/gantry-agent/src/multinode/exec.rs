//! The exec service: runs a command in a multinode member's container on this node for the
//! `rsh` wrapper (`rsh/main.rs`) in another member, as sshd would run `ssh HOST COMMAND`, but
//! only for its gang and only in its gang's containers.
//!
//! One TCP connection per command. Frames are `KIND (1 byte) LENGTH (4 bytes, big endian)
//! DATA`, at most [`MAX_FRAME`] bytes of data:
//!
//! ```text
//! client -> agent  REQUEST (1)  TOKEN "\n" ATTEMPT_ID "\n" ARG ("\0" ARG)*   first, once
//!                  STDIN   (2)  bytes for the command's stdin; empty: its end
//! agent -> client  STARTED (0x10)  the command runs: stdin may follow; first
//!                  STDOUT (0x11), STDERR (0x12)  the command's output
//!                  EXIT   (0x13)  4 bytes, big-endian exit code (128+N for signal N); last
//!                  ERROR  (0x14)  "refused" or "failed": nothing ran; last
//! ```
//!
//! The command runs only if ATTEMPT_ID is a running container of this agent whose assignment
//! is a multinode member with exactly this token (compared in constant time). It runs as
//! `/bin/sh -c "ARGS joined by spaces"` (what sshd does with a command line) through `runc
//! exec` as readiness probes run theirs ([`Runtime::exec_command`]: confine, the seccomp
//! filter, the container's user, environment and working directory), in a session of its own
//! so that one signal ends all of it. Hostile input gets one generic answer, the reason going
//! to the agent's log only: a request over the size limit, a slow one, a wrong token, another
//! gang's, a container that is no member or not running, more than [`MAX_PER_CONTAINER`] at
//! once in one container. The command is killed when its connection drops, and ends with its
//! container (stopping a container kills every process in it).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gantry_api::agent::Assignment;
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use uuid::Uuid;

use crate::lock;
use crate::runtime::{ContainerState, Runtime};

pub const REQUEST: u8 = 1;
pub const STDIN: u8 = 2;
pub const STARTED: u8 = 0x10;
pub const STDOUT: u8 = 0x11;
pub const STDERR: u8 = 0x12;
pub const EXIT: u8 = 0x13;
pub const ERROR: u8 = 0x14;
/// The largest frame either side sends (the request included).
pub const MAX_FRAME: usize = 64 << 10;
/// Commands running at once in one container (an MPI launcher starts one per member).
pub const MAX_PER_CONTAINER: usize = 32;
/// Connections that have not yet sent their request, or run a command, at once.
const MAX_CONNECTIONS: usize = 512;
/// How long a connection may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long output is still read once the command has exited (a process it left in the
/// background may hold its pipes open).
const DRAIN: Duration = Duration::from_millis(500);

struct Service {
    runtime: Arc<Runtime>,
    /// Commands running per container.
    running: Mutex<HashMap<String, usize>>,
    connections: Arc<tokio::sync::Semaphore>,
}

/// Listens on `listen` and serves until the runtime is shut down; the bound address.
pub async fn serve(listen: SocketAddr, runtime: Arc<Runtime>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(listen).await?;
    let bound = listener.local_addr()?;
    let svc = Arc::new(Service {
        runtime,
        running: Mutex::default(),
        connections: Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS)),
    });
    tokio::spawn(async move {
        loop {
            let (sock, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("exec service: accepting: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(permit) = svc.connections.clone().try_acquire_owned() else {
                tracing::warn!(%peer, "exec service: refused: too many connections");
                continue;
            };
            let svc = svc.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let _ = sock.set_nodelay(true);
                connection(&svc, sock, peer).await;
            });
        }
    });
    Ok(bound)
}

/// A parsed request.
struct Request {
    token: String,
    container: String,
    argv: Vec<String>,
}

fn parse(data: &[u8]) -> Result<Request, String> {
    let text = std::str::from_utf8(data).map_err(|_| "the request is not UTF-8")?;
    let mut parts = text.splitn(3, '\n');
    let (Some(token), Some(attempt), Some(args)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err("a malformed request".into());
    };
    let container = Uuid::parse_str(attempt)
        .map_err(|_| format!("`{attempt}` is no attempt id"))?
        .to_string();
    let argv: Vec<String> = args.split('\0').map(str::to_owned).collect();
    if argv.iter().all(|a| a.trim().is_empty()) {
        return Err("no command".into());
    }
    Ok(Request {
        token: token.to_owned(),
        container,
        argv,
    })
}

/// Whether `token` may run a command in `container`: a running multinode member of this agent
/// with that token.
fn authorize(rt: &Runtime, container: &str, token: &str) -> Result<(), String> {
    let meta = rt
        .meta(container)
        .map_err(|_| format!("no container {container} here"))?;
    let asg: Assignment = serde_json::from_value(meta)
        .map_err(|_| format!("container {container} is no attempt of this agent"))?;
    let Some(mn) = asg.multinode else {
        return Err(format!("container {container} is no multinode member"));
    };
    if !bool::from(mn.token.as_bytes().ct_eq(token.as_bytes())) {
        return Err(format!("a wrong token for container {container}"));
    }
    // Its shim runs before runc has made the container, and until runc's pid file is there
    // `runc exec` fails ("container does not exist"): refused, the client asks again.
    if rt.status(container) != ContainerState::Running || rt.pid(container).is_none() {
        return Err(format!("container {container} is not running"));
    }
    Ok(())
}

/// One command's place in its container's count, given back when dropped.
struct Slot<'a> {
    svc: &'a Service,
    container: String,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut running = lock(&self.svc.running);
        if let Some(n) = running.get_mut(&self.container) {
            *n -= 1;
            if *n == 0 {
                running.remove(&self.container);
            }
        }
    }
}

impl Service {
    fn take(&self, container: &str) -> Option<Slot<'_>> {
        let mut running = lock(&self.running);
        let n = running.entry(container.to_owned()).or_default();
        if *n >= MAX_PER_CONTAINER {
            return None;
        }
        *n += 1;
        Some(Slot {
            svc: self,
            container: container.to_owned(),
        })
    }
}

async fn connection(svc: &Service, sock: TcpStream, peer: SocketAddr) {
    let (mut rd, mut wr) = sock.into_split();
    let refuse = |why: String| {
        tracing::warn!(%peer, "exec service: refused: {why}");
    };
    let req = match tokio::time::timeout(REQUEST_TIMEOUT, read_frame(&mut rd)).await {
        Err(_) => return refuse("no request within the time allowed".into()),
        Ok(Err(why)) => {
            refuse(why);
            let _ = write_frame(&mut wr, ERROR, b"refused").await;
            return;
        }
        Ok(Ok((kind, data))) if kind == REQUEST => parse(&data),
        Ok(Ok((kind, _))) => Err(format!("a frame of kind {kind} before the request")),
    };
    let rt = svc.runtime.clone();
    let checked = match req {
        Ok(req) => {
            let (c, t) = (req.container.clone(), req.token.clone());
            tokio::task::spawn_blocking(move || authorize(&rt, &c, &t))
                .await
                .unwrap_or_else(|e| Err(e.to_string()))
                .map(|()| req)
        }
        Err(e) => Err(e),
    };
    let req = match checked {
        Ok(r) => r,
        Err(why) => {
            refuse(why);
            let _ = write_frame(&mut wr, ERROR, b"refused").await;
            return;
        }
    };
    let Some(_slot) = svc.take(&req.container) else {
        refuse(format!(
            "{MAX_PER_CONTAINER} commands already run in container {}",
            req.container
        ));
        let _ = write_frame(&mut wr, ERROR, b"refused").await;
        return;
    };
    tracing::info!(%peer, container = %req.container, "exec: {}", req.argv.join(" "));
    if let Err(e) = run(&svc.runtime, &req, rd, &mut wr).await {
        tracing::warn!(%peer, container = %req.container, "exec: {e}");
        let _ = write_frame(&mut wr, ERROR, b"failed").await;
    }
}

/// Runs the request's command and relays it until it ends (then EXIT) or the connection drops
/// (then it is killed).
async fn run(
    rt: &Runtime,
    req: &Request,
    mut rd: tokio::net::tcp::OwnedReadHalf,
    wr: &mut tokio::net::tcp::OwnedWriteHalf,
) -> anyhow::Result<()> {
    use std::process::Stdio;
    let argv = vec![
        super::RSH.to_owned(),
        "--setsid".into(),
        "/bin/sh".into(),
        "-c".into(),
        req.argv.join(" "),
    ];
    let (cmd, pid_file) = rt.exec_command(&req.container, &argv)?;
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    write_frame(wr, STARTED, b"").await?;
    let (mut stdin, mut out, mut err) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take());
    // The connection's frames go to stdin on a task of their own; its end (or garbage) means
    // the client is gone.
    let (gone_tx, mut gone) = tokio::sync::oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        loop {
            match read_frame(&mut rd).await {
                Ok((STDIN, data)) if data.is_empty() => stdin = None,
                Ok((STDIN, data)) => {
                    if let Some(s) = stdin.as_mut() {
                        if s.write_all(&data).await.is_err() {
                            stdin = None;
                        }
                    }
                }
                _ => break,
            }
        }
        let _ = gone_tx.send(());
    });
    let kill = |pid_file: &std::path::Path| {
        if let Some(pid) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
            .filter(|p| *p > 1)
        {
            // SAFETY: kill only sends signals: to the command's session (it leads its own
            // process group, `rsh --setsid`) and to the process itself.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGKILL);
            }
        }
    };
    let (mut buf_out, mut buf_err) = (vec![0u8; 32 << 10], vec![0u8; 32 << 10]);
    let mut status = None;
    let mut drain_until = None;
    let result = loop {
        if status.is_some() && out.is_none() && err.is_none() {
            break Ok(());
        }
        let drain = async {
            match drain_until {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut gone => {
                kill(&pid_file);
                break Err(anyhow::anyhow!("the connection dropped: command killed"));
            }
            n = read_some(&mut out, &mut buf_out) => match n {
                Some(n) => if write_frame(wr, STDOUT, &buf_out[..n]).await.is_err() {
                    kill(&pid_file);
                    break Err(anyhow::anyhow!("the connection dropped: command killed"));
                },
                None => out = None,
            },
            n = read_some(&mut err, &mut buf_err) => match n {
                Some(n) => if write_frame(wr, STDERR, &buf_err[..n]).await.is_err() {
                    kill(&pid_file);
                    break Err(anyhow::anyhow!("the connection dropped: command killed"));
                },
                None => err = None,
            },
            st = child.wait(), if status.is_none() => {
                status = Some(st?);
                drain_until = Some(tokio::time::Instant::now() + DRAIN);
            }
            _ = drain => break Ok(()),
        }
    };
    reader.abort();
    let _ = std::fs::remove_file(&pid_file);
    if result.is_err() {
        let _ = child.kill().await;
    }
    result?;
    let code = status.map_or(255, |st| {
        use std::os::unix::process::ExitStatusExt;
        st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
    });
    write_frame(wr, EXIT, &code.to_be_bytes()).await?;
    Ok(())
}

/// Reads what there is from an open pipe; `None` at its end (or when it is closed already,
/// which then never resolves).
async fn read_some(pipe: &mut Option<impl AsyncRead + Unpin>, buf: &mut [u8]) -> Option<usize> {
    match pipe {
        Some(p) => match p.read(buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(n),
        },
        None => std::future::pending().await,
    }
}

/// One frame; refused (before its data is read) when it is over [`MAX_FRAME`].
pub async fn read_frame(r: &mut (impl AsyncRead + Unpin)) -> Result<(u8, Vec<u8>), String> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head)
        .await
        .map_err(|e| format!("reading a frame: {e}"))?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_FRAME {
        return Err(format!("a frame of {len} bytes (the limit is {MAX_FRAME})"));
    }
    let mut data = vec![0u8; len];
    r.read_exact(&mut data)
        .await
        .map_err(|e| format!("reading a frame: {e}"))?;
    Ok((head[0], data))
}

pub async fn write_frame(
    w: &mut (impl AsyncWrite + Unpin),
    kind: u8,
    data: &[u8],
) -> std::io::Result<()> {
    let mut frame = Vec::with_capacity(5 + data.len());
    frame.push(kind);
    frame.extend_from_slice(&(data.len() as u32).to_be_bytes());
    frame.extend_from_slice(data);
    w.write_all(&frame).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_strictly() {
        let id = Uuid::new_v4();
        let r = parse(format!("tok\n{id}\nhostname\0-f").as_bytes()).unwrap();
        assert_eq!((r.token.as_str(), r.argv.len()), ("tok", 2));
        assert_eq!(r.container, id.to_string());
        assert!(parse(b"tok\nnot-an-id\nls").is_err());
        assert!(parse(format!("tok\n{id}\n").as_bytes()).is_err());
        assert!(parse(b"tok only").is_err());
        assert!(parse(&[0xff, b'\n']).is_err());
    }
}
