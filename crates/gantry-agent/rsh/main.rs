//! `rsh [OPTIONS] HOST COMMAND [ARG...]`: runs COMMAND in the container of the multinode
//! member HOST, through that member's agent (its exec service, `src/multinode/exec.rs`, whose
//! wire format this program speaks), as `ssh HOST COMMAND` would through sshd. It is what
//! `mpirun` (`OMPI_MCA_plm_rsh_agent`) and `mpiexec.hydra` (`HYDRA_LAUNCHER_EXEC`) start their
//! daemons with, and what `$MULTINODE_SSH_WRAPPER` names for `generic` jobs. Bind-mounted
//! read-only at `/.gantry/bin/rsh` in every member's container.
//!
//! HOST is a member's hostname (`<job>-<i>`), or its address when only one member has it. The
//! members and the gang's token are read from `/.gantry/multinode/` (see
//! `src/multinode/mod.rs`). The options launchers pass to ssh or rsh are skipped (`-x -n -T
//! -t -q -4 -6 -A -a -k -v -C`, and `-o -p -l -i -F` with their value); `-n` also means no
//! stdin. Its stdin goes to the remote command; the remote stdout and stderr are written to its
//! own, each line prefixed `[HOST] `, when `MULTINODE_WRAPPER_FORWARD_STREAMS=1`, and dropped
//! otherwise (only the head's own output is the job's log; MPI ranks' output reaches it through
//! the launcher's own connections, not this program). Exits with the remote exit code, or 255
//! (with a message on stderr) when the command could not be run: a member whose agent refuses
//! or cannot be reached is asked again for a minute first (members start at about the same
//! time, not at once).
//!
//! `rsh --idle` waits for SIGTERM or SIGINT and exits 0: the process of the members other than
//! the head, which only host what the launcher starts in them. `rsh --setsid COMMAND...` execs
//! COMMAND as the leader of a new session: the exec service starts remote commands so, to kill
//! every process of one with a single signal when its connection drops.
//!
//! Static and standard library only, like `confine/main.rs` (`build.rs`): images need no
//! libc of a particular version for it.

use std::io::{self, BufRead, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::process::CommandExt;
use std::process::{exit, Command};
use std::time::{Duration, Instant};

const DIR: &str = "/.gantry/multinode";

/// Frame kinds (`src/multinode/exec.rs` is the other side).
const REQUEST: u8 = 1;
const STDIN: u8 = 2;
const STARTED: u8 = 0x10;
const STDOUT: u8 = 0x11;
const STDERR: u8 = 0x12;
const EXIT: u8 = 0x13;
const ERROR: u8 = 0x14;
/// How long a member that refuses (or cannot be reached) is asked again: the gang's members
/// start at about the same time, not at once.
const WAIT_SECS: u64 = 60;
/// The exec service refuses larger frames.
const MAX_FRAME: usize = 64 << 10;

#[repr(C)]
struct SigSet([u64; 16]);
const SIG_BLOCK: i32 = 0;
const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;

extern "C" {
    fn sigemptyset(set: *mut SigSet) -> i32;
    fn sigaddset(set: *mut SigSet, sig: i32) -> i32;
    fn sigprocmask(how: i32, set: *const SigSet, old: *mut SigSet) -> i32;
    fn sigwait(set: *const SigSet, sig: *mut i32) -> i32;
    fn setsid() -> i32;
}

fn die(msg: &str) -> ! {
    eprintln!("rsh: {msg}");
    exit(255)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--idle") => idle(),
        Some("--setsid") => run_in_session(&args[1..]),
        _ => {}
    }
    let mut no_stdin = false;
    let mut i = 0;
    while i < args.len() && args[i].starts_with('-') && args[i].len() > 1 {
        let a = &args[i];
        for (n, c) in a[1..].char_indices() {
            match c {
                'x' | 'T' | 't' | 'q' | '4' | '6' | 'A' | 'a' | 'k' | 'v' | 'C' => {}
                'n' => no_stdin = true,
                'o' | 'p' | 'l' | 'i' | 'F' => {
                    // The value is the rest of this word, or the next word.
                    if n + 2 == a.len() {
                        i += 1;
                    }
                    break;
                }
                _ => die(&format!("unknown option -{c}")),
            }
        }
        i += 1;
    }
    let (Some(host), command) = (args.get(i), &args[(i + 1).min(args.len())..]) else {
        die("usage: rsh [OPTIONS] HOST COMMAND [ARG...]")
    };
    if command.is_empty() {
        die(&format!("{host}: no command (interactive logins are not supported)"));
    }
    let forward = std::env::var("MULTINODE_WRAPPER_FORWARD_STREAMS").is_ok_and(|v| v == "1");
    let (exec_addr, attempt) = member(host);
    let token = std::fs::read_to_string(format!("{DIR}/token"))
        .unwrap_or_else(|e| die(&format!("reading {DIR}/token: {e}")));
    let addrs: Vec<_> = exec_addr
        .to_socket_addrs()
        .unwrap_or_else(|e| die(&format!("{host}: exec address {exec_addr}: {e}")))
        .collect();
    let mut req = Vec::new();
    req.extend_from_slice(token.trim().as_bytes());
    req.push(b'\n');
    req.extend_from_slice(attempt.as_bytes());
    req.push(b'\n');
    for (n, a) in command.iter().enumerate() {
        if n > 0 {
            req.push(0);
        }
        req.extend_from_slice(a.as_bytes());
    }
    if req.len() > MAX_FRAME {
        die(&format!("{host}: the command line is longer than {MAX_FRAME} bytes"));
    }
    // Members start together but not at once: one whose container does not run yet (its
    // agent refuses, or is not up) is asked again for a while.
    let deadline = Instant::now() + Duration::from_secs(WAIT_SECS);
    let conn = loop {
        let why = match addrs
            .iter()
            .find_map(|a| TcpStream::connect_timeout(a, Duration::from_secs(10)).ok())
        {
            None => format!("cannot connect to its agent at {exec_addr}"),
            Some(mut conn) => {
                let _ = conn.set_nodelay(true);
                if write_frame(&mut conn, REQUEST, &req).is_err() {
                    format!("connection to its agent at {exec_addr} lost")
                } else {
                    match read_frame(&mut conn) {
                        Some((STARTED, _)) => break conn,
                        Some((ERROR, msg)) if msg == b"refused" => {
                            format!("its agent at {exec_addr} refused the command")
                        }
                        Some((ERROR, msg)) => die(&format!(
                            "{host}: {}",
                            String::from_utf8_lossy(&msg)
                        )),
                        _ => format!("connection to its agent at {exec_addr} lost"),
                    }
                }
            }
        };
        if Instant::now() > deadline {
            die(&format!("{host}: {why} (for {WAIT_SECS} s)"));
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let mut up = conn
        .try_clone()
        .unwrap_or_else(|e| die(&format!("socket: {e}")));
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 32 << 10];
        let mut stdin = io::stdin();
        loop {
            let n = if no_stdin {
                0
            } else {
                stdin.read(&mut buf).unwrap_or(0)
            };
            // An empty frame is the end of stdin.
            if write_frame(&mut up, STDIN, &buf[..n]).is_err() || n == 0 {
                return;
            }
        }
    });
    let mut out = Relay::new(host, forward, Box::new(io::stdout()));
    let mut err = Relay::new(host, forward, Box::new(io::stderr()));
    let mut conn = io::BufReader::new(conn);
    loop {
        let Some((kind, data)) = read_frame(&mut conn) else {
            out.finish();
            err.finish();
            die(&format!("{host}: connection to its agent lost"))
        };
        match kind {
            STDOUT => out.write(&data),
            STDERR => err.write(&data),
            EXIT if data.len() == 4 => {
                out.finish();
                err.finish();
                let code = i32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                exit(code.clamp(0, 255))
            }
            ERROR => die(&format!("{host}: {}", String::from_utf8_lossy(&data))),
            _ => die(&format!("{host}: bad answer from its agent")),
        }
    }
}

/// The exec address and attempt id of member `host` (by hostname, else by unique address):
/// `members` lines are `HOSTNAME EXEC_ADDR ATTEMPT_ID ADDRESS`.
fn member(host: &str) -> (String, String) {
    let f = std::fs::File::open(format!("{DIR}/members"))
        .unwrap_or_else(|e| die(&format!("reading {DIR}/members (not a multinode job?): {e}")));
    let rows: Vec<Vec<String>> = io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .filter(|r| r.len() == 4)
        .collect();
    if let Some(r) = rows.iter().find(|r| r[0] == host) {
        return (r[1].clone(), r[2].clone());
    }
    let by_addr: Vec<_> = rows.iter().filter(|r| r[3] == host).collect();
    match by_addr.as_slice() {
        [r] => (r[1].clone(), r[2].clone()),
        [] => die(&format!("{host} is not a member of this job")),
        _ => die(&format!(
            "{host} is the address of several members: name one by its hostname"
        )),
    }
}

fn write_frame(w: &mut impl Write, kind: u8, data: &[u8]) -> io::Result<()> {
    let mut head = [0u8; 5];
    head[0] = kind;
    head[1..].copy_from_slice(&(data.len() as u32).to_be_bytes());
    w.write_all(&head)?;
    w.write_all(data)?;
    w.flush()
}

fn read_frame(r: &mut impl Read) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head).ok()?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_FRAME {
        return None;
    }
    let mut data = vec![0u8; len];
    r.read_exact(&mut data).ok()?;
    Some((head[0], data))
}

/// One remote stream: dropped, or written line by line with the host's prefix.
struct Relay {
    prefix: Option<Vec<u8>>,
    partial: Vec<u8>,
    to: Box<dyn Write>,
}

impl Relay {
    fn new(host: &str, forward: bool, to: Box<dyn Write>) -> Self {
        Relay {
            prefix: forward.then(|| format!("[{host}] ").into_bytes()),
            partial: Vec::new(),
            to,
        }
    }

    fn write(&mut self, data: &[u8]) {
        let Some(prefix) = &self.prefix else { return };
        self.partial.extend_from_slice(data);
        let mut out = Vec::new();
        while let Some(nl) = self.partial.iter().position(|b| *b == b'\n') {
            out.extend_from_slice(prefix);
            out.extend(self.partial.drain(..=nl));
        }
        let _ = self.to.write_all(&out);
        let _ = self.to.flush();
    }

    fn finish(&mut self) {
        if let (Some(prefix), false) = (&self.prefix, self.partial.is_empty()) {
            let mut out = prefix.clone();
            out.append(&mut self.partial);
            out.push(b'\n');
            let _ = self.to.write_all(&out);
            let _ = self.to.flush();
        }
    }
}

fn idle() -> ! {
    let mut set = SigSet([0; 16]);
    let mut sig = 0;
    // SAFETY: the set is ours and only filled by the C library; the calls block the two
    // signals for this thread and wait for one of them.
    unsafe {
        sigemptyset(&mut set);
        sigaddset(&mut set, SIGTERM);
        sigaddset(&mut set, SIGINT);
        sigprocmask(SIG_BLOCK, &set, std::ptr::null_mut());
        sigwait(&set, &mut sig);
    }
    exit(0)
}

fn run_in_session(argv: &[String]) -> ! {
    let Some((cmd, rest)) = argv.split_first() else {
        die("usage: rsh --setsid COMMAND [ARG...]")
    };
    // SAFETY: setsid only changes this process's session.
    unsafe { setsid() };
    let e = Command::new(cmd).args(rest).exec();
    die(&format!("{cmd}: {e}"))
}
