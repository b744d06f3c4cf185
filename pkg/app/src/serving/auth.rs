//! Delegated authentication and authorization of callers, like Kubernetes' generic API servers do it:
//! a bearer token is checked with a `TokenReview`, a client certificate against the cluster's client CA,
//! and the resulting user is authorized with a `SubjectAccessReview` for the non-resource path and the
//! request's verb. Answers are cached briefly. Tokens are never logged.

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

/// How long a successful authentication or an "allowed" decision is reused.
pub const ALLOW_TTL: Duration = Duration::from_secs(10);
/// How long a failed authentication or a "denied" decision is reused.
pub const DENY_TTL: Duration = Duration::from_secs(10);
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
}

impl std::fmt::Debug for TokenAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenAuthenticator").finish_non_exhaustive()
    }
}

impl TokenAuthenticator {
    /// Reviews tokens through `client` (the `--authentication-kubeconfig` client).
    pub fn new(client: kube::Client) -> Self {
        Self {
            api: Api::all(client),
            cache: TtlCache::new(),
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
        let ttl = if user.is_some() { ALLOW_TTL } else { DENY_TTL };
        self.cache.insert(token.to_string(), user.clone(), ttl);
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
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

impl Authorizer {
    /// Reviews through `client` (the `--authorization-kubeconfig` client).
    pub fn new(client: kube::Client) -> Self {
        Self {
            api: Api::all(client),
            cache: TtlCache::new(),
        }
    }

    /// May `user` do `verb` on the non-resource `path`?
    pub async fn authorize(
        &self,
        user: &UserInfo,
        verb: &str,
        path: &str,
    ) -> Result<Decision, AuthError> {
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
            ALLOW_TTL
        } else {
            DENY_TTL
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

/// Looks up the cluster's client CA bundle (`client-ca-file` of the ConfigMap
/// `kube-system/extension-apiserver-authentication`).
pub async fn lookup_client_ca(client: kube::Client) -> Result<String, String> {
    let api: Api<ConfigMap> = Api::namespaced(client, "kube-system");
    let map = api
        .get("extension-apiserver-authentication")
        .await
        .map_err(|err| {
            let err = match err {
                kube::Error::Api(status) => {
                    format!("{} {}: {}", status.code, status.reason, status.message)
                }
                other => other.to_string(),
            };
            format!("cannot read configmap kube-system/extension-apiserver-authentication: {err}")
        })?;
    map.data
        .and_then(|mut data| data.remove("client-ca-file"))
        .filter(|pem| !pem.trim().is_empty())
        .ok_or_else(|| {
            "configmap kube-system/extension-apiserver-authentication has no client-ca-file"
                .to_string()
        })
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
