//! `do_cloud_config`: the DigitalOcean provider's configuration from an arbitrary YAML cloud-config and
//! arbitrary environment variables (the environment wins over the file).
//!
//! Input: `NAME=value` lines for the environment, `0xFF`, the cloud-config file (absent when empty).
//!
//! Contract: no panic; resolution is deterministic; an accepted configuration has an access token, a finite
//! non-negative rate limit (none for 0), a non-zero request timeout, and API and metadata URLs that end in
//! `/` (relative paths are joined onto them).

use std::collections::BTreeMap;

use provider_digitalocean::DoConfig;

use crate::input;

/// Resolves the DigitalOcean configuration from one input.
pub fn check(data: &[u8]) {
    let [env_bytes, file] = input::fields(data, 2)[..] else {
        unreachable!("fields returns exactly two fields")
    };
    let env: BTreeMap<String, String> = input::text(env_bytes)
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let file = (!file.is_empty()).then_some(file);
    let lookup = |name: &str| env.get(name).cloned();
    let config = DoConfig::from_sources(file, lookup);
    assert_eq!(
        format!("{config:?}"),
        format!("{:?}", DoConfig::from_sources(file, lookup)),
        "configuration is not deterministic"
    );
    let Ok(config) = config else { return };
    assert!(!config.access_token.is_empty(), "accepted without a token");
    if let Some(qps) = config.api_rate_limit_qps {
        assert!(qps.is_finite() && qps > 0.0, "rate limit {qps} accepted");
    }
    assert!(
        !config.request_timeout.is_zero(),
        "a zero request timeout accepted"
    );
    assert!(
        config.api_url.as_str().ends_with('/'),
        "API URL {} without '/'",
        config.api_url
    );
    assert!(
        config.metadata_url.as_str().ends_with('/'),
        "metadata URL without '/'"
    );
}
