//! The seccomp profile, compiled to a BPF program once per agent.
//!
//! runc 1.1 compiles a profile given in `config.json` with libseccomp in every container's
//! init: for our allow-list that is 7-9 ms of CPU per container, a third of what runc costs
//! (bench/README.md). The agent compiles the same profile the same way once, and each container
//! loads the result with `confine` (`confine/main.rs`) just before its command runs, so the
//! filter a container gets is what runc would have loaded:
//!
//! - rules as runc adds them (`libcontainer/seccomp`): names libseccomp does not know are
//!   skipped, a rule with the default action is dropped, conditions on distinct arguments are
//!   ANDed in one rule and several conditions on one argument become one rule each;
//! - runc's `-ENOSYS` stub (`patchbpf`): a syscall numbered above every syscall the profile
//!   names (one newer than the profile) fails with ENOSYS rather than the default EPERM, so
//!   programs fall back as they do on an older kernel instead of failing.
//!
//! libseccomp's binary-tree layout (`optimize=2`) is asked for as well: the filter runs on
//! every syscall of every job, and a tree needs ~9 comparisons where runc's linear list needs
//! up to one per rule.

use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};
use oci_spec::runtime::{Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompOperator};

use super::RuntimeError;

const ENOSYS: u32 = 38;
/// The kernel's limit on a filter's length, which confine checks too.
const BPF_MAXINSNS: usize = 4096;
/// `SECCOMP_RET_ERRNO | ENOSYS`.
const RET_ENOSYS: u32 = 0x0005_0000 | ENOSYS;
/// x32 syscalls arrive on x86_64 with this bit set in their number.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

// Classic BPF opcodes (linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20;
const JMP_JA: u16 = 0x05;
const JEQ_K: u16 = 0x15;
const JGT_K: u16 = 0x25;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
/// `struct seccomp_data`: the syscall number, then the `AUDIT_ARCH_*` value.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

fn err(m: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::InvalidSpec(format!("seccomp profile: {m}"))
}

/// libseccomp's architecture and the kernel's `AUDIT_ARCH_*` value (which oci-spec's `Arch`
/// discriminants are) for the architectures a Gantry node can have.
fn arch(a: Arch) -> Result<(ScmpArch, u32), RuntimeError> {
    Ok(match a {
        Arch::ScmpArchX86_64 => (ScmpArch::X8664, a as u32),
        Arch::ScmpArchX86 => (ScmpArch::X86, a as u32),
        Arch::ScmpArchAarch64 => (ScmpArch::Aarch64, a as u32),
        Arch::ScmpArchArm => (ScmpArch::Arm, a as u32),
        other => return Err(err(format!("architecture {other:?} is not supported"))),
    })
}

fn native() -> Result<(ScmpArch, u32), RuntimeError> {
    match ScmpArch::native() {
        ScmpArch::X8664 => arch(Arch::ScmpArchX86_64),
        ScmpArch::X86 => arch(Arch::ScmpArchX86),
        ScmpArch::Aarch64 => arch(Arch::ScmpArchAarch64),
        ScmpArch::Arm => arch(Arch::ScmpArchArm),
        other => Err(err(format!(
            "this host's architecture {other:?} is not supported"
        ))),
    }
}

fn action(a: LinuxSeccompAction, errno: Option<u32>) -> Result<ScmpAction, RuntimeError> {
    let errno = i32::try_from(errno.unwrap_or(libc::EPERM as u32)).map_err(err)?;
    Ok(match a {
        LinuxSeccompAction::ScmpActAllow => ScmpAction::Allow,
        LinuxSeccompAction::ScmpActErrno => ScmpAction::Errno(errno),
        LinuxSeccompAction::ScmpActKill | LinuxSeccompAction::ScmpActKillThread => {
            ScmpAction::KillThread
        }
        LinuxSeccompAction::ScmpActKillProcess => ScmpAction::KillProcess,
        LinuxSeccompAction::ScmpActTrap => ScmpAction::Trap,
        LinuxSeccompAction::ScmpActLog => ScmpAction::Log,
        LinuxSeccompAction::ScmpActTrace => ScmpAction::Trace(errno as u16),
        // Needs a listener that receives the notification fd: nothing of ours does.
        LinuxSeccompAction::ScmpActNotify => return Err(err("SCMP_ACT_NOTIFY is not supported")),
    })
}

fn compare(index: usize, op: LinuxSeccompOperator, value: u64, two: u64) -> ScmpArgCompare {
    let op_and_datum = match op {
        LinuxSeccompOperator::ScmpCmpNe => (ScmpCompareOp::NotEqual, value),
        LinuxSeccompOperator::ScmpCmpLt => (ScmpCompareOp::Less, value),
        LinuxSeccompOperator::ScmpCmpLe => (ScmpCompareOp::LessOrEqual, value),
        LinuxSeccompOperator::ScmpCmpEq => (ScmpCompareOp::Equal, value),
        LinuxSeccompOperator::ScmpCmpGe => (ScmpCompareOp::GreaterEqual, value),
        LinuxSeccompOperator::ScmpCmpGt => (ScmpCompareOp::Greater, value),
        // OCI (and runc): `value` is the mask, `valueTwo` what the masked argument must equal.
        LinuxSeccompOperator::ScmpCmpMaskedEq => (ScmpCompareOp::MaskedEqual(value), two),
    };
    ScmpArgCompare::new(index as u32, op_and_datum.0, op_and_datum.1)
}

/// The profile as the BPF program (`struct sock_filter` array, native byte order) that runc
/// would load for it.
pub fn compile(profile: &LinuxSeccomp) -> Result<Vec<u8>, RuntimeError> {
    let default = action(profile.default_action(), profile.default_errno_ret())?;
    let mut filter = ScmpFilterContext::new(default).map_err(err)?;
    let (native_scmp, native_audit) = native()?;
    // (libseccomp arch, AUDIT_ARCH) of every architecture in the filter, the host's first.
    let mut arches = vec![(native_scmp, native_audit)];
    for a in profile.architectures().iter().flatten() {
        let a = arch(*a)?;
        if !arches.contains(&a) {
            filter.add_arch(a.0).map_err(err)?;
            arches.push(a);
        }
    }
    // `confine` sets no_new_privs itself, as runc does; libseccomp must not (it would on load).
    filter.set_ctl_nnp(false).map_err(err)?;
    filter.set_ctl_optimize(2).map_err(err)?;

    let mut names: Vec<&str> = Vec::new();
    for rule in profile.syscalls().iter().flatten() {
        let act = action(rule.action(), rule.errno_ret())?;
        let args = rule.args().as_deref().unwrap_or_default();
        if let Some(a) = args.iter().find(|a| a.index() > 5) {
            return Err(err(format!(
                "argument index {} (syscalls have 6)",
                a.index()
            )));
        }
        let conditions: Vec<ScmpArgCompare> = args
            .iter()
            .map(|a| compare(a.index(), a.op(), a.value(), a.value_two().unwrap_or(0)))
            .collect();
        let mut indexes: Vec<usize> = args.iter().map(|a| a.index()).collect();
        indexes.sort_unstable();
        let shared_index = indexes.windows(2).any(|w| w[0] == w[1]);
        for name in rule.names() {
            names.push(name);
            if act == default {
                continue;
            }
            // A name this libseccomp does not know is a syscall this kernel generation lacks.
            let Ok(nr) = ScmpSyscall::from_name(name) else {
                continue;
            };
            let added = if conditions.is_empty() {
                filter.add_rule(act, nr)
            } else if shared_index {
                conditions
                    .iter()
                    .try_for_each(|c| filter.add_rule_conditional(act, nr, &[*c]).map(|_| ()))
                    .map(|_| &mut filter)
            } else {
                filter.add_rule_conditional(act, nr, &conditions)
            };
            added.map_err(|e| err(format!("rule for {name}: {e}")))?;
        }
    }

    let mut bpf = Vec::new();
    let mut out = memfd()?;
    filter.export_bpf(&out).map_err(err)?;
    {
        use std::io::{Read, Seek, SeekFrom};
        out.seek(SeekFrom::Start(0))
            .and_then(|_| out.read_to_end(&mut bpf))
            .map_err(err)?;
    }
    if bpf.is_empty() || bpf.len() % 8 != 0 {
        return Err(err(format!("libseccomp exported {} bytes", bpf.len())));
    }

    // runc's -ENOSYS stub, per architecture: the highest syscall number the profile names.
    // Not needed when everything unlisted gets ENOSYS already.
    let mut last: Vec<(u32, u32)> = Vec::new();
    let patch = default != ScmpAction::Errno(ENOSYS as i32);
    for (scmp, audit) in arches.iter().filter(|_| patch) {
        let max = names
            .iter()
            .filter_map(|n| ScmpSyscall::from_name_by_arch(n, *scmp).ok())
            .map(|s| s.as_raw_syscall())
            .filter(|nr| *nr > 0)
            .max();
        if let Some(max) = max {
            last.push((*audit, max as u32));
        }
    }
    let mut program = enosys_stub(&last, native_audit);
    program.extend_from_slice(&bpf);
    if program.len() / 8 > BPF_MAXINSNS {
        return Err(err(format!(
            "{} instructions (the kernel takes {BPF_MAXINSNS})",
            program.len() / 8
        )));
    }
    Ok(program)
}

fn memfd() -> Result<std::fs::File, RuntimeError> {
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create takes a NUL-terminated name; the fd it returns is ours to own.
    let fd = unsafe { libc::memfd_create(c"gantry-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh fd that nothing else owns.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Instructions put in front of libseccomp's program (which starts by loading the arch
/// itself): for each (AUDIT_ARCH, last syscall), a syscall above the last one returns ENOSYS;
/// everything else falls through to the filter.
fn enosys_stub(last: &[(u32, u32)], native_audit: u32) -> Vec<u8> {
    if last.is_empty() {
        return Vec::new();
    }
    let x86_64 = Arch::ScmpArchX86_64 as u32;
    let x32_check = |audit: u32| audit == x86_64 && native_audit == x86_64;
    // Section per arch: ld nr; [jset x32 -> ja]; jgt last -> enosys; ja filter.
    let section_len = |audit: u32| if x32_check(audit) { 4 } else { 3 };
    let dispatch = last.len() as u32 + 1; // a jeq per arch, then `ja filter`
    let sections: u32 = last.iter().map(|(a, _)| section_len(*a)).sum();
    let total = 1 + dispatch + sections + 1; // ld arch ... ret ENOSYS
    let enosys = total - 1;
    let mut insns: Vec<(u16, u8, u8, u32)> = vec![(LD_W_ABS, 0, 0, DATA_ARCH)];
    let mut section_at = 1 + dispatch;
    for (audit, _) in last {
        let here = insns.len() as u32;
        insns.push((JEQ_K, jump(here, section_at), 0, *audit));
        section_at += section_len(*audit);
    }
    let here = insns.len() as u32;
    insns.push((JMP_JA, 0, 0, total - here - 1));
    for (audit, nr) in last {
        insns.push((LD_W_ABS, 0, 0, DATA_NR));
        if x32_check(*audit) {
            // An x32 syscall: not ours to judge, the filter's arch checks handle it.
            let here = insns.len() as u32;
            insns.push((JSET_K, jump(here, here + 2), 0, X32_SYSCALL_BIT));
        }
        let here = insns.len() as u32;
        insns.push((JGT_K, jump(here, enosys), 0, *nr));
        let here = insns.len() as u32;
        insns.push((JMP_JA, 0, 0, total - here - 1));
    }
    insns.push((RET_K, 0, 0, RET_ENOSYS));
    debug_assert_eq!(insns.len() as u32, total);
    insns
        .into_iter()
        .flat_map(|(code, jt, jf, k)| {
            let mut b = Vec::with_capacity(8);
            b.extend_from_slice(&code.to_ne_bytes());
            b.push(jt);
            b.push(jf);
            b.extend_from_slice(&k.to_ne_bytes());
            b
        })
        .collect()
}

/// A conditional jump's offset from the instruction at `from` to the one at `to`.
fn jump(from: u32, to: u32) -> u8 {
    u8::try_from(to - from - 1).expect("the stub is far shorter than 255 instructions")
}

/// confine's program, compiled here as a module too so its code is linted with the rest (the
/// agent runs the static build `build.rs` makes; `tests/runtime.rs` runs that).
#[cfg(test)]
#[allow(dead_code)]
#[path = "../../confine/main.rs"]
mod confine_program;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::spec::seccomp_profile;

    #[test]
    fn the_profile_compiles_with_a_stub_for_both_arches() {
        let bpf = compile(&seccomp_profile().unwrap()).unwrap();
        assert_eq!(bpf.len() % 8, 0);
        // ld arch; jeq x86_64; jeq i386; ja; two sections (4 + 3); ret ENOSYS
        let insn = |i: usize| {
            let b = &bpf[i * 8..i * 8 + 8];
            (
                u16::from_ne_bytes([b[0], b[1]]),
                b[2],
                b[3],
                u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
            )
        };
        assert_eq!(insn(0), (LD_W_ABS, 0, 0, DATA_ARCH));
        assert_eq!(insn(1).3, 0xc000_003e);
        assert_eq!(insn(2).3, 0x4000_0003);
        assert_eq!(insn(11), (RET_K, 0, 0, RET_ENOSYS));
        // libseccomp's own program follows, starting with its arch load.
        assert_eq!(insn(12), (LD_W_ABS, 0, 0, DATA_ARCH));
    }

    /// Loads the compiled profile in a forked child and makes real syscalls under it.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_compiled_filter_allows_refuses_and_says_enosys_like_runc() {
        let bpf = compile(&seccomp_profile().unwrap()).unwrap();
        let fprog = libc::sock_fprog {
            len: (bpf.len() / 8) as u16,
            filter: bpf.as_ptr() as *mut libc::sock_filter,
        };
        // i386 getpid (20) through `int 0x80`, if this kernel runs 32-bit code at all.
        fn int80(nr: i64) -> i64 {
            let ret: i64;
            // SAFETY: a 32-bit syscall with no arguments touches no memory of ours.
            unsafe {
                std::arch::asm!(
                    "int 0x80",
                    inlateout("rax") nr => ret,
                    // The kernel clears these on a 32-bit syscall from 64-bit code.
                    out("r8") _, out("r9") _, out("r10") _, out("r11") _,
                    options(nostack),
                )
            };
            ret
        }
        let ia32 = int80(20) > 0;
        // SAFETY: the child makes only raw syscalls (no allocation, no locks) and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            // SAFETY: raw syscalls; the child exits with a code naming the first failed check.
            unsafe {
                let code = (|| {
                    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                        return 2;
                    }
                    if libc::syscall(libc::SYS_seccomp, 1, 0, &fprog) != 0 {
                        return 3;
                    }
                    if libc::getpid() <= 0 {
                        return 4; // allowed
                    }
                    if libc::unshare(libc::CLONE_NEWUTS) == 0 || errno() != libc::EPERM {
                        return 5; // kept out of the allow-list
                    }
                    if libc::syscall(libc::SYS_clone3, 0, 0) != -1 || errno() != libc::ENOSYS {
                        return 6; // the profile's own ENOSYS rule
                    }
                    if libc::syscall(1000) != -1 || errno() != libc::ENOSYS {
                        return 7; // newer than the profile: the stub
                    }
                    // setns(-1) would be EBADF if it were allowed.
                    if libc::syscall(libc::SYS_setns, -1, 0) != -1 || errno() != libc::EPERM {
                        return 8; // known and unlisted: the default action
                    }
                    if ia32 && (int80(20) <= 0 || int80(1000) != -(libc::ENOSYS as i64)) {
                        return 9; // i386: allowed, and the stub
                    }
                    if ia32 && int80(346) != -(libc::EPERM as i64) {
                        return 10; // i386 setns: the default action
                    }
                    0
                })();
                libc::_exit(code);
            }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "child died: {status:#x}");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "check failed (see the codes above)"
        );
    }
}
