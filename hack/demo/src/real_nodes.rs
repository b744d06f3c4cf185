//! `make demo REAL=1 NODES=2`: the story on real nodes (`hack/realkube` with kubelets, containerd and
//! kube-proxy): the kubelets register their nodes tainted, the CCM initializes them, a pod runs, a
//! LoadBalancer Service gets an address from the fake cloud, and the host reaches the pod through it
//! (kube-proxy's load-balancer path).

use std::time::Duration;

use ccm_e2e::real_nodes::{host_get, node_name};
use ccm_e2e::well_known::*;
use ccm_e2e::{Check, Harness, HarnessError, wait_for};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::{Outcomes, WAIT, narrator};

/// The story on `count` real nodes.
pub async fn script(h: &Harness, count: usize, outcomes: &mut Outcomes) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(h.client());
    narrator::say(format!(
        "{count} real kubelets (a containerd each) registered their nodes, tainted until the cloud initializes them."
    ));
    for index in 1..=count {
        let name = node_name(index);
        let result = crate::wait_node(&nodes, &format!("{name} to be initialized"), &name, |n| {
            n.is_some_and(|n| provider_id(n).is_some() && !has_taint(n, UNINITIALIZED_TAINT))
        })
        .await;
        outcomes.record(format!("{name} initialized by the CCM"), result);
    }

    narrator::say("A pod answering HTTP, and a LoadBalancer Service in front of it, are created.");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "hello", "labels": {"app": "hello"}},
        "spec": {
            "containers": [{
                "name": "hello",
                "image": "realkube.local/busybox:1",
                "imagePullPolicy": "Never",
                "command": ["sh", "-c",
                    "echo \"Hello from pod $(hostname), behind the load balancer\" > /www/index.html; exec httpd -f -p 8080 -h /www"],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
            }],
            "terminationGracePeriodSeconds": 1,
        },
    }))?;
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "hello"},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": "hello"},
            "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    }))?;
    Api::<Pod>::namespaced(h.client(), "default")
        .create(&PostParams::default(), &pod)
        .await?;
    let services: Api<Service> = Api::namespaced(h.client(), "default");
    services.create(&PostParams::default(), &service).await?;
    let ip = wait_for("Service hello to get an external IP", WAIT, || {
        let services = services.clone();
        async move {
            let svc = services
                .get("hello")
                .await
                .map_err(|e| HarnessError::kube("reading Service hello", e))?;
            Ok(match ingress(&svc).into_iter().next() {
                Some(ip) => Check::Done(ip),
                None => Check::Pending("no ingress yet".into()),
            })
        }
    })
    .await;
    let Some(ip) = outcomes.record(
        "Service hello got a load-balancer IP from the fake cloud",
        ip,
    ) else {
        return Ok(());
    };
    narrator::say(format!(
        "The host asks the load balancer: curl http://{ip}/"
    ));
    let answer = wait_for(
        "an answer through the load balancer",
        Duration::from_secs(60),
        || {
            let url = format!("http://{ip}/");
            async move {
                Ok(match host_get(&url) {
                    Some(body) if !body.is_empty() => Check::Done(body),
                    _ => Check::Pending("no answer yet (the pod may still be starting)".into()),
                })
            }
        },
    )
    .await;
    if let Ok(body) = &answer {
        println!("\n    $ curl http://{ip}/\n    {}", body.trim());
    }
    outcomes.record(format!("http://{ip}/ answered from the pod"), answer);
    Ok(())
}
