//! Delegated authentication and authorization of callers, like Kubernetes' generic API servers do it:
//! a proxy's client certificate (request-header CA) names the caller in request headers, a client
//! certificate (client CA) names the caller itself, a bearer token is checked with a `TokenReview`; the
//! resulting user is authorized with a `SubjectAccessReview` for the non-resource path and the request's
//! verb, unless it is in an always-allowed group (`system:masters`). Answers are cached for the flags'
//! TTLs. Tokens are never logged.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use parking_lot::Mutex;
use tokio::time::Instant;

/// The groups authorized for every path without a SubjectAccessReview, as upstream's.
pub const ALWAYS_ALLOW_GROUPS: &[&str] = &["system:masters"];
/// Cache entries kept at most (per cache); beyond it expired entries are dropped, then everything.
const CACHE_CAPACITY: usize = 4096;

/// The group every authenticated user belongs to.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct UserInfo {
    /// The user name.
    pub username: String,
    /// The user's UID, if known.
    pub uid: Option<String>,
    /// The user's groups.
    pub groups: Vec<String>,
    /// Extra attributes from the authenticator.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Errors talking to the API server for a review.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The TokenReview request failed.
    #[error("TokenReview failed: {0}")]
    TokenReview(#[source] kube::Error),
    /// The SubjectAccessReview request failed.
    #[error("SubjectAccessReview failed: {0}")]
    SubjectAccessReview(#[source] kube::Error),
}

/// A small TTL cache.
#[derive(Debug)]
struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    fn new() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock();
        let (expires, value) = entries.get(key)?;
        (Instant::now() < *expires).then(|| value.clone())
    }

    fn insert(&self, key: K, value: V, ttl: Duration) {
        let mut entries = self.entries.lock();
        let now = Instant::now();
        if entries.len() >= CACHE_CAPACITY {
            entries.retain(|_, (expires, _)| *expires > now);
            if entries.len() >= CACHE_CAPACITY {
                entries.clear();
            }
        }
        entries.insert(key, (now + ttl, value));
    }
}

/// Authenticates bearer tokens with TokenReviews.
pub struct TokenAuthenticator {
    api: Api<TokenReview>,
    cache: TtlCache<String, Option<UserInfo>>,
    ttl: Duration,
}

impl std::fmt::Debug for TokenAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenAuthenticator").finish_non_exhaustive()
    }
}

impl TokenAuthenticator {
    /// Reviews tokens through `client` (the `--authentication-kubeconfig` client), reusing each answer
    /// for `ttl` (`--authentication-token-webhook-cache-ttl`).
    pub fn new(client: kube::Client, ttl: Duration) -> Self {
        Self {
            api: Api::all(client),
            cache: TtlCache::new(),
            ttl,
        }
    }

    /// The user behind `token`, `None` when the API server does not accept it.
    pub async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, AuthError> {
        if let Some(cached) = self.cache.get(&token.to_string()) {
            return Ok(cached);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = self
            .api
            .create(&PostParams::default(), &review)
            .await
            .map_err(AuthError::TokenReview)?;
        let user = answer
            .status
            .filter(|status| status.authenticated == Some(true))
            .and_then(|status| status.user)
            .and_then(|user| {
                let username = user.username.filter(|u| !u.is_empty())?;
                Some(UserInfo {
                    username,
                    uid: user.uid.filter(|u| !u.is_empty()),
                    groups: user.groups.unwrap_or_default(),
                    extra: user.extra.unwrap_or_default().into_iter().collect(),
                })
            });
        self.cache.insert(token.to_string(), user.clone(), self.ttl);
        Ok(user)
    }
}

/// The result of an authorization check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// The authorizer's reason, if it gave one.
    pub reason: Option<String>,
}

/// Authorizes users for non-resource paths with SubjectAccessReviews.
pub struct Authorizer {
    api: Api<SubjectAccessReview>,
    cache: TtlCache<(UserInfo, String, String), Decision>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

impl Authorizer {
    /// Reviews through `client` (the `--authorization-kubeconfig` client), reusing an "allowed" answer for
    /// `allowed_ttl` and a "denied" one for `denied_ttl` (`--authorization-webhook-cache-*-ttl`).
    pub fn new(client: kube::Client, allowed_ttl: Duration, denied_ttl: Duration) -> Self {
        Self {
            api: Api::all(client),
            cache: TtlCache::new(),
            allowed_ttl,
            denied_ttl,
        }
    }

    /// May `user` do `verb` on the non-resource `path`?
    pub async fn authorize(
        &self,
        user: &UserInfo,
        verb: &str,
        path: &str,
    ) -> Result<Decision, AuthError> {
        if user
            .groups
            .iter()
            .any(|group| ALWAYS_ALLOW_GROUPS.contains(&group.as_str()))
        {
            return Ok(Decision {
                allowed: true,
                reason: None,
            });
        }
        let key = (user.clone(), verb.to_string(), path.to_string());
        if let Some(decision) = self.cache.get(&key) {
            return Ok(decision);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.username.clone()),
                uid: user.uid.clone(),
                groups: (!user.groups.is_empty()).then(|| user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone().into_iter().collect()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let answer = self
            .api
            .create(&PostParams::default(), &review)
            .await
            .map_err(AuthError::SubjectAccessReview)?;
        let status = answer.status.unwrap_or_default();
        let decision = Decision {
            allowed: status.allowed && status.denied != Some(true),
            reason: status.reason.filter(|r| !r.is_empty()),
        };
        let ttl = if decision.allowed {
            self.allowed_ttl
        } else {
            self.denied_ttl
        };
        self.cache.insert(key, decision.clone(), ttl);
        Ok(decision)
    }
}

/// Everything the serving endpoint needs to check callers.
#[derive(Debug, Clone)]
pub struct DelegatedAuth {
    /// Token authentication.
    pub authenticator: Arc<TokenAuthenticator>,
    /// Authorization.
    pub authorizer: Arc<Authorizer>,
    /// `--authorization-always-allow-paths`.
    pub always_allow_paths: Vec<String>,
    /// How proxies (certificates of the request-header CA) name callers, when there is such a CA.
    pub request_header: Option<RequestHeaderConfig>,
}

/// How a proxy names the caller in request headers (`--requestheader-*`, or the cluster's
/// `extension-apiserver-authentication` ConfigMap).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestHeaderConfig {
    /// Common names a proxy's certificate may have; empty: any the request-header CA signed.
    pub allowed_names: Vec<String>,
    /// Headers naming the user (the first present wins).
    pub username_headers: Vec<String>,
    /// Headers naming the user's UID.
    pub uid_headers: Vec<String>,
    /// Headers naming the user's groups (every value of each).
    pub group_headers: Vec<String>,
    /// Prefixes of headers carrying extra attributes (the rest of the name, lower-cased and
    /// percent-decoded, is the key).
    pub extra_headers_prefixes: Vec<String>,
}

/// Why a proxy's request cannot be attributed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestHeaderError {
    /// The proxy certificate's common name is not allowed.
    #[error("x509: subject with cn={0} is not in the allowed list")]
    NotAllowed(String),
}

impl RequestHeaderConfig {
    /// The user a proxy with certificate common name `proxy` names in `headers`: `Ok(None)` when no
    /// username header is present (other authenticators are tried), an error when the proxy is not
    /// allowed.
    pub fn user(
        &self,
        proxy: &str,
        headers: &http::HeaderMap,
    ) -> Result<Option<UserInfo>, RequestHeaderError> {
        if !self.allowed_names.is_empty() && !self.allowed_names.iter().any(|n| n == proxy) {
            return Err(RequestHeaderError::NotAllowed(proxy.to_string()));
        }
        let values = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_string)
                .collect()
        };
        let Some(username) = self
            .username_headers
            .iter()
            .flat_map(|h| values(h))
            .find(|v| !v.is_empty())
        else {
            return Ok(None);
        };
        let uid = self
            .uid_headers
            .iter()
            .flat_map(|h| values(h))
            .find(|v| !v.is_empty());
        let groups = self.group_headers.iter().flat_map(|h| values(h)).collect();
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in headers {
            let name = name.as_str();
            let Some(prefix) = self
                .extra_headers_prefixes
                .iter()
                .find(|p| name.len() > p.len() && name[..p.len()].eq_ignore_ascii_case(p))
            else {
                continue;
            };
            if let Ok(value) = value.to_str() {
                let key = percent_decode(&name[prefix.len()..]).to_ascii_lowercase();
                extra.entry(key).or_default().push(value.to_string());
            }
        }
        Ok(Some(UserInfo {
            username,
            uid,
            groups,
            extra,
        }))
    }
}

/// Decodes `%XX` escapes (a malformed escape is kept as it is).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl DelegatedAuth {
    /// Whether `path` skips authentication and authorization.
    pub fn always_allowed(&self, path: &str) -> bool {
        path_matches(&self.always_allow_paths, path)
    }
}

/// Whether `path` matches one of `patterns` (exact, or a prefix when the pattern ends with `*`).
pub fn path_matches(patterns: &[String], path: &str) -> bool {
    patterns
        .iter()
        .any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => pattern == path,
        })
}

/// The name of the ConfigMap with the cluster's authentication settings, in kube-system.
pub const AUTHENTICATION_CONFIGMAP: &str = "extension-apiserver-authentication";

/// What the cluster's `kube-system/extension-apiserver-authentication` ConfigMap says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterAuthentication {
    /// `client-ca-file`: the CA of client certificates that name users.
    pub client_ca: Option<String>,
    /// `requestheader-client-ca-file`: the CA of proxies.
    pub request_header_ca: Option<String>,
    /// The `requestheader-*` lists (JSON string arrays in the ConfigMap).
    pub request_header: RequestHeaderConfig,
}

/// Why the lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The ConfigMap could not be read (other than "not found").
    #[error("cannot read configmap kube-system/{AUTHENTICATION_CONFIGMAP}: {err}{hint}", err = .0, hint = forbidden_hint(.0))]
    Read(kube::Error),
    /// A list value is not a JSON array of strings.
    #[error("configmap kube-system/{AUTHENTICATION_CONFIGMAP}: {key}: {message}")]
    Malformed {
        /// The key.
        key: &'static str,
        /// Why.
        message: String,
    },
}

fn forbidden_hint(err: &kube::Error) -> &'static str {
    match err {
        kube::Error::Api(status) if status.code == 403 => {
            " (bind the Role extension-apiserver-authentication-reader in kube-system to this \
             ServiceAccount, as the manifests do)"
        }
        _ => "",
    }
}

/// Reads the cluster's authentication settings; `Ok(None)` when the ConfigMap does not exist.
pub async fn lookup_cluster_authentication(
    client: kube::Client,
) -> Result<Option<ClusterAuthentication>, LookupError> {
    let api: Api<ConfigMap> = Api::namespaced(client, "kube-system");
    let Some(map) = api
        .get_opt(AUTHENTICATION_CONFIGMAP)
        .await
        .map_err(LookupError::Read)?
    else {
        return Ok(None);
    };
    let data = map.data.unwrap_or_default();
    let text = |key: &str| data.get(key).filter(|v| !v.trim().is_empty()).cloned();
    let list = |key: &'static str| -> Result<Vec<String>, LookupError> {
        match text(key) {
            None => Ok(Vec::new()),
            Some(json) => serde_json::from_str(&json).map_err(|err| LookupError::Malformed {
                key,
                message: format!("expected a JSON array of strings: {err}"),
            }),
        }
    };
    Ok(Some(ClusterAuthentication {
        client_ca: text("client-ca-file"),
        request_header_ca: text("requestheader-client-ca-file"),
        request_header: RequestHeaderConfig {
            allowed_names: list("requestheader-allowed-names")?,
            username_headers: list("requestheader-username-headers")?,
            uid_headers: list("requestheader-uid-headers")?,
            group_headers: list("requestheader-group-headers")?,
            extra_headers_prefixes: list("requestheader-extra-headers-prefix")?,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn always_allow_patterns() {
        let patterns = vec!["/healthz".to_string(), "/debug/*".to_string()];
        assert!(path_matches(&patterns, "/healthz"));
        assert!(!path_matches(&patterns, "/healthz/ping"));
        assert!(path_matches(&patterns, "/debug/pprof"));
        assert!(path_matches(&patterns, "/debug/"));
        assert!(!path_matches(&patterns, "/metrics"));
        assert!(!path_matches(&[], "/healthz"));
    }

    #[test]
    fn proxies_name_users_in_headers() {
        let config = RequestHeaderConfig {
            allowed_names: vec!["front-proxy-client".into()],
            username_headers: vec!["x-remote-user".into()],
            uid_headers: vec!["x-remote-uid".into()],
            group_headers: vec!["x-remote-group".into()],
            extra_headers_prefixes: vec!["x-remote-extra-".into()],
        };
        let mut headers = http::HeaderMap::new();
        assert_eq!(config.user("front-proxy-client", &headers), Ok(None));
        headers.insert("x-remote-user", "alice".parse().unwrap());
        headers.insert("x-remote-uid", "u-1".parse().unwrap());
        headers.append("x-remote-group", "ops".parse().unwrap());
        headers.append("x-remote-group", "dev".parse().unwrap());
        headers.append("X-Remote-Extra-Scopes%2fRead", "a".parse().unwrap());
        let user = config
            .user("front-proxy-client", &headers)
            .unwrap()
            .unwrap();
        assert_eq!(user.username, "alice");
        assert_eq!(user.uid.as_deref(), Some("u-1"));
        assert_eq!(user.groups, ["ops", "dev"]);
        assert_eq!(user.extra["scopes/read"], ["a"]);
        assert_eq!(
            config
                .user("someone-else", &headers)
                .unwrap_err()
                .to_string(),
            "x509: subject with cn=someone-else is not in the allowed list"
        );
        let any = RequestHeaderConfig {
            allowed_names: Vec::new(),
            ..config
        };
        assert!(any.user("someone-else", &headers).unwrap().is_some());
        assert_eq!(percent_decode("a%2Fb%zz%"), "a/b%zz%");
    }

    #[tokio::test(start_paused = true)]
    async fn cache_entries_expire() {
        let cache: TtlCache<String, bool> = TtlCache::new();
        cache.insert("a".into(), true, Duration::from_secs(10));
        assert_eq!(cache.get(&"a".to_string()), Some(true));
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(cache.get(&"a".to_string()), Some(true));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(cache.get(&"a".to_string()), None);
    }

    #[tokio::test(start_paused = true)]
    async fn cache_is_bounded() {
        let cache: TtlCache<usize, usize> = TtlCache::new();
        for i in 0..CACHE_CAPACITY {
            cache.insert(i, i, Duration::from_secs(1));
        }
        tokio::time::advance(Duration::from_secs(2)).await;
        cache.insert(CACHE_CAPACITY, 0, Duration::from_secs(1));
        assert_eq!(cache.entries.lock().len(), 1);
        for i in 0..CACHE_CAPACITY + 10 {
            cache.insert(i, i, Duration::from_secs(100));
        }
        assert!(cache.entries.lock().len() <= CACHE_CAPACITY);
    }
}
