//! The answers of the stub's resource handlers ([`Answer`]) and what the handlers of every resource share:
//! the API's pagination ([`paginate`]) and request-body parsing ([`parse_body`]).

use std::collections::BTreeMap;

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::State;

const DEFAULT_PER_PAGE: usize = 20;
const MAX_PER_PAGE: usize = 200;

/// An answer before headers are added.
pub(super) struct Answer {
    /// The HTTP status.
    pub(super) status: StatusCode,
    /// The JSON body, if any.
    pub(super) body: Option<Value>,
    /// Headers beyond the ones every response carries.
    pub(super) extra: Vec<(&'static str, String)>,
}

impl Answer {
    pub(super) fn json(status: StatusCode, body: Value) -> Self {
        Answer {
            status,
            body: Some(body),
            extra: Vec::new(),
        }
    }

    pub(super) fn empty(status: StatusCode) -> Self {
        Answer {
            status,
            body: None,
            extra: Vec::new(),
        }
    }

    pub(super) fn error(status: StatusCode, id: &str, message: impl Into<String>) -> Self {
        Answer::json(status, json!({"id": id, "message": message.into()}))
    }

    pub(super) fn not_found() -> Self {
        Answer::error(
            StatusCode::NOT_FOUND,
            "not_found",
            "The resource you were accessing could not be found.",
        )
    }

    pub(super) fn unprocessable(message: impl Into<String>) -> Self {
        Answer::error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable_entity",
            message,
        )
    }
}

/// One page of `items` under `key`, with the API's `links.pages` and `meta.total`, as `page` and
/// `per_page` (at most 200) select it.
pub(super) fn paginate(
    st: &State,
    path: &str,
    query: &BTreeMap<String, String>,
    key: &str,
    items: Vec<Value>,
) -> Answer {
    let per_page = query
        .get("per_page")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(DEFAULT_PER_PAGE)
        .clamp(1, MAX_PER_PAGE);
    let page = query
        .get("page")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let total = items.len();
    let last = total.div_ceil(per_page).max(1);
    let slice: Vec<Value> = items
        .into_iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .collect();
    let link = |p: usize| {
        let mut q = query.clone();
        q.insert("page".into(), p.to_string());
        q.insert("per_page".into(), per_page.to_string());
        let qs: String = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(q.iter())
            .finish();
        format!("{}{}?{}", st.base, path, qs)
    };
    let mut pages = serde_json::Map::new();
    if page > 1 {
        pages.insert("first".into(), json!(link(1)));
        pages.insert("prev".into(), json!(link(page - 1)));
    }
    if page < last {
        pages.insert("next".into(), json!(link(page + 1)));
        pages.insert("last".into(), json!(link(last)));
    }
    let links = if pages.is_empty() {
        json!({})
    } else {
        json!({"pages": pages})
    };
    Answer::json(
        StatusCode::OK,
        json!({key: slice, "links": links, "meta": {"total": total}}),
    )
}

/// The JSON body of a request, or the 400 the API answers to one that does not parse.
pub(super) fn parse_body(body: &[u8]) -> Result<Value, Answer> {
    serde_json::from_slice(body).map_err(|e| {
        Answer::error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("invalid JSON: {e}"),
        )
    })
}
