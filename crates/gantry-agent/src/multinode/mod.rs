//! Multinode members (`Assignment.multinode`): a gang of containers on distinct nodes, each in
//! its node's network namespace, whose head (index 0) runs the job's command and starts
//! processes in the others through their agents' exec services ([`exec`]) with the static
//! `rsh` wrapper (`rsh/main.rs`), never over sshd.
//!
//! Every member's container gets, read-only:
//!
//! ```text
//! /.gantry/bin/rsh                   the wrapper (also the idle process of members > 0)
//! /.gantry/multinode/hostfile        Open MPI's format: `NAME slots=N` per member
//! /.gantry/multinode/hostfile.mpich  MPICH's (Hydra's): `NAME:N` per member
//! /.gantry/multinode/members         `HOSTNAME EXEC_ADDR ATTEMPT_ID ADDRESS` per member: what
//!                                    the wrapper needs to reach a member's agent
//! /.gantry/multinode/token           the gang's secret, readable by the container's root only
//!                                    (never in the environment, which every process reads)
//! /.gantry/multinode/launch          the head's POSIX sh launcher (`mpirun -np TOTAL ...`)
//! ```
//!
//! and the environment of [`environment`]. The files are written by the agent under its state
//! directory ([`write_files`]) and bound in like volumes, through the container's id mapping,
//! so they are root's in the container.

pub mod exec;

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use gantry_api::agent::{HostEntry, MultinodeSpec};

/// Where the wrapper is in a member's container.
pub const RSH: &str = "/.gantry/bin/rsh";
/// Where the member's files are in its container.
pub const DIR: &str = "/.gantry/multinode";
pub const HOSTFILE: &str = "/.gantry/multinode/hostfile";
pub const HOSTFILE_MPICH: &str = "/.gantry/multinode/hostfile.mpich";
const LAUNCH: &str = "/.gantry/multinode/launch";

/// How the head runs the job's command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Implementation {
    /// Under the image's Open MPI `mpirun`.
    OpenMpi,
    /// Under the image's MPICH `mpiexec.hydra`.
    Mpich,
    /// The command itself, with `$MULTINODE_*` expanded in its arguments.
    Generic,
}

impl Implementation {
    /// `implementation` as the workflow names it; `gasnet` and anything else are refused with
    /// the reason (the attempt's start error).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "openmpi" | "ompi" => Ok(Implementation::OpenMpi),
            "mpich" => Ok(Implementation::Mpich),
            "generic" => Ok(Implementation::Generic),
            "gasnet" => Err(
                "multinode implementation `gasnet` is not supported by this agent: GASNet's \
                 spawner (gasnetrun) is not wired to Gantry's remote launcher; use `generic` \
                 and start it with $MULTINODE_SSH_WRAPPER and $MULTINODE_HOSTLIST"
                    .into(),
            ),
            other => Err(format!(
                "unknown multinode implementation `{other}` (openmpi, ompi, mpich, gasnet, generic)"
            )),
        }
    }
}

/// Checks what the server sent: an index among the members, slots, and fields that fit the
/// files' one-line, space-separated records.
pub fn validate(mn: &MultinodeSpec) -> Result<(), String> {
    if mn.index as usize >= mn.members.len() {
        return Err(format!(
            "member index {} of a gang of {}",
            mn.index,
            mn.members.len()
        ));
    }
    if mn.slots == 0 {
        return Err("a member with 0 slots".into());
    }
    let plain = |s: &str| !s.is_empty() && !s.bytes().any(|b| b.is_ascii_whitespace() || b == 0);
    if !plain(&mn.token) {
        return Err("an empty or malformed gang token".into());
    }
    for m in &mn.members {
        if !(plain(&m.hostname) && plain(&m.address) && plain(&m.exec_addr)) {
            return Err(format!("malformed gang member `{}`", m.hostname));
        }
        if m.address.parse::<std::net::IpAddr>().is_err() {
            return Err(format!(
                "gang member {} has no IP address (`{}`)",
                m.hostname, m.address
            ));
        }
    }
    Ok(())
}

/// This member's hostname (`<job>-<index>`).
pub fn hostname(mn: &MultinodeSpec) -> &str {
    &mn.members[mn.index as usize].hostname
}

/// `/etc/hosts` entries for the other members (the container's own name is added by
/// `net::hosts_file`).
pub fn hosts(mn: &MultinodeSpec) -> Vec<HostEntry> {
    mn.members
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != mn.index as usize)
        .map(|(_, m)| HostEntry {
            name: m.hostname.clone(),
            address: m.address.clone(),
        })
        .collect()
}

/// Where the agent keeps a member's files (see the module's header), under its state directory.
pub fn files_dir(state_dir: &Path, container: &str) -> PathBuf {
    state_dir.join("multinode").join(container)
}

/// Writes the member's files into `dir` (made afresh; root's, world-readable but the token).
pub fn write_files(dir: &Path, mn: &MultinodeSpec) -> io::Result<()> {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
    let (mut ompi, mut mpich, mut members) = (String::new(), String::new(), String::new());
    for m in &mn.members {
        let _ = writeln!(ompi, "{} slots={}", m.hostname, mn.slots);
        let _ = writeln!(mpich, "{}:{}", m.hostname, mn.slots);
        let _ = writeln!(
            members,
            "{} {} {} {}",
            m.hostname, m.exec_addr, m.attempt_id, m.address
        );
    }
    for (name, data, mode) in [
        ("hostfile", ompi.as_bytes(), 0o644),
        ("hostfile.mpich", mpich.as_bytes(), 0o644),
        ("members", members.as_bytes(), 0o644),
        ("token", mn.token.as_bytes(), 0o400),
        ("launch", LAUNCHER.as_bytes(), 0o755),
    ] {
        use io::Write;
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(dir.join(name))?
            .write_all(data)?;
    }
    Ok(())
}

/// The head's launcher. Arguments: the implementation, the image (for the message), then the
/// job's command. The hostfile and the remote launcher reach `mpirun` through the environment
/// ([`environment`]), so a user's own `mpirun` in a script finds them the same way.
const LAUNCHER: &str = r#"#!/bin/sh
# Gantry's multinode launcher: the job's command under the image's own MPI launcher, one
# process per slot of every member.
impl=$1 image=$2
shift 2
case $impl in
  openmpi) names="mpirun.openmpi mpiexec.openmpi orterun mpirun" ;;
  mpich) names="mpiexec.hydra mpiexec.mpich mpirun.mpich mpiexec" ;;
  *) echo "gantry: unknown MPI implementation $impl" >&2; exit 127 ;;
esac
for n in $names; do
  if p=$(command -v "$n"); then
    exec "$p" -np "$MULTINODE_TOTAL_SLOTS" "$@"
  fi
done
echo "gantry: multinode $impl: the image $image has none of $names on PATH=$PATH" >&2
exit 127
"#;

/// The environment of every member, in two parts: `defaults` (the launchers' settings: a
/// user's own value of one of these wins, as Slurm users expect) and `facts` (the
/// `MULTINODE_*` description of the gang, which always wins). `node_ip` is this node's address.
pub fn environment(
    mn: &MultinodeSpec,
    imp: Implementation,
    node_ip: &str,
) -> (Vec<String>, Vec<String>) {
    let total = mn.slots as usize * mn.members.len();
    let names: Vec<&str> = mn.members.iter().map(|m| m.hostname.as_str()).collect();
    let with_slots: Vec<String> = names.iter().map(|n| format!("{n}:{}", mn.slots)).collect();
    let facts = vec![
        format!("MULTINODE_HOSTLIST={}", with_slots.join(",")),
        format!("MULTINODE_HOSTLIST_NOSLOTS={}", names.join(",")),
        format!("MULTINODE_TOTAL_SLOTS={total}"),
        format!("MULTINODE_NODE_IP={node_ip}"),
        format!("MULTINODE_INDEX={}", mn.index),
        format!("MULTINODE_SSH_WRAPPER={RSH}"),
        format!("MULTINODE_RSH_WRAPPER={RSH}"),
    ];
    let defaults = match imp {
        Implementation::OpenMpi => vec![
            format!("OMPI_MCA_plm_rsh_agent={RSH}"),
            format!("OMPI_MCA_orte_default_hostfile={HOSTFILE}"),
            // Every member's daemon is started by the head's mpirun (no daemon starts others).
            "OMPI_MCA_plm_rsh_no_tree_spawn=1".into(),
            // Root in the container is Gantry's to confine (a user namespace where the node
            // can), not Open MPI's to refuse.
            "OMPI_ALLOW_RUN_AS_ROOT=1".into(),
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1".into(),
            // Ranks of one member share memory by copying: cross-process reads
            // (process_vm_readv) are not in the containers' seccomp allow-list.
            "OMPI_MCA_btl_vader_single_copy_mechanism=none".into(),
            // Containers share a node's cores under a CPU quota, not a cpuset of their own:
            // Open MPI's default (each member's ranks bound to the node's first cores) would
            // pile the ranks of every job on a node onto the same cores. Two members on one
            // host spent 4 ms per 8-byte round trip so, 4 us without.
            "OMPI_MCA_hwloc_base_binding_policy=none".into(),
        ],
        Implementation::Mpich => vec![
            "HYDRA_LAUNCHER=rsh".into(),
            format!("HYDRA_LAUNCHER_EXEC={RSH}"),
            format!("HYDRA_HOST_FILE={HOSTFILE_MPICH}"),
        ],
        Implementation::Generic => vec![],
    };
    (defaults, facts)
}

/// The process a member's container runs: members > 0 idle (they host what the launcher starts
/// in them); the head runs `args` (the job's command, merged with the image's) under the
/// launcher, or for `generic` as it is with `$MULTINODE_*` expanded from `env`.
pub fn process(
    mn: &MultinodeSpec,
    imp: Implementation,
    image: &str,
    args: Vec<String>,
    env: &[String],
) -> Vec<String> {
    if mn.index > 0 {
        return vec![RSH.into(), "--idle".into()];
    }
    match imp {
        Implementation::OpenMpi | Implementation::Mpich => {
            let name = if imp == Implementation::OpenMpi {
                "openmpi"
            } else {
                "mpich"
            };
            let mut argv = vec!["/bin/sh".into(), LAUNCH.into(), name.into(), image.into()];
            argv.extend(args);
            argv
        }
        Implementation::Generic => args.iter().map(|a| expand(a, env)).collect(),
    }
}

/// `$MULTINODE_X` and `${MULTINODE_X}` replaced by their values in `env` (`K=V`); anything
/// else (other variables, unknown names) is left as it is.
pub fn expand(arg: &str, env: &[String]) -> String {
    let value = |name: &str| {
        env.iter()
            .rev()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
    };
    let is_name = |c: char| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_';
    let mut out = String::new();
    let mut rest = arg;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, len) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => (&inner[..end], end + 2),
                None => ("", 0),
            }
        } else {
            let end = after.find(|c| !is_name(c)).unwrap_or(after.len());
            (&after[..end], end)
        };
        match value(name).filter(|_| name.starts_with("MULTINODE_") && name.chars().all(is_name)) {
            Some(v) => {
                out.push_str(v);
                rest = &after[len..];
            }
            None => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::agent::GangMember;
    use uuid::Uuid;

    fn gang(index: u32) -> MultinodeSpec {
        MultinodeSpec {
            implementation: "openmpi".into(),
            index,
            slots: 2,
            members: (0..2)
                .map(|i| GangMember {
                    hostname: format!("sim-{i}"),
                    address: format!("10.0.0.{}", i + 1),
                    exec_addr: format!("10.0.0.{}:7000", i + 1),
                    attempt_id: Uuid::nil(),
                })
                .collect(),
            token: "secret".into(),
        }
    }

    #[test]
    fn environment_describes_the_gang_and_the_launcher() {
        let (defaults, facts) = environment(&gang(1), Implementation::OpenMpi, "10.0.0.2");
        assert!(facts.contains(&"MULTINODE_HOSTLIST=sim-0:2,sim-1:2".to_string()));
        assert!(facts.contains(&"MULTINODE_HOSTLIST_NOSLOTS=sim-0,sim-1".to_string()));
        assert!(facts.contains(&"MULTINODE_TOTAL_SLOTS=4".to_string()));
        assert!(facts.contains(&"MULTINODE_NODE_IP=10.0.0.2".to_string()));
        assert!(defaults.contains(&"OMPI_MCA_plm_rsh_agent=/.gantry/bin/rsh".to_string()));
        assert!(!facts.iter().chain(&defaults).any(|e| e.contains("secret")));
        let (defaults, _) = environment(&gang(0), Implementation::Mpich, "10.0.0.1");
        assert!(defaults.contains(&"HYDRA_HOST_FILE=/.gantry/multinode/hostfile.mpich".into()));
    }

    #[test]
    fn the_head_runs_the_command_and_the_others_idle() {
        let env = vec!["MULTINODE_HOSTLIST=a:1,b:1".to_string()];
        let args = vec!["echo".to_string(), "$MULTINODE_HOSTLIST".into()];
        assert_eq!(
            process(&gang(1), Implementation::Generic, "img", args.clone(), &env),
            vec![RSH, "--idle"]
        );
        assert_eq!(
            process(&gang(0), Implementation::Generic, "img", args.clone(), &env),
            vec!["echo", "a:1,b:1"]
        );
        let p = process(&gang(0), Implementation::Mpich, "img", args, &env);
        assert_eq!(&p[..4], &["/bin/sh", LAUNCH, "mpich", "img"]);
        assert_eq!(
            p[5], "$MULTINODE_HOSTLIST",
            "mpirun's ranks expand it themselves"
        );
    }

    #[test]
    fn expansion_touches_only_multinode_variables() {
        let env = vec!["MULTINODE_A=x".to_string(), "HOME=/root".into()];
        assert_eq!(expand("$MULTINODE_A-${MULTINODE_A}y", &env), "x-xy");
        assert_eq!(
            expand("$HOME $MULTINODE_B ${MULTINODE_A", &env),
            "$HOME $MULTINODE_B ${MULTINODE_A"
        );
        assert_eq!(expand("$$ $", &env), "$$ $");
    }

    #[test]
    fn gasnet_and_bad_gangs_are_refused() {
        assert!(Implementation::parse("gasnet")
            .unwrap_err()
            .contains("gasnet"));
        assert_eq!(Implementation::parse("ompi"), Ok(Implementation::OpenMpi));
        let mut g = gang(0);
        assert!(validate(&g).is_ok());
        g.index = 2;
        assert!(validate(&g).is_err());
        let mut g = gang(0);
        g.members[1].hostname = "a b".into();
        assert!(validate(&g).is_err());
        let mut g = gang(0);
        g.token = "two\nlines".into();
        assert!(validate(&g).is_err());
    }
}
