//! `fake_cloud_config`: arbitrary bytes as the fake provider's YAML cloud-config.
//!
//! Contract: no panic; a configuration it accepts is valid ([`FakeConfig::validate`]), and written back as
//! YAML it reads back equal (the fake admin API exports the cloud this way for a second process to start
//! from).

use provider_fake::FakeConfig;

/// Parses one fake cloud-config.
pub fn check(data: &[u8]) {
    let Ok(config) = FakeConfig::from_yaml(data) else {
        return;
    };
    config
        .validate()
        .expect("an accepted cloud-config does not validate");
    let yaml =
        serde_saphyr::to_string(&config).expect("an accepted cloud-config does not serialize");
    let again = FakeConfig::from_yaml(yaml.as_bytes())
        .unwrap_or_else(|e| panic!("written-back cloud-config refused ({e}):\n{yaml}"));
    assert_eq!(again, config, "cloud-config does not round-trip:\n{yaml}");
}
