//! Cloud firewalls of the stub (`/v2/firewalls`), shaped and validated like the real API: a create
//! answers 202 with the firewall `waiting`, an update replaces the whole firewall (omitted lists become
//! empty), an all-ports range (`all`, or no range) reads back as `"0"`, and invalid names, protocols, port
//! ranges, rules without sources or destinations, and invalid tags are refused with 422.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::answer::{Answer, paginate, parse_body};
use super::{State, timestamp, uuid_like};
use crate::config::{is_firewall_name, is_tag};

/// Answers a request under `/v2/firewalls`.
pub(super) fn route(
    st: &mut State,
    method: &str,
    path: &str,
    segments: &[&str],
    query: &BTreeMap<String, String>,
    body: &[u8],
) -> Answer {
    match (method, segments) {
        ("GET", []) => {
            let items = st.firewalls.values().cloned().collect();
            paginate(st, path, query, "firewalls", items)
        }
        ("POST", []) => match parse_body(body).and_then(|b| checked(&b).map(|()| b)) {
            Ok(request) => {
                let id = uuid_like(st.next_id());
                let firewall = new_firewall(&id, &request);
                st.firewalls.insert(id, firewall.clone());
                Answer::json(StatusCode::ACCEPTED, json!({ "firewall": firewall }))
            }
            Err(answer) => answer,
        },
        ("GET", [id]) => match st.firewalls.get(*id) {
            Some(firewall) => Answer::json(StatusCode::OK, json!({ "firewall": firewall })),
            None => Answer::not_found(),
        },
        ("PUT", [id]) => {
            let Some(existing) = st.firewalls.get(*id) else {
                return Answer::not_found();
            };
            match parse_body(body).and_then(|b| checked(&b).map(|()| b)) {
                Ok(request) => {
                    let mut firewall = new_firewall(id, &request);
                    firewall["created_at"] = existing["created_at"].clone();
                    st.firewalls.insert(id.to_string(), firewall.clone());
                    Answer::json(StatusCode::OK, json!({ "firewall": firewall }))
                }
                Err(answer) => answer,
            }
        }
        ("DELETE", [id]) => match st.firewalls.remove(*id) {
            Some(_) => Answer::empty(StatusCode::NO_CONTENT),
            None => Answer::not_found(),
        },
        ("POST" | "DELETE", [id, "tags"]) => edit_tags(st, method, id, body),
        _ => Answer::error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "Method not allowed",
        ),
    }
}

/// `POST`/`DELETE /v2/firewalls/{id}/tags`: adds or removes tags.
fn edit_tags(st: &mut State, method: &str, id: &str, body: &[u8]) -> Answer {
    let request = match parse_body(body) {
        Ok(request) => request,
        Err(answer) => return answer,
    };
    let tags = strings(&request["tags"]);
    if tags.is_empty() {
        return Answer::unprocessable("tags must contain at least one tag");
    }
    if let Some(bad) = tags.iter().find(|t| !is_tag(t)) {
        return Answer::unprocessable(format!("tag {bad:?} is invalid"));
    }
    let Some(firewall) = st.firewalls.get_mut(id) else {
        return Answer::not_found();
    };
    let mut current = strings(&firewall["tags"]);
    if method == "POST" {
        for tag in tags {
            if !current.contains(&tag) {
                current.push(tag);
            }
        }
    } else {
        current.retain(|t| !tags.contains(t));
    }
    firewall["tags"] = json!(current);
    Answer::empty(StatusCode::NO_CONTENT)
}

/// The stored firewall for a (checked) create or update request.
pub(super) fn new_firewall(id: &str, request: &Value) -> Value {
    json!({
        "id": id,
        "name": request["name"],
        "status": "waiting",
        "inbound_rules": rules(&request["inbound_rules"], "sources"),
        "outbound_rules": rules(&request["outbound_rules"], "destinations"),
        "created_at": timestamp(),
        "droplet_ids": request["droplet_ids"].as_array().cloned().unwrap_or_default(),
        "tags": strings(&request["tags"]),
        "pending_changes": [],
    })
}

/// Rules as the API stores them: an all-ports range reads back as `"0"`.
fn rules(rules: &Value, targets: &str) -> Vec<Value> {
    rules
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|rule| {
            let ports = match rule["ports"].as_str() {
                None | Some("" | "all") => "0",
                Some(ports) => ports,
            };
            json!({
                "protocol": rule["protocol"],
                "ports": ports,
                targets: rule[targets],
            })
        })
        .collect()
}

/// Validates a create or update request like the API.
fn checked(request: &Value) -> Result<(), Answer> {
    check_request(request).map_err(Answer::unprocessable)
}

fn check_request(request: &Value) -> Result<(), String> {
    let name = request["name"].as_str().unwrap_or_default();
    if !is_firewall_name(name) {
        return Err(format!(
            "name {name:?} is invalid: it must start with a letter or digit and contain only letters, \
             digits, '.' and '-'"
        ));
    }
    for (list, targets) in [
        ("inbound_rules", "sources"),
        ("outbound_rules", "destinations"),
    ] {
        match &request[list] {
            Value::Null => {}
            Value::Array(rules) => {
                for rule in rules {
                    check_rule(rule, targets).map_err(|e| format!("{list}: {e}"))?;
                }
            }
            _ => return Err(format!("{list} must be a list")),
        }
    }
    for tag in strings(&request["tags"]) {
        if !is_tag(&tag) {
            return Err(format!("tag {tag:?} is invalid"));
        }
    }
    Ok(())
}

fn check_rule(rule: &Value, targets: &str) -> Result<(), String> {
    let protocol = rule["protocol"].as_str().unwrap_or_default();
    match protocol {
        "tcp" | "udp" => {
            let ports = rule["ports"].as_str().unwrap_or_default();
            if !valid_ports(ports) {
                return Err(format!(
                    "ports {ports:?} is invalid for protocol {protocol}"
                ));
            }
        }
        "icmp" => {}
        other => return Err(format!("protocol {other:?} is invalid")),
    }
    let target = &rule[targets];
    let named = [
        "addresses",
        "tags",
        "droplet_ids",
        "load_balancer_uids",
        "kubernetes_ids",
    ]
    .iter()
    .any(|key| target[key].as_array().is_some_and(|a| !a.is_empty()));
    if !named {
        return Err(format!("a rule needs at least one of its {targets}"));
    }
    Ok(())
}

/// `all`, a port, or a range `low-high` of ports 1..=65535.
fn valid_ports(ports: &str) -> bool {
    let port = |p: &str| p.parse::<u16>().is_ok_and(|p| p >= 1);
    match ports.split_once('-') {
        _ if ports == "all" => true,
        Some((low, high)) => {
            port(low) && port(high) && low.parse::<u16>().ok() <= high.parse::<u16>().ok()
        }
        None => port(ports),
    }
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_ranges() {
        for good in ["all", "1", "30000", "65535", "80-443", "5-5"] {
            assert!(valid_ports(good), "{good}");
        }
        for bad in ["", "0", "65536", "443-80", "a", "1-", "-1", "0-10"] {
            assert!(!valid_ports(bad), "{bad}");
        }
    }

    #[test]
    fn requests_are_validated_like_the_api() {
        let rule = |protocol: &str, ports: &str| json!({"protocol": protocol, "ports": ports, "sources": {"addresses": ["0.0.0.0/0"]}});
        let request = |name: &str, rules: Vec<Value>, tags: Vec<&str>| json!({"name": name, "inbound_rules": rules, "outbound_rules": null, "tags": tags});
        assert!(
            check_request(&request(
                "k8s-public-access",
                vec![rule("tcp", "30000")],
                vec!["k8s:c1"]
            ))
            .is_ok()
        );
        let bad = [
            request("-x", vec![], vec![]),
            request("a b", vec![], vec![]),
            request("fw", vec![rule("sctp", "1")], vec![]),
            request("fw", vec![rule("tcp", "")], vec![]),
            request(
                "fw",
                vec![json!({"protocol": "tcp", "ports": "80", "sources": {}})],
                vec![],
            ),
            request("fw", vec![], vec!["bad tag"]),
        ];
        for request in bad {
            assert!(check_request(&request).is_err(), "{request}");
        }
    }

    #[test]
    fn all_ports_read_back_as_zero() {
        let request = json!({
            "name": "fw",
            "outbound_rules": [
                {"protocol": "tcp", "ports": "all", "destinations": {"addresses": ["0.0.0.0/0"]}},
                {"protocol": "icmp", "destinations": {"addresses": ["0.0.0.0/0"]}},
            ],
        });
        let firewall = new_firewall("id", &request);
        assert_eq!(firewall["outbound_rules"][0]["ports"], "0");
        assert_eq!(firewall["outbound_rules"][1]["ports"], "0");
        assert_eq!(firewall["inbound_rules"], json!([]));
        assert_eq!(firewall["tags"], json!([]));
    }
}
