//! `/configz`: the effective configuration, in the shape upstream's cloud-controller-manager serves it
//! (`{"cloudcontrollermanager.config.k8s.io": <CloudControllerManagerConfiguration v1alpha1>}`, Go field
//! names as keys, durations as Go prints them), so tools that read upstream's `/configz` read this
//! daemon's too. The flags only this daemon has are under the extra key `cloudControllerManagerRs`.

use serde_json::{Value, json};

use crate::duration::format_duration;
use crate::options::Options;

/// The name upstream registers its configuration under.
pub const CONFIGZ_NAME: &str = "cloudcontrollermanager.config.k8s.io";

/// The `/configz` document of `options`.
pub fn document(options: &Options) -> Value {
    let g = &options.generic;
    let c = &options.controllers;
    let le = &options.leader_election;
    let go = |d: std::time::Duration| Value::String(format_duration(d));
    let path = |p: &Option<std::path::PathBuf>| {
        Value::String(
            p.as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        )
    };
    let status_updates = if c.concurrent_node_status_updates > 0 {
        c.concurrent_node_status_updates
    } else {
        c.concurrent_node_syncs
    };
    let webhooks = if options.webhook.webhooks.is_empty() {
        Value::Null
    } else {
        json!(options.webhook.webhooks)
    };
    json!({
        CONFIGZ_NAME: {
            "kind": "CloudControllerManagerConfiguration",
            "apiVersion": "cloudcontrollermanager.config.k8s.io/v1alpha1",
            "Generic": {
                "Port": 0,
                "Address": "0.0.0.0",
                "MinResyncPeriod": go(g.min_resync_period),
                "ClientConnection": {
                    "kubeconfig": path(&g.kubeconfig),
                    "acceptContentTypes": "",
                    "contentType": g.kube_api_content_type,
                    "qps": g.kube_api_qps,
                    "burst": g.kube_api_burst,
                },
                "ControllerStartInterval": go(g.controller_start_interval),
                "LeaderElection": {
                    "leaderElect": le.leader_elect,
                    "leaseDuration": go(le.leader_elect_lease_duration),
                    "renewDeadline": go(le.leader_elect_renew_deadline),
                    "retryPeriod": go(le.leader_elect_retry_period),
                    "resourceLock": le.leader_elect_resource_lock,
                    "resourceName": le.leader_elect_resource_name,
                    "resourceNamespace": le.leader_elect_resource_namespace,
                },
                "Controllers": g.controllers,
                "Debugging": {
                    "enableProfiling": options.serving.profiling,
                    "enableContentionProfiling": options.serving.contention_profiling,
                },
                "LeaderMigrationEnabled": le.enable_leader_migration,
                "LeaderMigration": {
                    "leaderName": "",
                    "resourceLock": "",
                    "controllerLeaders": null,
                },
            },
            "KubeCloudShared": {
                "CloudProvider": {
                    "Name": g.cloud_provider.clone().unwrap_or_default(),
                    "CloudConfigFile": path(&g.cloud_config),
                },
                "ExternalCloudVolumePlugin": g.external_cloud_volume_plugin,
                "UseServiceAccountCredentials": g.use_service_account_credentials,
                "AllowUntaggedCloud": g.allow_untagged_cloud,
                "RouteReconciliationPeriod": go(c.route_reconciliation_period),
                "ClusterName": g.cluster_name,
                "ClusterCIDR": g.cluster_cidr,
                "AllocateNodeCIDRs": g.allocate_node_cidrs,
                "CIDRAllocatorType": g.cidr_allocator_type,
                "ConfigureCloudRoutes": g.configure_cloud_routes,
                "NodeSyncPeriod": go(g.node_sync_period),
            },
            "NodeController": {
                "ConcurrentNodeSyncs": c.concurrent_node_syncs,
                "ConcurrentNodeStatusUpdates": status_updates,
            },
            "NodeLifecycleController": {
                "NodeMonitorPeriod": go(c.node_monitor_period),
                "ConcurrentNodeLifecycleSyncs": c.concurrent_node_lifecycle_syncs,
            },
            "ServiceController": {
                "ConcurrentServiceSyncs": c.concurrent_service_syncs,
            },
            "NodeStatusUpdateFrequency": go(c.node_status_update_frequency),
            "Webhook": {
                "Webhooks": webhooks,
            },
        },
        "cloudControllerManagerRs": {
            "cloudCallTimeout": go(c.cloud_call_timeout),
            "instanceExistsGracePeriod": go(c.instance_exists_grace_period),
            "nodeDeletionMaxPercent": c.node_deletion_max_percent,
            "featureGates": g.feature_gates,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn upstreams_shape_with_the_effective_values() {
        let options = Options::try_parse_from([
            "ccm",
            "--cloud-provider=fake",
            "--concurrent-node-syncs=3",
            "--min-resync-period=1h",
            "--leader-elect=false",
        ])
        .unwrap();
        let doc = document(&options);
        let config = &doc[CONFIGZ_NAME];
        assert_eq!(config["kind"], "CloudControllerManagerConfiguration");
        assert_eq!(config["Generic"]["MinResyncPeriod"], "1h0m0s");
        assert_eq!(config["Generic"]["LeaderElection"]["leaderElect"], false);
        assert_eq!(config["Generic"]["LeaderElection"]["leaseDuration"], "15s");
        assert_eq!(config["Generic"]["ClientConnection"]["qps"], 20.0);
        assert_eq!(config["KubeCloudShared"]["CloudProvider"]["Name"], "fake");
        assert_eq!(
            config["KubeCloudShared"]["CIDRAllocatorType"],
            "RangeAllocator"
        );
        assert_eq!(config["NodeController"]["ConcurrentNodeSyncs"], 3);
        assert_eq!(config["NodeController"]["ConcurrentNodeStatusUpdates"], 3);
        assert_eq!(config["NodeLifecycleController"]["NodeMonitorPeriod"], "5s");
        assert_eq!(config["NodeStatusUpdateFrequency"], "5m0s");
        assert_eq!(config["Webhook"]["Webhooks"], Value::Null);
    }
}
