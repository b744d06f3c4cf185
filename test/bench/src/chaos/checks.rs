//! The state the chaos must end in, checked on the API server and in the fake cloud:
//!
//! - every Node is initialized (no uninitialized taint, provider ID `fake://<name>`, the cloud's labels),
//!   except those whose instance was terminated, which are deleted; those whose instance was stopped carry
//!   the shutdown taint; no other Node is deleted or tainted;
//! - every Service that was not deleted has its ingress (distinct IPs), the deleted ones are gone;
//! - the cloud holds exactly one load balancer per remaining Service (its UID, its ingress IP, every
//!   remaining Node as a backend) and none for anything else;
//! - the cloud still has the stopped and terminated instances as they were made.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Service};
use kube::ResourceExt;
use provider_fake::{FakeConfig, InitialState};

use crate::workload::{
    INSTANCE_TYPE, PROVIDER_PREFIX, TAINT_SHUTDOWN, ZONE, has_taint, ingress_of, is_uninitialized,
    node_name, service_name,
};

/// Names shown per kind of problem.
const EXAMPLES: usize = 3;

/// What the end state must be.
#[derive(Debug, Clone, Default)]
pub struct Expected {
    /// Nodes created (`node_name(0..nodes)`).
    pub nodes: usize,
    /// Services created (`service_name(0..services)`).
    pub services: usize,
    /// Nodes whose instance was stopped.
    pub stopped: BTreeSet<String>,
    /// Nodes whose instance was terminated.
    pub terminated: BTreeSet<String>,
    /// Services deleted midway.
    pub deleted_services: BTreeSet<String>,
}

impl Expected {
    /// The Services that stay.
    pub fn kept_services(&self) -> Vec<String> {
        (0..self.services)
            .map(service_name)
            .filter(|name| !self.deleted_services.contains(name))
            .collect()
    }

    /// The Nodes that stay, sorted.
    pub fn kept_nodes(&self) -> Vec<String> {
        (0..self.nodes)
            .map(node_name)
            .filter(|name| !self.terminated.contains(name))
            .collect()
    }
}

/// Problems by kind, each with the objects concerned.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Problems(BTreeMap<&'static str, Vec<String>>);

impl Problems {
    fn add(&mut self, problem: &'static str, object: impl Into<String>) {
        self.0.entry(problem).or_default().push(object.into());
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// One line per kind of problem: how many objects and the first few.
    pub fn lines(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|(problem, objects)| {
                let shown: Vec<&str> = objects.iter().take(EXAMPLES).map(String::as_str).collect();
                let more = if objects.len() > EXAMPLES {
                    ", ..."
                } else {
                    ""
                };
                format!("{problem}: {} ({}{more})", objects.len(), shown.join(", "))
            })
            .collect()
    }
}

/// What the cloud check needs of a remaining Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceFacts {
    /// Its UID.
    pub uid: String,
    /// Its ingress IP.
    pub ingress: Option<String>,
}

/// Checks the Nodes.
pub fn check_nodes(nodes: &[Node], expected: &Expected, problems: &mut Problems) {
    let by_name: BTreeMap<String, &Node> = nodes.iter().map(|n| (n.name_any(), n)).collect();
    for name in (0..expected.nodes).map(node_name) {
        let node = by_name.get(&name);
        if expected.terminated.contains(&name) {
            if node.is_some() {
                problems.add("instance terminated but the node is not deleted", name);
            }
            continue;
        }
        let Some(node) = node else {
            problems.add("node deleted although its instance exists", name);
            continue;
        };
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        let labels = node.labels();
        let label = |key: &str| labels.get(key).map(String::as_str);
        if is_uninitialized(node) {
            problems.add("node still has the uninitialized taint", name.clone());
        } else if provider_id != Some(format!("{PROVIDER_PREFIX}{name}").as_str()) {
            problems.add("node without its provider ID", name.clone());
        } else if label("topology.kubernetes.io/zone") != Some(ZONE)
            || label("node.kubernetes.io/instance-type") != Some(INSTANCE_TYPE)
        {
            problems.add("node without the cloud's labels", name.clone());
        }
        let tainted = has_taint(node, TAINT_SHUTDOWN);
        if expected.stopped.contains(&name) && !tainted {
            problems.add("instance stopped but no shutdown taint", name);
        } else if !expected.stopped.contains(&name) && tainted {
            problems.add("shutdown taint on a running instance", name);
        }
    }
}

/// Checks the Services; returns the facts of the remaining ones, by name.
pub fn check_services(
    services: &[Service],
    expected: &Expected,
    problems: &mut Problems,
) -> BTreeMap<String, ServiceFacts> {
    let by_name: BTreeMap<String, &Service> = services.iter().map(|s| (s.name_any(), s)).collect();
    for name in &expected.deleted_services {
        if by_name.contains_key(name) {
            problems.add("deleted service still present", name.clone());
        }
    }
    let mut facts = BTreeMap::new();
    let mut owner_of_ip: BTreeMap<String, String> = BTreeMap::new();
    for name in expected.kept_services() {
        let Some(service) = by_name.get(&name) else {
            problems.add("service missing", name);
            continue;
        };
        let ingress = ingress_of(service);
        match &ingress {
            None => problems.add("service without ingress", name.clone()),
            Some(ip) => {
                if let Some(other) = owner_of_ip.insert(ip.clone(), name.clone()) {
                    problems.add("ingress IP given twice", format!("{ip}: {other}, {name}"));
                }
            }
        }
        facts.insert(
            name,
            ServiceFacts {
                uid: service.uid().unwrap_or_default(),
                ingress,
            },
        );
    }
    facts
}

/// Checks the cloud against the remaining Services (`facts`) and Nodes.
pub fn check_cloud(
    cloud: &FakeConfig,
    expected: &Expected,
    facts: &BTreeMap<String, ServiceFacts>,
    problems: &mut Problems,
) {
    let backends = expected.kept_nodes();
    let mut balancers: BTreeMap<String, usize> = BTreeMap::new();
    for lb in &cloud.load_balancers {
        let name = lb
            .service
            .strip_prefix("default/")
            .unwrap_or(&lb.service)
            .to_string();
        *balancers.entry(name.clone()).or_insert(0) += 1;
        let Some(service) = facts.get(&name) else {
            problems.add(
                "load balancer of a deleted or unknown service",
                lb.service.clone(),
            );
            continue;
        };
        if lb.service_uid != service.uid {
            problems.add("load balancer of another service UID", lb.service.clone());
        }
        if lb.ip != service.ingress {
            problems.add(
                "ingress differs from the load balancer's IP",
                lb.service.clone(),
            );
        }
        let mut nodes = cloud.load_balancer_nodes(lb).to_vec();
        nodes.sort();
        if nodes != backends {
            problems.add(
                "load balancer backends are not the remaining nodes",
                format!("{} ({} of {})", lb.service, nodes.len(), backends.len()),
            );
        }
    }
    for name in facts.keys() {
        match balancers.get(name).copied().unwrap_or(0) {
            0 => problems.add("service without a load balancer", name.clone()),
            1 => {}
            n => problems.add("duplicate load balancers", format!("{name} ({n})")),
        }
    }
    let states: BTreeMap<&str, InitialState> = cloud
        .instances
        .iter()
        .map(|i| (i.name.as_str(), i.state))
        .collect();
    for (names, state) in [
        (&expected.stopped, InitialState::Stopped),
        (&expected.terminated, InitialState::Terminated),
    ] {
        for name in names {
            if states.get(name.as_str()) != Some(&state) {
                problems.add(
                    "victim instance not in its state in the cloud",
                    name.clone(),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
