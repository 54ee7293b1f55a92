//! Services: their network (ports, endpoints), readiness probes, autoscaler and dynamic
//! configuration.

use std::collections::BTreeSet;

use crate::diag::Pos;
use crate::model::*;
use crate::names::{endpoint_name_error, name_error};
use crate::yaml::{Entry, Node};

use super::prim::{did_you_mean, index, listing, Fields};
use super::schema::{
    AUTOSCALER, DYNAMIC_CONFIG, ENDPOINT, EXEC, GRPC, HEADER, HTTP_GET, METRICS, PORT, PROBE,
    REPLICAS, SCALE_POLICY, SCALE_UP, SERVICE, SERVICE_NETWORK, TCP_SOCKET,
};
use super::steps::{merge_env, merge_mounts, PDefaults};
use super::Cx;

impl Cx<'_> {
    pub(super) fn service(
        &mut self,
        e: &Entry,
        path: &str,
        top: &PDefaults,
        ds: &PDefaults,
    ) -> Option<Service> {
        self.entry_name(e, path);
        let f = self.fields(&e.value, path, e.key_pos, &SERVICE)?;
        let c = self.common(&e.key, &f, false);
        let persist = f
            .get("persist")
            .and_then(|n| self.boolean(n, &f.child("persist")))
            .unwrap_or(false);
        let readiness_probe = f
            .get("readiness-probe")
            .and_then(|n| self.probe(n, &f.child("readiness-probe"), f.key_pos("readiness-probe")));
        let network = f
            .get("network")
            .map(|n| self.service_network(n, &f.child("network"), f.key_pos("network")))
            .unwrap_or_default();
        let autoscaler = f.get("autoscaler").and_then(|n| {
            self.autoscaler(n, &e.key, &f.child("autoscaler"), f.key_pos("autoscaler"))
        });
        let dynamic_config = f.get("dynamic-config").and_then(|n| {
            self.dynamic_config(n, &f.child("dynamic-config"), f.key_pos("dynamic-config"))
        });
        let image = c.image.unwrap_or_else(ImageRef::invalid);
        Some(Service {
            name: e.key.clone(),
            display_name: c.display_name,
            image,
            command: c.command,
            script: c.script,
            args: c.args,
            env: merge_env(&[&top.env, &ds.env, &c.env]),
            cwd: c.cwd,
            mounts: merge_mounts(&[&top.mounts, &ds.mounts, &c.mounts]),
            files: c.files,
            resource: c
                .resource
                .over(&ds.resource.clone().over(&top.resource))
                .finish(),
            depends_on: c.depends_on,
            multinode: c.multinode,
            policy: c.policy.finish(),
            preemptible: c.preemptible,
            persist,
            readiness_probe,
            network,
            autoscaler,
            dynamic_config,
            pos: e.key_pos,
        })
    }

    pub(super) fn service_network(&mut self, node: &Node, path: &str, owner: Pos) -> Network {
        let mut net = Network::default();
        let Some(f) = self.fields(node, path, owner, &SERVICE_NETWORK) else {
            return net;
        };
        net.host = f
            .get("host")
            .and_then(|n| self.boolean(n, &f.child("host")))
            .unwrap_or(false);
        if let Some(n) = f.get("ports") {
            let pp = f.child("ports");
            for (i, item) in self.seq(n, &pp).iter().enumerate() {
                let p = index(&pp, i);
                let Some(pf) = self.fields(item, &p, item.pos, &PORT) else {
                    continue;
                };
                let name = pf
                    .get("name")
                    .and_then(|n| self.nonempty(n, &pf.child("name")));
                let port = pf.get("port").and_then(|n| self.port(n, &pf.child("port")));
                let protocol = pf
                    .get("protocol")
                    .and_then(|n| {
                        self.enum_value(
                            n,
                            &pf.child("protocol"),
                            &[("tcp", PortProtocol::Tcp), ("udp", PortProtocol::Udp)],
                            true,
                        )
                    })
                    .unwrap_or(PortProtocol::Tcp);
                for key in ["name", "port"] {
                    if pf.get(key).is_none() {
                        let msg =
                            format!("missing `{key}`; a port is `{{name: NAME, port: NUMBER}}`");
                        self.err(item.pos, &p, msg);
                    }
                }
                let (Some(name), Some(port)) = (name, port) else {
                    continue;
                };
                if net.ports.iter().any(|x| x.name == name) {
                    let msg = format!("a port named `{name}` is already defined");
                    self.err(pf.key_pos("name"), &pf.child("name"), msg);
                    continue;
                }
                if net
                    .ports
                    .iter()
                    .any(|x| x.port == port && x.protocol == protocol)
                {
                    let msg = format!("port {port} is already defined");
                    self.err(pf.key_pos("port"), &pf.child("port"), msg);
                    continue;
                }
                net.ports.push(Port {
                    name,
                    port,
                    protocol,
                });
            }
        }
        if let Some(n) = f.get("endpoints") {
            let ep = f.child("endpoints");
            for (i, item) in self.seq(n, &ep).iter().enumerate() {
                let p = index(&ep, i);
                if let Some(e) = self.endpoint(item, &p, &net.ports) {
                    if net.endpoints.iter().any(|x| x.name == e.name) {
                        let msg = format!("an endpoint named `{}` is already defined", e.name);
                        self.err(e.pos, &p, msg);
                        continue;
                    }
                    net.endpoints.push(e);
                }
            }
        }
        net
    }

    pub(super) fn endpoint(&mut self, node: &Node, path: &str, ports: &[Port]) -> Option<Endpoint> {
        let f = self.fields(node, path, node.pos, &ENDPOINT)?;
        let name = f.get("name").and_then(|n| {
            let s = self.string(n, &f.child("name"))?;
            if let Some(msg) = name_error(&s) {
                self.err(n.pos, &f.child("name"), msg);
                return None;
            }
            Some(s)
        });
        let port_name = f.get("port-name").and_then(|n| {
            let s = self.string(n, &f.child("port-name"))?;
            if !ports.iter().any(|p| p.name == s) {
                let names: BTreeSet<String> = ports.iter().map(|p| p.name.clone()).collect();
                let msg = format!(
                    "port `{s}` is not one of this service's `network.ports`{}; ports: {}",
                    did_you_mean(&s, &names),
                    listing(&names)
                );
                self.err(n.pos, &f.child("port-name"), msg);
                return None;
            }
            Some(s)
        });
        let protocol = f
            .get("protocol")
            .and_then(|n| {
                self.enum_value(
                    n,
                    &f.child("protocol"),
                    &[
                        ("http", EndpointProtocol::Http),
                        ("https", EndpointProtocol::Https),
                        ("grpc", EndpointProtocol::Grpc),
                        ("grpcs", EndpointProtocol::Grpcs),
                        ("tcp", EndpointProtocol::Tcp),
                        ("tls", EndpointProtocol::Tls),
                    ],
                    true,
                )
            })
            .unwrap_or(EndpointProtocol::Http);
        let kind = f
            .get("type")
            .and_then(|n| {
                self.enum_value(
                    n,
                    &f.child("type"),
                    &[
                        ("path", EndpointKind::Path),
                        ("subdomain", EndpointKind::Subdomain),
                    ],
                    true,
                )
            })
            .unwrap_or(EndpointKind::Path);
        let scope = f
            .get("scope")
            .and_then(|n| {
                self.enum_value(
                    n,
                    &f.child("scope"),
                    &[
                        ("user", Scope::User),
                        ("group", Scope::Group),
                        ("organization", Scope::Organization),
                        ("public", Scope::Public),
                    ],
                    true,
                )
            })
            .unwrap_or(Scope::Group);
        let annotations = f
            .get("annotations")
            .map(|n| self.string_map(n, &f.child("annotations")))
            .unwrap_or_default();
        let attach = f.get("attach").and_then(|n| {
            let s = self.string(n, &f.child("attach"))?;
            if let Some(msg) = endpoint_name_error(&s) {
                self.err(n.pos, &f.child("attach"), msg);
                return None;
            }
            Some(s)
        });
        for key in ["name", "port-name"] {
            if f.get(key).is_none() {
                let msg = format!("missing `{key}`");
                self.err(node.pos, path, msg);
            }
        }
        Some(Endpoint {
            name: name?,
            port_name: port_name?,
            protocol,
            kind,
            scope,
            annotations,
            attach,
            pos: node.pos,
        })
    }

    pub(super) fn probe(&mut self, node: &Node, path: &str, owner: Pos) -> Option<Probe> {
        let f = self.fields(node, path, owner, &PROBE)?;
        let actions: Vec<&str> = ["exec", "http-get", "tcp-socket", "grpc"]
            .into_iter()
            .filter(|k| f.get(k).is_some())
            .collect();
        if actions.len() > 1 {
            let msg = format!(
                "`{}` and `{}` are both set; a probe has exactly one action",
                actions[0], actions[1]
            );
            self.err(f.key_pos(actions[1]), path, msg);
        }
        let timing = |cx: &mut Self, key: &str, min: u32, default: u32| -> u32 {
            f.get(key)
                .and_then(|n| cx.u32_in(n, &f.child(key), min))
                .unwrap_or(default)
        };
        let initial_delay_seconds = timing(self, "initial-delay-seconds", 0, 0);
        let period_seconds = timing(self, "period-seconds", 1, 10);
        let timeout_seconds = timing(self, "timeout-seconds", 1, 1);
        let success_threshold = timing(self, "success-threshold", 1, 1);
        let failure_threshold = timing(self, "failure-threshold", 1, 3);
        let Some(action) = actions.first().copied() else {
            self.err(
                owner,
                path,
                "missing the probe's action: `exec`, `http-get`, `tcp-socket` or `grpc`",
            );
            return None;
        };
        let an = f.get(action)?;
        let ap = f.child(action);
        let apos = f.key_pos(action);
        let kind = match action {
            "exec" => {
                let ef = self.fields(an, &ap, apos, &EXEC)?;
                let command = ef
                    .get("command")
                    .map(|n| self.strings(n, &ef.child("command")))
                    .unwrap_or_default();
                if command.is_empty() {
                    self.err(
                        apos,
                        &ap,
                        "missing `command`, the probe's command line as a list",
                    );
                    return None;
                }
                ProbeKind::Exec { command }
            }
            "http-get" => {
                let hf = self.fields(an, &ap, apos, &HTTP_GET)?;
                let path_s = hf
                    .get("path")
                    .and_then(|n| self.string(n, &hf.child("path")))
                    .unwrap_or_else(|| "/".into());
                let scheme = hf
                    .get("scheme")
                    .and_then(|n| {
                        self.enum_value(
                            n,
                            &hf.child("scheme"),
                            &[("HTTP", HttpScheme::Http), ("HTTPS", HttpScheme::Https)],
                            true,
                        )
                    })
                    .unwrap_or(HttpScheme::Http);
                let mut http_headers = Vec::new();
                if let Some(n) = hf.get("http-headers") {
                    let hp = hf.child("http-headers");
                    for (i, item) in self.seq(n, &hp).iter().enumerate() {
                        let p = index(&hp, i);
                        let Some(hdr) = self.fields(item, &p, item.pos, &HEADER) else {
                            continue;
                        };
                        let name = hdr
                            .get("name")
                            .and_then(|n| self.nonempty(n, &hdr.child("name")));
                        let value = hdr
                            .get("value")
                            .and_then(|n| self.string(n, &hdr.child("value")));
                        match (name, value) {
                            (Some(name), Some(value)) => {
                                http_headers.push(HttpHeader { name, value })
                            }
                            _ => {
                                if hdr.get("name").is_none() || hdr.get("value").is_none() {
                                    self.err(item.pos, &p, "a header needs `name` and `value`");
                                }
                            }
                        }
                    }
                }
                let port = self.probe_port(&hf, apos, &ap)?;
                ProbeKind::HttpGet {
                    path: path_s,
                    port,
                    scheme,
                    http_headers,
                }
            }
            "tcp-socket" => {
                let tf = self.fields(an, &ap, apos, &TCP_SOCKET)?;
                ProbeKind::TcpSocket {
                    port: self.probe_port(&tf, apos, &ap)?,
                }
            }
            _ => {
                let gf = self.fields(an, &ap, apos, &GRPC)?;
                let service = gf
                    .get("service")
                    .and_then(|n| self.string(n, &gf.child("service")));
                ProbeKind::Grpc {
                    port: self.probe_port(&gf, apos, &ap)?,
                    service,
                }
            }
        };
        Some(Probe {
            kind,
            initial_delay_seconds,
            period_seconds,
            timeout_seconds,
            success_threshold,
            failure_threshold,
        })
    }

    pub(super) fn probe_port(&mut self, f: &Fields, owner: Pos, path: &str) -> Option<u16> {
        match f.get("port") {
            Some(n) => self.port(n, &f.child("port")),
            None => {
                self.err(owner, path, "missing `port`");
                None
            }
        }
    }

    pub(super) fn service_refs(&mut self, node: &Node, path: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (i, (name, pos)) in self.string_list(node, path).into_iter().enumerate() {
            if !self.names.services.contains(&name) {
                let msg = format!(
                    "`{name}` is not a service of this workflow{}; services: {}",
                    did_you_mean(&name, &self.names.services),
                    listing(&self.names.services)
                );
                self.err(pos, &index(path, i), msg);
                continue;
            }
            out.push(name);
        }
        out
    }

    pub(super) fn scale_policy(
        &mut self,
        node: &Node,
        path: &str,
        owner: Pos,
    ) -> Option<ScalePolicy> {
        let f = self.fields(node, path, owner, &SCALE_POLICY)?;
        Some(ScalePolicy {
            metrics_query: f
                .get("metrics-query")
                .and_then(|n| self.nonempty(n, &f.child("metrics-query"))),
            cooldown_period: f
                .get("cooldown-period")
                .and_then(|n| self.uint(n, &f.child("cooldown-period"), 0, u64::MAX)),
            services: f
                .get("services")
                .map(|n| self.service_refs(n, &f.child("services")))
                .unwrap_or_default(),
            drain_period: f
                .get("drain-period")
                .and_then(|n| self.uint(n, &f.child("drain-period"), 0, u64::MAX)),
        })
    }

    pub(super) fn autoscaler(
        &mut self,
        node: &Node,
        me: &str,
        path: &str,
        owner: Pos,
    ) -> Option<Autoscaler> {
        let f = self.fields(node, path, owner, &AUTOSCALER)?;
        let mut a = Autoscaler::default();
        if let Some(n) = f.get("replicas") {
            let rp = f.child("replicas");
            if let Some(rf) = self.fields(n, &rp, f.key_pos("replicas"), &REPLICAS) {
                let min = match rf.get("min") {
                    Some(n) => self.u32_in(n, &rf.child("min"), 0),
                    None => Some(0),
                };
                let max = rf
                    .get("max")
                    .and_then(|n| self.u32_in(n, &rf.child("max"), 1));
                if rf.get("max").is_none() {
                    self.err(f.key_pos("replicas"), &rp, "missing `max`");
                }
                if let (Some(min), Some(max)) = (min, max) {
                    if min > max {
                        let msg = format!("`min` ({min}) is more than `max` ({max})");
                        self.err(rf.key_pos("min"), &rp, msg);
                    } else {
                        a.replicas = Some(Replicas { min, max });
                    }
                }
            }
        }
        if let Some(n) = f.get("metrics") {
            let mp = f.child("metrics");
            if let Some(mf) = self.fields(n, &mp, f.key_pos("metrics"), &METRICS) {
                a.metrics = Some(AutoscalerMetrics {
                    enabled: mf
                        .get("enabled")
                        .and_then(|n| self.boolean(n, &mf.child("enabled")))
                        .unwrap_or(false),
                    path: mf.get("path").and_then(|n| {
                        let s = self.string(n, &mf.child("path"))?;
                        if !s.starts_with('/') {
                            let msg = format!("metrics path `{s}` must start with `/`");
                            self.err(n.pos, &mf.child("path"), msg);
                            return None;
                        }
                        Some(s)
                    }),
                    port: mf.get("port").and_then(|n| self.port(n, &mf.child("port"))),
                    interval: mf
                        .get("interval")
                        .and_then(|n| self.uint(n, &mf.child("interval"), 1, u64::MAX)),
                    includes: mf
                        .get("includes")
                        .map(|n| self.strings(n, &mf.child("includes")))
                        .unwrap_or_default(),
                });
            }
        }
        if let Some(n) = f.get("scale-up") {
            let sp = f.child("scale-up");
            if let Some(sf) = self.fields(n, &sp, f.key_pos("scale-up"), &SCALE_UP) {
                if let Some(t) = sf.get("triggers") {
                    let tp = sf.child("triggers");
                    for (i, item) in self.seq(t, &tp).iter().enumerate() {
                        if let Some(pol) = self.scale_policy(item, &index(&tp, i), item.pos) {
                            if pol.services.iter().any(|s| s == me) {
                                let msg = format!(
                                    "`{me}` names itself in `services`; leave `services` empty to scale this service"
                                );
                                self.err(item.pos, &index(&tp, i), msg);
                            }
                            a.scale_up.push(pol);
                        }
                    }
                }
            }
            let targeted = a.scale_up.iter().filter(|p| !p.services.is_empty()).count();
            if targeted > 0 && targeted < a.scale_up.len() {
                self.err(
                    f.key_pos("scale-up"),
                    &sp,
                    "either every trigger names `services` (to scale other services) or none does",
                );
            }
            if targeted > 0 && f.get("replicas").is_some() {
                self.err(
                    f.key_pos("replicas"),
                    &f.child("replicas"),
                    "`replicas` cannot be set when the scale-up triggers scale other services",
                );
            }
        }
        if let Some(n) = f.get("scale-down") {
            let dp = f.child("scale-down");
            if let Some(pol) = self.scale_policy(n, &dp, f.key_pos("scale-down")) {
                if !pol.services.is_empty() {
                    self.err(
                        f.key_pos("scale-down"),
                        &dp,
                        "`services` is only for scale-up triggers; scale-down applies to this service",
                    );
                }
                a.scale_down = Some(pol);
            }
        }
        Some(a)
    }

    pub(super) fn dynamic_config(
        &mut self,
        node: &Node,
        path: &str,
        owner: Pos,
    ) -> Option<DynamicConfig> {
        let f = self.fields(node, path, owner, &DYNAMIC_CONFIG)?;
        let file = f.get("path").and_then(|n| {
            let s = self.string(n, &f.child("path"))?;
            self.abs_path(&s, n.pos, &f.child("path"), "path")
                .then_some(s)
        });
        let services = f
            .get("services")
            .map(|n| self.service_refs(n, &f.child("services")))
            .unwrap_or_default();
        let script = f
            .get("script")
            .and_then(|n| self.nonempty(n, &f.child("script")));
        for key in ["path", "script"] {
            if f.get(key).is_none() {
                let msg = format!("missing `{key}`");
                self.err(owner, path, msg);
            }
        }
        Some(DynamicConfig {
            path: file?,
            services,
            script: script?,
        })
    }
}
