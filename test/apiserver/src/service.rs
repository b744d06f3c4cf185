//! Services: defaulting, validation, and the cluster-IP and node-port allocators.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use serde_json::{Map, Value, json};

use crate::error::{FieldError, quote};
use crate::object;
use crate::rng::SplitMix64;
use crate::validation;

const SPEC_ORDER: &[&str] = &[
    "ports",
    "selector",
    "clusterIP",
    "clusterIPs",
    "type",
    "externalIPs",
    "sessionAffinity",
    "loadBalancerIP",
    "loadBalancerSourceRanges",
    "externalName",
    "externalTrafficPolicy",
    "healthCheckNodePort",
    "publishNotReadyAddresses",
    "sessionAffinityConfig",
    "ipFamilies",
    "ipFamilyPolicy",
    "allocateLoadBalancerNodePorts",
    "loadBalancerClass",
    "internalTrafficPolicy",
    "trafficDistribution",
];

const PORT_ORDER: &[&str] = &[
    "name",
    "protocol",
    "appProtocol",
    "port",
    "targetPort",
    "nodePort",
];

const TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];

fn spec(v: &Value) -> &Value {
    &v["spec"]
}

fn spec_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let obj = v.as_object_mut().expect("value was just made an object");
    let s = obj.entry("spec").or_insert_with(|| json!({}));
    if !s.is_object() {
        *s = json!({});
    }
    s.as_object_mut().expect("spec was just made an object")
}

/// The service type, defaulted.
pub(crate) fn service_type(v: &Value) -> &str {
    spec(v)["type"].as_str().unwrap_or("ClusterIP")
}

/// Whether node ports are allocated for this service.
pub(crate) fn needs_node_ports(v: &Value) -> bool {
    match service_type(v) {
        "NodePort" => true,
        "LoadBalancer" => spec(v)["allocateLoadBalancerNodePorts"].as_bool() != Some(false),
        _ => false,
    }
}

/// Whether a health-check node port is allocated for this service.
pub(crate) fn needs_health_check(v: &Value) -> bool {
    service_type(v) == "LoadBalancer" && spec(v)["externalTrafficPolicy"].as_str() == Some("Local")
}

fn wants_cluster_ip(v: &Value) -> bool {
    service_type(v) != "ExternalName"
}

/// Defaults applied on every write of a Service (before allocation).
pub(crate) fn default_service(v: &mut Value) {
    let ty = service_type(v).to_string();
    let s = spec_mut(v);
    s.entry("type").or_insert_with(|| json!(ty));
    s.entry("sessionAffinity").or_insert_with(|| json!("None"));
    if ty != "ExternalName" {
        s.entry("internalTrafficPolicy")
            .or_insert_with(|| json!("Cluster"));
    }
    if ty == "NodePort" || ty == "LoadBalancer" {
        s.entry("externalTrafficPolicy")
            .or_insert_with(|| json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        s.entry("allocateLoadBalancerNodePorts")
            .or_insert_with(|| json!(true));
    }
    if let Some(ports) = s.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut() {
            let Value::Object(pm) = p else { continue };
            pm.entry("protocol").or_insert_with(|| json!("TCP"));
            let port = pm.get("port").cloned().unwrap_or(json!(0));
            let missing_target = match pm.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(Value::Number(n)) => n.as_i64() == Some(0),
                Some(Value::String(s)) => s.is_empty(),
                _ => false,
            };
            if missing_target {
                pm.insert("targetPort".into(), port);
            }
            object::order_map(pm, PORT_ORDER);
        }
    }
    if let Some(Value::Object(status)) = v.get_mut("status") {
        status.entry("loadBalancer").or_insert_with(|| json!({}));
    } else if let Value::Object(obj) = v {
        obj.insert("status".into(), json!({"loadBalancer": {}}));
    }
    order_spec(v);
}

/// Defaults `ipMode: VIP` on load-balancer ingress points with an `ip`, as the real server's decoding does.
/// It runs on the object the request carries, before a status write restores the stored spec: a status
/// write whose body changes `spec.type` away from `LoadBalancer` gets no default (and fails validation).
pub(crate) fn default_ingress_ip_mode(v: &mut Value) {
    if service_type(v) != "LoadBalancer" {
        return;
    }
    let Some(ingress) = v
        .pointer_mut("/status/loadBalancer/ingress")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for point in ingress.iter_mut() {
        let Value::Object(point) = point else {
            continue;
        };
        let has_ip = point
            .get("ip")
            .and_then(Value::as_str)
            .is_some_and(|ip| !ip.is_empty());
        if has_ip && point.get("ipMode").is_none_or(Value::is_null) {
            point.insert("ipMode".into(), json!("VIP"));
        }
    }
}

/// Validation of `status.loadBalancer.ingress`: an `ip` needs an `ipMode` of `VIP` or `Proxy`.
fn validate_ingress(v: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(ingress) = v
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
    else {
        return errs;
    };
    for (i, point) in ingress.iter().enumerate() {
        let field = format!("status.loadBalancer.ingress[{i}].ipMode");
        let has_ip = point["ip"].as_str().is_some_and(|ip| !ip.is_empty());
        match point["ipMode"].as_str() {
            None if has_ip => errs.push(FieldError::required(
                field,
                "must be specified when `ip` is set",
            )),
            Some(mode) if !["Proxy", "VIP"].contains(&mode) => {
                errs.push(FieldError::not_supported(field, mode, &["Proxy", "VIP"]));
            }
            _ => {}
        }
    }
    errs
}

/// Puts the spec keys in the order the real server serialises them.
pub(crate) fn order_spec(v: &mut Value) {
    if let Some(Value::Object(s)) = v.get_mut("spec") {
        object::order_map(s, SPEC_ORDER);
    }
}

/// On update, copies the values the server allocated earlier into a new object that left them
/// out (cluster IPs, node ports matched by port and protocol, the health-check node port), and
/// drops type-dependent fields the user left unchanged when the type no longer uses them.
pub(crate) fn carry_allocations(new: &mut Value, old: &Value) {
    let new_needs_ports = needs_node_ports(new);
    let new_needs_hc = needs_health_check(new);
    let new_type = service_type(new).to_string();
    let old_type = service_type(old).to_string();
    let old_spec = spec(old).clone();
    let s = spec_mut(new);
    if new_type != "ExternalName" {
        for key in ["clusterIP", "clusterIPs"] {
            let missing = match s.get(key) {
                None | Some(Value::Null) => true,
                Some(Value::String(x)) => x.is_empty(),
                Some(Value::Array(a)) => a.is_empty(),
                _ => false,
            };
            if missing && let Some(old_val) = old_spec.get(key) {
                s.insert(key.to_string(), old_val.clone());
            }
        }
        for key in ["ipFamilies", "ipFamilyPolicy"] {
            if !s.contains_key(key)
                && let Some(old_val) = old_spec.get(key)
            {
                s.insert(key.to_string(), old_val.clone());
            }
        }
    } else {
        for key in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            s.remove(key);
        }
    }
    let old_ports: Vec<Value> = old_spec["ports"].as_array().cloned().unwrap_or_default();
    if let Some(ports) = s.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut() {
            let Value::Object(pm) = p else { continue };
            let key = (
                pm.get("port").and_then(Value::as_i64),
                pm.get("protocol")
                    .and_then(Value::as_str)
                    .unwrap_or("TCP")
                    .to_string(),
            );
            let old_match = old_ports.iter().find(|op| {
                (
                    op["port"].as_i64(),
                    op["protocol"].as_str().unwrap_or("TCP").to_string(),
                ) == key
            });
            if new_needs_ports {
                if pm.get("nodePort").and_then(Value::as_i64).unwrap_or(0) == 0
                    && let Some(np) = old_match
                        .and_then(|o| o.get("nodePort"))
                        .filter(|n| n.as_i64().unwrap_or(0) != 0)
                {
                    pm.insert("nodePort".into(), np.clone());
                }
            } else if let Some(np) = pm.get("nodePort").cloned() {
                let unchanged = old_match.and_then(|o| o.get("nodePort")) == Some(&np)
                    || np.as_i64() == Some(0);
                if unchanged && old_type != new_type {
                    pm.remove("nodePort");
                }
            }
        }
    }
    if new_needs_hc {
        if s.get("healthCheckNodePort")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            == 0
            && let Some(hc) = old_spec.get("healthCheckNodePort")
        {
            s.insert("healthCheckNodePort".into(), hc.clone());
        }
    } else if s
        .get("healthCheckNodePort")
        .is_some_and(|hc| Some(hc) == old_spec.get("healthCheckNodePort"))
    {
        s.remove("healthCheckNodePort");
    }
    if new_type != "LoadBalancer"
        && s.get("allocateLoadBalancerNodePorts")
            .is_some_and(|a| Some(a) == old_spec.get("allocateLoadBalancerNodePorts"))
    {
        s.remove("allocateLoadBalancerNodePorts");
    }
    if new_type != "NodePort"
        && new_type != "LoadBalancer"
        && s.get("externalTrafficPolicy")
            .is_some_and(|e| Some(e) == old_spec.get("externalTrafficPolicy"))
    {
        s.remove("externalTrafficPolicy");
    }
}

fn port_number(v: &Value) -> Option<i64> {
    v.as_i64()
}

fn go_service_port(p: &Value) -> String {
    format!(
        "core.ServicePort{{Name:\"\", Protocol:{}, AppProtocol:(*string)(nil), Port:{}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, NodePort:0}}",
        quote(p["protocol"].as_str().unwrap_or("TCP")),
        p["port"].as_i64().unwrap_or(0)
    )
}

/// Validation of a Service (create and update share it).
pub(crate) fn validate(v: &Value) -> Vec<FieldError> {
    let mut errs = validation::object_meta(v, validation::NameRule::Dns1035Label);
    let s = spec(v);
    let ty = service_type(v);
    if !TYPES.contains(&ty) {
        errs.push(FieldError::not_supported("spec.type", ty, TYPES));
    }
    let cluster_ip = s["clusterIP"].as_str().unwrap_or("");
    errs.extend(validate_ports(s, ty, cluster_ip));
    errs.extend(validate_traffic(v, ty));
    errs.extend(validate_addresses(s, ty, cluster_ip));
    errs.extend(validation::labels(&s["selector"], "spec.selector"));
    errs.extend(validate_ingress(v));
    errs
}

/// Validation of `spec.ports`: required unless the Service is headless or an ExternalName; each port
/// valid on its own, names and (protocol, port) pairs unique.
fn validate_ports(s: &Value, ty: &str, cluster_ip: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ports = s["ports"].as_array().cloned().unwrap_or_default();
    if ports.is_empty() && ty != "ExternalName" && cluster_ip != "None" {
        errs.push(FieldError::required("spec.ports", ""));
    }
    let mut names = HashSet::new();
    let mut keys = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let base = format!("spec.ports[{i}]");
        let name = p["name"].as_str().unwrap_or("");
        if ports.len() > 1 && name.is_empty() {
            errs.push(FieldError::required(format!("{base}.name"), ""));
        } else if !name.is_empty() {
            for m in validation::dns1123_label(name) {
                errs.push(FieldError::invalid_str(format!("{base}.name"), name, m));
            }
            if !names.insert(name.to_string()) {
                errs.push(FieldError::duplicate(format!("{base}.name"), quote(name)));
            }
        }
        let port = port_number(&p["port"]).unwrap_or(0);
        if !(1..=65535).contains(&port) {
            errs.push(FieldError::invalid(
                format!("{base}.port"),
                port.to_string(),
                "must be between 1 and 65535, inclusive",
            ));
        }
        let proto = p["protocol"].as_str().unwrap_or("TCP");
        if !["SCTP", "TCP", "UDP"].contains(&proto) {
            errs.push(FieldError::not_supported(
                format!("{base}.protocol"),
                proto,
                &["SCTP", "TCP", "UDP"],
            ));
        }
        errs.extend(validate_target_port(&p["targetPort"], &base));
        errs.extend(validate_node_port(p, ty, &base));
        if !keys.insert((proto.to_string(), port)) {
            errs.push(FieldError::duplicate(base.clone(), go_service_port(p)));
        }
    }
    errs
}

/// Validation of a port's `targetPort` (at `base`): a number in 1-65535 or an IANA service name.
fn validate_target_port(target: &Value, base: &str) -> Option<FieldError> {
    match target {
        Value::Number(n) => {
            let t = n.as_i64().unwrap_or(0);
            (!(1..=65535).contains(&t)).then(|| {
                FieldError::invalid(
                    format!("{base}.targetPort"),
                    t.to_string(),
                    "must be between 1 and 65535, inclusive",
                )
            })
        }
        Value::String(t) => {
            let ok = !t.is_empty()
                && t.len() <= 15
                && t.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && t.bytes().any(|c| c.is_ascii_lowercase());
            (!ok).then(|| {
                FieldError::invalid_str(
                    format!("{base}.targetPort"),
                    t,
                    "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                )
            })
        }
        _ => None,
    }
}

/// Validation of a port's `nodePort` (at `base`): none on a ClusterIP Service, otherwise in 1-65535
/// (the allocator checks the node-port range).
fn validate_node_port(p: &Value, ty: &str, base: &str) -> Option<FieldError> {
    let np = p
        .get("nodePort")
        .and_then(Value::as_i64)
        .filter(|n| *n != 0)?;
    if ty == "ClusterIP" {
        Some(FieldError::forbidden(
            format!("{base}.nodePort"),
            "may not be used when `type` is 'ClusterIP'",
        ))
    } else if !(1..=65535).contains(&np) {
        Some(FieldError::invalid(
            format!("{base}.nodePort"),
            np.to_string(),
            "must be between 1 and 65535, inclusive",
        ))
    } else {
        None
    }
}

/// Validation of how traffic reaches the Service: session affinity, the external and internal traffic
/// policies, and the fields only a LoadBalancer Service may set (health-check node port, node-port
/// allocation).
fn validate_traffic(v: &Value, ty: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let s = spec(v);
    let affinity = s["sessionAffinity"].as_str().unwrap_or("None");
    if !["ClientIP", "None"].contains(&affinity) {
        errs.push(FieldError::not_supported(
            "spec.sessionAffinity",
            affinity,
            &["ClientIP", "None"],
        ));
    }
    if let Some(etp) = s["externalTrafficPolicy"].as_str() {
        if ty != "NodePort" && ty != "LoadBalancer" {
            errs.push(FieldError::invalid_str(
                "spec.externalTrafficPolicy",
                etp,
                "may only be set when `type` is 'NodePort' or 'LoadBalancer'",
            ));
        } else if !["Cluster", "Local"].contains(&etp) {
            errs.push(FieldError::not_supported(
                "spec.externalTrafficPolicy",
                etp,
                &["Cluster", "Local"],
            ));
        }
    }
    if let Some(itp) = s["internalTrafficPolicy"].as_str()
        && !["Cluster", "Local"].contains(&itp)
    {
        errs.push(FieldError::not_supported(
            "spec.internalTrafficPolicy",
            itp,
            &["Cluster", "Local"],
        ));
    }
    if let Some(hc) = s["healthCheckNodePort"].as_i64().filter(|h| *h != 0)
        && !needs_health_check(v)
    {
        errs.push(FieldError::invalid(
            "spec.healthCheckNodePort",
            hc.to_string(),
            "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
        ));
    }
    if s.get("allocateLoadBalancerNodePorts")
        .is_some_and(|a| !a.is_null())
        && ty != "LoadBalancer"
    {
        errs.push(FieldError::forbidden(
            "spec.allocateLoadBalancerNodePorts",
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    errs
}

/// Validation of the Service's addresses: a cluster IP that is an IPv4 address (or `None`), and the DNS
/// name of an ExternalName Service.
fn validate_addresses(s: &Value, ty: &str, cluster_ip: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !cluster_ip.is_empty() && cluster_ip != "None" && cluster_ip.parse::<Ipv4Addr>().is_err() {
        errs.push(FieldError::invalid_str(
            "spec.clusterIPs[0]",
            cluster_ip,
            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        ));
    }
    if ty == "ExternalName" {
        let ext = s["externalName"].as_str().unwrap_or("");
        if ext.is_empty() {
            errs.push(FieldError::required("spec.externalName", ""));
        } else {
            for m in validation::dns1123_subdomain(ext.trim_end_matches('.')) {
                errs.push(FieldError::invalid_str("spec.externalName", ext, m));
            }
        }
    }
    errs
}

/// Update-only checks: the cluster IP cannot change once set.
pub(crate) fn validate_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let old_ip = old["spec"]["clusterIP"].as_str().unwrap_or("");
    let new_ip = new["spec"]["clusterIP"].as_str().unwrap_or("");
    if service_type(new) != "ExternalName"
        && service_type(old) != "ExternalName"
        && !old_ip.is_empty()
        && old_ip != new_ip
    {
        errs.push(FieldError::invalid_str(
            "spec.clusterIP",
            new_ip,
            "field is immutable",
        ));
    }
    errs
}

/// The cluster IP a Service asks for, as checked against the allocator.
#[derive(Debug, Default)]
struct ClusterIpRequest {
    /// The IP the object names (one it held already, or one to reserve).
    named: Option<u32>,
    /// A named IP the object did not hold before, free and in the range: reserved on commit.
    reserve: Option<u32>,
    /// The object leaves its IP empty: one is picked.
    pick: bool,
}

/// The node ports a Service asks for, as checked against the allocator.
#[derive(Debug, Default)]
struct NodePortRequest {
    /// The node ports (and health-check node port) the object names: reserved on commit.
    fixed: Vec<u16>,
    /// Every port the object uses, named or picked, so that no two of its ports share one.
    taken_now: HashSet<u16>,
    /// The indices of the ports that need a node port picked.
    pick: Vec<usize>,
    /// The health-check node port needs to be picked.
    pick_health_check: bool,
}

/// Defaults the cluster-IP fields of a Service that has a cluster IP: `clusterIPs` from `clusterIP`,
/// and single-stack IPv4.
fn default_ip_families(new: &mut Value) {
    let s = spec_mut(new);
    if let Some(ip) = s.get("clusterIP").cloned()
        && !s.contains_key("clusterIPs")
    {
        s.insert("clusterIPs".into(), json!([ip]));
    }
    s.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
    s.entry("ipFamilyPolicy")
        .or_insert_with(|| json!("SingleStack"));
}

/// Allocates cluster IPs from a service CIDR and node ports from a port range, without collisions.
#[derive(Debug)]
pub(crate) struct ServiceAllocator {
    base: u32,
    prefix: u8,
    size: u32,
    ips: HashSet<u32>,
    port_lo: u16,
    port_hi: u16,
    ports: HashSet<u16>,
    rng: SplitMix64,
}

/// Parses `a.b.c.d/n` into (network address, prefix length).
pub(crate) fn parse_cidr(cidr: &str) -> Option<(u32, u8)> {
    let (ip, len) = cidr.split_once('/')?;
    let ip: Ipv4Addr = ip.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    if !(1..=30).contains(&len) {
        return None;
    }
    let mask = u32::MAX << (32 - u32::from(len));
    Some((u32::from(ip) & mask, len))
}

impl ServiceAllocator {
    /// A new allocator for `cidr` (already validated) and the node port range `lo..=hi`.
    pub(crate) fn new(cidr: (u32, u8), port_lo: u16, port_hi: u16, seed: u64) -> Self {
        let size = 1u32 << (32 - u32::from(cidr.1));
        Self {
            base: cidr.0,
            prefix: cidr.1,
            size,
            ips: HashSet::new(),
            port_lo,
            port_hi,
            ports: HashSet::new(),
            rng: SplitMix64::new(seed),
        }
    }

    fn cidr_string(&self) -> String {
        format!("{}/{}", Ipv4Addr::from(self.base), self.prefix)
    }

    fn in_range_ip(&self, ip: u32) -> bool {
        ip > self.base && ip < self.base + self.size - 1
    }

    fn pick_ip(&mut self) -> Option<u32> {
        // Skip the network address, the first host (reserved for the `kubernetes` service by
        // convention) and the broadcast address.
        let usable = self.size.saturating_sub(3);
        if usable == 0 || self.ips.len() as u64 >= u64::from(usable) {
            return None;
        }
        for _ in 0..64 {
            let ip = self.base + 2 + (self.rng.next_u64() % u64::from(usable)) as u32;
            if !self.ips.contains(&ip) {
                return Some(ip);
            }
        }
        (self.base + 2..self.base + 2 + usable).find(|ip| !self.ips.contains(ip))
    }

    fn pick_port(&mut self, taken_now: &HashSet<u16>) -> Option<u16> {
        let span = u32::from(self.port_hi - self.port_lo) + 1;
        for _ in 0..64 {
            let p = self.port_lo + (self.rng.next_u64() % u64::from(span)) as u16;
            if !self.ports.contains(&p) && !taken_now.contains(&p) {
                return Some(p);
            }
        }
        (self.port_lo..=self.port_hi).find(|p| !self.ports.contains(p) && !taken_now.contains(p))
    }

    fn owned_ports(v: &Value) -> Vec<u16> {
        let mut out: Vec<u16> = v["spec"]["ports"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .filter_map(|p| p["nodePort"].as_u64())
                    .filter_map(|n| u16::try_from(n).ok())
                    .filter(|n| *n != 0)
                    .collect()
            })
            .unwrap_or_default();
        if let Some(hc) = v["spec"]["healthCheckNodePort"]
            .as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n != 0)
        {
            out.push(hc);
        }
        out
    }

    fn owned_ip(v: &Value) -> Option<u32> {
        v["spec"]["clusterIP"]
            .as_str()
            .and_then(|s| s.parse::<Ipv4Addr>().ok())
            .map(u32::from)
    }

    /// Fills in and reserves the cluster IP and node ports of `new`. `old` is the previous state on
    /// update (its reservations are kept or released). A refused request changes nothing; a full range
    /// is only found after the requested IP and ports are reserved.
    pub(crate) fn allocate(
        &mut self,
        new: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), Vec<FieldError>> {
        let old_ip = old.and_then(Self::owned_ip);
        let old_ports: Vec<u16> = old.map(Self::owned_ports).unwrap_or_default();
        let mut errs = Vec::new();
        let ip = self.check_cluster_ip(new, old_ip, &mut errs);
        let mut ports = self.check_node_ports(new, &old_ports, &mut errs);
        self.check_health_check_port(new, &old_ports, &mut ports, &mut errs);
        if !errs.is_empty() {
            return Err(errs);
        }
        self.reserve(old_ip, &old_ports, &ip, &ports);
        if ip.pick {
            self.assign_cluster_ip(new)?;
        }
        self.assign_node_ports(new, ports)?;
        if wants_cluster_ip(new) {
            default_ip_families(new);
        }
        order_spec(new);
        Ok(())
    }

    /// Checks the cluster IP `new` asks for: a named one must be in the range and free (unless `old`
    /// held it already); an empty one is to be picked; `None` (headless) needs none.
    fn check_cluster_ip(
        &self,
        new: &Value,
        old_ip: Option<u32>,
        errs: &mut Vec<FieldError>,
    ) -> ClusterIpRequest {
        let mut req = ClusterIpRequest::default();
        if !wants_cluster_ip(new) {
            return req;
        }
        let requested = new["spec"]["clusterIP"].as_str().unwrap_or("").to_string();
        if requested == "None" {
            // Headless: nothing to allocate.
        } else if requested.is_empty() {
            req.pick = true;
        } else if let Ok(ip) = requested.parse::<Ipv4Addr>() {
            let ip = u32::from(ip);
            req.named = Some(ip);
            if Some(ip) != old_ip {
                if !self.in_range_ip(ip) {
                    errs.push(FieldError::invalid_str(
                        "spec.clusterIPs[0]",
                        &requested,
                        format!(
                            "failed to allocate IP {requested}: the provided IP ({requested}) is not in the valid range. The range of valid IPs is {}",
                            self.cidr_string()
                        ),
                    ));
                } else if self.ips.contains(&ip) {
                    errs.push(FieldError::invalid_str(
                        "spec.clusterIPs[0]",
                        &requested,
                        format!(
                            "failed to allocate IP {requested}: provided IP is already allocated"
                        ),
                    ));
                } else {
                    req.reserve = Some(ip);
                }
            }
        }
        req
    }

    /// Checks the node ports `new` names (in the range, not twice, free unless `old` held them) and
    /// lists the ports that need one picked.
    fn check_node_ports(
        &self,
        new: &Value,
        old_ports: &[u16],
        errs: &mut Vec<FieldError>,
    ) -> NodePortRequest {
        let mut req = NodePortRequest::default();
        let ports_len = new["spec"]["ports"].as_array().map_or(0, Vec::len);
        let needs_ports = needs_node_ports(new);
        for i in 0..ports_len {
            let np = new["spec"]["ports"][i]["nodePort"].as_i64().unwrap_or(0);
            if np == 0 {
                if needs_ports {
                    req.pick.push(i);
                }
                continue;
            }
            let field = format!("spec.ports[{i}].nodePort");
            match u16::try_from(np) {
                Ok(p) if p >= self.port_lo && p <= self.port_hi => {
                    if !req.taken_now.insert(p) {
                        errs.push(FieldError::duplicate(field, np.to_string()));
                    } else if !old_ports.contains(&p) && self.ports.contains(&p) {
                        errs.push(FieldError::invalid(field, np.to_string(), "provided port is already allocated"));
                    } else {
                        req.fixed.push(p);
                    }
                }
                _ => errs.push(FieldError::invalid(
                    field,
                    np.to_string(),
                    format!(
                        "provided port is not in the valid range. The range of valid ports is {}-{}",
                        self.port_lo, self.port_hi
                    ),
                )),
            }
        }
        req
    }

    /// Checks the health-check node port of a Service that needs one: a named one must be in the range
    /// and free; none means one is to be picked.
    fn check_health_check_port(
        &self,
        new: &Value,
        old_ports: &[u16],
        req: &mut NodePortRequest,
        errs: &mut Vec<FieldError>,
    ) {
        if !needs_health_check(new) {
            return;
        }
        let hc = new["spec"]["healthCheckNodePort"].as_i64().unwrap_or(0);
        if hc == 0 {
            req.pick_health_check = true;
            return;
        }
        match u16::try_from(hc) {
            Ok(p)
                if p >= self.port_lo
                    && p <= self.port_hi
                    && (old_ports.contains(&p) || !self.ports.contains(&p))
                    && req.taken_now.insert(p) =>
            {
                req.fixed.push(p);
            }
            _ => errs.push(FieldError::invalid(
                "spec.healthCheckNodePort",
                hc.to_string(),
                "provided port is already allocated or not in the valid range",
            )),
        }
    }

    /// Commits what was checked: releases what the old object held first, so that its ports may be
    /// reused by the new state, then reserves the named ports and IP.
    fn reserve(
        &mut self,
        old_ip: Option<u32>,
        old_ports: &[u16],
        ip: &ClusterIpRequest,
        ports: &NodePortRequest,
    ) {
        if let Some(old) = old_ip
            && Some(old) != ip.named
        {
            self.ips.remove(&old);
        }
        for p in old_ports {
            self.ports.remove(p);
        }
        for p in &ports.fixed {
            self.ports.insert(*p);
        }
        if let Some(reserved) = ip.reserve {
            self.ips.insert(reserved);
        }
        if let Some(named) = ip.named {
            self.ips.insert(named);
        }
    }

    /// Picks a free cluster IP for `new` and sets `clusterIP` and `clusterIPs`.
    fn assign_cluster_ip(&mut self, new: &mut Value) -> Result<(), Vec<FieldError>> {
        let Some(ip) = self.pick_ip() else {
            return Err(vec![FieldError::invalid(
                "spec.clusterIPs",
                "[]",
                "failed to allocate IP: range is full",
            )]);
        };
        self.ips.insert(ip);
        let ip_s = Ipv4Addr::from(ip).to_string();
        let s = spec_mut(new);
        s.insert("clusterIP".into(), json!(ip_s));
        s.insert("clusterIPs".into(), json!([ip_s]));
        Ok(())
    }

    /// Picks the node ports (and health-check node port) `new` still needs, each distinct from the
    /// others of the object.
    fn assign_node_ports(
        &mut self,
        new: &mut Value,
        mut req: NodePortRequest,
    ) -> Result<(), Vec<FieldError>> {
        let mut full = false;
        for i in req.pick {
            match self.pick_port(&req.taken_now) {
                Some(p) => {
                    req.taken_now.insert(p);
                    self.ports.insert(p);
                    if let Some(pm) = new["spec"]["ports"][i].as_object_mut() {
                        pm.insert("nodePort".into(), json!(p));
                    }
                }
                None => full = true,
            }
        }
        if req.pick_health_check {
            match self.pick_port(&req.taken_now) {
                Some(p) => {
                    self.ports.insert(p);
                    spec_mut(new).insert("healthCheckNodePort".into(), json!(p));
                }
                None => full = true,
            }
        }
        if full {
            return Err(vec![FieldError::invalid(
                "spec.ports",
                "[]",
                "failed to allocate a nodePort: range is full",
            )]);
        }
        Ok(())
    }

    /// Releases everything `v` holds (final deletion).
    pub(crate) fn release(&mut self, v: &Value) {
        if let Some(ip) = Self::owned_ip(v) {
            self.ips.remove(&ip);
        }
        for p in Self::owned_ports(v) {
            self.ports.remove(&p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc() -> ServiceAllocator {
        ServiceAllocator::new(parse_cidr("10.96.0.0/12").unwrap(), 30000, 32767, 7)
    }

    #[test]
    fn defaults_like_golden_lb() {
        let mut v = json!({"metadata":{"name":"lb-svc"},"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local",
            "selector":{"app":"web"},"ports":[{"name":"http","protocol":"TCP","port":80,"targetPort":8080},{"name":"dns","protocol":"UDP","port":53}]}});
        default_service(&mut v);
        let mut a = alloc();
        a.allocate(&mut v, None).unwrap();
        let s = &v["spec"];
        assert_eq!(s["ports"][1]["targetPort"], 53);
        assert!(s["ports"][0]["nodePort"].as_u64().unwrap() >= 30000);
        assert_ne!(s["ports"][0]["nodePort"], s["ports"][1]["nodePort"]);
        assert!(s["healthCheckNodePort"].as_u64().is_some());
        assert_eq!(s["clusterIPs"][0], s["clusterIP"]);
        assert_eq!(s["ipFamilies"], json!(["IPv4"]));
        assert_eq!(s["ipFamilyPolicy"], "SingleStack");
        assert_eq!(s["sessionAffinity"], "None");
        assert_eq!(s["internalTrafficPolicy"], "Cluster");
        assert_eq!(s["allocateLoadBalancerNodePorts"], true);
        assert_eq!(v["status"], json!({"loadBalancer":{}}));
        let keys: Vec<&String> = s.as_object().unwrap().keys().collect();
        assert_eq!(keys[0], "ports");
        assert_eq!(keys[keys.len() - 1], "internalTrafficPolicy");
        assert!(validate(&v).is_empty());
    }

    #[test]
    fn invalid_services() {
        let mut v = json!({"metadata":{"name":"bad-svc"},"spec":{"type":"LoadBalancer","ports":[{"name":"http","protocol":"TCP","port":0}]}});
        default_service(&mut v);
        let fields: Vec<String> = validate(&v).iter().map(|e| e.field.clone()).collect();
        assert_eq!(fields, ["spec.ports[0].port", "spec.ports[0].targetPort"]);

        let mut v = json!({"metadata":{"name":"bad-svc"},"spec":{"externalTrafficPolicy":"Local","ports":[{"port":80}]}});
        default_service(&mut v);
        assert_eq!(validate(&v)[0].field, "spec.externalTrafficPolicy");

        let mut v = json!({"metadata":{"name":"Bad_Svc"},"spec":{"ports":[{"name":"a","port":80},{"name":"a","port":80}]}});
        default_service(&mut v);
        let errs = validate(&v);
        let fields: Vec<String> = errs.iter().map(|e| e.field.clone()).collect();
        assert_eq!(
            fields,
            ["metadata.name", "spec.ports[1].name", "spec.ports[1]"]
        );
        assert!(
            errs[2]
                .message()
                .starts_with("Duplicate value: core.ServicePort{Name:\"\", Protocol:\"TCP\"")
        );
    }

    #[test]
    fn explicit_ports_collide() {
        let mut a = alloc();
        let mut one = json!({"metadata":{"name":"a"},"spec":{"type":"NodePort","ports":[{"port":80,"nodePort":30080}]}});
        default_service(&mut one);
        a.allocate(&mut one, None).unwrap();
        let mut two = json!({"metadata":{"name":"b"},"spec":{"type":"NodePort","ports":[{"port":80,"nodePort":30080}]}});
        default_service(&mut two);
        let errs = a.allocate(&mut two, None).unwrap_err();
        assert_eq!(
            errs[0].full(),
            "spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated"
        );
        a.release(&one);
        a.allocate(&mut two, None).unwrap();
    }

    #[test]
    fn update_keeps_and_releases() {
        let mut a = alloc();
        let mut lb =
            json!({"metadata":{"name":"a"},"spec":{"type":"LoadBalancer","ports":[{"port":80}]}});
        default_service(&mut lb);
        a.allocate(&mut lb, None).unwrap();
        let np = lb["spec"]["ports"][0]["nodePort"].clone();
        // A PUT that leaves allocated values out keeps them.
        let mut put =
            json!({"metadata":{"name":"a"},"spec":{"type":"LoadBalancer","ports":[{"port":80}]}});
        carry_allocations(&mut put, &lb);
        default_service(&mut put);
        a.allocate(&mut put, Some(&lb)).unwrap();
        assert_eq!(put["spec"]["ports"][0]["nodePort"], np);
        assert_eq!(put["spec"]["clusterIP"], lb["spec"]["clusterIP"]);
        assert!(validate_update(&put, &lb).is_empty());
        // Switching to ClusterIP drops the unchanged node port and releases it.
        let mut cip = put.clone();
        cip["spec"]["type"] = json!("ClusterIP");
        carry_allocations(&mut cip, &put);
        default_service(&mut cip);
        a.allocate(&mut cip, Some(&put)).unwrap();
        assert!(cip["spec"]["ports"][0].get("nodePort").is_none());
        assert!(cip["spec"].get("allocateLoadBalancerNodePorts").is_none());
        assert!(validate(&cip).is_empty(), "{:?}", validate(&cip));
        let port = u16::try_from(np.as_u64().unwrap()).unwrap();
        assert!(!a.ports.contains(&port));
    }
}
