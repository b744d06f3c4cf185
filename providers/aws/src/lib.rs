//! The AWS cloud provider: EC2 instances, network load balancers through ELBv2, VPC routes and EBS volume
//! labels.
//!
//! Register it with [`register`] and select it with `--cloud-provider aws`; the `--cloud-config` file is the
//! INI file described in [`config`]. Capabilities:
//!
//! - [`InstancesV2`](cloud_provider::InstancesV2), [`Instances`](cloud_provider::Instances) and
//!   [`Zones`](cloud_provider::Zones): provider IDs `aws:///<zone>/<instance-id>`, node addresses in the
//!   upstream order, instance types, zones, the `topology.k8s.aws/zone-id` and network-node labels
//!   ([`topology`]), bulk lookups that put up
//!   to 150 IDs in one DescribeInstances filter, and a cache with bounded staleness (`InstanceCacheTTL`).
//! - [`LoadBalancer`](cloud_provider::LoadBalancer): NLBs (see [`load_balancer`]).
//! - [`Routes`](cloud_provider::Routes): pod routes in the cluster's route table.
//! - [`PvLabeler`](cloud_provider::PvLabeler): zone and region labels of EBS-backed volumes.
//! - [`ResourceTagger`](cloud_provider::ResourceTagger): the tagging controller's instance tags (see
//!   [`resource_tags`]).
//!
//! Every AWS call is counted in [`AwsMetrics`] under the upstream metric names, retried by the SDK in
//! standard or adaptive mode, and never logged with credentials. Every call that can change something
//! passes through the provider's [`MutationGate`](cloud_provider::MutationGate) (an SDK interceptor), which
//! stops it in a dry run.

pub mod client;
pub mod cloud;
pub mod config;
pub(crate) mod ec2_instance;
pub mod error;
pub mod ini;
pub mod instances;
pub mod load_balancer;
pub mod metrics;
mod mutation_gate;
mod paginate;
pub mod provider_id;
pub mod resource_tags;
pub mod routes;
pub mod tagging;
pub mod topology;
mod topology_cache;
pub mod volumes;

use std::sync::Arc;

use cloud_provider::{CloudProvider, Registry, RegistryError};

pub use cloud::{AwsCloud, AwsOptions, BuildError, build_from_config_bytes};
pub use config::{AwsService, CloudConfig, ConfigError, IpFamily, RetryMode, ServiceOverride};
pub use error::ApiError;
pub use metrics::AwsMetrics;
pub use provider_id::PROVIDER_NAME;
pub use tagging::ClusterTagging;

/// `tracing` filter directives that keep the AWS SDK's own logs at `info` and above.
///
/// The SDK logs the resolved identity (including the access key ID) at `debug` and the SigV4 canonical
/// request (including the session token) at `trace`. A process using this provider adds these directives
/// after its own, whatever the verbosity, e.g. `EnvFilter::new(format!("trace,{SDK_LOG_DIRECTIVES}"))`;
/// the provider's own logs never contain credentials at any level.
pub const SDK_LOG_DIRECTIVES: &str = "aws_config=info,aws_credential_types=info,aws_runtime=info,\
     aws_sigv4=info,aws_smithy_runtime=info,aws_smithy_runtime_api=info,aws_smithy_http_client=info,\
     aws_smithy_http=info,aws_smithy_types=info,aws_sdk_ec2=info,aws_sdk_elasticloadbalancingv2=info,\
     aws_sdk_sts=info";

/// Registers the provider as `aws`; fails when the name is taken.
pub fn try_register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register_fn(PROVIDER_NAME, |config| {
        let cloud = build_from_config_bytes(config)?;
        Ok(cloud as Arc<dyn CloudProvider>)
    })
}

/// Registers the provider as `aws`.
///
/// # Panics
///
/// When a provider named `aws` is already registered (a programming error in the daemon).
pub fn register(registry: &mut Registry) {
    if let Err(e) = try_register(registry) {
        panic!("registering the AWS cloud provider: {e}");
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    /// Every `.api("Operation")` / `from_sdk("Operation"` in a source file, with the IAM service prefix of
    /// the file's client.
    fn calls_in(path: &Path, out: &mut BTreeSet<String>) {
        let text = std::fs::read_to_string(path).unwrap();
        let service = match path.file_name().and_then(|n| n.to_str()) {
            Some("elbv2.rs" | "elb.rs") => "elasticloadbalancing",
            Some("client.rs") => "sts",
            _ => "ec2",
        };
        for marker in [".api(\"", "from_sdk(\""] {
            for part in text.split(marker).skip(1) {
                let op: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect();
                if !op.is_empty() && op.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
                    out.insert(format!("{service}:{op}"));
                }
            }
        }
    }

    fn walk(dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("lib.rs") {
                calls_in(&path, out);
            }
        }
    }

    /// The README's IAM policy lists every AWS call the code makes (it may grant more).
    #[test]
    fn iam_policy_matches_the_calls_in_the_code() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut calls = BTreeSet::new();
        walk(&root.join("src"), &mut calls);
        assert!(calls.contains("ec2:DescribeInstances"), "{calls:?}");
        assert!(
            calls.contains("elasticloadbalancing:CreateLoadBalancer"),
            "{calls:?}"
        );
        assert!(calls.contains("sts:AssumeRole"), "{calls:?}");

        let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
        let start = readme.find("```json").expect("policy block");
        let end = start
            + readme[start..]
                .find("\n```\n")
                .expect("end of policy block");
        let policy = &readme[start..end];
        let actions: BTreeSet<String> = policy
            .split('"')
            .filter(|s| {
                ["ec2:", "elasticloadbalancing:", "sts:"]
                    .iter()
                    .any(|p| s.starts_with(p))
            })
            .map(str::to_string)
            .collect();
        let missing: Vec<&String> = calls.difference(&actions).collect();
        let unused: Vec<&String> = actions.difference(&calls).collect();
        assert!(
            missing.is_empty() && unused.is_empty(),
            "calls missing from the policy: {missing:?}; actions the code never calls: {unused:?}"
        );
    }
}
