//! kubectl-style tables of the end state: nodes, Services and the cloud's routes and load balancers.

use ccm_e2e::Harness;
use ccm_e2e::well_known::*;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

/// Formats rows as left-aligned columns separated by three spaces, like kubectl.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.len());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == last {
                    c.to_string()
                } else {
                    format!("{c:<width$}", width = widths[i])
                }
            })
            .collect::<Vec<_>>()
            .join("   ")
    };
    let mut out = vec![line(header.to_vec())];
    for row in rows {
        out.push(line(row.iter().map(String::as_str).collect()));
    }
    out.join("\n")
}

fn or_none(value: String) -> String {
    if value.is_empty() {
        "<none>".to_string()
    } else {
        value
    }
}

fn port_text(svc: &Service) -> String {
    svc.spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .map(|ports| {
            ports
                .iter()
                .map(|p| {
                    let protocol = p.protocol.as_deref().unwrap_or("TCP");
                    match p.node_port {
                        Some(node_port) => format!("{}:{node_port}/{protocol}", p.port),
                        None => format!("{}/{protocol}", p.port),
                    }
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// Prints the end state: the nodes and Services as kubectl shows them, then the cloud's routes and load
/// balancers.
pub async fn print(h: &Harness) -> anyhow::Result<()> {
    print_nodes(h).await?;
    print_services(h).await?;
    print_routes(h).await?;
    print_load_balancers(h).await
}

/// Prints a table under the command that would show it.
fn print_table(command: &str, header: &[&str], rows: &[Vec<String>]) {
    println!("\n$ {command}");
    println!("{}", render(header, rows));
}

/// `kubectl get nodes`, with the columns the cloud fills in: provider ID, zone, type and taints.
async fn print_nodes(h: &Harness) -> anyhow::Result<()> {
    let nodes = h.nodes().await?;
    let rows: Vec<Vec<String>> = nodes.iter().map(node_row).collect();
    print_table(
        "kubectl get nodes",
        &["NAME", "STATUS", "PROVIDER-ID", "ZONE", "TYPE", "TAINTS"],
        &rows,
    );
    Ok(())
}

/// A node's row of `kubectl get nodes`.
fn node_row(n: &Node) -> Vec<String> {
    let labels = labels(n);
    let status = match condition(n, "Ready").map(|c| c.status.as_str()) {
        Some("True") => "Ready",
        Some("False") => "NotReady",
        _ => "Unknown",
    };
    vec![
        node_name(n).to_string(),
        status.to_string(),
        or_none(provider_id(n).unwrap_or_default().to_string()),
        or_none(labels.get(ZONE_LABEL).cloned().unwrap_or_default()),
        or_none(labels.get(INSTANCE_TYPE_LABEL).cloned().unwrap_or_default()),
        or_none(taint_keys(n).join(",")),
    ]
}

/// `kubectl get services --all-namespaces`, with the external IPs the load balancers gave.
async fn print_services(h: &Harness) -> anyhow::Result<()> {
    let services = Api::<Service>::all(h.client())
        .list(&ListParams::default())
        .await?;
    let rows: Vec<Vec<String>> = services
        .items
        .iter()
        .map(|s| {
            vec![
                s.namespace().unwrap_or_default(),
                s.name_any(),
                s.spec
                    .as_ref()
                    .and_then(|spec| spec.type_.clone())
                    .unwrap_or_default(),
                or_none(ingress(s).join(",")),
                port_text(s),
            ]
        })
        .collect();
    print_table(
        "kubectl get services --all-namespaces",
        &["NAMESPACE", "NAME", "TYPE", "EXTERNAL-IP", "PORTS"],
        &rows,
    );
    Ok(())
}

/// The fake cloud's routes, active or blackholed.
async fn print_routes(h: &Harness) -> anyhow::Result<()> {
    let routes = h.admin().routes().await?;
    let rows: Vec<Vec<String>> = routes
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.target_node.clone(),
                r.destination_cidr.clone(),
                if r.blackhole {
                    "blackhole".into()
                } else {
                    "active".into()
                },
            ]
        })
        .collect();
    print_table(
        "fake-cloud routes",
        &["NAME", "TARGET-NODE", "DESTINATION", "STATE"],
        &rows,
    );
    Ok(())
}

/// The fake cloud's load balancers, with their ports and backend nodes.
async fn print_load_balancers(h: &Harness) -> anyhow::Result<()> {
    let lbs = h.admin().load_balancers().await?;
    let rows: Vec<Vec<String>> = lbs
        .iter()
        .map(|lb| {
            vec![
                lb.name.clone(),
                lb.service.clone(),
                lb.ip.clone(),
                lb.ports
                    .iter()
                    .map(|p| format!("{}/{}", p.port, p.protocol))
                    .collect::<Vec<_>>()
                    .join(","),
                lb.nodes.join(","),
            ]
        })
        .collect();
    print_table(
        "fake-cloud load-balancers",
        &["NAME", "SERVICE", "IP", "PORTS", "NODES"],
        &rows,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_aligned_and_the_last_is_not_padded() {
        let text = render(
            &["NAME", "IP"],
            &[
                vec!["web".into(), "198.51.100.1".into()],
                vec!["a-long-name".into(), "-".into()],
            ],
        );
        assert_eq!(
            text,
            "NAME          IP\nweb           198.51.100.1\na-long-name   -"
        );
    }
}
