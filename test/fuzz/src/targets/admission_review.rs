//! `admission_review`: the body of a request to the webhook endpoint, as the API server (or anyone who can
//! reach the port) sends it, read into an admission request and answered.
//!
//! Input: byte 0 picks the content type (even: `application/json`, odd: the next line of the input up to
//! a newline); the rest is the body.
//!
//! Contract: no panic; a body that is read gives a request whose answer is an `admission.k8s.io/v1`
//! AdmissionReview echoing the request's UID, allowed or refused as asked, that parses back as JSON.

use ccm_app::webhook::review::{ADMISSION_API_VERSION, parse_review, response_review};

use crate::input;

/// Runs the review parser over one input.
pub fn check(data: &[u8]) {
    let (selector, rest) = data.split_first().unwrap_or((&0, &[]));
    let (content_type, body) = if selector % 2 == 0 {
        ("application/json".to_string(), rest)
    } else {
        let split = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
        let (line, body) = rest.split_at(split);
        (input::text(line), body.get(1..).unwrap_or_default())
    };
    let Ok(request) = parse_review(Some(&content_type), body) else {
        return;
    };
    let _ = request.is_service();
    for denied in [None, Some("refused")] {
        let answer = response_review(&request.uid, denied, &["a warning".to_string()]);
        let text = answer.to_string();
        let back: serde_json::Value = serde_json::from_str(&text).expect("the answer is JSON");
        assert_eq!(back["apiVersion"], ADMISSION_API_VERSION);
        assert_eq!(back["response"]["uid"], request.uid.as_str());
        assert_eq!(back["response"]["allowed"], denied.is_none());
    }
}
