//! Droplet lookups through a cache of the whole droplet list.
//!
//! Upstream asks the API once per node per check. Here one paginated `GET /v2/droplets` (200 per page)
//! answers every lookup for [`DoConfig::droplet_cache_ttl`](crate::DoConfig): node checks cost O(1) API
//! calls per period, independent of the number of nodes. A lookup that misses the cache refreshes the list
//! (at most once per
//! [`DoConfig::droplet_miss_refresh_interval`](crate::DoConfig), and concurrent refreshes are coalesced) and then asks for the
//! droplet itself, so a droplet is only ever reported missing after `GET /v2/droplets/{id}` answered 404
//! (or, for a node without a provider ID, after `GET /v2/droplets?name=` found nothing).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cloud_provider::{CloudError, ProviderId};
use k8s_openapi::api::core::v1::Node;
use tokio::time::Instant;

use crate::api::Droplet;
use crate::client::{ApiError, DoClient};

/// The provider name, also the provider-ID scheme: `digitalocean://<droplet id>`.
pub const PROVIDER_NAME: &str = "digitalocean";

/// How a node names its droplet.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DropletRef {
    /// By ID, from the node's provider ID.
    Id(u64),
    /// By name, for nodes without a provider ID.
    Name(String),
}

impl std::fmt::Display for DropletRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DropletRef::Id(id) => write!(f, "droplet {id}"),
            DropletRef::Name(name) => write!(f, "droplet named {name:?}"),
        }
    }
}

/// The droplet ID in a provider ID `digitalocean://<id>`.
///
/// ```
/// use provider_digitalocean::droplet_id_from_provider_id;
/// assert_eq!(droplet_id_from_provider_id("digitalocean://12345").unwrap(), 12345);
/// assert!(droplet_id_from_provider_id("aws:///us-east-1a/i-1").is_err());
/// assert!(droplet_id_from_provider_id("digitalocean://web-1").is_err());
/// ```
pub fn droplet_id_from_provider_id(provider_id: &str) -> Result<u64, CloudError> {
    let parsed = ProviderId::parse_for(PROVIDER_NAME, provider_id).map_err(|e| {
        CloudError::provider_with(format!("invalid provider ID {provider_id:?}"), e)
    })?;
    parsed.instance.parse::<u64>().map_err(|_| {
        CloudError::provider(format!(
            "invalid provider ID {provider_id:?}: the droplet ID must be an integer"
        ))
    })
}

/// The provider ID of a droplet.
pub fn provider_id_of(droplet_id: u64) -> String {
    ProviderId::new(PROVIDER_NAME, droplet_id.to_string()).to_string()
}

/// How a node refers to its droplet: its provider ID when set, else its name.
pub fn droplet_ref_of(node: &Node) -> Result<DropletRef, CloudError> {
    let provider_id = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|p| !p.is_empty());
    match provider_id {
        Some(pid) => droplet_id_from_provider_id(pid).map(DropletRef::Id),
        None => node
            .metadata
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .map(DropletRef::Name)
            .ok_or_else(|| CloudError::provider("node has neither a provider ID nor a name")),
    }
}

#[derive(Default)]
struct CacheState {
    by_id: HashMap<u64, Arc<Droplet>>,
    by_name: HashMap<String, Vec<u64>>,
    fetched_at: Option<Instant>,
    generation: u64,
}

impl CacheState {
    fn fresh(&self, ttl: Duration) -> bool {
        self.fetched_at.is_some_and(|t| t.elapsed() < ttl)
    }

    fn get(&self, r: &DropletRef) -> Lookup {
        match r {
            DropletRef::Id(id) => match self.by_id.get(id) {
                Some(d) => Lookup::Found(d.clone()),
                None => Lookup::Missing,
            },
            DropletRef::Name(name) => match self.by_name.get(name).map(Vec::as_slice) {
                None | Some([]) => Lookup::Missing,
                Some([id]) => match self.by_id.get(id) {
                    Some(d) => Lookup::Found(d.clone()),
                    None => Lookup::Missing,
                },
                Some(ids) => Lookup::Ambiguous(ids.to_vec()),
            },
        }
    }

    fn insert(&mut self, droplet: Droplet) {
        let droplet = Arc::new(droplet);
        if let Some(old) = self.by_id.insert(droplet.id, droplet.clone())
            && let Some(ids) = self.by_name.get_mut(&old.name)
        {
            ids.retain(|id| *id != old.id);
        }
        let ids = self.by_name.entry(droplet.name.clone()).or_default();
        if !ids.contains(&droplet.id) {
            ids.push(droplet.id);
        }
    }
}

enum Lookup {
    Found(Arc<Droplet>),
    Missing,
    Ambiguous(Vec<u64>),
}

/// The droplet cache and lookups.
pub struct DropletDirectory {
    client: DoClient,
    ttl: Duration,
    miss_refresh_interval: Duration,
    state: parking_lot::RwLock<CacheState>,
    refresh_lock: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for DropletDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.read();
        f.debug_struct("DropletDirectory")
            .field("ttl", &self.ttl)
            .field("cached", &state.by_id.len())
            .finish_non_exhaustive()
    }
}

impl DropletDirectory {
    /// A directory whose list is trusted for `ttl`; misses refresh it at most once per
    /// `miss_refresh_interval`.
    pub fn new(client: DoClient, ttl: Duration, miss_refresh_interval: Duration) -> Self {
        DropletDirectory {
            client,
            ttl,
            miss_refresh_interval: miss_refresh_interval.min(ttl),
            state: parking_lot::RwLock::new(CacheState::default()),
            refresh_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Re-lists every droplet unless another caller did so since `seen_generation`.
    async fn refresh(&self, seen_generation: u64) -> Result<(), ApiError> {
        let _guard = self.refresh_lock.lock().await;
        if self.state.read().generation != seen_generation {
            return Ok(());
        }
        let droplets: Vec<Droplet> = self
            .client
            .list("list_droplets", "v2/droplets", "droplets", &[])
            .await?;
        let mut fresh = CacheState {
            fetched_at: Some(Instant::now()),
            generation: seen_generation + 1,
            ..CacheState::default()
        };
        for d in droplets {
            fresh.insert(d);
        }
        tracing::debug!(droplets = fresh.by_id.len(), "refreshed the droplet cache");
        *self.state.write() = fresh;
        Ok(())
    }

    /// Every cached droplet after making sure the list is fresh.
    pub async fn all(&self) -> Result<Vec<Arc<Droplet>>, CloudError> {
        let (fresh, generation) = {
            let s = self.state.read();
            (s.fresh(self.ttl), s.generation)
        };
        if !fresh {
            self.refresh(generation).await?;
        }
        let mut out: Vec<_> = self.state.read().by_id.values().cloned().collect();
        out.sort_by_key(|d| d.id);
        Ok(out)
    }

    /// Looks one droplet up; `Ok(None)` only when the API confirmed it does not exist.
    pub async fn lookup(&self, r: &DropletRef) -> Result<Option<Arc<Droplet>>, CloudError> {
        self.lookup_many(std::slice::from_ref(r))
            .await
            .pop()
            .unwrap_or(Ok(None))
    }

    /// Looks many droplets up with at most one list refresh; results in input order.
    pub async fn lookup_many(
        &self,
        refs: &[DropletRef],
    ) -> Vec<Result<Option<Arc<Droplet>>, CloudError>> {
        let (fresh, generation, last_fetch) = {
            let s = self.state.read();
            (s.fresh(self.ttl), s.generation, s.fetched_at)
        };
        let mut refreshed = false;
        if !fresh {
            if let Err(e) = self.refresh(generation).await {
                let e = CloudError::from(e);
                return refs.iter().map(|_| Err(clone_error(&e))).collect();
            }
            refreshed = true;
        }
        let mut results: Vec<Option<Result<Option<Arc<Droplet>>, CloudError>>> =
            refs.iter().map(|r| self.cached(r)).collect();

        let missing = results.iter().any(Option::is_none);
        let may_refresh =
            !refreshed && last_fetch.is_none_or(|t| t.elapsed() >= self.miss_refresh_interval);
        if missing && may_refresh {
            let generation = self.state.read().generation;
            match self.refresh(generation).await {
                Ok(()) => {
                    for (slot, r) in results.iter_mut().zip(refs) {
                        if slot.is_none() {
                            *slot = self.cached(r);
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not refresh the droplet cache"),
            }
        }

        let mut out = Vec::with_capacity(refs.len());
        for (slot, r) in results.into_iter().zip(refs) {
            out.push(match slot {
                Some(done) => done,
                None => self.fetch_one(r).await,
            });
        }
        out
    }

    fn cached(&self, r: &DropletRef) -> Option<Result<Option<Arc<Droplet>>, CloudError>> {
        match self.state.read().get(r) {
            Lookup::Found(d) => Some(Ok(Some(d))),
            Lookup::Missing => None,
            Lookup::Ambiguous(ids) => Some(Err(ambiguous(r, &ids))),
        }
    }

    /// Asks the API for one droplet the cache does not know.
    async fn fetch_one(&self, r: &DropletRef) -> Result<Option<Arc<Droplet>>, CloudError> {
        match r {
            DropletRef::Id(id) => {
                let found: Option<Droplet> = self
                    .client
                    .get_opt("get_droplet", &format!("v2/droplets/{id}"), "droplet")
                    .await?;
                Ok(found.map(|d| self.remember(d)))
            }
            DropletRef::Name(name) => {
                let found: Vec<Droplet> = self
                    .client
                    .list(
                        "list_droplets_by_name",
                        "v2/droplets",
                        "droplets",
                        &[("name", name)],
                    )
                    .await?;
                let mut matching: Vec<Droplet> =
                    found.into_iter().filter(|d| &d.name == name).collect();
                match matching.len() {
                    0 => Ok(None),
                    1 => Ok(matching.pop().map(|d| self.remember(d))),
                    _ => Err(ambiguous(
                        r,
                        &matching.iter().map(|d| d.id).collect::<Vec<_>>(),
                    )),
                }
            }
        }
    }

    fn remember(&self, droplet: Droplet) -> Arc<Droplet> {
        let mut state = self.state.write();
        state.insert(droplet.clone());
        Arc::new(droplet)
    }
}

fn ambiguous(r: &DropletRef, ids: &[u64]) -> CloudError {
    CloudError::provider(format!(
        "{r} is ambiguous: droplets {ids:?} share that name; set the node's provider ID"
    ))
}

/// Copies an error for fan-out to many callers (the source chain is flattened into the message).
pub(crate) fn clone_error(e: &CloudError) -> CloudError {
    match e {
        CloudError::Retry { message, after } => CloudError::retry(message.clone(), *after),
        CloudError::InstanceNotFound => CloudError::InstanceNotFound,
        CloudError::DiskNotFound => CloudError::DiskNotFound,
        CloudError::NotImplemented => CloudError::NotImplemented,
        CloudError::ImplementedElsewhere => CloudError::ImplementedElsewhere,
        other => CloudError::provider(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, provider_id: Option<&str>) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        if let Some(p) = provider_id {
            n.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
                provider_id: Some(p.into()),
                ..Default::default()
            });
        }
        n
    }

    #[test]
    fn droplet_refs() {
        assert_eq!(
            droplet_ref_of(&node("n1", Some("digitalocean://42"))).unwrap(),
            DropletRef::Id(42)
        );
        assert_eq!(
            droplet_ref_of(&node("n1", None)).unwrap(),
            DropletRef::Name("n1".into())
        );
        assert_eq!(
            droplet_ref_of(&node("n1", Some(""))).unwrap(),
            DropletRef::Name("n1".into())
        );
        let err = droplet_ref_of(&node("n1", Some("fake://n1"))).unwrap_err();
        assert!(err.to_string().contains("fake://n1"), "{err}");
        let err = droplet_ref_of(&node("n1", Some("digitalocean://abc"))).unwrap_err();
        assert!(err.to_string().contains("must be an integer"), "{err}");
        assert_eq!(provider_id_of(7), "digitalocean://7");
    }

    #[test]
    fn cache_state_tracks_renames_and_duplicates() {
        let mut s = CacheState::default();
        let d = |id, name: &str| Droplet {
            id,
            name: name.into(),
            ..Default::default()
        };
        s.insert(d(1, "a"));
        s.insert(d(2, "b"));
        assert!(matches!(s.get(&DropletRef::Name("a".into())), Lookup::Found(x) if x.id == 1));
        s.insert(d(1, "renamed"));
        assert!(matches!(
            s.get(&DropletRef::Name("a".into())),
            Lookup::Missing
        ));
        assert!(matches!(
            s.get(&DropletRef::Name("renamed".into())),
            Lookup::Found(_)
        ));
        s.insert(d(3, "b"));
        assert!(
            matches!(s.get(&DropletRef::Name("b".into())), Lookup::Ambiguous(ids) if ids == vec![2, 3])
        );
        assert!(matches!(s.get(&DropletRef::Id(9)), Lookup::Missing));
    }
}
