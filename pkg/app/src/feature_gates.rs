//! `--feature-gates`: every gate upstream's cloud-controller-manager knows (k8s.io/cloud-provider v0.37.2:
//! the controller-manager, logging, metrics and generic API server gates), parsed with upstream's rules.
//!
//! A gate this daemon reads changes what it does as upstream's gate does ([`READ_GATES`]); the others
//! configure code that does not exist in a cloud-controller-manager (an API server's storage, admission
//! and serving) and change nothing here, as they change nothing in upstream's. A test compares
//! [`KNOWN_GATES`] with the gates of the pinned upstream binary.

use std::collections::BTreeMap;

/// How far a feature is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Alpha: off by default.
    Alpha,
    /// Beta.
    Beta,
    /// Generally available.
    Ga,
    /// Deprecated.
    Deprecated,
}

/// One gate: its name, default, stage and whether it is locked to its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// The name, as `--feature-gates` takes it.
    pub name: &'static str,
    /// Its value when not set.
    pub default: bool,
    /// Its stage.
    pub stage: Stage,
    /// Whether setting it to anything but its default is refused.
    pub locked: bool,
}

const fn gate(name: &'static str, default: bool, stage: Stage) -> Gate {
    Gate {
        name,
        default,
        stage,
        locked: false,
    }
}

const fn locked(name: &'static str, default: bool, stage: Stage) -> Gate {
    Gate {
        name,
        default,
        stage,
        locked: true,
    }
}

/// `AllAlpha`: every alpha gate not set explicitly.
pub const ALL_ALPHA: &str = "AllAlpha";
/// `AllBeta`: every beta gate not set explicitly.
pub const ALL_BETA: &str = "AllBeta";
/// Split and buffered log streams (`--log-*-split-stream`, `--log-*-info-buffer-size`).
pub const LOGGING_ALPHA_OPTIONS: &str = "LoggingAlphaOptions";
/// The JSON log format.
pub const LOGGING_BETA_OPTIONS: &str = "LoggingBetaOptions";
/// `--requestheader-uid-headers`.
pub const REMOTE_REQUEST_HEADER_UID: &str = "RemoteRequestHeaderUID";
/// A client certificate's UID attribute names the caller's UID.
pub const ALLOW_PARSING_USER_UID_FROM_CERT_AUTH: &str = "AllowParsingUserUIDFromCertAuth";
/// Serving the cloud provider's webhooks (`--webhooks`).
pub const CLOUD_CONTROLLER_MANAGER_WEBHOOK: &str = "CloudControllerManagerWebhook";

/// The gates this daemon reads, with what each turns on here.
pub const READ_GATES: &[(&str, &str)] = &[
    (
        LOGGING_ALPHA_OPTIONS,
        "allows --log-text-split-stream, --log-json-split-stream and the --log-*-info-buffer-size flags",
    ),
    (LOGGING_BETA_OPTIONS, "allows --logging-format=json"),
    (
        REMOTE_REQUEST_HEADER_UID,
        "allows --requestheader-uid-headers (and the ConfigMap's requestheader-uid-headers)",
    ),
    (
        ALLOW_PARSING_USER_UID_FROM_CERT_AUTH,
        "a client certificate's UID attribute becomes the caller's UID in SubjectAccessReviews",
    ),
    (
        CLOUD_CONTROLLER_MANAGER_WEBHOOK,
        "serves the webhooks --webhooks enables on --webhook-secure-port (lb-service: admission of LoadBalancer Services)",
    ),
];

/// Every gate of upstream's cloud-controller-manager v0.37.2 (`AllAlpha` and `AllBeta` included).
pub const KNOWN_GATES: &[Gate] = &[
    gate("APIResponseCompression", true, Stage::Beta),
    gate("APIServerIdentity", true, Stage::Beta),
    gate("APIServerWebhookAuthenticationToken", false, Stage::Alpha),
    gate("APIServingWithRoutine", false, Stage::Alpha),
    locked("AggregatedDiscoveryRemoveBetaType", true, Stage::Deprecated),
    gate(ALL_ALPHA, false, Stage::Alpha),
    gate(ALL_BETA, false, Stage::Beta),
    gate(ALLOW_PARSING_USER_UID_FROM_CERT_AUTH, true, Stage::Beta),
    gate("AllowUnsafeMalformedObjectDeletion", true, Stage::Beta),
    gate("CBORServingAndStorage", false, Stage::Alpha),
    gate(
        "CloudControllerManagerWatchBasedRoutesReconciliation",
        false,
        Stage::Alpha,
    ),
    gate(CLOUD_CONTROLLER_MANAGER_WEBHOOK, false, Stage::Alpha),
    gate("ComponentFlagz", true, Stage::Beta),
    gate("ComponentStatusz", true, Stage::Beta),
    gate("ConcurrentWatchObjectDecode", true, Stage::Beta),
    gate(
        "ConsistentListFromCacheSkipTimeoutFallback",
        false,
        Stage::Alpha,
    ),
    gate("ConstrainedImpersonation", true, Stage::Beta),
    gate("ContextualLogging", true, Stage::Beta),
    gate(
        "ControllerManagerReleaseLeaderElectionLockOnExit",
        false,
        Stage::Alpha,
    ),
    gate("CoordinatedLeaderElection", false, Stage::Beta),
    locked("DeclarativeValidation", true, Stage::Ga),
    gate("DeclarativeValidationBeta", true, Stage::Beta),
    locked("DeclarativeValidationTakeover", false, Stage::Deprecated),
    gate("DetectCacheInconsistency", true, Stage::Beta),
    gate("EtcdRangeStream", true, Stage::Beta),
    gate("ExcludeAdmissionWebhookVirtualResources", true, Stage::Beta),
    gate("KMSv1", false, Stage::Deprecated),
    gate("ListFromCacheSnapshot", true, Stage::Beta),
    gate(LOGGING_ALPHA_OPTIONS, false, Stage::Alpha),
    gate(LOGGING_BETA_OPTIONS, true, Stage::Beta),
    gate("ManifestBasedAdmissionControlConfig", true, Stage::Beta),
    gate("MutatingAdmissionPolicy", true, Stage::Ga),
    gate("NativeHistograms", true, Stage::Beta),
    gate("OpenAPIEnums", true, Stage::Beta),
    gate(REMOTE_REQUEST_HEADER_UID, true, Stage::Beta),
    locked("SeparateCacheWatchRPC", false, Stage::Deprecated),
    gate("ShardedListAndWatch", false, Stage::Alpha),
    gate("SizeBasedListCostEstimate", true, Stage::Beta),
    gate("StorageVersionAPI", false, Stage::Alpha),
    gate("StorageVersionHash", true, Stage::Beta),
    gate(
        "StructuredAuthenticationConfigurationEgressSelector",
        true,
        Stage::Beta,
    ),
    gate(
        "StructuredAuthenticationConfigurationJWKSMetrics",
        true,
        Stage::Beta,
    ),
    gate("TokenRequestServiceAccountUIDValidation", true, Stage::Beta),
    gate("UnauthenticatedHTTP2DOSMitigation", true, Stage::Beta),
    gate("UnknownVersionInteroperabilityProxy", true, Stage::Beta),
    locked("WatchCacheInitializationPostStartHook", true, Stage::Ga),
    gate("WatchList", true, Stage::Beta),
    gate("WatchListCompression", true, Stage::Beta),
    gate("WebhookRoundTripLoadBalancing", true, Stage::Beta),
];

/// The value of every gate after `--feature-gates`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FeatureGates {
    /// The gates set explicitly, by name.
    explicit: BTreeMap<&'static str, bool>,
}

impl FeatureGates {
    /// Parses the `--feature-gates` entries (`Name=bool`; the flag may be repeated, later entries win), with
    /// upstream's checks and messages: an unknown gate, a value that is not a boolean and a locked gate set
    /// to anything but its default are errors.
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        let mut explicit = BTreeMap::new();
        for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            let Some((name, value)) = entry.split_once('=') else {
                return Err(format!("missing bool value for {entry}"));
            };
            let name = name.trim();
            let value = value.trim();
            let gate = KNOWN_GATES
                .iter()
                .find(|g| g.name == name)
                .ok_or_else(|| format!("unrecognized feature gate: {name}"))?;
            let enabled = crate::options::values::parse_go_bool(value).map_err(|_| {
                format!("invalid value of {name}={value}, err: expected a boolean (true or false)")
            })?;
            if gate.locked && enabled != gate.default {
                return Err(format!(
                    "cannot set feature gate {name} to {enabled}, feature is locked to {}",
                    gate.default
                ));
            }
            explicit.insert(gate.name, enabled);
        }
        Ok(FeatureGates { explicit })
    }

    /// Whether the gate `name` is on: its explicit value, else `AllAlpha`/`AllBeta` for an alpha/beta gate,
    /// else its default. An unknown name is off.
    pub fn enabled(&self, name: &str) -> bool {
        let Some(gate) = KNOWN_GATES.iter().find(|g| g.name == name) else {
            return false;
        };
        if let Some(value) = self.explicit.get(gate.name) {
            return *value;
        }
        let all = match gate.stage {
            Stage::Alpha => self.explicit.get(ALL_ALPHA),
            Stage::Beta => self.explicit.get(ALL_BETA),
            Stage::Ga | Stage::Deprecated => None,
        };
        all.copied().unwrap_or(gate.default)
    }

    /// The gates set explicitly, for `/configz` and the start-up log.
    pub fn explicit(&self) -> &BTreeMap<&'static str, bool> {
        &self.explicit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(entries: &[&str]) -> Result<FeatureGates, String> {
        FeatureGates::parse(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn defaults_and_explicit_values() {
        let gates = parse(&[]).unwrap();
        assert!(!gates.enabled(LOGGING_ALPHA_OPTIONS));
        assert!(gates.enabled(LOGGING_BETA_OPTIONS));
        let gates = parse(&["LoggingAlphaOptions=true", "LoggingBetaOptions=false"]).unwrap();
        assert!(gates.enabled(LOGGING_ALPHA_OPTIONS));
        assert!(!gates.enabled(LOGGING_BETA_OPTIONS));
        // Later entries win.
        let gates = parse(&["LoggingAlphaOptions=true", "LoggingAlphaOptions=false"]).unwrap();
        assert!(!gates.enabled(LOGGING_ALPHA_OPTIONS));
    }

    #[test]
    fn all_alpha_and_all_beta() {
        let gates = parse(&["AllAlpha=true", "CloudControllerManagerWebhook=false"]).unwrap();
        assert!(gates.enabled(LOGGING_ALPHA_OPTIONS));
        assert!(!gates.enabled(CLOUD_CONTROLLER_MANAGER_WEBHOOK));
        assert!(gates.enabled(LOGGING_BETA_OPTIONS));
        let gates = parse(&["AllBeta=false"]).unwrap();
        assert!(!gates.enabled(LOGGING_BETA_OPTIONS));
        assert!(
            gates.enabled("MutatingAdmissionPolicy"),
            "GA: not a beta gate"
        );
    }

    #[test]
    fn upstream_errors() {
        assert_eq!(
            parse(&["Foo=true"]).unwrap_err(),
            "unrecognized feature gate: Foo"
        );
        assert_eq!(
            parse(&["CloudControllerManagerWebhook"]).unwrap_err(),
            "missing bool value for CloudControllerManagerWebhook"
        );
        assert!(
            parse(&["CloudControllerManagerWebhook=maybe"])
                .unwrap_err()
                .starts_with("invalid value of CloudControllerManagerWebhook=maybe")
        );
        assert_eq!(
            parse(&["DeclarativeValidation=false"]).unwrap_err(),
            "cannot set feature gate DeclarativeValidation to false, feature is locked to true"
        );
        // A locked gate may be set to its default.
        assert!(parse(&["DeclarativeValidation=true"]).is_ok());
    }

    #[test]
    fn every_read_gate_is_known() {
        for (name, _) in READ_GATES {
            assert!(KNOWN_GATES.iter().any(|g| g.name == *name), "{name}");
        }
    }
}
