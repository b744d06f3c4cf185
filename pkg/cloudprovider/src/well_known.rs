//! Well-known taints, labels, annotations, finalizers and ports shared by the controllers and providers.

/// Taint kubelets started with `--cloud-provider=external` put on their Node until the node controller
/// has initialized it from the cloud.
pub const TAINT_UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// Taint the node-lifecycle controller puts on a NotReady node whose instance is shut down.
pub const TAINT_SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";
/// Taint the cluster autoscaler puts on nodes it is about to remove (such nodes leave load balancers).
pub const TAINT_TO_BE_DELETED_BY_AUTOSCALER: &str = "ToBeDeletedByClusterAutoscaler";
/// Annotation carrying the IP (or `v4,v6` pair) given to the kubelet with `--node-ip`.
pub const ANNOTATION_PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";
/// Annotation listing allowed client CIDRs of a LoadBalancer Service, used when the spec field is empty.
pub const ANNOTATION_LOAD_BALANCER_SOURCE_RANGES: &str =
    "service.beta.kubernetes.io/load-balancer-source-ranges";
/// GA instance-type label.
pub const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// Deprecated (beta) instance-type label, kept in sync with [`LABEL_INSTANCE_TYPE`].
pub const LABEL_INSTANCE_TYPE_BETA: &str = "beta.kubernetes.io/instance-type";
/// GA zone label.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
/// Deprecated (beta) zone label, kept in sync with [`LABEL_ZONE`].
pub const LABEL_ZONE_BETA: &str = "failure-domain.beta.kubernetes.io/zone";
/// GA region label.
pub const LABEL_REGION: &str = "topology.kubernetes.io/region";
/// Deprecated (beta) region label, kept in sync with [`LABEL_REGION`].
pub const LABEL_REGION_BETA: &str = "failure-domain.beta.kubernetes.io/region";
/// Node label that removes the node from every external load balancer.
pub const LABEL_EXCLUDE_FROM_EXTERNAL_LB: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";
/// Node hostname label set by kubelets.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// Finalizer the service controller puts on a LoadBalancer Service before creating its load balancer.
pub const FINALIZER_LOAD_BALANCER_CLEANUP: &str = "service.kubernetes.io/load-balancer-cleanup";
/// Default HTTPS port of the cloud-controller-manager.
pub const DEFAULT_SECURE_PORT: u16 = 10258;
