//! Tags of the stub (`/v2/tags`), as the API keeps them: a tag exists once created (`POST /v2/tags`, which
//! answers 201 also for an existing name) or once a load balancer is created with it; `POST
//! /v2/tags/{name}/resources` adds it to load balancers (204), answering 404 for a tag that does not exist
//! and 422 for a resource that is not a known load balancer or an invalid request.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::State;
use super::answer::{Answer, parse_body};
use crate::config::is_tag;

/// Answers a request under `/v2/tags`.
pub(super) fn route(st: &mut State, method: &str, segments: &[&str], body: &[u8]) -> Answer {
    match (method, segments) {
        ("POST", []) => create(st, body),
        ("GET", [name]) if st.tags.contains(*name) => {
            Answer::json(StatusCode::OK, json!({ "tag": { "name": name } }))
        }
        ("POST", [name, "resources"]) => tag_resources(st, name, body),
        _ => Answer::not_found(),
    }
}

fn create(st: &mut State, body: &[u8]) -> Answer {
    let request = match parse_body(body) {
        Ok(request) => request,
        Err(answer) => return answer,
    };
    let name = request["name"].as_str().unwrap_or_default().to_string();
    if !is_tag(&name) {
        return Answer::unprocessable(format!("invalid tag name {name:?}"));
    }
    st.tags.insert(name.clone());
    Answer::json(StatusCode::CREATED, json!({ "tag": { "name": name } }))
}

fn tag_resources(st: &mut State, name: &str, body: &[u8]) -> Answer {
    if !st.tags.contains(name) {
        return Answer::not_found();
    }
    let request = match parse_body(body) {
        Ok(request) => request,
        Err(answer) => return answer,
    };
    let resources = request["resources"].as_array().cloned().unwrap_or_default();
    if resources.is_empty() {
        return Answer::unprocessable("resources must contain at least one resource");
    }
    let mut ids = Vec::with_capacity(resources.len());
    for resource in &resources {
        let id = resource["resource_id"].as_str().unwrap_or_default();
        if resource["resource_type"] != json!("load_balancer")
            || !st.load_balancers.contains_key(id)
        {
            return Answer::unprocessable(format!("resource {resource} was not found"));
        }
        ids.push(id.to_string());
    }
    for id in ids {
        if let Some(lb) = st.load_balancers.get_mut(&id) {
            let tags = lb.value["tags"].as_array_mut();
            match tags {
                Some(tags) if !tags.contains(&json!(name)) => tags.push(json!(name)),
                Some(_) => {}
                None => lb.value["tags"] = json!([name]),
            }
        }
    }
    Answer::empty(StatusCode::NO_CONTENT)
}

/// Records the tags of a load balancer being created: the API creates them.
pub(super) fn note_created_tags(st: &mut State, lb: &Value) {
    for tag in lb["tags"].as_array().into_iter().flatten() {
        if let Some(tag) = tag.as_str() {
            st.tags.insert(tag.to_string());
        }
    }
}
