//! Provider IDs: the `<provider>://<instance>` strings stored in `node.spec.providerID`.
//!
//! The generic parser accepts only the full form; a bare instance ID (for example `i-0abc`) is rejected so a
//! node can never be matched to the wrong cloud by accident. The instance part is opaque and may itself
//! contain slashes (some clouds put a zone there, as in `aws:///us-east-1a/i-0abc`).

use std::fmt;
use std::str::FromStr;

/// The separator between the provider name and the instance part.
const SEPARATOR: &str = "://";

/// Why a string is not a valid provider ID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderIdError {
    /// The string has no `<provider>://` prefix (for example a bare instance ID).
    #[error("provider ID {0:?} has no \"<provider>://\" scheme")]
    MissingScheme(String),
    /// The part before `://` is empty or contains characters a provider name cannot have.
    #[error("provider ID {0:?} has an empty or invalid provider name")]
    InvalidProvider(String),
    /// Nothing follows `://`.
    #[error("provider ID {0:?} has an empty instance")]
    EmptyInstance(String),
    /// The provider ID names a different provider than the one expected.
    #[error("provider ID {id:?} belongs to provider {found:?}, expected {expected:?}")]
    WrongProvider {
        /// The full provider ID.
        id: String,
        /// The provider it names.
        found: String,
        /// The provider the caller expected.
        expected: String,
    },
}

/// A parsed provider ID.
///
/// ```
/// use cloud_provider::ProviderId;
///
/// let id = ProviderId::parse("fake://node-1").unwrap();
/// assert_eq!(id.provider, "fake");
/// assert_eq!(id.instance, "node-1");
/// assert_eq!(id.to_string(), "fake://node-1");
///
/// assert!(ProviderId::parse("node-1").is_err());      // bare IDs are rejected
/// assert!(ProviderId::parse("fake://").is_err());     // so is an empty instance
/// assert_eq!(ProviderId::new("aws", "/us-east-1a/i-1").to_string(), "aws:///us-east-1a/i-1");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProviderId {
    /// The provider name, e.g. `fake`.
    pub provider: String,
    /// The provider-specific instance part (everything after `://`).
    pub instance: String,
}

impl ProviderId {
    /// Builds a provider ID from its two parts (not validated; use [`ProviderId::parse`] for input).
    pub fn new(provider: impl Into<String>, instance: impl Into<String>) -> Self {
        ProviderId {
            provider: provider.into(),
            instance: instance.into(),
        }
    }

    /// Parses `<provider>://<instance>`. Surrounding whitespace is not accepted.
    pub fn parse(id: &str) -> Result<Self, ProviderIdError> {
        let Some((provider, instance)) = id.split_once(SEPARATOR) else {
            return Err(ProviderIdError::MissingScheme(id.to_string()));
        };
        if provider.is_empty() || !provider.chars().all(is_provider_char) {
            return Err(ProviderIdError::InvalidProvider(id.to_string()));
        }
        if instance.is_empty() {
            return Err(ProviderIdError::EmptyInstance(id.to_string()));
        }
        Ok(ProviderId::new(provider, instance))
    }

    /// Parses `id` and checks it names `expected` as its provider.
    ///
    /// ```
    /// use cloud_provider::ProviderId;
    /// assert_eq!(ProviderId::parse_for("fake", "fake://a").unwrap().instance, "a");
    /// assert!(ProviderId::parse_for("fake", "aws://a").is_err());
    /// ```
    pub fn parse_for(expected: &str, id: &str) -> Result<Self, ProviderIdError> {
        let parsed = Self::parse(id)?;
        if parsed.provider != expected {
            return Err(ProviderIdError::WrongProvider {
                id: id.to_string(),
                found: parsed.provider,
                expected: expected.to_string(),
            });
        }
        Ok(parsed)
    }
}

fn is_provider_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

impl fmt::Display for ProviderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{SEPARATOR}{}", self.provider, self.instance)
    }
}

impl FromStr for ProviderId {
    type Err = ProviderIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for raw in [
            "fake://node-1",
            "aws:///us-east-1a/i-0123456789",
            "digitalocean://123456",
            "gce://project/zone/name",
            "fake://a://b",
        ] {
            let id = ProviderId::parse(raw).unwrap();
            assert_eq!(id.to_string(), raw);
            assert_eq!(raw.parse::<ProviderId>().unwrap(), id);
        }
        let id = ProviderId::parse("aws:///us-east-1a/i-1").unwrap();
        assert_eq!(id.provider, "aws");
        assert_eq!(id.instance, "/us-east-1a/i-1");
        let built = ProviderId::new("fake", "n");
        assert_eq!(ProviderId::parse(&built.to_string()).unwrap(), built);
    }

    #[test]
    fn rejects_bad_forms() {
        assert_eq!(
            ProviderId::parse("i-0abc"),
            Err(ProviderIdError::MissingScheme("i-0abc".into()))
        );
        assert_eq!(
            ProviderId::parse("fake:/node"),
            Err(ProviderIdError::MissingScheme("fake:/node".into()))
        );
        assert_eq!(
            ProviderId::parse(""),
            Err(ProviderIdError::MissingScheme(String::new()))
        );
        assert_eq!(
            ProviderId::parse("fake://"),
            Err(ProviderIdError::EmptyInstance("fake://".into()))
        );
        assert_eq!(
            ProviderId::parse("://node"),
            Err(ProviderIdError::InvalidProvider("://node".into()))
        );
        assert_eq!(
            ProviderId::parse("fa ke://node"),
            Err(ProviderIdError::InvalidProvider("fa ke://node".into()))
        );
        let err = ProviderId::parse_for("fake", "aws://x").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"provider ID "aws://x" belongs to provider "aws", expected "fake""#
        );
        assert!(
            ProviderId::parse("node-1")
                .unwrap_err()
                .to_string()
                .contains("scheme")
        );
    }
}
