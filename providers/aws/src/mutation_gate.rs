//! The one place every mutating AWS call passes through: an SDK interceptor on the EC2, ELBv2 and classic
//! ELB clients that hands each call whose operation is not `Describe*`, `Get*` or `List*` to the provider's
//! [`MutationGate`]. In a dry run the gate records it (operation and input) and the interceptor stops it
//! before it is signed or sent; the metrics do not count it.

use std::sync::Arc;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use cloud_provider::MutationGate;

use crate::metrics::{StoppedByGate, is_read_only, operation_name};

/// The longest input text a dry run records of one call.
const MAX_DETAILS: usize = 2000;

/// Passes every mutating call of the client it is installed on through the gate.
#[derive(Debug, Clone)]
pub(crate) struct MutationGateInterceptor {
    gate: Arc<MutationGate>,
}

impl MutationGateInterceptor {
    /// An interceptor checking with `gate`.
    pub(crate) fn new(gate: Arc<MutationGate>) -> Self {
        MutationGateInterceptor { gate }
    }
}

/// The call's input as the SDK prints it, cut to [`MAX_DETAILS`] characters.
fn details(input: &impl std::fmt::Debug) -> String {
    let text = format!("{input:?}");
    match text.char_indices().nth(MAX_DETAILS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

impl Intercept for MutationGateInterceptor {
    fn name(&self) -> &'static str {
        "CloudProviderAwsMutationGate"
    }

    // The first hook that knows the operation (its metadata is loaded with the operation's configuration).
    fn read_before_serialization(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let operation = operation_name(cfg).to_string();
        if is_read_only(&operation) {
            return Ok(());
        }
        if let Err(refused) = self.gate.check(&operation, || details(context.input())) {
            cfg.interceptor_state().store_put(StoppedByGate);
            return Err(refused.into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_inputs_are_cut() {
        let long = "x".repeat(MAX_DETAILS + 10);
        let text = details(&long);
        assert_eq!(text.chars().count(), MAX_DETAILS + 1);
        assert!(text.ends_with('…'));
        assert_eq!(details(&"short"), "\"short\"");
    }
}
