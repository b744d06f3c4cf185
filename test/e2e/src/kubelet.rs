//! Simulated kubelets: Node objects registered the way a kubelet running with `--cloud-provider=external`
//! registers them, kept Ready by a heartbeat.
//!
//! A registered node carries the `node.cloudprovider.kubernetes.io/uninitialized` taint, its addresses
//! (an InternalIP and the Hostname), the `alpha.kubernetes.io/provided-node-ip` annotation, pod CIDRs
//! (which kube-controller-manager's IPAM would otherwise assign) and a Ready condition. The heartbeat
//! rewrites the Ready condition through `nodes/status` every [`HEARTBEAT_PERIOD`] and at once when the
//! desired readiness changes. Marking a node not ready plays what kube-controller-manager's node
//! lifecycle does when a kubelet stops posting status: `Ready=Unknown`.
//!
//! On a real cluster ("existing" mode) the fleet does not register anything; it can still hold a node
//! `Ready=Unknown` for a while (re-asserting it against the real kubelet) and hand it back.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::HarnessError;
use crate::well_known::{PROVIDED_NODE_IP_ANNOTATION, UNINITIALIZED_TAINT};

/// How often a Ready node's heartbeat is written.
pub const HEARTBEAT_PERIOD: Duration = Duration::from_secs(5);
/// How often a node held not ready is re-asserted (a real kubelet may overwrite it).
const OVERRIDE_PERIOD: Duration = Duration::from_secs(1);
/// How often the fleet wakes up.
const TICK: Duration = Duration::from_millis(250);

/// What a simulated kubelet registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulatedNode {
    /// The node name (also the hostname).
    pub name: String,
    /// The InternalIP the kubelet reports (and the provided node IP).
    pub internal_ip: Ipv4Addr,
    /// The pod CIDRs.
    pub pod_cidrs: Vec<String>,
}

impl SimulatedNode {
    /// The `index`-th node of a fleet named `prefix`: name `<prefix>-<index>`, InternalIP `10.0.0.<index+10>`,
    /// pod CIDR `10.244.<index>.0/24` (inside the suite's cluster CIDR 10.244.0.0/16).
    pub fn numbered(prefix: &str, index: u8) -> SimulatedNode {
        SimulatedNode {
            name: format!("{prefix}-{index}"),
            internal_ip: Ipv4Addr::new(10, 0, 0, index.saturating_add(10)),
            pod_cidrs: vec![format!("10.244.{index}.0/24")],
        }
    }

    /// The Node object a kubelet with `--cloud-provider=external` creates.
    pub fn to_node(&self) -> Result<Node, HarnessError> {
        let now = Timestamp::now().to_string();
        let value = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
                "annotations": {
                    PROVIDED_NODE_IP_ANNOTATION: self.internal_ip.to_string(),
                },
            },
            "spec": {
                "podCIDR": self.pod_cidrs.first(),
                "podCIDRs": self.pod_cidrs,
                "taints": [{
                    "key": UNINITIALIZED_TAINT,
                    "value": "true",
                    "effect": "NoSchedule",
                }],
            },
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": self.internal_ip.to_string()},
                    {"type": "Hostname", "address": self.name},
                ],
                "conditions": [ready_condition(Readiness::Ready, &now, &now)],
                "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": "",
                    "containerRuntimeVersion": "containerd://1.7.0",
                    "kernelVersion": "6.1.0",
                    "kubeProxyVersion": "",
                    "kubeletVersion": "v1.33.0",
                    "machineID": "",
                    "operatingSystem": "linux",
                    "osImage": "simulated",
                    "systemUUID": "",
                },
            },
        });
        serde_json::from_value(value)
            .map_err(|e| HarnessError::Config(format!("building node {}: {e}", self.name)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Readiness {
    Ready,
    Unknown,
}

fn ready_condition(readiness: Readiness, heartbeat: &str, transition: &str) -> serde_json::Value {
    let (status, reason, message) = match readiness {
        Readiness::Ready => ("True", "KubeletReady", "kubelet is posting ready status"),
        Readiness::Unknown => (
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
        ),
    };
    json!({
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": heartbeat,
        "lastTransitionTime": transition,
    })
}

#[derive(Debug)]
struct Heartbeat {
    readiness: Readiness,
    /// True for nodes the fleet registered; false for a real node held not ready.
    owned: bool,
    transition: String,
    written: Option<(Readiness, Instant)>,
}

impl Heartbeat {
    fn due(&self, now: Instant) -> bool {
        match self.written {
            None => true,
            Some((readiness, _)) if readiness != self.readiness => true,
            Some((Readiness::Ready, at)) => now.duration_since(at) >= HEARTBEAT_PERIOD,
            Some((Readiness::Unknown, at)) => {
                now.duration_since(at)
                    >= if self.owned {
                        HEARTBEAT_PERIOD
                    } else {
                        OVERRIDE_PERIOD
                    }
            }
        }
    }
}

type Beats = Arc<Mutex<BTreeMap<String, Heartbeat>>>;

/// The simulated kubelets of one run. Dropping the fleet stops every heartbeat.
#[derive(Debug)]
pub struct KubeletFleet {
    nodes: Api<Node>,
    beats: Beats,
    task: tokio::task::JoinHandle<()>,
}

impl KubeletFleet {
    /// Starts the heartbeat loop (it writes through `client`).
    pub fn start(client: Client) -> KubeletFleet {
        let nodes: Api<Node> = Api::all(client);
        let beats: Beats = Arc::default();
        let task = tokio::spawn(heartbeat_loop(nodes.clone(), beats.clone()));
        KubeletFleet { nodes, beats, task }
    }

    /// Registers a node the way its kubelet would, and keeps it Ready.
    pub async fn register(&self, node: &SimulatedNode) -> Result<Node, HarnessError> {
        let created = self
            .nodes
            .create(&PostParams::default(), &node.to_node()?)
            .await
            .map_err(|e| HarnessError::kube(format!("registering node {}", node.name), e))?;
        let now = Timestamp::now().to_string();
        self.lock().insert(
            node.name.clone(),
            Heartbeat {
                readiness: Readiness::Ready,
                owned: true,
                transition: now,
                written: Some((Readiness::Ready, Instant::now())),
            },
        );
        Ok(created)
    }

    /// The names of the nodes this fleet registered and still heart-beats.
    pub fn registered(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, beat)| beat.owned)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Marks a node Ready=Unknown (its kubelet stopped posting status) or Ready again.
    ///
    /// For a node the fleet does not own (a real cluster's node), not ready is re-asserted every second
    /// until it is marked ready again; then one Ready=True is written and the real kubelet takes over.
    pub async fn set_ready(&self, name: &str, ready: bool) -> Result<(), HarnessError> {
        let readiness = if ready {
            Readiness::Ready
        } else {
            Readiness::Unknown
        };
        let hand_back = {
            let mut beats = self.lock();
            let now = Timestamp::now().to_string();
            let beat = beats.entry(name.to_string()).or_insert_with(|| Heartbeat {
                readiness: Readiness::Ready,
                owned: false,
                transition: now.clone(),
                written: None,
            });
            if beat.readiness != readiness {
                beat.transition = now;
            }
            beat.readiness = readiness;
            if ready && !beat.owned {
                beats.remove(name).map(|beat| beat.transition)
            } else {
                None
            }
        };
        match hand_back {
            Some(transition) => write_ready(&self.nodes, name, Readiness::Ready, &transition).await,
            None => Ok(()),
        }
    }

    /// Stops the kubelet of a node for good (its node was, or is about to be, deleted).
    pub fn forget(&self, name: &str) {
        self.lock().remove(name);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Heartbeat>> {
        self.beats
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for KubeletFleet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn write_ready(
    nodes: &Api<Node>,
    name: &str,
    readiness: Readiness,
    transition: &str,
) -> Result<(), HarnessError> {
    let now = Timestamp::now().to_string();
    let patch = json!({"status": {"conditions": [ready_condition(readiness, &now, transition)]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .map(|_| ())
        .map_err(|e| HarnessError::kube(format!("posting the status of node {name}"), e))
}

async fn heartbeat_loop(nodes: Api<Node>, beats: Beats) {
    loop {
        tokio::time::sleep(TICK).await;
        let now = Instant::now();
        let due: Vec<(String, Readiness, String)> = {
            let beats = beats
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            beats
                .iter()
                .filter(|(_, beat)| beat.due(now))
                .map(|(name, beat)| (name.clone(), beat.readiness, beat.transition.clone()))
                .collect()
        };
        for (name, readiness, transition) in due {
            let result = write_ready(&nodes, &name, readiness, &transition).await;
            let mut beats = beats
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match result {
                Ok(()) => {
                    if let Some(beat) = beats.get_mut(&name) {
                        beat.written = Some((readiness, Instant::now()));
                    }
                }
                // The node is gone (deleted by the CCM when its instance vanished): nothing left to post.
                Err(HarnessError::Kube { source, .. }) if is_not_found(&source) => {
                    beats.remove(&name);
                }
                // Anything else is retried on the next tick, like a kubelet would.
                Err(_) => {}
            }
        }
    }
}

fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_node_looks_like_an_external_cloud_kubelet_made_it() {
        let node = SimulatedNode::numbered("e2e", 2).to_node().unwrap();
        assert_eq!(node.metadata.name.as_deref(), Some("e2e-2"));
        let spec = node.spec.unwrap();
        assert_eq!(spec.pod_cidrs.unwrap(), vec!["10.244.2.0/24".to_string()]);
        let taints = spec.taints.unwrap();
        assert_eq!(taints.len(), 1);
        assert_eq!(taints[0].key, UNINITIALIZED_TAINT);
        assert_eq!(taints[0].effect, "NoSchedule");
        let status = node.status.unwrap();
        let addresses = status.addresses.unwrap();
        assert_eq!(addresses[0].type_, "InternalIP");
        assert_eq!(addresses[0].address, "10.0.0.12");
        let ready = &status.conditions.unwrap()[0];
        assert_eq!(
            (ready.type_.as_str(), ready.status.as_str()),
            ("Ready", "True")
        );
        assert_eq!(
            node.metadata.annotations.unwrap()[PROVIDED_NODE_IP_ANNOTATION],
            "10.0.0.12"
        );
    }

    #[test]
    fn heartbeats_are_due_on_change_and_after_their_period() {
        let now = Instant::now();
        let mut beat = Heartbeat {
            readiness: Readiness::Ready,
            owned: true,
            transition: String::new(),
            written: Some((Readiness::Ready, now)),
        };
        assert!(!beat.due(now));
        assert!(beat.due(now + HEARTBEAT_PERIOD));
        beat.readiness = Readiness::Unknown;
        assert!(beat.due(now));
        beat.written = Some((Readiness::Unknown, now));
        assert!(!beat.due(now + OVERRIDE_PERIOD));
        beat.owned = false;
        assert!(beat.due(now + OVERRIDE_PERIOD));
    }
}
