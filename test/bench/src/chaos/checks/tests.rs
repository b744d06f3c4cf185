use super::*;
use crate::workload::{initialized_node, load_balancer_service, tainted_node};
use provider_fake::{InstanceConfig, LoadBalancerConfig};

fn expected() -> Expected {
    Expected {
        nodes: 4,
        services: 3,
        stopped: [node_name(1)].into(),
        terminated: [node_name(2)].into(),
        deleted_services: [service_name(0)].into(),
    }
}

fn shutdown_tainted(index: usize) -> Node {
    let mut node = initialized_node(index, false);
    node.spec.get_or_insert_default().taints = Some(vec![
        serde_json::from_value(serde_json::json!({"key": TAINT_SHUTDOWN, "effect": "NoSchedule"}))
            .unwrap(),
    ]);
    node
}

fn service_with(index: usize, uid: &str, ip: Option<&str>) -> Service {
    let mut s = load_balancer_service(index);
    s.metadata.uid = Some(uid.into());
    if let Some(ip) = ip {
        s.status = Some(
            serde_json::from_value(serde_json::json!({"loadBalancer": {"ingress": [{"ip": ip}]}}))
                .unwrap(),
        );
    }
    s
}

fn balancer(index: usize, uid: &str, ip: &str, nodes: &[usize]) -> LoadBalancerConfig {
    serde_json::from_value(serde_json::json!({
        "serviceUID": uid,
        "service": format!("default/{}", service_name(index)),
        "ip": ip,
        "nodes": nodes.iter().map(|i| node_name(*i)).collect::<Vec<_>>(),
    }))
    .unwrap()
}

fn victim(index: usize, state: InitialState) -> InstanceConfig {
    InstanceConfig {
        state,
        ..InstanceConfig::named(node_name(index))
    }
}

#[test]
fn the_converged_state_has_no_problems() {
    let e = expected();
    let nodes = vec![
        initialized_node(0, true),
        shutdown_tainted(1),
        initialized_node(3, true),
    ];
    let services = vec![
        service_with(1, "u1", Some("100.64.0.1")),
        service_with(2, "u2", Some("100.64.0.2")),
    ];
    let mut problems = Problems::default();
    check_nodes(&nodes, &e, &mut problems);
    let facts = check_services(&services, &e, &mut problems);
    let cloud = FakeConfig {
        load_balancers: vec![
            balancer(1, "u1", "100.64.0.1", &[3, 0, 1]),
            balancer(2, "u2", "100.64.0.2", &[0, 1, 3]),
        ],
        instances: vec![
            victim(1, InitialState::Stopped),
            victim(2, InitialState::Terminated),
        ],
        ..FakeConfig::default()
    };
    check_cloud(&cloud, &e, &facts, &mut problems);
    assert!(problems.is_empty(), "{:?}", problems.lines());
}

#[test]
fn every_kind_of_divergence_is_named() {
    let e = expected();
    let nodes = vec![
        tainted_node(0),
        initialized_node(1, false),
        initialized_node(2, false),
        shutdown_tainted(3),
    ];
    let services = vec![
        service_with(0, "u0", Some("100.64.0.9")),
        service_with(1, "u1", Some("100.64.0.1")),
        service_with(2, "u2", None),
    ];
    let mut problems = Problems::default();
    check_nodes(&nodes, &e, &mut problems);
    let facts = check_services(&services, &e, &mut problems);
    let cloud = FakeConfig {
        load_balancers: vec![
            balancer(0, "u0", "100.64.0.9", &[0, 1, 3]),
            balancer(1, "u1-old", "100.64.0.7", &[0, 1]),
        ],
        instances: vec![victim(1, InitialState::Stopped)],
        ..FakeConfig::default()
    };
    check_cloud(&cloud, &e, &facts, &mut problems);
    let lines = problems.lines();
    let expected_lines = [
        "deleted service still present: 1 (bench-svc-00000)",
        "ingress differs from the load balancer's IP: 1 (default/bench-svc-00001)",
        "instance stopped but no shutdown taint: 1 (bench-node-00001)",
        "instance terminated but the node is not deleted: 1 (bench-node-00002)",
        "load balancer backends are not the remaining nodes: 1 (default/bench-svc-00001 (2 of 3))",
        "load balancer of a deleted or unknown service: 1 (default/bench-svc-00000)",
        "load balancer of another service UID: 1 (default/bench-svc-00001)",
        "node still has the uninitialized taint: 1 (bench-node-00000)",
        "service without a load balancer: 1 (bench-svc-00002)",
        "service without ingress: 1 (bench-svc-00002)",
        "shutdown taint on a running instance: 1 (bench-node-00003)",
        "victim instance not in its state in the cloud: 1 (bench-node-00002)",
    ];
    assert_eq!(lines, expected_lines);

    // A missing node, a duplicate load balancer and an IP given twice.
    let mut problems = Problems::default();
    check_nodes(&[], &e, &mut problems);
    let facts = check_services(
        &[
            service_with(1, "u1", Some("100.64.0.1")),
            service_with(2, "u2", Some("100.64.0.1")),
        ],
        &e,
        &mut problems,
    );
    let cloud = FakeConfig {
        load_balancers: vec![
            balancer(1, "u1", "100.64.0.1", &[0, 1, 3]),
            balancer(1, "u1", "100.64.0.1", &[0, 1, 3]),
            balancer(2, "u2", "100.64.0.1", &[0, 1, 3]),
        ],
        ..FakeConfig::default()
    };
    check_cloud(&cloud, &e, &facts, &mut problems);
    let lines = problems.lines();
    assert!(
        lines.contains(&"node deleted although its instance exists: 3 (bench-node-00000, bench-node-00001, bench-node-00003)".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"duplicate load balancers: 1 (bench-svc-00001 (2))".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(
            &"ingress IP given twice: 1 (100.64.0.1: bench-svc-00001, bench-svc-00002)".to_string()
        ),
        "{lines:?}"
    );
}

#[test]
fn long_problem_lists_are_cut() {
    let mut problems = Problems::default();
    for i in 0..5 {
        problems.add("service missing", format!("s{i}"));
    }
    assert_eq!(problems.lines(), ["service missing: 5 (s0, s1, s2, ...)"]);
}
