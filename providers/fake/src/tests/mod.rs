//! Behaviour tests of the fake cloud through the provider traits, the control handle and the admin API.

mod admin;
mod admission;
mod cloud;
mod data_path;
mod declared;

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Service, ServicePort, ServiceSpec};

use crate::FakeCloud;

pub(crate) fn cloud(yaml: &str) -> FakeCloud {
    FakeCloud::from_yaml(yaml.as_bytes()).unwrap()
}

pub(crate) fn node(name: &str) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.to_string());
    n
}

pub(crate) fn node_with(name: &str, provider_id: Option<&str>, addrs: &[(&str, &str)]) -> Node {
    let mut n = node(name);
    n.spec = Some(NodeSpec {
        provider_id: provider_id.map(str::to_string),
        ..Default::default()
    });
    n.status = Some(NodeStatus {
        addresses: Some(
            addrs
                .iter()
                .map(|(t, a)| cloud_provider::node_address(t, a))
                .collect(),
        ),
        ..Default::default()
    });
    n
}

pub(crate) fn service(name: &str, uid: &str, ports: &[(i32, i32)]) -> Service {
    let mut s = Service::default();
    s.metadata.name = Some(name.to_string());
    s.metadata.namespace = Some("default".to_string());
    s.metadata.uid = Some(uid.to_string());
    s.spec = Some(ServiceSpec {
        type_: Some("LoadBalancer".to_string()),
        ports: Some(
            ports
                .iter()
                .map(|(port, node_port)| ServicePort {
                    port: *port,
                    node_port: Some(*node_port),
                    protocol: Some("TCP".to_string()),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    });
    s
}
