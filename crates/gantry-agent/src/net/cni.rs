//! Calling CNI plugins directly, as the CNI specification (1.0) describes: the plugin binary
//! with `CNI_*` variables in its environment, the network configuration as JSON on stdin, the
//! result (or an error object) as JSON on stdout.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::NetError;

/// The specification version of the configurations Gantry writes.
pub const CNI_VERSION: &str = "1.0.0";

/// How long one plugin call may take before it is killed.
const PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Where Debian (`containernetworking-plugins`) and upstream install the plugins.
const DEFAULT_DIRS: [&str; 3] = ["/usr/lib/cni", "/opt/cni/bin", "/usr/libexec/cni"];

/// The first directory that holds the `bridge` plugin.
pub fn find_plugin_dir() -> Option<PathBuf> {
    DEFAULT_DIRS
        .iter()
        .map(PathBuf::from)
        .find(|d| d.join("bridge").is_file())
}

/// One call of a plugin.
pub struct Call<'a> {
    pub dir: &'a Path,
    /// `ADD`, `DEL` or `CHECK`.
    pub command: &'a str,
    pub container_id: &'a str,
    /// Empty: no namespace (a DEL after the namespace is gone).
    pub netns: &'a Path,
    pub ifname: &'a str,
    pub config: &'a serde_json::Value,
}

impl Call<'_> {
    /// Runs the plugin named by the configuration's `type`. Returns its result (`null` for a
    /// DEL, which prints nothing).
    pub fn run(&self) -> Result<serde_json::Value, NetError> {
        let plugin = self.config["type"].as_str().unwrap_or_default().to_owned();
        let fail = |message: String| NetError::Plugin {
            plugin: plugin.clone(),
            command: self.command.to_owned(),
            message,
        };
        if plugin.is_empty() || plugin.contains('/') {
            return Err(fail("the configuration has no plugin type".into()));
        }
        let bin = self.dir.join(&plugin);
        if !bin.is_file() {
            return Err(fail(format!(
                "{} is missing (install containernetworking-plugins)",
                bin.display()
            )));
        }
        let stdin = serde_json::to_vec(self.config).map_err(|e| fail(e.to_string()))?;
        // The bridge plugin runs iptables (ipMasq): make sure the sbin directories are on PATH.
        let mut path = std::env::var("PATH").unwrap_or_default();
        for d in ["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"] {
            if !path.split(':').any(|p| p == d) {
                if !path.is_empty() {
                    path.push(':');
                }
                path.push_str(d);
            }
        }
        let mut child = Command::new(&bin)
            .env("CNI_COMMAND", self.command)
            .env("CNI_CONTAINERID", self.container_id)
            .env("CNI_NETNS", self.netns)
            .env("CNI_IFNAME", self.ifname)
            .env("CNI_PATH", self.dir)
            .env("PATH", path)
            .env_remove("CNI_ARGS")
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| fail(format!("running {}: {e}", bin.display())))?;
        let mut input = child.stdin.take();
        let writer = std::thread::spawn(move || {
            if let Some(w) = input.as_mut() {
                let _ = w.write_all(&stdin);
            }
        });
        let read = |r: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut r) = r {
                    let _ = r.by_ref().take(1 << 20).read_to_end(&mut buf);
                }
                buf
            })
        };
        let out = read(child.stdout.take().map(|r| Box::new(r) as _));
        let err = read(child.stderr.take().map(|r| Box::new(r) as _));
        let deadline = Instant::now() + PLUGIN_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(fail(format!(
                        "no answer within {} s",
                        PLUGIN_TIMEOUT.as_secs()
                    )));
                }
                Err(e) => return Err(fail(format!("waiting: {e}"))),
            }
        };
        let _ = writer.join();
        let stdout = out.join().unwrap_or_default();
        let stderr = err.join().unwrap_or_default();
        if status.success() {
            if stdout.iter().all(u8::is_ascii_whitespace) {
                return Ok(serde_json::Value::Null);
            }
            return serde_json::from_slice(&stdout)
                .map_err(|e| fail(format!("unreadable result ({e})")));
        }
        // An error is `{"cniVersion", "code", "msg", "details"}` on stdout.
        let message = serde_json::from_slice::<serde_json::Value>(&stdout)
            .ok()
            .and_then(|v| {
                let msg = v["msg"].as_str()?.to_owned();
                Some(match v["details"].as_str().filter(|d| !d.is_empty()) {
                    Some(d) => format!("{msg}: {d}"),
                    None => msg,
                })
            })
            .unwrap_or_else(|| {
                let text =
                    String::from_utf8_lossy(if stdout.is_empty() { &stderr } else { &stdout })
                        .trim()
                        .to_owned();
                format!("exited with {status}: {text}")
            });
        Err(fail(message))
    }
}

/// The container's IPv4 address and its prefix from an ADD result: the first `ips` entry
/// whose interface lies in a sandbox (the container's side), else the first entry.
pub fn result_address(result: &serde_json::Value) -> Option<(std::net::Ipv4Addr, u8)> {
    let ifaces = result["interfaces"].as_array();
    let in_sandbox = |ip: &serde_json::Value| {
        ip["interface"]
            .as_u64()
            .and_then(|i| ifaces?.get(i as usize))
            .is_some_and(|iface| iface["sandbox"].as_str().is_some_and(|s| !s.is_empty()))
    };
    let ips = result["ips"].as_array()?;
    let parse = |ip: &serde_json::Value| {
        let (addr, prefix) = ip["address"].as_str()?.split_once('/')?;
        Some((addr.parse().ok()?, prefix.parse().ok()?))
    };
    ips.iter()
        .filter(|ip| in_sandbox(ip))
        .chain(ips.iter())
        .find_map(parse)
}

/// The host side of the container's veth pair and the container's own MAC, from the bridge
/// plugin's ADD result: its interfaces are the bridge, the host's end (no sandbox) and the
/// container's end (in a sandbox).
pub fn result_port(result: &serde_json::Value, bridge: &str) -> Option<(String, String)> {
    let ifaces = result["interfaces"].as_array()?;
    let sandboxed = |i: &&serde_json::Value| i["sandbox"].as_str().is_some_and(|s| !s.is_empty());
    let mac = ifaces.iter().find(sandboxed)?["mac"].as_str()?;
    let host = ifaces
        .iter()
        .filter(|i| !sandboxed(i))
        .filter_map(|i| i["name"].as_str())
        .find(|n| *n != bridge)?;
    Some((host.to_owned(), mac.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_comes_from_the_sandbox_interface() {
        let r = serde_json::json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "gtr0", "mac": "f2:00"},
                {"name": "veth1", "mac": "92:00"},
                {"name": "eth0", "mac": "5a:00", "sandbox": "/x/netns/c"}
            ],
            "ips": [
                {"interface": 0, "address": "10.9.0.1/24"},
                {"interface": 2, "address": "10.9.0.7/24", "gateway": "10.9.0.1"}
            ]
        });
        assert_eq!(result_address(&r), Some(("10.9.0.7".parse().unwrap(), 24)));
        let bare = serde_json::json!({"ips": [{"address": "10.9.0.8/24"}]});
        assert_eq!(
            result_address(&bare),
            Some(("10.9.0.8".parse().unwrap(), 24))
        );
        assert_eq!(result_address(&serde_json::json!({})), None);
        assert_eq!(
            result_port(&r, "gtr0"),
            Some(("veth1".to_owned(), "5a:00".to_owned()))
        );
        assert_eq!(result_port(&bare, "gtr0"), None);
    }
}
