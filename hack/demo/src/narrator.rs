//! The narrated timeline: a watch on Nodes and Services that prints each change the CCM makes, as it
//! happens, with the time since the start.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Instant;

use ccm_e2e::well_known::*;
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};

static START: OnceLock<Instant> = OnceLock::new();

fn stamp() -> String {
    let elapsed = START.get_or_init(Instant::now).elapsed().as_secs_f32();
    format!("[{elapsed:5.1}s]")
}

/// Prints a step of the script.
pub fn say(text: impl AsRef<str>) {
    println!("{} >> {}", stamp(), text.as_ref());
}

/// Prints something the CCM did.
pub fn tell(text: impl AsRef<str>) {
    println!("{}    {}", stamp(), text.as_ref());
}

/// What the narrator remembers about a node, to tell what changed.
#[derive(Default, Clone, PartialEq)]
struct NodeView {
    provider_id: Option<String>,
    uninitialized: bool,
    shutdown: bool,
    routed: bool,
    ready: bool,
}

impl NodeView {
    fn of(node: &Node) -> NodeView {
        NodeView {
            provider_id: provider_id(node).map(str::to_string),
            uninitialized: has_taint(node, UNINITIALIZED_TAINT),
            shutdown: has_taint(node, SHUTDOWN_TAINT),
            routed: condition(node, "NetworkUnavailable").is_some_and(|c| {
                c.status == "False" && c.reason.as_deref() == Some("RouteCreated")
            }),
            ready: is_ready(node),
        }
    }
}

fn describe_node_change(node: &Node, before: Option<&NodeView>) -> Vec<String> {
    let name = node_name(node);
    let now = NodeView::of(node);
    let mut lines = Vec::new();
    let Some(before) = before else {
        // The watch may first see a node after the CCM already handled it: tell both steps.
        let seen_late = NodeView {
            uninitialized: true,
            routed: false,
            ..now.clone()
        };
        let ip = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
            .map(|a| a.address.clone())
            .unwrap_or_default();
        lines.push(format!(
            "{name} registered by its kubelet: InternalIP {ip}, pod CIDR {}{}",
            pod_cidrs(node).join(","),
            if now.uninitialized {
                ", tainted uninitialized"
            } else {
                ""
            }
        ));
        if !now.uninitialized && now.provider_id.is_some() {
            lines.extend(describe_node_change(node, Some(&seen_late)));
        }
        return lines;
    };
    if before.uninitialized && !now.uninitialized {
        let labels = labels(node);
        let get = |k: &str| labels.get(k).cloned().unwrap_or_else(|| "?".into());
        lines.push(format!(
            "{name} initialized by the CCM: provider ID {}, zone {}, region {}, type {}",
            now.provider_id.as_deref().unwrap_or("?"),
            get(ZONE_LABEL),
            get(REGION_LABEL),
            get(INSTANCE_TYPE_LABEL)
        ));
    }
    if !before.routed && now.routed {
        lines.push(format!(
            "route created for {name}'s pod CIDR {} (NetworkUnavailable=False, RouteCreated)",
            pod_cidrs(node).join(",")
        ));
    }
    if before.ready && !now.ready {
        lines.push(format!(
            "{name} is no longer Ready (its kubelet stopped reporting)"
        ));
    }
    if !before.ready && now.ready {
        lines.push(format!("{name} is Ready again"));
    }
    if !before.shutdown && now.shutdown {
        lines.push(format!(
            "{name} tainted {SHUTDOWN_TAINT}: its instance is shut down"
        ));
    }
    if before.shutdown && !now.shutdown {
        lines.push(format!("{name} lost the shutdown taint"));
    }
    lines
}

fn describe_service_change(svc: &Service, before: Option<&Vec<String>>) -> Vec<String> {
    let name = format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any());
    let now = ingress(svc);
    match before {
        None => {
            let mut lines = vec![format!(
                "Service {name} created: type {}, ports {}",
                svc.spec
                    .as_ref()
                    .and_then(|s| s.type_.clone())
                    .unwrap_or_default(),
                service_ports(svc).join(",")
            )];
            if !now.is_empty() {
                lines.push(format!(
                    "Service {name} has load-balancer IP {}",
                    now.join(",")
                ));
            }
            lines
        }
        Some(before) if *before != now => {
            if now.is_empty() {
                vec![format!("Service {name} lost its load-balancer IP")]
            } else {
                vec![format!(
                    "Service {name} got load-balancer IP {}",
                    now.join(",")
                )]
            }
        }
        Some(_) => Vec::new(),
    }
}

enum Change {
    Node(Box<Event<Node>>),
    Service(Box<Event<Service>>),
}

/// What the narrator has seen so far.
#[derive(Default)]
struct Views {
    nodes: BTreeMap<String, NodeView>,
    services: BTreeMap<String, Vec<String>>,
}

impl Views {
    fn node_event(&mut self, event: Event<Node>) {
        match event {
            Event::Apply(node) | Event::InitApply(node) => {
                let name = node_name(&node).to_string();
                for line in describe_node_change(&node, self.nodes.get(&name)) {
                    tell(line);
                }
                self.nodes.insert(name, NodeView::of(&node));
            }
            Event::Delete(node) => {
                let name = node_name(&node).to_string();
                tell(format!(
                    "{name} deleted by the CCM: its instance no longer exists"
                ));
                self.nodes.remove(&name);
            }
            Event::Init | Event::InitDone => {}
        }
    }

    fn service_event(&mut self, event: Event<Service>) {
        match event {
            Event::Apply(svc) | Event::InitApply(svc) => {
                let key = format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any());
                for line in describe_service_change(&svc, self.services.get(&key)) {
                    tell(line);
                }
                self.services.insert(key, ingress(&svc));
            }
            Event::Delete(svc) => {
                let key = format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any());
                tell(format!("Service {key} deleted"));
                self.services.remove(&key);
            }
            Event::Init | Event::InitDone => {}
        }
    }
}

/// The running narrator.
pub struct Narrator {
    task: tokio::task::JoinHandle<()>,
}

impl Narrator {
    /// Starts watching; times are measured from `start`.
    pub fn start(client: Client, start: Instant) -> Narrator {
        let _ = START.set(start);
        let nodes = watcher::watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
            .default_backoff()
            .map(|e| e.map(|e| Change::Node(Box::new(e))));
        let services = watcher::watcher(Api::<Service>::all(client), watcher::Config::default())
            .default_backoff()
            .map(|e| e.map(|e| Change::Service(Box::new(e))));
        let task = tokio::spawn(async move {
            let mut changes = stream::select(Box::pin(nodes), Box::pin(services));
            let mut views = Views::default();
            while let Some(change) = changes.next().await {
                match change {
                    Ok(Change::Node(event)) => views.node_event(*event),
                    Ok(Change::Service(event)) => views.service_event(*event),
                    Err(err) => tell(format!("(watch interrupted: {err}; resuming)")),
                }
            }
        });
        Narrator { task }
    }

    /// Stops watching.
    pub fn stop(self) {
        self.task.abort();
    }
}
