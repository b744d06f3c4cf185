//! Tests of the patch engine: every patch case of the captured real-server sessions (golden cases 13-22 and 28-31)
//! replayed through [`apply`], the strategic-merge directives, the limits, and a deterministic pseudo-random
//! no-panic run over thousands of generated and mangled inputs.

use serde_json::{Value, json};

use super::value::depth_exceeds;
use super::*;

const INTERNAL_IP_10: &str = "10.0.1.10";

fn smp(resource: &str, original: &Value, patch: &str) -> Result<Value, PatchError> {
    apply(
        PatchType::StrategicMerge,
        resource,
        original,
        patch.as_bytes(),
    )
}

fn merge(resource: &str, original: &Value, patch: &str) -> Result<Value, PatchError> {
    apply(PatchType::Merge, resource, original, patch.as_bytes())
}

fn json_patch(resource: &str, original: &Value, patch: &str) -> Result<Value, PatchError> {
    apply(PatchType::Json, resource, original, patch.as_bytes())
}

/// `document` with the value at the JSON pointer `at` (whose parent must exist) set to `value`.
fn with(mut document: Value, at: &str, value: Value) -> Value {
    let (parent, name) = at.rsplit_once('/').expect("pointer has a parent");
    match document.pointer_mut(parent).expect("parent exists") {
        Value::Object(members) => {
            members.insert(name.replace("~1", "/").replace("~0", "~"), value);
        }
        Value::Array(items) => {
            let index: usize = name.parse().expect("array index");
            items[index] = value;
        }
        other => panic!("cannot set {at} under {other}"),
    }
    document
}

/// `document` without the member at the JSON pointer `at`.
fn without(mut document: Value, at: &str) -> Value {
    let (parent, name) = at.rsplit_once('/').expect("pointer has a parent");
    document
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .expect("parent object")
        .shift_remove(name);
    document
}

fn address(kind: &str, address: &str) -> Value {
    json!({"type": kind, "address": address})
}

fn uninitialized_taint() -> Value {
    json!({"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"})
}

fn not_ready_taint() -> Value {
    json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
}

/// node-a as stored before golden case 13.
fn node_a() -> Value {
    json!({
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": "node-a",
            "uid": "5eda7979-b38a-459a-a50a-07ff5c6f72ec",
            "resourceVersion": "203",
            "creationTimestamp": "2026-11-21T12:47:36Z",
            "labels": {"env": "dev", "topology.kubernetes.io/zone": "zone-1"},
            "managedFields": [{
                "manager": "golden-capture",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-11-21T12:47:38Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:env": {}}}}
            }]
        },
        "spec": {"taints": [uninitialized_taint(), not_ready_taint()]},
        "status": {
            "addresses": [address("InternalIP", INTERNAL_IP_10), address("Hostname", "node-a")],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
                "containerRuntimeVersion": "", "kubeletVersion": "", "kubeProxyVersion": "",
                "operatingSystem": "", "architecture": ""
            }
        }
    })
}

/// lb-svc as stored before golden case 28.
fn lb_svc() -> Value {
    json!({
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": {
            "name": "lb-svc",
            "namespace": "default",
            "uid": "cfdcfbcc-2255-4bbc-bb92-04eb77b2a7ba",
            "resourceVersion": "235",
            "creationTimestamp": "2026-11-21T12:47:43Z",
            "labels": {"app": "web"}
        },
        "spec": {
            "ports": [
                {"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080, "nodePort": 31436},
                {"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 53, "nodePort": 32621}
            ],
            "selector": {"app": "web"},
            "clusterIP": "10.0.0.3",
            "clusterIPs": ["10.0.0.3"],
            "type": "LoadBalancer",
            "sessionAffinity": "None",
            "externalTrafficPolicy": "Local",
            "healthCheckNodePort": 32546,
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "allocateLoadBalancerNodePorts": true,
            "internalTrafficPolicy": "Cluster"
        },
        "status": {"loadBalancer": {}}
    })
}

fn generic_invalid() -> Result<Value, PatchError> {
    Err(PatchError::Invalid(GENERIC_INVALID_MESSAGE.to_owned()))
}

// ---- golden 13: merge patch of labels -------------------------------------------------------------------------

#[test]
fn golden_13_merge_patch_adds_and_deletes_labels() {
    let result = merge(
        "nodes",
        &node_a(),
        r#"{"metadata":{"labels":{"team":"cloud","env":null}}}"#,
    )
    .unwrap();
    let expected = with(
        node_a(),
        "/metadata/labels",
        json!({"team": "cloud", "topology.kubernetes.io/zone": "zone-1"}),
    );
    assert_eq!(result, expected);
}

// ---- golden 14: JSON patch with test ----------------------------------------------------------------------------

fn node_a_team_cloud() -> Value {
    with(
        node_a(),
        "/metadata/labels",
        json!({"team": "cloud", "topology.kubernetes.io/zone": "zone-1"}),
    )
}

#[test]
fn golden_14_failing_test_operation_is_422_with_the_generic_message() {
    let patch = r#"[
  {"op": "test", "path": "/metadata/labels/team", "value": "wrong-value"},
  {"op": "replace", "path": "/metadata/labels/team", "value": "network"}
]"#;
    let error = json_patch("nodes", &node_a_team_cloud(), patch).unwrap_err();
    assert_eq!(error.status_code(), 422);
    assert_eq!(error.reason(), "Invalid");
    assert_eq!(
        error.to_string(),
        "the server rejected our request due to an error in our request"
    );
}

#[test]
fn golden_14_remove_of_a_missing_path_is_422() {
    let patch = r#"[
  {"op": "remove", "path": "/metadata/labels/does-not-exist"}
]"#;
    assert_eq!(
        json_patch("nodes", &node_a_team_cloud(), patch),
        generic_invalid()
    );
}

#[test]
fn golden_14_passing_test_then_replace() {
    let patch = r#"[
  {"op": "test", "path": "/metadata/labels/team", "value": "cloud"},
  {"op": "replace", "path": "/metadata/labels/team", "value": "network"}
]"#;
    let result = json_patch("nodes", &node_a_team_cloud(), patch).unwrap();
    assert_eq!(
        result,
        with(
            node_a_team_cloud(),
            "/metadata/labels/team",
            json!("network")
        )
    );
}

// ---- golden 15: spec.taints is atomic ---------------------------------------------------------------------------

#[test]
fn golden_15_delete_directive_in_taints_replaces_the_list() {
    // The real server then fails validation (effect is required): 422 from the server, not from the patch.
    let result = smp(
        "nodes",
        &node_a(),
        r#"{"spec":{"taints":[{"key":"node.kubernetes.io/not-ready","$patch":"delete"}]}}"#,
    )
    .unwrap();
    assert_eq!(
        result,
        with(
            node_a(),
            "/spec/taints",
            json!([{"key": "node.kubernetes.io/not-ready"}])
        )
    );

    let result = smp(
        "nodes",
        &node_a(),
        r#"{"spec":{"taints":[{"key":"node.kubernetes.io/not-ready","effect":"NoSchedule","$patch":"delete"}]}}"#,
    )
    .unwrap();
    assert_eq!(
        result,
        with(node_a(), "/spec/taints", json!([not_ready_taint()]))
    );
}

#[test]
fn golden_15_full_list_restores_and_removes_taints() {
    let only_not_ready = with(node_a(), "/spec/taints", json!([not_ready_taint()]));
    let restore = r#"{"spec":{"taints":[{"key":"node.cloudprovider.kubernetes.io/uninitialized","value":"true","effect":"NoSchedule"},{"key":"node.kubernetes.io/not-ready","effect":"NoSchedule"}]}}"#;
    assert_eq!(smp("nodes", &only_not_ready, restore).unwrap(), node_a());

    // PatchNodeTaints style: the remaining list plus metadata.resourceVersion (a precondition the server checks).
    let current = with(node_a(), "/metadata/resourceVersion", json!("207"));
    let result = smp(
        "nodes",
        &current,
        r#"{"metadata":{"resourceVersion":"207"},"spec":{"taints":[{"effect":"NoSchedule","key":"node.kubernetes.io/not-ready"}]}}"#,
    )
    .unwrap();
    assert_eq!(
        result,
        with(current, "/spec/taints", json!([not_ready_taint()]))
    );
    assert_eq!(
        result.pointer("/metadata/resourceVersion"),
        Some(&json!("207"))
    );
}

#[test]
fn golden_15_merge_patch_and_empty_list_replace_taints() {
    let result = merge(
        "nodes",
        &node_a(),
        r#"{"spec":{"taints":[{"key":"node.kubernetes.io/not-ready","effect":"NoSchedule"},{"key":"example.com/extra","value":"x","effect":"PreferNoSchedule"}]}}"#,
    )
    .unwrap();
    let extra = json!({"key": "example.com/extra", "value": "x", "effect": "PreferNoSchedule"});
    assert_eq!(
        result,
        with(node_a(), "/spec/taints", json!([not_ready_taint(), extra]))
    );

    // The typed server then omits the empty list (`spec: {}`); the engine leaves it empty.
    let result = smp("nodes", &node_a(), r#"{"spec":{"taints":[]}}"#).unwrap();
    assert_eq!(result, with(node_a(), "/spec/taints", json!([])));
}

// ---- golden 16 and 17: status.addresses merged by type ----------------------------------------------------------

fn with_addresses(addresses: Value) -> Value {
    with(node_a(), "/status/addresses", addresses)
}

#[test]
fn golden_16_addresses_merge_by_type() {
    let step1 = smp(
        "nodes",
        &node_a(),
        r#"{"status":{"addresses":[{"type":"InternalIP","address":"10.0.1.10"},{"type":"InternalIP","address":"10.0.1.11"}]}}"#,
    )
    .unwrap();
    let two = with_addresses(json!([
        address("InternalIP", "10.0.1.11"),
        address("Hostname", "node-a")
    ]));
    assert_eq!(
        step1, two,
        "two InternalIPs collapse into the first stored one, the last wins"
    );

    let step2 = smp(
        "nodes",
        &step1,
        r#"{"status":{"addresses":[{"type":"ExternalIP","address":"203.0.113.10"}]}}"#,
    )
    .unwrap();
    let three = with_addresses(json!([
        address("ExternalIP", "203.0.113.10"),
        address("InternalIP", "10.0.1.11"),
        address("Hostname", "node-a")
    ]));
    assert_eq!(step2, three, "a new type goes first");

    let step3 = smp(
        "nodes",
        &step2,
        r#"{"status":{"addresses":[{"type":"ExternalIP","$patch":"delete"}]}}"#,
    )
    .unwrap();
    assert_eq!(step3, two);
}

#[test]
fn golden_17_replace_directive_and_duplicate_types() {
    let start = with_addresses(json!([
        address("InternalIP", "10.0.1.11"),
        address("Hostname", "node-a")
    ]));
    let step1 = smp(
        "nodes",
        &start,
        r#"{"status":{"addresses":[{"type":"InternalIP","address":"10.0.1.10"},{"type":"InternalIP","address":"10.0.1.11"},{"type":"Hostname","address":"node-a"},{"$patch":"replace"}]}}"#,
    )
    .unwrap();
    assert_eq!(
        step1,
        with_addresses(json!([
            address("InternalIP", "10.0.1.10"),
            address("InternalIP", "10.0.1.11"),
            address("Hostname", "node-a")
        ])),
        "the list becomes exactly the patch list, duplicates kept"
    );

    let step2 = smp(
        "nodes",
        &step1,
        r#"{"status":{"addresses":[{"type":"InternalIP","address":"10.0.1.12"}]}}"#,
    )
    .unwrap();
    assert_eq!(
        step2,
        with_addresses(json!([
            address("InternalIP", "10.0.1.12"),
            address("InternalIP", "10.0.1.11"),
            address("Hostname", "node-a")
        ])),
        "only the first InternalIP is overwritten"
    );

    let step3 = smp(
        "nodes",
        &step2,
        r#"{"status":{"addresses":[{"type":"InternalIP","$patch":"delete"}]}}"#,
    )
    .unwrap();
    assert_eq!(
        step3,
        with_addresses(json!([address("Hostname", "node-a")])),
        "delete removes every match"
    );

    let step4 = smp(
        "nodes",
        &step3,
        r#"{"status":{"addresses":[{"type":"InternalIP","address":"10.0.1.10"},{"type":"Hostname","address":"node-a"},{"$patch":"replace"}]}}"#,
    )
    .unwrap();
    assert_eq!(step4, node_a());
}

// ---- golden 18: status.conditions merged by type ---------------------------------------------------------------

#[test]
fn golden_18_conditions_merge_field_by_field_and_follow_set_element_order() {
    let ready_false = json!({
        "type": "Ready", "status": "False",
        "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z",
        "reason": "KubeletNotReady", "message": "container runtime network not ready"
    });
    let step1 = smp(
        "nodes",
        &node_a(),
        r#"{"status":{"conditions":[{"type":"Ready","status":"False","lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z","reason":"KubeletNotReady","message":"container runtime network not ready"}]}}"#,
    )
    .unwrap();
    assert_eq!(
        step1,
        with(node_a(), "/status/conditions", json!([ready_false]))
    );

    let network_ok = json!({
        "type": "NetworkUnavailable", "status": "False",
        "lastHeartbeatTime": "2026-01-01T00:01:00Z", "lastTransitionTime": "2026-01-01T00:01:00Z",
        "reason": "RouteCreated", "message": "RouteController created a route"
    });
    let step2 = smp(
        "nodes",
        &step1,
        r#"{"status":{"conditions":[{"type":"NetworkUnavailable","status":"False","lastHeartbeatTime":"2026-01-01T00:01:00Z","lastTransitionTime":"2026-01-01T00:01:00Z","reason":"RouteCreated","message":"RouteController created a route"}]}}"#,
    )
    .unwrap();
    assert_eq!(
        step2,
        with(
            node_a(),
            "/status/conditions",
            json!([network_ok, ready_false])
        )
    );

    let network_down = json!({
        "type": "NetworkUnavailable", "status": "True",
        "lastHeartbeatTime": "2026-01-01T00:02:00Z", "lastTransitionTime": "2026-01-01T00:01:00Z",
        "reason": "NoRouteCreated", "message": "RouteController failed to create a route"
    });
    let step3 = smp(
        "nodes",
        &step2,
        r#"{"status":{"conditions":[{"type":"NetworkUnavailable","status":"True","lastHeartbeatTime":"2026-01-01T00:02:00Z","reason":"NoRouteCreated","message":"RouteController failed to create a route"}]}}"#,
    )
    .unwrap();
    assert_eq!(
        step3,
        with(
            node_a(),
            "/status/conditions",
            json!([network_down, ready_false])
        )
    );

    let ready_true = json!({
        "type": "Ready", "status": "True",
        "lastHeartbeatTime": "2026-01-01T00:03:00Z", "lastTransitionTime": "2026-01-01T00:03:00Z",
        "reason": "KubeletReady", "message": "kubelet is posting ready status"
    });
    let step4 = smp(
        "nodes",
        &step3,
        r#"{"status":{"$setElementOrder/conditions":[{"type":"Ready"},{"type":"NetworkUnavailable"}],"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status","lastHeartbeatTime":"2026-01-01T00:03:00Z","lastTransitionTime":"2026-01-01T00:03:00Z"}]}}"#,
    )
    .unwrap();
    assert_eq!(
        step4,
        with(
            node_a(),
            "/status/conditions",
            json!([ready_true, network_down])
        )
    );
}

// ---- golden 19 and 20: the engine is subresource-agnostic -------------------------------------------------------

#[test]
fn golden_19_and_20_engine_applies_every_part_and_leaves_subresource_filtering_to_the_server() {
    let result = merge(
        "nodes",
        &node_a(),
        r#"{"metadata":{"labels":{"via":"main"}},"status":{"addresses":[{"type":"Hostname","address":"changed-via-main"}],"capacity":{"cpu":"4"}}}"#,
    )
    .unwrap();
    assert_eq!(result.pointer("/metadata/labels/via"), Some(&json!("main")));
    assert_eq!(
        result.pointer("/status/addresses"),
        Some(&json!([address("Hostname", "changed-via-main")]))
    );

    let result = smp(
        "nodes",
        &node_a(),
        r#"{"metadata":{"labels":{"via":"status"},"annotations":{"example.com/note":"set-via-status"}},"spec":{"unschedulable":true,"providerID":"fake://node-a","podCIDR":"10.244.0.0/24"},"status":{"capacity":{"cpu":"2","memory":"4Gi","pods":"110"}}}"#,
    )
    .unwrap();
    let mut expected = with(node_a(), "/metadata/labels/via", json!("status"));
    expected = with(
        expected,
        "/metadata/annotations",
        json!({"example.com/note": "set-via-status"}),
    );
    expected = with(expected, "/spec/unschedulable", json!(true));
    expected = with(expected, "/spec/providerID", json!("fake://node-a"));
    expected = with(expected, "/spec/podCIDR", json!("10.244.0.0/24"));
    expected = with(
        expected,
        "/status/capacity",
        json!({"cpu": "2", "memory": "4Gi", "pods": "110"}),
    );
    assert_eq!(result, expected);
}

// ---- golden 22: malformed bodies --------------------------------------------------------------------------------

#[test]
fn golden_22_malformed_patch_bodies_are_400_with_the_server_messages() {
    let error = merge("nodes", &node_a(), r#"{"metadata":{"labels":"#).unwrap_err();
    assert_eq!(
        error,
        PatchError::BadRequest("Invalid JSON Patch".to_owned())
    );
    assert_eq!(error.status_code(), 400);
    assert_eq!(error.reason(), "BadRequest");

    assert_eq!(
        smp("nodes", &node_a(), r#"[{"op":"add"}]"#),
        Err(PatchError::BadRequest(
            "json: cannot unmarshal array into Go value of type map[string]interface {}".to_owned()
        ))
    );
    assert_eq!(
        json_patch(
            "nodes",
            &node_a(),
            r#"{"op":"remove","path":"/metadata/labels/env"}"#
        ),
        Err(PatchError::BadRequest(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch".to_owned()
        ))
    );
}

#[test]
fn golden_22_a_patch_producing_an_invalid_label_is_applied_for_the_server_to_validate() {
    let result = merge(
        "nodes",
        &node_a(),
        r#"{"metadata":{"labels":{"bad":"has spaces"}}}"#,
    )
    .unwrap();
    assert_eq!(
        result.pointer("/metadata/labels/bad"),
        Some(&json!("has spaces"))
    );
}

// ---- golden 28: service status.loadBalancer.ingress is atomic ---------------------------------------------------

#[test]
fn golden_28_ingress_is_replaced() {
    let step1 = smp(
        "services",
        &lb_svc(),
        r#"{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10"}]}}}"#,
    )
    .unwrap();
    let with_ip = with(
        lb_svc(),
        "/status/loadBalancer/ingress",
        json!([{"ip": "192.0.2.10"}]),
    );
    assert_eq!(step1, with_ip);

    let step2 = smp(
        "services",
        &step1,
        r#"{"status":{"loadBalancer":{"ingress":[{"hostname":"lb.example.com","ports":[{"port":80,"protocol":"TCP"},{"port":53,"protocol":"UDP"}]}]}}}"#,
    )
    .unwrap();
    let hostname = json!([{
        "hostname": "lb.example.com",
        "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]
    }]);
    assert_eq!(
        step2,
        with(lb_svc(), "/status/loadBalancer/ingress", hostname)
    );

    // Step 3 through the status subresource: the server keeps only the status part, which is what this patch
    // leaves after spec is dropped.
    let step3 = smp(
        "services",
        &step2,
        r#"{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10"}]}}}"#,
    )
    .unwrap();
    assert_eq!(step3, with_ip);

    // Step 4 changes nothing once the server drops status from a main-resource patch; a patch that repeats the
    // stored state yields an equal object, which is how the server detects the no-op.
    let again = smp(
        "services",
        &step3,
        r#"{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10"}]}}}"#,
    )
    .unwrap();
    assert_eq!(again, step3);
    let via_merge = merge(
        "services",
        &step3,
        r#"{"status":{"loadBalancer":{"ingress":[{"ip":"198.51.100.1"}]}}}"#,
    )
    .unwrap();
    assert_eq!(
        via_merge,
        with(
            lb_svc(),
            "/status/loadBalancer/ingress",
            json!([{"ip": "198.51.100.1"}])
        )
    );
}

// ---- golden 29, 30, 31: finalizers ------------------------------------------------------------------------------

const CLEANUP: &str = "service.kubernetes.io/load-balancer-cleanup";

#[test]
fn golden_29_finalizer_label_and_annotation_through_strategic_merge() {
    let step1 = smp(
        "services",
        &lb_svc(),
        r#"{"metadata":{"finalizers":["service.kubernetes.io/load-balancer-cleanup"]}}"#,
    )
    .unwrap();
    assert_eq!(
        step1,
        with(lb_svc(), "/metadata/finalizers", json!([CLEANUP]))
    );

    let step2 = smp(
        "services",
        &step1,
        r#"{"metadata":{"labels":{"via":"status"},"annotations":{"example.com/a":"b"}}}"#,
    )
    .unwrap();
    let mut expected = with(lb_svc(), "/metadata/finalizers", json!([CLEANUP]));
    expected = with(expected, "/metadata/labels/via", json!("status"));
    expected = with(
        expected,
        "/metadata/annotations",
        json!({"example.com/a": "b"}),
    );
    assert_eq!(step2, expected);
}

#[test]
fn golden_30_finalizers_through_the_main_resource() {
    let start = with(lb_svc(), "/metadata/finalizers", json!([CLEANUP]));
    let step1 = smp(
        "services",
        &start,
        r#"{"metadata":{"$setElementOrder/finalizers":["service.kubernetes.io/load-balancer-cleanup","example.com/other"],"finalizers":["example.com/other"]}}"#,
    )
    .unwrap();
    assert_eq!(
        step1,
        with(
            lb_svc(),
            "/metadata/finalizers",
            json!([CLEANUP, "example.com/other"])
        )
    );

    let step2 = smp(
        "services",
        &step1,
        r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["example.com/other"]}}"#,
    )
    .unwrap();
    assert_eq!(step2, start);

    let step3 = smp(
        "services",
        &step2,
        r#"{"metadata":{"finalizers":["example.com/third"]}}"#,
    )
    .unwrap();
    assert_eq!(
        step3,
        with(
            lb_svc(),
            "/metadata/finalizers",
            json!(["example.com/third", CLEANUP])
        ),
        "union, new first"
    );

    let step4 = merge(
        "services",
        &step3,
        r#"{"metadata":{"finalizers":["service.kubernetes.io/load-balancer-cleanup"]}}"#,
    )
    .unwrap();
    assert_eq!(step4, start, "a JSON merge patch replaces the list");
}

#[test]
fn golden_31_null_finalizers_removes_them() {
    let terminating = with(lb_svc(), "/metadata/finalizers", json!([CLEANUP]));
    let terminating = with(
        terminating,
        "/metadata/deletionTimestamp",
        json!("2026-11-21T12:47:44Z"),
    );
    let result = smp(
        "services",
        &terminating,
        r#"{"metadata":{"finalizers":null}}"#,
    )
    .unwrap();
    assert_eq!(result, without(terminating, "/metadata/finalizers"));
}

// ---- strategic merge directives beyond the captured cases -------------------------------------------------------

#[test]
fn map_directives() {
    let node = node_a();
    let replaced = smp(
        "nodes",
        &node,
        r#"{"metadata":{"labels":{"$patch":"replace","only":"this","gone":null}}}"#,
    );
    assert_eq!(
        replaced.unwrap(),
        with(node_a(), "/metadata/labels", json!({"only": "this"}))
    );

    let deleted = smp(
        "nodes",
        &node,
        r#"{"status":{"nodeInfo":{"$patch":"delete"}}}"#,
    )
    .unwrap();
    assert_eq!(deleted, without(node_a(), "/status/nodeInfo"));

    let merged = smp(
        "nodes",
        &node,
        r#"{"metadata":{"labels":{"$patch":"merge","x":"y"}}}"#,
    )
    .unwrap();
    assert_eq!(merged, with(node_a(), "/metadata/labels/x", json!("y")));

    assert_eq!(smp("nodes", &node, r#"{"$patch":"delete"}"#), Ok(json!({})));
    assert_eq!(
        smp("nodes", &node, r#"{"$patch":"replace","kind":"Node"}"#),
        Ok(json!({"kind": "Node"}))
    );
    assert!(matches!(
        smp("nodes", &node, r#"{"spec":{"$patch":"explode"}}"#),
        Err(PatchError::BadRequest(_))
    ));
    assert!(matches!(
        smp("nodes", &node, r#"{"spec":{"$patch":7}}"#),
        Err(PatchError::BadRequest(_))
    ));
}

#[test]
fn retain_keys_directive() {
    let original = json!({"spec": {"a": 1, "b": 2, "c": 3}});
    let result = smp(
        "widgets",
        &original,
        r#"{"spec":{"$retainKeys":["a","d"],"d":4}}"#,
    )
    .unwrap();
    assert_eq!(result, json!({"spec": {"a": 1, "d": 4}}));
    assert_eq!(
        smp(
            "widgets",
            &original,
            r#"{"spec":{"$retainKeys":["a"],"d":4}}"#
        ),
        generic_invalid()
    );
    assert!(matches!(
        smp("widgets", &original, r#"{"spec":{"$retainKeys":"a"}}"#),
        Err(PatchError::BadRequest(_))
    ));
    assert!(matches!(
        smp("widgets", &original, r#"{"spec":{"$retainKeys":[1]}}"#),
        Err(PatchError::BadRequest(_))
    ));
}

#[test]
fn service_ports_merge_by_port() {
    let result = smp(
        "services",
        &lb_svc(),
        r#"{"spec":{"ports":[{"port":443,"protocol":"TCP","name":"https"},{"port":80,"targetPort":9090},{"port":53,"$patch":"delete"}]}}"#,
    )
    .unwrap();
    let ports = json!([
        {"port": 443, "protocol": "TCP", "name": "https"},
        {"name": "http", "protocol": "TCP", "port": 80, "targetPort": 9090, "nodePort": 31436}
    ]);
    assert_eq!(result, with(lb_svc(), "/spec/ports", ports));
    // Atomic lists of the same resource are still replaced.
    let result = smp(
        "services",
        &lb_svc(),
        r#"{"spec":{"clusterIPs":["10.0.0.9"]}}"#,
    )
    .unwrap();
    assert_eq!(
        result,
        with(lb_svc(), "/spec/clusterIPs", json!(["10.0.0.9"]))
    );
}

#[test]
fn owner_references_merge_by_uid() {
    let original = json!({"metadata": {"ownerReferences": [
        {"uid": "u1", "kind": "A", "name": "a"},
        {"uid": "u2", "kind": "B", "name": "b"}
    ]}});
    let result = smp(
        "leases",
        &original,
        r#"{"metadata":{"ownerReferences":[{"uid":"u2","name":"b2"}]}}"#,
    )
    .unwrap();
    let expected = json!({"metadata": {"ownerReferences": [
        {"uid": "u1", "kind": "A", "name": "a"},
        {"uid": "u2", "kind": "B", "name": "b2"}
    ]}});
    assert_eq!(
        result, expected,
        "a patched element keeps its stored position when it was stored after the others"
    );
}

#[test]
fn directives_on_fields_missing_from_the_stored_object_are_resolved() {
    let bare = json!({"kind": "Node", "metadata": {"name": "n"}});
    let result = smp(
        "nodes",
        &bare,
        r#"{"status":{"$setElementOrder/conditions":[{"type":"B"},{"type":"A"}],"conditions":[{"type":"B","status":"False"},{"type":"A","status":"True"}],"addresses":[{"type":"InternalIP","address":"10.0.0.1"},{"type":"InternalIP","address":"10.0.0.2"},{"$patch":"replace"}],"nodeInfo":{"$patch":"delete"}},"metadata":{"labels":{"a":"b","c":null}}}"#,
    )
    .unwrap();
    let expected = json!({
        "kind": "Node",
        "metadata": {"name": "n", "labels": {"a": "b"}},
        "status": {
            "conditions": [{"type": "B", "status": "False"}, {"type": "A", "status": "True"}],
            "addresses": [address("InternalIP", "10.0.0.1"), address("InternalIP", "10.0.0.2")]
        }
    });
    assert_eq!(result, expected);
}

#[test]
fn atomic_list_elements_lose_directives_and_nulls() {
    let result = smp("nodes", &node_a(), r#"{"spec":{"taints":[{"key":"k","value":null,"effect":"NoExecute"},{"$patch":"replace"}]}}"#)
        .unwrap();
    assert_eq!(
        result,
        with(
            node_a(),
            "/spec/taints",
            json!([{"key": "k", "effect": "NoExecute"}, {}])
        )
    );
}

#[test]
fn merge_list_errors() {
    let node = node_a();
    let missing_key = smp(
        "nodes",
        &node,
        r#"{"status":{"addresses":[{"address":"1.2.3.4"}]}}"#,
    );
    assert!(matches!(missing_key, Err(PatchError::BadRequest(_))));
    let delete_without_key = smp(
        "nodes",
        &node,
        r#"{"status":{"addresses":[{"$patch":"delete"}]}}"#,
    );
    assert!(matches!(delete_without_key, Err(PatchError::BadRequest(_))));
    let mixed = smp("nodes", &node, r#"{"status":{"addresses":["1.2.3.4"]}}"#);
    assert!(matches!(mixed, Err(PatchError::BadRequest(_))));
    assert_eq!(
        smp("nodes", &node, r#"{"status":{"addresses":[["x"]]}}"#),
        generic_invalid()
    );
    let objects_in_set = smp("nodes", &node, r#"{"metadata":{"finalizers":[{"a":1}]}}"#);
    assert!(matches!(objects_in_set, Err(PatchError::BadRequest(_))));
    let bad_delete_list = smp(
        "nodes",
        &node,
        r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":"x"}}"#,
    );
    assert!(matches!(bad_delete_list, Err(PatchError::BadRequest(_))));
    let bad_order = smp(
        "nodes",
        &node,
        r#"{"status":{"$setElementOrder/addresses":{"type":"x"}}}"#,
    );
    assert!(matches!(bad_order, Err(PatchError::BadRequest(_))));
    let contradicting_order = smp(
        "nodes",
        &node,
        r#"{"status":{"$setElementOrder/addresses":[{"type":"Hostname"},{"type":"InternalIP"}],"addresses":[{"type":"InternalIP","address":"a"},{"type":"Hostname","address":"b"}]}}"#,
    );
    assert!(matches!(
        contradicting_order,
        Err(PatchError::BadRequest(_))
    ));
}

#[test]
fn set_element_order_alone_reorders_the_stored_list() {
    let result = smp(
        "nodes",
        &node_a(),
        r#"{"status":{"$setElementOrder/addresses":[{"type":"Hostname"},{"type":"InternalIP"}]}}"#,
    )
    .unwrap();
    let reversed = json!([
        address("Hostname", "node-a"),
        address("InternalIP", INTERNAL_IP_10)
    ]);
    assert_eq!(result, with(node_a(), "/status/addresses", reversed));
}

#[test]
fn strategic_bodies() {
    let node = node_a();
    assert_eq!(smp("nodes", &node, "null"), Ok(node_a()));
    assert_eq!(smp("nodes", &node, "{}"), Ok(node_a()));
    assert_eq!(
        smp("nodes", &node, r#"{"spec":"#),
        Err(PatchError::BadRequest(
            "unexpected end of JSON input".into()
        ))
    );
    assert_eq!(
        smp("nodes", &node, r#""text""#),
        Err(PatchError::BadRequest(
            "json: cannot unmarshal string into Go value of type map[string]interface {}".into()
        ))
    );
    assert!(matches!(
        smp("nodes", &node, "{} trailing"),
        Err(PatchError::BadRequest(_))
    ));
}

// ---- content types, errors, limits ------------------------------------------------------------------------------

#[test]
fn content_types() {
    assert_eq!(
        PatchType::from_content_type("application/json-patch+json"),
        Some(PatchType::Json)
    );
    assert_eq!(
        PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
        Some(PatchType::Merge)
    );
    assert_eq!(
        PatchType::from_content_type(" Application/Strategic-Merge-Patch+JSON ;charset=UTF-8"),
        Some(PatchType::StrategicMerge)
    );
    for other in [
        "application/json",
        "text/plain",
        "application/apply-patch+yaml",
        "",
        ";",
    ] {
        assert_eq!(PatchType::from_content_type(other), None, "{other}");
    }
    for kind in [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge] {
        assert_eq!(PatchType::from_content_type(kind.media_type()), Some(kind));
    }
}

fn nested(depth: usize) -> Value {
    let mut value = json!("leaf");
    for _ in 0..depth {
        value = json!({ "a": value });
    }
    value
}

#[test]
fn depth_limits() {
    let deep = nested(MAX_DEPTH + 1);
    for kind in [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge] {
        let body = if kind == PatchType::Json { "[]" } else { "{}" };
        assert!(matches!(
            apply(kind, "nodes", &deep, body.as_bytes()),
            Err(PatchError::BadRequest(_))
        ));
        assert!(apply(kind, "nodes", &nested(MAX_DEPTH), body.as_bytes()).is_ok());
    }
    // Bodies nested beyond what the decoder accepts are bad requests, never a stack overflow.
    let deep_body = format!("{}{}", "{\"a\":".repeat(100_000), "}".repeat(100_000));
    for kind in [PatchType::Merge, PatchType::StrategicMerge] {
        assert!(matches!(
            apply(kind, "nodes", &json!({}), deep_body.as_bytes()),
            Err(PatchError::BadRequest(_))
        ));
    }
    let deep_array = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(matches!(
        apply(PatchType::Json, "nodes", &json!({}), deep_array.as_bytes()),
        Err(PatchError::BadRequest(_))
    ));
}

// ---- no-panic run over generated inputs -------------------------------------------------------------------------

/// A small deterministic xorshift generator, so the run is reproducible without extra crates.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const KEYS: &[&str] = &[
    "metadata",
    "spec",
    "status",
    "labels",
    "finalizers",
    "ownerReferences",
    "uid",
    "addresses",
    "conditions",
    "type",
    "address",
    "taints",
    "ports",
    "port",
    "loadBalancer",
    "ingress",
    "a",
    "b",
    "",
    "$patch",
    "$retainKeys",
    "$setElementOrder/addresses",
    "$setElementOrder/finalizers",
    "$setElementOrder/conditions",
    "$deleteFromPrimitiveList/finalizers",
    "$deleteFromPrimitiveList/a",
    "resourceVersion",
];

const STRINGS: &[&str] = &[
    "replace",
    "delete",
    "merge",
    "InternalIP",
    "Hostname",
    "Ready",
    "x",
    "",
    "a",
    "~1/",
];

fn random_value(rng: &mut Rng, depth: usize) -> Value {
    let choice = if depth == 0 {
        rng.below(5)
    } else {
        rng.below(9)
    };
    match choice {
        0 => Value::Null,
        1 => json!(rng.below(2) == 0),
        2 => json!(rng.below(100) as i64 - 50),
        3 => json!(rng.below(4) as f64 / 2.0),
        4 => json!(rng.pick(STRINGS)),
        5 | 6 => {
            let len = rng.below(4);
            Value::Object(
                (0..len)
                    .map(|_| (rng.pick(KEYS).to_owned(), random_value(rng, depth - 1)))
                    .collect(),
            )
        }
        _ => {
            let len = rng.below(4);
            Value::Array((0..len).map(|_| random_value(rng, depth - 1)).collect())
        }
    }
}

fn random_pointer(rng: &mut Rng) -> String {
    let segments = rng.below(4);
    (0..segments)
        .map(|_| match rng.below(4) {
            0 => "-".to_owned(),
            1 => rng.below(3).to_string(),
            _ => rng.pick(KEYS).replace('~', "~0").replace('/', "~1"),
        })
        .fold(String::new(), |path, segment| path + "/" + &segment)
}

fn random_json_patch(rng: &mut Rng) -> (Value, bool) {
    const OPS: &[&str] = &["add", "remove", "replace", "move", "copy", "test", "bogus"];
    let count = rng.below(5);
    let mut only_tests = true;
    let ops = (0..count)
        .map(|_| {
            let op = rng.pick(OPS);
            only_tests &= op == "test";
            let mut fields = serde_json::Map::new();
            fields.insert("op".to_owned(), json!(op));
            fields.insert("path".to_owned(), json!(random_pointer(rng)));
            fields.insert("from".to_owned(), json!(random_pointer(rng)));
            fields.insert("value".to_owned(), random_value(rng, 3));
            Value::Object(fields)
        })
        .collect();
    (Value::Array(ops), only_tests)
}

/// Damages a body the way a fuzzer would: truncation, a flipped byte or a spliced byte.
fn mangle(rng: &mut Rng, body: &mut Vec<u8>) {
    if body.is_empty() {
        return;
    }
    match rng.below(3) {
        0 => body.truncate(rng.below(body.len())),
        1 => {
            let at = rng.below(body.len());
            body[at] ^= 1 << rng.below(8);
        }
        _ => {
            let at = rng.below(body.len() + 1);
            body.insert(at, b"{}[]\",:\\n0-"[rng.below(11)]);
        }
    }
}

#[test]
fn generated_inputs_never_panic_and_keep_invariants() {
    const RESOURCES: &[&str] = &[
        "nodes",
        "services",
        "leases",
        "events",
        "persistentvolumes",
        "namespaces",
        "x",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut outcomes = [(0usize, 0usize); 3];
    for round in 0..4500 {
        let kind_index = round % 3;
        let kind = [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge][kind_index];
        let resource = rng.pick(RESOURCES);
        let original = if rng.below(3) == 0 {
            node_a()
        } else {
            random_value(&mut rng, 5)
        };
        let (patch, only_tests) = match kind {
            PatchType::Json => random_json_patch(&mut rng),
            _ => {
                let mut value = random_value(&mut rng, 5);
                if rng.below(4) != 0 && !value.is_object() {
                    value = json!({ rng.pick(KEYS): value });
                }
                (value, false)
            }
        };
        let mut body = serde_json::to_vec(&patch).unwrap();
        let mangled = rng.below(4) == 0;
        if mangled {
            mangle(&mut rng, &mut body);
        }
        match apply(kind, resource, &original, &body) {
            Ok(result) => {
                outcomes[kind_index].0 += 1;
                assert!(!depth_exceeds(&result, MAX_DEPTH));
                if kind == PatchType::Json && only_tests && !mangled {
                    assert_eq!(result, original, "a patch of passing tests changes nothing");
                }
                if kind == PatchType::Merge && patch.is_object() && !mangled {
                    let again =
                        apply(kind, resource, &result, &body).expect("a merge patch applies twice");
                    assert_eq!(again, result, "merge patches are idempotent");
                }
            }
            Err(error) => {
                outcomes[kind_index].1 += 1;
                assert!(!error.to_string().is_empty());
                assert!(matches!(error.status_code(), 400 | 422));
            }
        }
    }
    for (kind, (ok, err)) in outcomes.iter().enumerate() {
        assert!(
            *ok > 100 && *err > 100,
            "patch type #{kind}: {ok} applied, {err} refused"
        );
    }
}
