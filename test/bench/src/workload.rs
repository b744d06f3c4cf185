//! The objects a benchmark creates (Nodes as a kubelet registers them, LoadBalancer Services) and the fake
//! cloud configuration the daemon runs with.

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{Node, Service};
use serde_json::json;

/// The taint a kubelet started with `--cloud-provider=external` registers its Node with.
pub const TAINT_UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// The taint the lifecycle controller puts on Nodes whose instance is shut down.
pub const TAINT_SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

/// The region of the fake cloud.
pub const REGION: &str = "bench-region-1";
/// The only zone of the fake cloud (one zone, so that pre-initialized Nodes can carry the right labels).
pub const ZONE: &str = "bench-region-1a";
/// The only instance type of the fake cloud.
pub const INSTANCE_TYPE: &str = "bench.standard";
/// The fake cloud's provider-ID scheme.
pub const PROVIDER_PREFIX: &str = "fake://";

/// The name of the `index`-th benchmark Node.
pub fn node_name(index: usize) -> String {
    format!("bench-node-{index:05}")
}

/// The name of the `index`-th benchmark Service.
pub fn service_name(index: usize) -> String {
    format!("bench-svc-{index:05}")
}

/// A distinct internal IP for the `index`-th Node (10.1.0.0 and up).
pub fn node_ip(index: usize) -> String {
    let i = index + 1;
    format!(
        "10.{}.{}.{}",
        1 + (i >> 16) % 254,
        (i >> 8) & 0xff,
        i & 0xff
    )
}

fn base_node(index: usize, ready: bool) -> serde_json::Value {
    let name = node_name(index);
    let (status, reason, message) = if ready {
        ("True", "KubeletReady", "kubelet is posting ready status")
    } else {
        ("False", "KubeletNotReady", "container runtime is down")
    };
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        },
        "spec": {},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": node_ip(index)},
                {"type": "Hostname", "address": name},
            ],
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "conditions": [{
                "type": "Ready",
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": "2025-01-01T00:00:00Z",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            }],
            "nodeInfo": {"kubeletVersion": "v1.34.0", "architecture": "amd64", "operatingSystem": "linux"},
        },
    })
}

fn to_node(value: serde_json::Value) -> Node {
    serde_json::from_value(value).expect("the benchmark's node template is a valid Node")
}

/// A Ready Node as a kubelet with `--cloud-provider=external` registers it: uninitialized taint, no provider
/// ID, no cloud labels.
pub fn tainted_node(index: usize) -> Node {
    let mut node = base_node(index, true);
    node["spec"]["taints"] = json!([{
        "key": TAINT_UNINITIALIZED,
        "value": "true",
        "effect": "NoSchedule",
    }]);
    to_node(node)
}

/// A Node the cloud-node-controller already initialized (provider ID, zone/region/instance-type labels in
/// both generations, no uninitialized taint), Ready or not.
pub fn initialized_node(index: usize, ready: bool) -> Node {
    let mut node = base_node(index, ready);
    let name = node_name(index);
    node["spec"]["providerID"] = json!(format!("{PROVIDER_PREFIX}{name}"));
    let labels = node["metadata"]["labels"]
        .as_object_mut()
        .expect("the template has labels");
    for (key, value) in [
        ("topology.kubernetes.io/region", REGION),
        ("failure-domain.beta.kubernetes.io/region", REGION),
        ("topology.kubernetes.io/zone", ZONE),
        ("failure-domain.beta.kubernetes.io/zone", ZONE),
        ("node.kubernetes.io/instance-type", INSTANCE_TYPE),
        ("beta.kubernetes.io/instance-type", INSTANCE_TYPE),
    ] {
        labels.insert(key.to_string(), json!(value));
    }
    to_node(node)
}

/// A `type: LoadBalancer` Service with one TCP port.
pub fn load_balancer_service(index: usize) -> Service {
    to_service(load_balancer_service_json(index))
}

/// A `type: LoadBalancer` Service with one TCP port and `allocateLoadBalancerNodePorts: false`: more
/// such Services fit a cluster than its NodePort range has ports (2,768 by default), as with load
/// balancers that reach pods directly.
pub fn load_balancer_service_without_node_ports(index: usize) -> Service {
    let mut service = load_balancer_service_json(index);
    service["spec"]["allocateLoadBalancerNodePorts"] = json!(false);
    to_service(service)
}

fn load_balancer_service_json(index: usize) -> serde_json::Value {
    let name = service_name(index);
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    })
}

fn to_service(value: serde_json::Value) -> Service {
    serde_json::from_value(value).expect("the benchmark's service template is a valid Service")
}

/// The label that keeps a Node out of every load balancer.
pub const LABEL_EXCLUDE_FROM_LB: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// An initialized Ready Node labelled out of every load balancer.
pub fn excluded_node(index: usize) -> Node {
    let mut node = initialized_node(index, true);
    node.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(LABEL_EXCLUDE_FROM_LB.to_string(), String::new());
    node
}

/// Whether the Node still carries the uninitialized taint.
pub fn is_uninitialized(node: &Node) -> bool {
    has_taint(node, TAINT_UNINITIALIZED)
}

/// Whether the Node carries a taint with this key.
pub fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

/// The first ingress IP (or hostname) of the Service's load-balancer status.
pub fn ingress_of(service: &Service) -> Option<String> {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .and_then(|list| list.first())
        .and_then(|i| i.ip.clone().or_else(|| i.hostname.clone()))
}

/// Explicit fake-cloud instances for the lifecycle scenario.
#[derive(Debug, Clone, Default)]
pub struct ExplicitInstances {
    /// Node names whose instances exist but are shut down.
    pub stopped: Vec<String>,
    /// Node names whose instances are terminated (gone).
    pub terminated: Vec<String>,
}

/// How the benchmark's fake cloud behaves beyond its instances.
#[derive(Debug, Clone, Copy, Default)]
pub struct CloudBehaviour {
    /// Auto-discovered instances report an ExternalIP besides the kubelet's addresses.
    pub external_ips: bool,
    /// Every call's latency is waited to within tens of microseconds (`preciseLatency`).
    pub precise_latency: bool,
}

/// The fake cloud's `--cloud-config`: one region and zone, one instance type, every call delayed by
/// `latency_ms`, the admin API on `admin_port`, and the explicit instances (every other Node is an
/// auto-discovered running instance).
pub fn cloud_config(
    latency_ms: u64,
    admin_port: u16,
    explicit: &ExplicitInstances,
    behaviour: CloudBehaviour,
) -> String {
    let CloudBehaviour {
        external_ips,
        precise_latency,
    } = behaviour;
    let mut yaml = format!(
        "clusterID: bench\n\
         clusterName: kubernetes\n\
         region: {REGION}\n\
         zones: [{ZONE}]\n\
         instanceTypes: [{INSTANCE_TYPE}]\n\
         loadBalancerCIDR: 100.64.0.0/16\n\
         adminAddress: 127.0.0.1:{admin_port}\n\
         discoveredExternalIPs: {external_ips}\n\
         faults:\n  \"*\": {{latencyMs: {latency_ms}}}\n"
    );
    // Written only when on, so that a daemon from before the setting reads the other scenarios' config.
    if precise_latency {
        yaml.push_str("preciseLatency: true\n");
    }
    if !explicit.stopped.is_empty() || !explicit.terminated.is_empty() {
        yaml.push_str("instances:\n");
        for (names, state) in [
            (&explicit.stopped, "stopped"),
            (&explicit.terminated, "terminated"),
        ] {
            for name in names {
                let _ = writeln!(yaml, "  - {{name: {name}, state: {state}}}");
            }
        }
    }
    yaml
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ips_are_distinct_and_stable() {
        assert_eq!(node_name(7), "bench-node-00007");
        assert_eq!(service_name(12), "bench-svc-00012");
        let ips: std::collections::HashSet<String> = (0..70_000).map(node_ip).collect();
        assert_eq!(ips.len(), 70_000);
        assert_eq!(node_ip(0), "10.1.0.1");
        assert!(
            ips.iter()
                .all(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok())
        );
    }

    #[test]
    fn tainted_nodes_look_like_kubelet_registrations() {
        let node = tainted_node(3);
        assert!(is_uninitialized(&node));
        assert!(node.spec.as_ref().unwrap().provider_id.is_none());
        let status = node.status.as_ref().unwrap();
        assert_eq!(status.addresses.as_ref().unwrap()[0].address, "10.1.0.4");
        assert_eq!(status.conditions.as_ref().unwrap()[0].status, "True");
    }

    #[test]
    fn initialized_nodes_carry_provider_id_and_both_label_generations() {
        let node = initialized_node(1, false);
        assert!(!is_uninitialized(&node));
        assert_eq!(
            node.spec.as_ref().unwrap().provider_id.as_deref(),
            Some("fake://bench-node-00001")
        );
        let labels = node.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["topology.kubernetes.io/zone"], ZONE);
        assert_eq!(labels["failure-domain.beta.kubernetes.io/zone"], ZONE);
        assert_eq!(labels["beta.kubernetes.io/instance-type"], INSTANCE_TYPE);
        let ready = &node.status.as_ref().unwrap().conditions.as_ref().unwrap()[0];
        assert_eq!(
            (ready.type_.as_str(), ready.status.as_str()),
            ("Ready", "False")
        );
    }

    #[test]
    fn services_want_a_load_balancer() {
        let svc = load_balancer_service(0);
        let spec = svc.spec.as_ref().unwrap();
        assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
        assert!(spec.load_balancer_class.is_none());
        assert_eq!(ingress_of(&svc), None);
        let without = load_balancer_service_without_node_ports(1);
        let spec = without.spec.as_ref().unwrap();
        assert_eq!(spec.allocate_load_balancer_node_ports, Some(false));
        assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
        let excluded = excluded_node(2);
        assert!(
            excluded
                .metadata
                .labels
                .as_ref()
                .unwrap()
                .contains_key(LABEL_EXCLUDE_FROM_LB)
        );
        assert!(!is_uninitialized(&excluded));
    }

    #[test]
    fn cloud_config_lists_explicit_instances_and_latency() {
        let explicit = ExplicitInstances {
            stopped: vec!["a".into()],
            terminated: vec!["b".into(), "c".into()],
        };
        let yaml = cloud_config(20, 4242, &explicit, CloudBehaviour::default());
        assert!(yaml.contains("\"*\": {latencyMs: 20}"));
        assert!(yaml.contains("adminAddress: 127.0.0.1:4242"));
        assert!(yaml.contains("  - {name: a, state: stopped}\n"));
        assert!(yaml.contains("  - {name: c, state: terminated}\n"));
        let plain = cloud_config(
            5,
            1,
            &ExplicitInstances::default(),
            CloudBehaviour {
                external_ips: true,
                precise_latency: true,
            },
        );
        assert!(plain.contains("discoveredExternalIPs: true"));
        assert!(plain.contains("preciseLatency: true"));
        assert!(!yaml.contains("preciseLatency"));
        assert!(!plain.contains("instances:"));
    }

    #[test]
    fn the_fake_provider_accepts_the_cloud_config() {
        let explicit = ExplicitInstances {
            stopped: vec![node_name(0)],
            terminated: vec![node_name(1)],
        };
        let cloud = provider_fake::FakeCloud::from_yaml(
            cloud_config(
                20,
                0,
                &explicit,
                CloudBehaviour {
                    external_ips: true,
                    precise_latency: true,
                },
            )
            .as_bytes(),
        )
        .expect("valid fake cloud config");
        let live = cloud.handle().instances();
        assert_eq!(live.len(), 1, "the terminated instance is only a tombstone");
        assert_eq!(live[0].name, node_name(0));
        assert_eq!(live[0].zone, ZONE);
        assert_eq!(live[0].instance_type, INSTANCE_TYPE);
        let faults = cloud.handle().faults();
        assert_eq!(faults["*"].latency_ms, 20);
    }
}
