//! The state every request handler shares ([`State`]): the object store, authentication, the test
//! controls' rules and counters, and the settings ([`Config`]). `server` builds it; `api`, `watch`,
//! `controls` and `http` use it.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::sync::watch;

use crate::auth::AuthConfig;
use crate::controls_state::ControlsState;
use crate::store::Store;

/// Settings the request handlers read.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub require_auth: bool,
    pub not_ready_taint: bool,
    pub bookmark_interval: Duration,
    pub default_watch_timeout: Duration,
    pub list_wait: Duration,
    pub max_body: usize,
    /// The shortest `expirationSeconds` a TokenRequest may ask for.
    pub min_token_expiration: Duration,
}

/// Everything a request handler needs.
pub(crate) struct State {
    pub store: Store,
    pub auth: AuthConfig,
    pub controls: ControlsState,
    pub cfg: Config,
    pub shutdown: watch::Receiver<bool>,
    /// `host:port` of the server, set once it listens.
    pub(crate) address: OnceLock<String>,
}

impl State {
    /// `host:port` of the server, as `/api` reports it.
    pub(crate) fn server_address(&self) -> String {
        self.address.get().cloned().unwrap_or_default()
    }

    /// The uid of a ServiceAccount, if it exists (what issued tokens are checked against).
    pub(crate) fn service_account_uid(&self, namespace: &str, name: &str) -> Option<String> {
        self.store
            .get(
                crate::resources::Storage::ServiceAccounts,
                &(namespace.to_string(), name.to_string()),
            )
            .map(|sa| sa.uid.to_string())
    }
}
