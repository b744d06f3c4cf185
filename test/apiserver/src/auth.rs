//! Authentication of requests (bearer tokens), and the answers to TokenReview and
//! SubjectAccessReview, which tests configure per token and per user.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::error::{ApiError, FieldError};

/// The API audience reported for authenticated tokens.
pub const DEFAULT_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// Who a token belongs to (also what a TokenReview of that token answers).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    /// The user name, e.g. `system:serviceaccount:kube-system:cloud-controller-manager`.
    pub username: String,
    /// The user's uid, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Group memberships.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Extra attributes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with a name and groups.
    pub fn new(username: impl Into<String>, groups: &[&str]) -> Self {
        Self {
            username: username.into(),
            uid: None,
            groups: groups.iter().map(|g| (*g).to_string()).collect(),
            extra: BTreeMap::new(),
        }
    }

    /// The identity of the administrator token written into the kubeconfig.
    pub fn admin() -> Self {
        Self::new("admin", &["system:masters", "system:authenticated"])
    }

    fn review_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("username".into(), json!(self.username));
        if let Some(uid) = &self.uid {
            m.insert("uid".into(), json!(uid));
        }
        if !self.groups.is_empty() {
            m.insert("groups".into(), json!(self.groups));
        }
        if !self.extra.is_empty() {
            m.insert("extra".into(), json!(self.extra));
        }
        Value::Object(m)
    }
}

/// A rule that makes SubjectAccessReviews answer `allowed: true`. Unset fields match anything,
/// except `subresource` (unset matches only requests without a subresource) and `path` (set only
/// for non-resource rules).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccessRule {
    /// The user the rule applies to.
    #[serde(default)]
    pub user: Option<String>,
    /// A group the rule applies to.
    #[serde(default)]
    pub group: Option<String>,
    /// The verb (`get`, `list`, ...) or `*`.
    #[serde(default = "star")]
    pub verb: String,
    /// API group of the resource, or unset/`*` for any.
    #[serde(default)]
    pub api_group: Option<String>,
    /// The resource plural, or unset/`*` for any.
    #[serde(default)]
    pub resource: Option<String>,
    /// The subresource, `*` for any; unset matches only the main resource.
    #[serde(default)]
    pub subresource: Option<String>,
    /// The namespace, unset for any.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The object name, unset for any.
    #[serde(default)]
    pub name: Option<String>,
    /// For non-resource requests: the path; a trailing `*` matches a prefix.
    #[serde(default)]
    pub path: Option<String>,
    /// The `reason` reported when the rule allows a request.
    #[serde(default)]
    pub reason: Option<String>,
}

fn star() -> String {
    "*".to_string()
}

fn any_or(rule: &Option<String>, value: &str) -> bool {
    match rule.as_deref() {
        None | Some("*") => true,
        Some(r) => r == value,
    }
}

impl AccessRule {
    /// A rule allowing `verb` on `resource` for `user`.
    pub fn user_can(
        user: impl Into<String>,
        verb: impl Into<String>,
        resource: impl Into<String>,
    ) -> Self {
        Self {
            user: Some(user.into()),
            verb: verb.into(),
            resource: Some(resource.into()),
            ..Self::default()
        }
    }

    /// A rule allowing `verb` on the non-resource `path` for members of `group`.
    pub fn group_can_path(
        group: impl Into<String>,
        verb: impl Into<String>,
        path: impl Into<String>,
    ) -> Self {
        Self {
            group: Some(group.into()),
            verb: verb.into(),
            path: Some(path.into()),
            ..Self::default()
        }
    }

    /// Sets the reason reported when this rule allows a request.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    fn matches(&self, user: &str, groups: &[String], spec: &Value) -> bool {
        if let Some(u) = &self.user
            && u != user
        {
            return false;
        }
        if let Some(g) = &self.group
            && !groups.iter().any(|x| x == g)
        {
            return false;
        }
        if let Some(ra) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
            if self.path.is_some() {
                return false;
            }
            let s = |k: &str| ra[k].as_str().unwrap_or("").to_string();
            let sub = s("subresource");
            let sub_ok = match self.subresource.as_deref() {
                None => sub.is_empty(),
                Some("*") => true,
                Some(x) => x == sub,
            };
            (self.verb == "*" || self.verb == s("verb"))
                && any_or(&self.api_group, &s("group"))
                && any_or(&self.resource, &s("resource"))
                && sub_ok
                && any_or(&self.namespace, &s("namespace"))
                && any_or(&self.name, &s("name"))
        } else if let Some(nra) = spec.get("nonResourceAttributes").filter(|v| v.is_object()) {
            let Some(path) = &self.path else { return false };
            let req_path = nra["path"].as_str().unwrap_or("");
            let path_ok = match path.strip_suffix('*') {
                Some(prefix) => req_path.starts_with(prefix),
                None => req_path == path,
            };
            path_ok && (self.verb == "*" || self.verb == nra["verb"].as_str().unwrap_or(""))
        } else {
            false
        }
    }
}

/// A token this server issued through a TokenRequest (`serviceaccounts/token`).
#[derive(Debug, Clone)]
pub(crate) struct IssuedToken {
    /// Namespace of the ServiceAccount.
    pub namespace: String,
    /// Name of the ServiceAccount.
    pub service_account: String,
    /// The ServiceAccount's uid when the token was issued: a recreated account invalidates it.
    pub uid: String,
    /// The audiences the token is valid for.
    pub audiences: Vec<String>,
    /// When the token stops being accepted.
    pub expires: Instant,
}

impl IssuedToken {
    /// The identity the token authenticates as.
    pub(crate) fn user(&self) -> UserInfo {
        let mut user = UserInfo::new(
            format!(
                "system:serviceaccount:{}:{}",
                self.namespace, self.service_account
            ),
            &[
                "system:serviceaccounts",
                &format!("system:serviceaccounts:{}", self.namespace),
                "system:authenticated",
            ],
        );
        user.uid = Some(self.uid.clone());
        user
    }
}

/// Looks up the uid of a ServiceAccount by namespace and name (`None`: it does not exist).
pub(crate) type AccountLookup<'a> = &'a dyn Fn(&str, &str) -> Option<String>;

/// `["a" "b"]`: how Go's `%q` prints a list of strings, as the real server's messages show them.
fn go_quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| crate::error::quote(i)).collect();
    format!("[{}]", quoted.join(" "))
}

/// Token identities and access rules.
#[derive(Debug, Default)]
pub(crate) struct AuthConfig {
    identities: RwLock<HashMap<String, UserInfo>>,
    issued: RwLock<HashMap<String, IssuedToken>>,
    rules: RwLock<Vec<AccessRule>>,
}

/// The outcome of authenticating a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Authn {
    /// The token is known.
    Known(UserInfo),
    /// A token was presented but is not known (accepted unless authentication is required).
    UnknownToken,
    /// No token was presented.
    Anonymous,
    /// A token this server issued that is no longer valid (expired, for another audience, or of a
    /// ServiceAccount that was deleted): always answered 401, as a real server rejects it.
    Rejected(String),
}

impl Authn {
    /// The user name recorded in the request log.
    pub(crate) fn username(&self) -> String {
        match self {
            Authn::Known(u) => u.username.clone(),
            Authn::UnknownToken => "system:unknown-token".to_string(),
            Authn::Anonymous | Authn::Rejected(_) => "system:anonymous".to_string(),
        }
    }
}

impl AuthConfig {
    pub(crate) fn set_identity(&self, token: &str, user: UserInfo) {
        self.identities.write().insert(token.to_string(), user);
    }

    pub(crate) fn remove_identity(&self, token: &str) -> bool {
        self.identities.write().remove(token).is_some()
    }

    /// Remembers a token issued for a ServiceAccount.
    pub(crate) fn issue(&self, token: &str, issued: IssuedToken) {
        self.issued.write().insert(token.to_string(), issued);
    }

    /// How many issued tokens are still within their lifetime.
    pub(crate) fn live_issued_tokens(&self) -> usize {
        let now = Instant::now();
        self.issued
            .read()
            .values()
            .filter(|t| t.expires > now)
            .count()
    }

    /// Checks an issued token for `audiences` (any one must match): the identity, or why the token
    /// is not valid (the message a TokenReview reports).
    fn check_issued(
        issued: &IssuedToken,
        audiences: &[String],
        account_uid: AccountLookup<'_>,
    ) -> Result<UserInfo, String> {
        if Instant::now() >= issued.expires {
            return Err("service account token has expired".to_string());
        }
        if !issued.audiences.iter().any(|a| audiences.contains(a)) {
            return Err(format!(
                "token audiences {} is invalid for the target audiences {}",
                go_quoted_list(&issued.audiences),
                go_quoted_list(audiences)
            ));
        }
        match account_uid(&issued.namespace, &issued.service_account) {
            Some(uid) if uid == issued.uid => Ok(issued.user()),
            _ => Err("service account token has been invalidated".to_string()),
        }
    }

    pub(crate) fn add_rule(&self, rule: AccessRule) {
        self.rules.write().push(rule);
    }

    pub(crate) fn clear_rules(&self) {
        self.rules.write().clear();
    }

    /// Authenticates an `Authorization` header value. Issued tokens are valid for the API audience
    /// only while they have not expired and their ServiceAccount (same uid) exists.
    pub(crate) fn authenticate(
        &self,
        header: Option<&str>,
        account_uid: AccountLookup<'_>,
    ) -> Authn {
        let Some(h) = header else {
            return Authn::Anonymous;
        };
        let token = h
            .strip_prefix("Bearer ")
            .or_else(|| h.strip_prefix("bearer "))
            .map(str::trim);
        match token {
            Some(t) if !t.is_empty() => {
                if let Some(u) = self.identities.read().get(t) {
                    return Authn::Known(u.clone());
                }
                match self.issued.read().get(t) {
                    Some(issued) => {
                        match Self::check_issued(
                            issued,
                            &[DEFAULT_AUDIENCE.to_string()],
                            account_uid,
                        ) {
                            Ok(user) => Authn::Known(user),
                            Err(why) => Authn::Rejected(why),
                        }
                    }
                    None => Authn::UnknownToken,
                }
            }
            _ => Authn::Anonymous,
        }
    }

    /// Answers a TokenReview body (already decoded). 201 with the review, or 400.
    pub(crate) fn token_review(
        &self,
        body: &Value,
        account_uid: AccountLookup<'_>,
    ) -> Result<Value, ApiError> {
        let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
        let token = spec["token"].as_str().unwrap_or("");
        if token.is_empty() {
            return Err(ApiError::bad_request(
                "token is required for TokenReview in authentication",
            ));
        }
        let requested: Option<Vec<String>> = spec
            .get("audiences")
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            });
        let known = self.identities.read().get(token).cloned();
        let status = match known {
            Some(user) => json!({
                "authenticated": true,
                "user": user.review_json(),
                "audiences": requested.map_or_else(|| json!([DEFAULT_AUDIENCE]), |a| json!(a))
            }),
            None => match self.issued.read().get(token) {
                Some(issued) => {
                    let wanted = requested.unwrap_or_else(|| vec![DEFAULT_AUDIENCE.to_string()]);
                    match Self::check_issued(issued, &wanted, account_uid) {
                        Ok(user) => {
                            let matched: Vec<&String> = wanted
                                .iter()
                                .filter(|a| issued.audiences.contains(a))
                                .collect();
                            json!({
                                "authenticated": true,
                                "user": user.review_json(),
                                "audiences": matched
                            })
                        }
                        Err(why) => json!({
                            "user": {},
                            "error": format!("[invalid bearer token, {why}]")
                        }),
                    }
                }
                None => json!({"user": {}, "error": "invalid bearer token"}),
            },
        };
        Ok(json!({
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": null},
            "spec": spec,
            "status": status
        }))
    }

    /// Answers a SubjectAccessReview body (already decoded). 201 with the review, or 422.
    pub(crate) fn subject_access_review(&self, body: &Value) -> Result<Value, ApiError> {
        let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
        let user = spec["user"].as_str().unwrap_or("");
        let groups: Vec<String> = spec["groups"]
            .as_array()
            .map(|g| {
                g.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let has_ra = spec.get("resourceAttributes").is_some_and(Value::is_object);
        let nra = spec.get("nonResourceAttributes").filter(|v| v.is_object());
        let mut errs = Vec::new();
        if user.is_empty() && groups.is_empty() {
            errs.push(FieldError::invalid_str(
                "spec.user",
                "",
                "at least one of user or group must be specified",
            ));
        }
        if has_ra && let Some(n) = nra {
            errs.push(FieldError::invalid(
                "spec.nonResourceAttributes",
                format!(
                    "authorization.NonResourceAttributes{{Path:{}, Verb:{}}}",
                    crate::error::quote(n["path"].as_str().unwrap_or("")),
                    crate::error::quote(n["verb"].as_str().unwrap_or(""))
                ),
                "cannot be specified in combination with resourceAttributes",
            ));
        }
        if !has_ra && nra.is_none() {
            errs.push(FieldError::required(
                "spec.resourceAttributes",
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ));
        }
        if !errs.is_empty() {
            let mut e = ApiError::invalid_by_resource(sar_def(), "", &errs);
            e.message = format!(".authorization.k8s.io \"\" is invalid: {}", summary(&errs));
            e.details = e.details.map(|mut d| {
                if let Value::Object(m) = &mut *d {
                    m.shift_remove("kind");
                }
                d
            });
            return Err(e);
        }
        let status = if groups.iter().any(|g| g == "system:masters") {
            json!({"allowed": true})
        } else {
            match self
                .rules
                .read()
                .iter()
                .find(|r| r.matches(user, &groups, &spec))
            {
                Some(rule) => match &rule.reason {
                    Some(reason) => json!({"allowed": true, "reason": reason}),
                    None => json!({"allowed": true}),
                },
                None => json!({"allowed": false}),
            }
        };
        Ok(json!({
            "kind": "SubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": null},
            "spec": spec,
            "status": status
        }))
    }
}

fn summary(errs: &[FieldError]) -> String {
    if errs.len() == 1 {
        errs[0].full()
    } else {
        format!(
            "[{}]",
            errs.iter()
                .map(FieldError::full)
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

fn sar_def() -> &'static crate::resources::ResourceDef {
    crate::resources::find("authorization.k8s.io", "v1", "subjectaccessreviews")
        .unwrap_or(&crate::resources::RESOURCES[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_reviews() {
        let a = AuthConfig::default();
        a.set_identity(
            "good",
            UserInfo::new(
                "system:serviceaccount:kube-system:ccm",
                &["system:serviceaccounts", "system:authenticated"],
            ),
        );
        let none = |_: &str, _: &str| None;
        let ok = a
            .token_review(&json!({"spec":{"token":"good"}}), &none)
            .unwrap();
        assert_eq!(ok["status"]["authenticated"], true);
        assert_eq!(
            ok["status"]["user"]["username"],
            "system:serviceaccount:kube-system:ccm"
        );
        assert_eq!(ok["status"]["audiences"], json!([DEFAULT_AUDIENCE]));
        assert!(ok["metadata"]["creationTimestamp"].is_null());
        let bad = a
            .token_review(&json!({"spec":{"token":"bogus-token"}}), &none)
            .unwrap();
        assert_eq!(
            bad["status"],
            json!({"user": {}, "error": "invalid bearer token"})
        );
        assert_eq!(
            a.token_review(&json!({"spec":{}}), &none).unwrap_err().code,
            400
        );
        assert_eq!(
            a.authenticate(Some("Bearer good"), &none),
            Authn::Known(a.identities.read()["good"].clone())
        );
        assert_eq!(
            a.authenticate(Some("Bearer other"), &none),
            Authn::UnknownToken
        );
        assert_eq!(a.authenticate(None, &none), Authn::Anonymous);
    }

    fn issued(expires_in: std::time::Duration, audiences: &[&str]) -> IssuedToken {
        IssuedToken {
            namespace: "kube-system".into(),
            service_account: "cloud-node-controller".into(),
            uid: "uid-1".into(),
            audiences: audiences.iter().map(|a| (*a).to_string()).collect(),
            expires: Instant::now() + expires_in,
        }
    }

    #[test]
    fn issued_tokens() {
        let a = AuthConfig::default();
        let hour = std::time::Duration::from_secs(3600);
        a.issue("live", issued(hour, &[DEFAULT_AUDIENCE]));
        a.issue("other-audience", issued(hour, &["vault"]));
        a.issue(
            "expired",
            issued(std::time::Duration::ZERO, &[DEFAULT_AUDIENCE]),
        );
        let exists = |ns: &str, name: &str| {
            (ns == "kube-system" && name == "cloud-node-controller").then(|| "uid-1".to_string())
        };
        let recreated = |_: &str, _: &str| Some("uid-2".to_string());
        let Authn::Known(user) = a.authenticate(Some("Bearer live"), &exists) else {
            panic!("the live token is not accepted");
        };
        assert_eq!(
            user.username,
            "system:serviceaccount:kube-system:cloud-node-controller"
        );
        assert_eq!(
            user.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system",
                "system:authenticated"
            ]
        );
        assert_eq!(user.uid.as_deref(), Some("uid-1"));
        assert_eq!(
            a.authenticate(Some("Bearer expired"), &exists),
            Authn::Rejected("service account token has expired".into())
        );
        assert_eq!(
            a.authenticate(Some("Bearer live"), &recreated),
            Authn::Rejected("service account token has been invalidated".into())
        );
        assert!(matches!(
            a.authenticate(Some("Bearer other-audience"), &exists),
            Authn::Rejected(_)
        ));
        assert_eq!(a.live_issued_tokens(), 2);

        let review = a
            .token_review(&json!({"spec":{"token":"live"}}), &exists)
            .unwrap();
        assert_eq!(review["status"]["authenticated"], true);
        assert_eq!(review["status"]["user"]["uid"], "uid-1");
        assert_eq!(review["status"]["audiences"], json!([DEFAULT_AUDIENCE]));
        let review = a
            .token_review(
                &json!({"spec":{"token":"live","audiences":["some-other-audience"]}}),
                &exists,
            )
            .unwrap();
        assert_eq!(
            review["status"],
            json!({"user": {}, "error": "[invalid bearer token, token audiences [\"https://kubernetes.default.svc.cluster.local\"] is invalid for the target audiences [\"some-other-audience\"]]"})
        );
        let review = a
            .token_review(
                &json!({"spec":{"token":"other-audience","audiences":["vault","x"]}}),
                &exists,
            )
            .unwrap();
        assert_eq!(review["status"]["audiences"], json!(["vault"]));
        let review = a
            .token_review(&json!({"spec":{"token":"expired"}}), &exists)
            .unwrap();
        assert_eq!(
            review["status"]["error"],
            "[invalid bearer token, service account token has expired]"
        );
    }

    #[test]
    fn access_reviews() {
        let a = AuthConfig::default();
        let r = a.subject_access_review(&json!({"spec":{"user":"alice","resourceAttributes":{"verb":"get","resource":"nodes","version":"v1"}}})).unwrap();
        assert_eq!(r["status"], json!({"allowed": false}));
        let r = a.subject_access_review(&json!({"spec":{"user":"bob","groups":["system:masters"],"resourceAttributes":{"verb":"get","resource":"nodes"}}})).unwrap();
        assert_eq!(r["status"], json!({"allowed": true}));
        a.add_rule(
            AccessRule::group_can_path("system:authenticated", "get", "/healthz")
                .with_reason("RBAC: allowed"),
        );
        let r = a
            .subject_access_review(&json!({"spec":{"user":"sa","groups":["system:authenticated"],"nonResourceAttributes":{"path":"/healthz","verb":"get"}}}))
            .unwrap();
        assert_eq!(
            r["status"],
            json!({"allowed": true, "reason": "RBAC: allowed"})
        );
        a.add_rule(AccessRule::user_can("alice", "get", "nodes"));
        let r = a.subject_access_review(&json!({"spec":{"user":"alice","resourceAttributes":{"verb":"get","resource":"nodes"}}})).unwrap();
        assert_eq!(r["status"], json!({"allowed": true}));
        let r = a.subject_access_review(&json!({"spec":{"user":"alice","resourceAttributes":{"verb":"get","resource":"nodes","subresource":"status"}}})).unwrap();
        assert_eq!(r["status"], json!({"allowed": false}));

        let e = a
            .subject_access_review(
                &json!({"spec":{"resourceAttributes":{"verb":"get","resource":"nodes"}}}),
            )
            .unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            ".authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified"
        );
        assert_eq!(
            e.details.as_deref(),
            Some(
                &json!({"group":"authorization.k8s.io","causes":[{"reason":"FieldValueInvalid","message":"Invalid value: \"\": at least one of user or group must be specified","field":"spec.user"}]})
            )
        );
        let e = a
            .subject_access_review(&json!({"spec":{"user":"alice","resourceAttributes":{"verb":"get","resource":"nodes"},"nonResourceAttributes":{"path":"/healthz","verb":"get"}}}))
            .unwrap_err();
        assert!(e.message.contains("authorization.NonResourceAttributes{Path:\"/healthz\", Verb:\"get\"}: cannot be specified in combination with resourceAttributes"));
    }
}
