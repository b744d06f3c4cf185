//! Pure decisions of the service-lb-controller: which Services want a load balancer, which need cleanup,
//! which changes require a re-sync, and which Nodes belong behind a load balancer.

use std::collections::BTreeMap;

use crate::cached_node::CachedNode;
use cloud_provider::well_known::{
    FINALIZER_LOAD_BALANCER_CLEANUP, LABEL_EXCLUDE_FROM_EXTERNAL_LB,
    TAINT_TO_BE_DELETED_BY_AUTOSCALER,
};
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Node, Service, SessionAffinityConfig,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The Service `spec.type` handled by this controller.
pub const SERVICE_TYPE_LOAD_BALANCER: &str = "LoadBalancer";

/// True when the Service asks this controller for a cloud load balancer: `type: LoadBalancer` and no
/// `spec.loadBalancerClass` (a class means another implementation owns the load balancer).
pub fn wants_load_balancer(service: &Service) -> bool {
    service.spec.as_ref().is_some_and(|spec| {
        spec.type_.as_deref() == Some(SERVICE_TYPE_LOAD_BALANCER)
            && spec.load_balancer_class.is_none()
    })
}

/// True when the Service carries the load-balancer cleanup finalizer.
pub fn has_cleanup_finalizer(service: &Service) -> bool {
    service
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER_LOAD_BALANCER_CLEANUP))
}

/// True when the Service still holds the cleanup finalizer but is being deleted or is no longer of type
/// LoadBalancer: its load balancer must be deleted and the finalizer released.
pub fn needs_cleanup(service: &Service) -> bool {
    if !has_cleanup_finalizer(service) {
        return false;
    }
    if service.metadata.deletion_timestamp.is_some() {
        return true;
    }
    service.spec.as_ref().and_then(|s| s.type_.as_deref()) != Some(SERVICE_TYPE_LOAD_BALANCER)
}

/// True when the Service must go through the deletion flow (delete the load balancer, release the
/// finalizer) rather than the ensure flow.
pub fn should_delete(service: &Service) -> bool {
    !wants_load_balancer(service) || needs_cleanup(service)
}

/// One Service port as far as the load balancer is concerned.
#[derive(Debug, Clone, PartialEq)]
struct LbPort {
    name: Option<String>,
    protocol: Option<String>,
    port: i32,
    node_port: Option<i32>,
    target_port: Option<IntOrString>,
    app_protocol: Option<String>,
}

/// The parts of a Service that, when changed, require its load balancer to be synced again.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncFingerprint {
    wants_load_balancer: bool,
    uid: Option<String>,
    source_ranges: Option<Vec<String>>,
    ports: Vec<LbPort>,
    session_affinity: Option<String>,
    session_affinity_config: Option<SessionAffinityConfig>,
    load_balancer_ip: Option<String>,
    external_ips: Vec<String>,
    annotations: BTreeMap<String, String>,
    external_traffic_policy: Option<String>,
    health_check_node_port: Option<i32>,
    ip_family_count: usize,
}

impl SyncFingerprint {
    /// Extracts the fingerprint of a Service.
    pub fn of(service: &Service) -> Self {
        let spec = service.spec.clone().unwrap_or_default();
        SyncFingerprint {
            wants_load_balancer: wants_load_balancer(service),
            uid: service.metadata.uid.clone(),
            source_ranges: spec.load_balancer_source_ranges,
            ports: spec
                .ports
                .unwrap_or_default()
                .into_iter()
                .map(|p| LbPort {
                    name: p.name,
                    protocol: p.protocol,
                    port: p.port,
                    node_port: p.node_port,
                    target_port: p.target_port,
                    app_protocol: p.app_protocol,
                })
                .collect(),
            session_affinity: spec.session_affinity,
            session_affinity_config: spec.session_affinity_config,
            load_balancer_ip: spec.load_balancer_ip,
            external_ips: spec.external_ips.unwrap_or_default(),
            annotations: service.metadata.annotations.clone().unwrap_or_default(),
            external_traffic_policy: spec.external_traffic_policy,
            health_check_node_port: spec.health_check_node_port,
            ip_family_count: spec.ip_families.map_or(0, |f| f.len()),
        }
    }

    /// Whether a Service that changed from `old` to `self` needs its load balancer synced again.
    /// Services that neither wanted nor want a load balancer never do.
    pub fn needs_update_from(&self, old: &SyncFingerprint) -> bool {
        if !old.wants_load_balancer && !self.wants_load_balancer {
            return false;
        }
        self != old
    }
}

/// Decides whether a watch notification about `current` should queue the Service for a sync, given the
/// fingerprint recorded the last time the Service was seen (None for a Service seen for the first time).
pub fn should_enqueue(previous: Option<&SyncFingerprint>, current: &Service) -> bool {
    if needs_cleanup(current) {
        return true;
    }
    let fingerprint = SyncFingerprint::of(current);
    match previous {
        None => fingerprint.wants_load_balancer,
        Some(old) => fingerprint.needs_update_from(old),
    }
}

/// True when two load-balancer statuses carry the same ingress points (absent and empty are equal).
pub fn load_balancer_status_equal(a: &LoadBalancerStatus, b: &LoadBalancerStatus) -> bool {
    fn ingress(status: &LoadBalancerStatus) -> &[LoadBalancerIngress] {
        status.ingress.as_deref().unwrap_or_default()
    }
    ingress(a) == ingress(b)
}

/// The current load-balancer status recorded on a Service (empty when absent).
pub fn current_status(service: &Service) -> LoadBalancerStatus {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.clone())
        .unwrap_or_default()
}

/// True when `newer` is `older` changed only where this controller writes: its status (and resourceVersion)
/// and the load-balancer cleanup finalizer; the same identity, labels, annotations, other finalizers,
/// deletion state and spec.
pub fn differs_in_status_only(older: &Service, newer: &Service) -> bool {
    fn other_finalizers(service: &Service) -> impl Iterator<Item = &String> {
        service
            .metadata
            .finalizers
            .iter()
            .flatten()
            .filter(|f| *f != FINALIZER_LOAD_BALANCER_CLEANUP)
    }
    let (a, b) = (&older.metadata, &newer.metadata);
    a.uid == b.uid
        && a.name == b.name
        && a.namespace == b.namespace
        && a.generation == b.generation
        && a.labels == b.labels
        && a.annotations == b.annotations
        && other_finalizers(older).eq(other_finalizers(newer))
        && a.owner_references == b.owner_references
        && a.deletion_timestamp == b.deletion_timestamp
        && a.deletion_grace_period_seconds == b.deletion_grace_period_seconds
        && a.creation_timestamp == b.creation_timestamp
        && older.spec == newer.spec
}

/// Parses a boolean the way Kubernetes label values are usually parsed (Go `strconv.ParseBool`).
fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// True when a Node may serve as a load-balancer backend: it is not being deleted, it is not excluded by
/// the `node.kubernetes.io/exclude-from-external-load-balancers` label (a value that does not parse as a
/// boolean excludes it, `false` keeps it) and the cluster autoscaler has not marked it for removal.
/// Readiness is deliberately not a criterion: a flapping node must not churn every load balancer.
pub fn is_load_balancer_node(node: &CachedNode) -> bool {
    !node.is_terminating()
        && is_included(node)
        && !node.has_taint(TAINT_TO_BE_DELETED_BY_AUTOSCALER)
}

/// True when the `node.kubernetes.io/exclude-from-external-load-balancers` label does not exclude the node
/// (absent, or a boolean `false`; any other value excludes it). A change of this alone (or of a node's
/// presence or provider ID) re-targets every load balancer, as upstream's stable node set (KEP-3458) has
/// it; a deletion timestamp or the autoscaler's taint take effect at the next sync instead.
pub fn is_included(node: &CachedNode) -> bool {
    match node.label(LABEL_EXCLUDE_FROM_EXTERNAL_LB) {
        Some(value) => parse_bool(value) == Some(false),
        None => true,
    }
}

/// Filters nodes down to the load-balancer backends, sorted by name so the provider sees a stable order.
pub fn load_balancer_nodes<'a>(nodes: impl IntoIterator<Item = &'a CachedNode>) -> Vec<Node> {
    let mut hosts: Vec<&CachedNode> = nodes
        .into_iter()
        .filter(|n| is_load_balancer_node(n))
        .collect();
    hosts.sort_by(|a, b| a.name().cmp(b.name()));
    hosts.into_iter().map(CachedNode::to_node).collect()
}

/// Node names for an event message: at most `limit` of them.
pub fn limited_node_names(nodes: &[Node], limit: usize) -> Vec<String> {
    nodes
        .iter()
        .take(limit)
        .map(|n| n.metadata.name.clone().unwrap_or_default())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, ServicePort, ServiceSpec, ServiceStatus, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn lb_service() -> Service {
        Service {
            metadata: kube::api::ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("uid-1".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ports: Some(vec![ServicePort {
                    port: 80,
                    node_port: Some(30080),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn with_finalizer(mut s: Service) -> Service {
        s.metadata.finalizers = Some(vec![FINALIZER_LOAD_BALANCER_CLEANUP.into()]);
        s
    }

    fn deleting(mut s: Service) -> Service {
        s.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        s
    }

    fn set_type(mut s: Service, t: &str) -> Service {
        s.spec.as_mut().unwrap().type_ = Some(t.into());
        s
    }

    #[test]
    fn a_status_change_alone_is_told_from_other_changes() {
        let older = lb_service();
        let mut newer = lb_service();
        newer.metadata.resource_version = Some("8".into());
        newer.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![LoadBalancerIngress {
                    ip: Some("198.51.100.1".into()),
                    ..Default::default()
                }]),
            }),
            ..Default::default()
        });
        assert!(differs_in_status_only(&older, &newer));
        assert!(differs_in_status_only(
            &older,
            &with_finalizer(newer.clone())
        ));
        let mut other_finalizer = newer.clone();
        other_finalizer.metadata.finalizers = Some(vec!["example.com/keep".into()]);
        assert!(!differs_in_status_only(&older, &other_finalizer));
        assert!(!differs_in_status_only(&older, &deleting(newer.clone())));
        assert!(!differs_in_status_only(
            &older,
            &set_type(newer.clone(), "ClusterIP")
        ));
        let mut labelled = newer;
        labelled.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
        assert!(!differs_in_status_only(&older, &labelled));
    }

    #[test]
    fn wants_load_balancer_requires_type_and_no_class() {
        assert!(wants_load_balancer(&lb_service()));
        assert!(!wants_load_balancer(&set_type(lb_service(), "ClusterIP")));
        let mut classed = lb_service();
        classed.spec.as_mut().unwrap().load_balancer_class = Some("example.com/other".into());
        assert!(!wants_load_balancer(&classed));
        assert!(should_delete(&classed));
        assert!(!wants_load_balancer(&Service::default()));
    }

    #[test]
    fn cleanup_needs_finalizer_and_deletion_or_type_change() {
        assert!(!needs_cleanup(&lb_service()));
        assert!(!needs_cleanup(&deleting(lb_service())));
        assert!(!needs_cleanup(&with_finalizer(lb_service())));
        assert!(needs_cleanup(&deleting(with_finalizer(lb_service()))));
        assert!(needs_cleanup(&with_finalizer(set_type(
            lb_service(),
            "NodePort"
        ))));
        assert!(should_delete(&deleting(with_finalizer(lb_service()))));
        assert!(!should_delete(&with_finalizer(lb_service())));
    }

    #[test]
    fn enqueue_rules() {
        let svc = lb_service();
        assert!(should_enqueue(None, &svc));
        assert!(!should_enqueue(None, &set_type(lb_service(), "ClusterIP")));
        let fp = SyncFingerprint::of(&svc);
        // Status and finalizer changes do not trigger a sync.
        let mut status_only = with_finalizer(svc.clone());
        status_only.status = Some(ServiceStatus::default());
        status_only.metadata.resource_version = Some("99".into());
        assert!(!should_enqueue(Some(&fp), &status_only));
        // Each trigger does.
        let mut changed = svc.clone();
        changed.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
        assert!(should_enqueue(Some(&fp), &changed));
        let mut changed = svc.clone();
        changed.metadata.uid = Some("uid-2".into());
        assert!(should_enqueue(Some(&fp), &changed));
        let mut changed = svc.clone();
        changed.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].node_port = Some(30081);
        assert!(should_enqueue(Some(&fp), &changed));
        let mut changed = svc.clone();
        changed.spec.as_mut().unwrap().load_balancer_source_ranges =
            Some(vec!["10.0.0.0/8".into()]);
        assert!(should_enqueue(Some(&fp), &changed));
        let mut changed = svc.clone();
        changed.spec.as_mut().unwrap().external_traffic_policy = Some("Local".into());
        assert!(should_enqueue(Some(&fp), &changed));
        let mut changed = svc.clone();
        changed.spec.as_mut().unwrap().ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
        assert!(should_enqueue(Some(&fp), &changed));
        assert!(should_enqueue(
            Some(&fp),
            &set_type(svc.clone(), "ClusterIP")
        ));
        // Cleanup always triggers.
        let fp_cleanup = SyncFingerprint::of(&deleting(with_finalizer(svc.clone())));
        assert!(should_enqueue(
            Some(&fp_cleanup),
            &deleting(with_finalizer(svc))
        ));
        // Non-LB services never need updates among themselves.
        let cip = set_type(lb_service(), "ClusterIP");
        let mut cip2 = cip.clone();
        cip2.metadata.annotations = Some([("x".to_string(), "y".to_string())].into());
        assert!(!should_enqueue(Some(&SyncFingerprint::of(&cip)), &cip2));
    }

    #[test]
    fn status_equality_treats_absent_as_empty() {
        let empty = LoadBalancerStatus::default();
        let empty_list = LoadBalancerStatus {
            ingress: Some(vec![]),
        };
        assert!(load_balancer_status_equal(&empty, &empty_list));
        let ip = LoadBalancerStatus {
            ingress: Some(vec![LoadBalancerIngress {
                ip: Some("198.51.100.1".into()),
                ..Default::default()
            }]),
        };
        assert!(!load_balancer_status_equal(&empty, &ip));
        assert!(load_balancer_status_equal(&ip, &ip.clone()));
        assert_eq!(current_status(&lb_service()), empty);
    }

    fn node(name: &str) -> Node {
        Node {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(format!("fake://{name}")),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn labelled(mut n: Node, value: &str) -> Node {
        n.metadata.labels = Some(
            [(
                LABEL_EXCLUDE_FROM_EXTERNAL_LB.to_string(),
                value.to_string(),
            )]
            .into(),
        );
        n
    }

    fn is_load_balancer_node(node: &Node) -> bool {
        super::is_load_balancer_node(&CachedNode::from(node.clone()))
    }

    #[test]
    fn node_predicates() {
        assert!(is_load_balancer_node(&node("a")));
        assert!(!is_load_balancer_node(&labelled(node("a"), "true")));
        assert!(!is_load_balancer_node(&labelled(node("a"), "")));
        assert!(!is_load_balancer_node(&labelled(node("a"), "maybe")));
        assert!(is_load_balancer_node(&labelled(node("a"), "false")));
        let mut gone = node("a");
        gone.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(!is_load_balancer_node(&gone));
        let mut scaled_down = node("a");
        scaled_down.spec.as_mut().unwrap().taints = Some(vec![Taint {
            key: TAINT_TO_BE_DELETED_BY_AUTOSCALER.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]);
        assert!(!is_load_balancer_node(&scaled_down));
        // A NotReady node stays a backend.
        let mut not_ready = node("a");
        not_ready.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            conditions: Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                type_: "Ready".into(),
                status: "False".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(is_load_balancer_node(&not_ready));
    }

    #[test]
    fn load_balancer_nodes_are_filtered_and_sorted() {
        let nodes = [node("b"), node("a"), labelled(node("c"), "true")].map(CachedNode::from);
        let hosts = load_balancer_nodes(&nodes);
        assert_eq!(limited_node_names(&hosts, 5), vec!["a", "b"]);
        assert_eq!(limited_node_names(&hosts, 1), vec!["a"]);
        assert_eq!(
            hosts[0].spec.as_ref().unwrap().provider_id.as_deref(),
            Some("fake://a")
        );
        assert!(load_balancer_nodes(&[]).is_empty());
    }
}
