//! A stateful in-process stub of the DigitalOcean v2 API, for tests (feature `test-support`).
//!
//! [`DoStub::start`] serves on `127.0.0.1` (a free port) over plain HTTP. It keeps droplets, load balancers,
//! certificates, volumes and regions, answers with the API's request and response shapes (envelopes,
//! `links.pages` pagination with `page`/`per_page` up to 200, `meta.total`, error bodies with `id`,
//! `message` and `request_id`), checks the bearer token, and sends `RateLimit-Limit`,
//! `RateLimit-Remaining` and `RateLimit-Reset` on every response, answering 429 when the window's budget
//! is spent. Faults (429 with `RateLimit-Reset` and/or `Retry-After`, or any error status) can be injected
//! per method and path prefix ([`Fault`]). Every request is recorded ([`RecordedRequest`]) so tests can
//! count API calls. `GET /metadata/v1/region` plays the droplet metadata service.
//!
//! Load balancers are validated like the API does (names, regions, protocols, ports, certificates,
//! droplets, health-check and idle-timeout ranges, sizes, firewall rules, immutable type, network,
//! network stack, region and VPC) and get an ID, an IP address (and an IPv6 one when dual-stack) and a
//! status: `active` at once, or `new` until they have been read a configured number of times
//! ([`DoStubBuilder::activate_after_reads`]). As the API, the stub completes what a request leaves out
//! with the documented defaults (health check, sticky sessions, size, idle timeout, firewall, network,
//! network stack, TLS cipher policy, ...) and answers the response-only fields (`algorithm`, `size` next
//! to `size_unit`, `region` as an object, `vpc_uuid`, `project_id`, `created_at`). A `PUT` replaces the
//! load balancer: what it leaves out goes back to the defaults, except the creation-only `tags`, `ip`
//! and `vpc_uuid`. Mutating requests are recorded with their bodies ([`DoStub::mutations`]). Cloud firewalls
//! are kept and validated too (create, get, list, update, delete, tags), and so are tags (created, and
//! added to load balancers).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use provider_digitalocean::api::Droplet;
//! use provider_digitalocean::stub::{DoStub, DropletSpec};
//! use provider_digitalocean::{AccessToken, DoClient, DoConfig};
//!
//! let stub = DoStub::start().await;
//! let id = stub.add_droplet(DropletSpec::new("node-1"));
//! let config = DoConfig::new(AccessToken::new(stub.token()), &stub.url()).unwrap();
//! let client = DoClient::new(&config).unwrap();
//! let droplet: Droplet = client.get("get_droplet", &format!("v2/droplets/{id}"), "droplet").await.unwrap();
//! assert_eq!(droplet.name, "node-1");
//! assert_eq!(stub.count("GET", &format!("/v2/droplets/{id}")), 1);
//! # }
//! ```

mod answer;
mod firewalls;
mod handlers;
mod tags;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde_json::{Value, json};

/// The token the stub accepts unless the builder sets another.
pub const DEFAULT_TOKEN: &str = "stub-token-0123456789";
/// The regions the stub knows unless the builder sets others.
pub const DEFAULT_REGIONS: [&str; 3] = ["nyc3", "fra1", "sfo3"];

/// A droplet to add to the stub.
#[derive(Debug, Clone)]
pub struct DropletSpec {
    /// The name.
    pub name: String,
    /// `active`, `off`, `new` or `archive`.
    pub status: String,
    /// The size slug.
    pub size_slug: String,
    /// The region slug.
    pub region: String,
    /// Private IPv4 (none when `None`).
    pub private_ipv4: Option<String>,
    /// Public IPv4 (none when `None`).
    pub public_ipv4: Option<String>,
    /// Public IPv6 (none when `None`).
    pub public_ipv6: Option<String>,
    /// Tags.
    pub tags: Vec<String>,
}

impl DropletSpec {
    /// An active `s-2vcpu-4gb` droplet in `nyc3` with private and public IPv4 addresses derived from the
    /// droplet ID the stub assigns (unless set explicitly).
    pub fn new(name: impl Into<String>) -> Self {
        DropletSpec {
            name: name.into(),
            status: "active".into(),
            size_slug: "s-2vcpu-4gb".into(),
            region: "nyc3".into(),
            private_ipv4: None,
            public_ipv4: None,
            public_ipv6: None,
            tags: vec!["k8s".into()],
        }
    }

    /// Sets the status.
    pub fn status(mut self, status: &str) -> Self {
        self.status = status.into();
        self
    }

    /// Sets the region.
    pub fn region(mut self, region: &str) -> Self {
        self.region = region.into();
        self
    }

    /// Sets the size slug.
    pub fn size(mut self, size_slug: &str) -> Self {
        self.size_slug = size_slug.into();
        self
    }

    /// Sets the addresses explicitly (`None` = no address of that kind).
    pub fn addresses(
        mut self,
        private_v4: Option<&str>,
        public_v4: Option<&str>,
        public_v6: Option<&str>,
    ) -> Self {
        self.private_ipv4 = Some(private_v4.unwrap_or_default().to_string());
        self.public_ipv4 = Some(public_v4.unwrap_or_default().to_string());
        self.public_ipv6 = Some(public_v6.unwrap_or_default().to_string());
        self
    }
}

/// What an injected fault answers.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultKind {
    /// `429 Too Many Requests` with `RateLimit-Reset` = now + `reset_in` (rounded up to whole seconds) and,
    /// when set, `Retry-After` in seconds.
    TooManyRequests {
        /// When the window resets.
        reset_in: Duration,
        /// The `Retry-After` value, if any.
        retry_after: Option<u64>,
    },
    /// An error status with the API's error body (e.g. 500 `server_error`, 503 `service_unavailable`).
    Status(u16),
}

/// A fault answering the next `times` requests matching `method` (any when `None`) and `path_prefix`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// The HTTP method, e.g. `GET`; `None` matches every method.
    pub method: Option<String>,
    /// The path prefix, e.g. `/v2/droplets`.
    pub path_prefix: String,
    /// What to answer.
    pub kind: FaultKind,
    /// How many requests it answers.
    pub times: u32,
}

impl Fault {
    /// `times` 429 answers with `Retry-After: retry_after` seconds (and a reset as far away).
    pub fn retry_after(method: &str, path_prefix: &str, retry_after: u64, times: u32) -> Self {
        Fault {
            method: Some(method.into()),
            path_prefix: path_prefix.into(),
            kind: FaultKind::TooManyRequests {
                reset_in: Duration::from_secs(retry_after),
                retry_after: Some(retry_after),
            },
            times,
        }
    }

    /// `times` 429 answers with only `RateLimit-Reset` = now + `reset_in`.
    pub fn rate_limit_reset(
        method: &str,
        path_prefix: &str,
        reset_in: Duration,
        times: u32,
    ) -> Self {
        Fault {
            method: Some(method.into()),
            path_prefix: path_prefix.into(),
            kind: FaultKind::TooManyRequests {
                reset_in,
                retry_after: None,
            },
            times,
        }
    }

    /// `times` answers with `status`.
    pub fn status(method: &str, path_prefix: &str, status: u16, times: u32) -> Self {
        Fault {
            method: Some(method.into()),
            path_prefix: path_prefix.into(),
            kind: FaultKind::Status(status),
            times,
        }
    }
}

/// One request the stub received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The method.
    pub method: String,
    /// The path.
    pub path: String,
    /// The query string (empty when none).
    pub query: String,
    /// The status answered.
    pub status: u16,
    /// The body of a mutating request (POST, PUT, PATCH, DELETE), when it had one.
    pub body: Option<String>,
}

impl RecordedRequest {
    /// True for POST, PUT, PATCH and DELETE, except a load-balancer request that only asks to be
    /// validated (`validate_only`), which changes nothing.
    pub fn is_mutating(&self) -> bool {
        matches!(self.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
            && !self.is_validate_only()
    }

    /// True for a request whose body asks only for validation (`"validate_only": true`).
    pub fn is_validate_only(&self) -> bool {
        self.body
            .as_deref()
            .and_then(|b| serde_json::from_str::<Value>(b).ok())
            .is_some_and(|b| b["validate_only"] == Value::Bool(true))
    }
}

pub(crate) struct StubLb {
    pub(crate) value: Value,
    pub(crate) reads_until_active: Option<u32>,
    pub(crate) pending_ip: Option<String>,
}

pub(crate) struct RateWindow {
    pub(crate) limit: u64,
    pub(crate) window: Duration,
    pub(crate) remaining: u64,
    pub(crate) reset_at: SystemTime,
}

pub(crate) struct State {
    pub(crate) token: String,
    pub(crate) base: String,
    pub(crate) regions: Vec<String>,
    pub(crate) metadata_region: String,
    pub(crate) droplets: BTreeMap<u64, Value>,
    pub(crate) next_droplet_id: u64,
    pub(crate) load_balancers: BTreeMap<String, StubLb>,
    pub(crate) counter: u64,
    pub(crate) certificates: BTreeMap<String, Value>,
    pub(crate) volumes: BTreeMap<String, Value>,
    pub(crate) firewalls: BTreeMap<String, Value>,
    pub(crate) tags: BTreeSet<String>,
    pub(crate) faults: Vec<Fault>,
    pub(crate) requests: Vec<RecordedRequest>,
    pub(crate) rate: RateWindow,
    pub(crate) activation_reads: Option<u32>,
}

impl State {
    pub(crate) fn next_id(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }
}

/// A uuid-shaped ID whose lexical order is creation order.
pub(crate) fn uuid_like(n: u64) -> String {
    format!("{:08x}-0000-4000-8000-{:012x}", n, n)
}

pub(crate) fn region_json(slug: &str) -> Value {
    json!({
        "name": format!("Region {slug}"),
        "slug": slug,
        "features": ["backups", "ipv6", "metadata", "storage", "image_transfer"],
        "available": true,
        "sizes": ["s-1vcpu-1gb", "s-2vcpu-4gb", "s-4vcpu-8gb"]
    })
}

pub(crate) fn timestamp() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map_or_else(|_| "1970-01-01T00:00:00Z".to_string(), |t| t.to_string())
}

/// Builds a [`DoStub`].
#[derive(Debug, Clone)]
pub struct DoStubBuilder {
    token: String,
    regions: Vec<String>,
    metadata_region: Option<String>,
    activation_reads: Option<u32>,
    rate_limit: u64,
    rate_window: Duration,
}

impl Default for DoStubBuilder {
    fn default() -> Self {
        DoStubBuilder {
            token: DEFAULT_TOKEN.into(),
            regions: DEFAULT_REGIONS.iter().map(|r| r.to_string()).collect(),
            metadata_region: None,
            activation_reads: None,
            rate_limit: 5000,
            rate_window: Duration::from_secs(3600),
        }
    }
}

impl DoStubBuilder {
    /// The accepted bearer token.
    pub fn token(mut self, token: &str) -> Self {
        self.token = token.into();
        self
    }

    /// The known regions.
    pub fn regions(mut self, regions: &[&str]) -> Self {
        self.regions = regions.iter().map(|r| r.to_string()).collect();
        self
    }

    /// The region the metadata service reports (default: the first region).
    pub fn metadata_region(mut self, region: &str) -> Self {
        self.metadata_region = Some(region.into());
        self
    }

    /// New load balancers start `new` (without an IP) and become `active` on their `reads`-th read (at
    /// least the first); by default they are active at once.
    pub fn activate_after_reads(mut self, reads: u32) -> Self {
        self.activation_reads = Some(reads);
        self
    }

    /// The request budget per window (default 5000 per hour).
    pub fn rate_limit(mut self, limit: u64, window: Duration) -> Self {
        self.rate_limit = limit;
        self.rate_window = window;
        self
    }

    /// Starts the stub.
    pub async fn start(self) -> DoStub {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("the DigitalOcean stub needs a free port on 127.0.0.1");
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        let state = Arc::new(Mutex::new(State {
            token: self.token,
            base: format!("http://{addr}"),
            metadata_region: self
                .metadata_region
                .or_else(|| self.regions.first().cloned())
                .unwrap_or_default(),
            regions: self.regions,
            droplets: BTreeMap::new(),
            next_droplet_id: 100_001,
            load_balancers: BTreeMap::new(),
            counter: 0,
            certificates: BTreeMap::new(),
            volumes: BTreeMap::new(),
            firewalls: BTreeMap::new(),
            tags: BTreeSet::new(),
            faults: Vec::new(),
            requests: Vec::new(),
            rate: RateWindow {
                limit: self.rate_limit,
                window: self.rate_window,
                remaining: self.rate_limit,
                reset_at: SystemTime::now() + self.rate_window,
            },
            activation_reads: self.activation_reads,
        }));
        let app = axum::Router::new()
            .fallback(handlers::handle)
            .with_state(state.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        DoStub {
            addr,
            state,
            shutdown: Some(tx),
            task,
        }
    }
}

/// The running stub; stops when dropped.
pub struct DoStub {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for DoStub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DoStub")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for DoStub {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.task.abort();
    }
}

impl DoStub {
    /// Starts a stub with the defaults.
    pub async fn start() -> DoStub {
        DoStubBuilder::default().start().await
    }

    /// A builder.
    pub fn builder() -> DoStubBuilder {
        DoStubBuilder::default()
    }

    /// The API base URL, with a trailing slash (`DO_OVERRIDE_URL`).
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// The metadata service base URL (`metadataURL`).
    pub fn metadata_url(&self) -> String {
        format!("http://{}/metadata/v1/", self.addr)
    }

    /// The accepted token.
    pub fn token(&self) -> String {
        self.state.lock().token.clone()
    }

    /// Adds a droplet; returns its ID. Unset addresses are derived from the ID.
    pub fn add_droplet(&self, spec: DropletSpec) -> u64 {
        let mut st = self.state.lock();
        let id = st.next_droplet_id;
        st.next_droplet_id += 1;
        let n = id % 250 + 1;
        let m = (id / 250) % 250;
        let private = spec
            .private_ipv4
            .unwrap_or_else(|| format!("10.110.{m}.{n}"));
        let public = spec
            .public_ipv4
            .unwrap_or_else(|| format!("198.51.{m}.{n}"));
        let v6 = spec
            .public_ipv6
            .unwrap_or_else(|| format!("2604:a880:400:d1::{:x}:{:x}", id >> 16, id & 0xffff));
        let mut v4 = Vec::new();
        if !public.is_empty() {
            v4.push(json!({"ip_address": public, "netmask": "255.255.240.0", "gateway": "198.51.0.1", "type": "public"}));
        }
        if !private.is_empty() {
            v4.push(json!({"ip_address": private, "netmask": "255.255.240.0", "gateway": "10.110.0.1", "type": "private"}));
        }
        let v6: Vec<Value> = if v6.is_empty() {
            Vec::new()
        } else {
            vec![
                json!({"ip_address": v6, "netmask": 64, "gateway": "2604:a880:400:d1::1", "type": "public"}),
            ]
        };
        let droplet = json!({
            "id": id,
            "name": spec.name,
            "memory": 4096,
            "vcpus": 2,
            "disk": 80,
            "locked": false,
            "status": spec.status,
            "created_at": timestamp(),
            "features": ["private_networking", "ipv6"],
            "backup_ids": [],
            "snapshot_ids": [],
            "volume_ids": [],
            "size": {"slug": spec.size_slug, "memory": 4096, "vcpus": 2, "disk": 80},
            "size_slug": spec.size_slug,
            "networks": {"v4": v4, "v6": v6},
            "region": region_json(&spec.region),
            "tags": spec.tags,
            "vpc_uuid": format!("vpc-{}", spec.region),
        });
        st.droplets.insert(id, droplet);
        id
    }

    /// Sets a droplet's status (`off` = powered off); false when it does not exist.
    pub fn set_droplet_status(&self, id: u64, status: &str) -> bool {
        match self.state.lock().droplets.get_mut(&id) {
            Some(d) => {
                d["status"] = json!(status);
                true
            }
            None => false,
        }
    }

    /// Deletes a droplet; false when it did not exist.
    pub fn remove_droplet(&self, id: u64) -> bool {
        self.state.lock().droplets.remove(&id).is_some()
    }

    /// A droplet's JSON.
    pub fn droplet(&self, id: u64) -> Option<Value> {
        self.state.lock().droplets.get(&id).cloned()
    }

    /// Adds a certificate (`custom` or `lets_encrypt`); returns its ID.
    pub fn add_certificate(&self, name: &str, type_: &str) -> String {
        let mut st = self.state.lock();
        let n = st.next_id();
        let id = uuid_like(n);
        st.certificates.insert(
            id.clone(),
            json!({
                "id": id,
                "name": name,
                "not_after": "2031-01-01T00:00:00Z",
                "sha1_fingerprint": format!("{n:040x}"),
                "created_at": timestamp(),
                "dns_names": [],
                "state": "verified",
                "type": type_,
            }),
        );
        id
    }

    /// Adds a volume in `region`; returns its ID.
    pub fn add_volume(&self, name: &str, region: &str) -> String {
        let mut st = self.state.lock();
        let id = uuid_like(st.next_id());
        st.volumes.insert(
            id.clone(),
            json!({
                "id": id,
                "region": region_json(region),
                "droplet_ids": [],
                "name": name,
                "description": "",
                "size_gigabytes": 10,
                "created_at": timestamp(),
                "filesystem_type": "ext4",
                "filesystem_label": "",
                "tags": [],
            }),
        );
        id
    }

    /// Every load balancer, in creation order.
    pub fn load_balancers(&self) -> Vec<Value> {
        self.state
            .lock()
            .load_balancers
            .values()
            .map(|lb| lb.value.clone())
            .collect()
    }

    /// A load balancer's JSON.
    pub fn load_balancer(&self, id: &str) -> Option<Value> {
        self.state
            .lock()
            .load_balancers
            .get(id)
            .map(|lb| lb.value.clone())
    }

    /// Creates an active load balancer directly (as if made outside the cluster, e.g. by another
    /// controller); `body` is a create request body, which the stub validates and completes like the API
    /// does. Returns its ID.
    ///
    /// # Panics
    ///
    /// When the API would refuse `body`, naming why.
    pub fn insert_load_balancer(&self, body: Value) -> String {
        let mut st = self.state.lock();
        if let Err(why) = handlers::validate(&st, &body, None) {
            panic!("the DigitalOcean API would refuse this load balancer: {why}");
        }
        let mut lb = handlers::new_load_balancer(&mut st, body);
        lb["status"] = json!("active");
        tags::note_created_tags(&mut st, &lb);
        let id = lb["id"].as_str().unwrap_or_default().to_string();
        st.load_balancers.insert(
            id.clone(),
            StubLb {
                value: lb,
                reads_until_active: None,
                pending_ip: None,
            },
        );
        id
    }

    /// Edits a load balancer in place (e.g. to simulate a certificate renewal); false when absent.
    pub fn modify_load_balancer(&self, id: &str, edit: impl FnOnce(&mut Value)) -> bool {
        match self.state.lock().load_balancers.get_mut(id) {
            Some(lb) => {
                edit(&mut lb.value);
                true
            }
            None => false,
        }
    }

    /// Every tag that exists, sorted.
    pub fn tags(&self) -> Vec<String> {
        self.state.lock().tags.iter().cloned().collect()
    }

    /// Every cloud firewall, in creation order.
    pub fn firewalls(&self) -> Vec<Value> {
        self.state.lock().firewalls.values().cloned().collect()
    }

    /// Creates a firewall directly (as if made outside the cluster, or by another controller manager);
    /// `request` is a create request body, not validated. Returns its ID.
    pub fn insert_firewall(&self, request: Value) -> String {
        let mut st = self.state.lock();
        let id = uuid_like(st.next_id());
        let mut firewall = firewalls::new_firewall(&id, &request);
        firewall["status"] = json!("succeeded");
        st.firewalls.insert(id.clone(), firewall);
        id
    }

    /// Deletes a firewall directly (out of band); false when absent.
    pub fn remove_firewall(&self, id: &str) -> bool {
        self.state.lock().firewalls.remove(id).is_some()
    }

    /// Edits a firewall in place (out-of-band drift); false when absent.
    pub fn modify_firewall(&self, id: &str, edit: impl FnOnce(&mut Value)) -> bool {
        match self.state.lock().firewalls.get_mut(id) {
            Some(firewall) => {
                edit(firewall);
                true
            }
            None => false,
        }
    }

    /// Injects a fault.
    pub fn inject(&self, fault: Fault) {
        self.state.lock().faults.push(fault);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.lock().requests.clone()
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        self.state.lock().requests.clear();
    }

    /// Requests with exactly this method and path.
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.state
            .lock()
            .requests
            .iter()
            .filter(|r| r.method == method && r.path == path)
            .count()
    }

    /// The mutating requests (POST, PUT, PATCH, DELETE) whose path starts with `prefix`, with their bodies.
    pub fn mutations(&self, prefix: &str) -> Vec<RecordedRequest> {
        self.state
            .lock()
            .requests
            .iter()
            .filter(|r| r.is_mutating() && r.path.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Requests with this method whose path starts with `prefix`.
    pub fn count_prefix(&self, method: &str, prefix: &str) -> usize {
        self.state
            .lock()
            .requests
            .iter()
            .filter(|r| r.method == method && r.path.starts_with(prefix))
            .count()
    }
}
