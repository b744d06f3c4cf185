//! `provider_ids`: `spec.providerID` values through every provider's reader: the generic
//! `<provider>://<instance>` form, AWS instance IDs (`aws:///<zone>/i-…`, bare `i-…`), DigitalOcean droplet
//! IDs and fake instance names.
//!
//! Contract: no panic; an accepted ID prints back to itself; an instance part a provider extracts is what
//! that provider writes into the provider IDs it sets, and reads back the same.

use cloud_provider::ProviderId;
use provider_aws::instances::instance_id_from_provider_id;
use provider_digitalocean::{droplet_id_from_provider_id, provider_id_of as droplet_provider_id};

use crate::input;

/// Reads one provider ID with every provider.
pub fn check(data: &[u8]) {
    let id = input::text(data);
    if let Ok(parsed) = ProviderId::parse(&id) {
        assert_eq!(parsed.to_string(), id, "provider ID does not round-trip");
        assert!(!parsed.provider.is_empty() && !parsed.instance.is_empty());
    }
    if let Ok(instance) = instance_id_from_provider_id(&id) {
        assert!(
            instance.starts_with("i-") && instance.len() > 2,
            "AWS instance ID {instance:?}"
        );
        assert!(instance[2..].bytes().all(|b| b.is_ascii_alphanumeric()));
        assert!(id.contains(&instance), "{instance:?} is not part of {id:?}");
        for written in [format!("aws:///us-east-1a/{instance}"), instance.clone()] {
            assert_eq!(
                instance_id_from_provider_id(&written).ok().as_ref(),
                Some(&instance)
            );
        }
    }
    if let Ok(droplet) = droplet_id_from_provider_id(&id) {
        let written = droplet_provider_id(droplet);
        assert_eq!(droplet_id_from_provider_id(&written).ok(), Some(droplet));
    }
    if let Ok(parsed) = ProviderId::parse_for("fake", &id) {
        let written = provider_fake::provider_id_of(&parsed.instance);
        assert_eq!(written, id, "fake provider ID does not round-trip");
    }
}
