//! Builds the small programs the agent embeds and writes out at start, as static
//! executables: `confine/main.rs`, which every container starts with, `shim/main.rs`, the
//! per-container parent, and `rsh/main.rs`, multinode members' remote launcher (see their
//! headers). confine and rsh run inside images that may have no libc and the shim starts for
//! every container, so none can be a normal (dynamically linked) target of this workspace, and
//! Cargo cannot give one target its own `-C target-feature=+crt-static`: hence rustc directly.
//! All use only the standard library.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = env::var("TARGET").expect("TARGET");
    // The shim includes the runtime's std-only container-directory module.
    println!("cargo:rerun-if-changed=src/runtime/dir.rs");
    for name in ["confine", "shim", "rsh"] {
        let src = format!("{name}/main.rs");
        println!("cargo:rerun-if-changed={src}");
        let status = Command::new(&rustc)
            .args([
                "--edition",
                "2021",
                "--crate-name",
                name,
                "--target",
                &target,
            ])
            .args([
                "-C",
                "opt-level=s",
                "-C",
                "panic=abort",
                "-C",
                "strip=symbols",
            ])
            .args(["-C", "target-feature=+crt-static"])
            .arg("-o")
            .arg(out_dir.join(name))
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("running rustc for {src}: {e}"));
        assert!(
            status.success(),
            "building {src} statically failed ({status}): the C library's static archive \
             (libc.a, Debian's libc6-dev) is needed"
        );
    }
}
