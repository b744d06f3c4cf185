//! AWS provider IDs, `aws:///<zone>/<instance-id>`: the name the provider registers under and the forms of
//! an ID it accepts.

use cloud_provider::{CloudError, Result};

/// The name the provider registers under (`--cloud-provider aws`); provider IDs are `aws:///<zone>/<id>`.
pub const PROVIDER_NAME: &str = "aws";

/// Extracts the instance ID from the accepted provider-ID forms: `aws:///<zone>/<id>`, `aws:////<id>`,
/// `aws:///<id>` and a bare `i-...`.
pub fn instance_id_from_provider_id(provider_id: &str) -> Result<String> {
    let invalid = || {
        CloudError::provider(format!(
            "invalid AWS provider ID {provider_id:?}: expected aws:///<zone>/<instance-id> or i-<id>"
        ))
    };
    let path = match provider_id.strip_prefix("aws://") {
        Some(rest) => rest,
        None if provider_id.contains("://") => return Err(invalid()),
        None => provider_id,
    };
    let tokens: Vec<&str> = path.trim_matches('/').split('/').collect();
    let id = match tokens.as_slice() {
        [id] => *id,
        [_zone, id] => *id,
        _ => return Err(invalid()),
    };
    let valid = id
        .strip_prefix("i-")
        .is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric()));
    if valid {
        Ok(id.to_string())
    } else {
        Err(invalid())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_id_forms() {
        for ok in [
            "aws:///us-east-1a/i-0123456789abcdef0",
            "aws:////i-0123456789abcdef0",
            "aws:///i-0123456789abcdef0",
            "i-0123456789abcdef0",
        ] {
            assert_eq!(
                instance_id_from_provider_id(ok).unwrap(),
                "i-0123456789abcdef0",
                "{ok}"
            );
        }
        for bad in [
            "",
            "aws:///",
            "aws:///us-east-1a/vol-1",
            "aws:///a/b/i-1",
            "gce://p/z/i-1",
            "i-",
            "node-1",
            "aws:///us-east-1a/i-12/x",
        ] {
            let err = instance_id_from_provider_id(bad).unwrap_err();
            assert!(
                err.to_string().contains("invalid AWS provider ID"),
                "{bad}: {err}"
            );
        }
    }
}
