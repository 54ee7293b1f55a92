#!/bin/sh
# gen-seccomp.sh - regenerate the seccomp profile that the agent embeds in every container.
#   scripts/gen-seccomp.sh [SOURCE] > crates/gantry-agent/src/runtime/seccomp.json
#
# The source is Debian's containers-common profile (package golang-github-containers-common,
# /usr/share/containers/seccomp.json, Apache-2.0). It is written for Podman, which leans on user
# namespaces, so it allows unshare/setns/mount and friends to everyone. Gantry's containers run
# as real root without a user namespace, so, like Docker's default, we keep the syscalls that
# Docker only grants with CAP_SYS_ADMIN (and a few kernel-global ones: keyrings, syslog, reboot)
# out, and we resolve the profile for what we actually run: amd64 and Docker's default
# capability set. The output is in OCI runtime-spec form, so runc reads it as is.
set -eu
SRC=${1:-/usr/share/containers/seccomp.json}
[ -r "$SRC" ] || { echo "gen-seccomp: $SRC not found (apt-get install golang-github-containers-common)" >&2; exit 1; }

jq --sort-keys '
  def caps: ["CAP_CHOWN","CAP_DAC_OVERRIDE","CAP_FSETID","CAP_FOWNER","CAP_MKNOD","CAP_NET_RAW",
             "CAP_SETGID","CAP_SETUID","CAP_SETFCAP","CAP_SETPCAP","CAP_NET_BIND_SERVICE",
             "CAP_SYS_CHROOT","CAP_KILL","CAP_AUDIT_WRITE"];
  def arches: ["amd64","x86"];
  def blocked: ["add_key","bpf","clone","clone3","fanotify_init","fsconfig","fsmount","fsopen",
                "fspick","keyctl","lookup_dcookie","mount","mount_setattr","move_mount",
                "open_tree","perf_event_open","pivot_root","quotactl","quotactl_fd","reboot",
                "request_key","setdomainname","sethostname","setns","syslog","umount","umount2",
                "unshare"];
  def any_in($xs; $ys): any($xs[]; . as $x | $ys | index([$x]));
  def applies:
      ((.includes.arches // []) as $a | ($a | length) == 0 or any_in($a; arches))
    and ((.excludes.arches // []) as $a | any_in($a; arches) | not)
    and ((.includes.caps // []) as $c | all($c[]; . as $x | caps | index([$x])))
    and ((.excludes.caps // []) as $c | any_in($c; caps) | not);
  [.syscalls[] | select(.action == "SCMP_ACT_ALLOW" and applies)] as $rules
  | ([$rules[] | select((.args // []) | length == 0) | .names[]] | unique - blocked) as $plain
  | {
      defaultAction: "SCMP_ACT_ERRNO",
      defaultErrnoRet: 1,
      # No x32: runc 1.1 has libseccomp compile the filter in every container start, and each
      # architecture adds ~5 ms of CPU (3 arches 34 ms, these 2 29 ms, bare runc 22 ms per
      # container, measured in bench/). x32 is off by default in Debian kernels and no image
      # we know of uses it; its syscalls get the default action, so this only narrows the
      # filter. i386 stays: 32-bit binaries in images still run.
      architectures: ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"],
      syscalls: (
        [{names: $plain, action: "SCMP_ACT_ALLOW"}]
        + [$rules[] | select((.args // []) | length > 0)
           | {names, action, args: [.args[] | {index, value, op} + (if .valueTwo != 0 then {valueTwo} else {} end)]}]
        # clone without any namespace flag (CLONE_NEWNS|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET|NEWCGROUP)
        + [{names: ["clone"], action: "SCMP_ACT_ALLOW",
            args: [{index: 0, value: 2114060288, valueTwo: 0, op: "SCMP_CMP_MASKED_EQ"}]}]
        # ENOSYS (not EPERM) makes glibc fall back to clone, whose flags we can inspect
        + [{names: ["clone3"], action: "SCMP_ACT_ERRNO", errnoRet: 38}]
      )
    }
' "$SRC"
