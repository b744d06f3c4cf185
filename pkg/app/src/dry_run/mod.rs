//! `--dry-run`: one pass of every enabled controller over the cluster that changes nothing, and the report
//! of what it would have changed.
//!
//! Nothing is persisted: the controllers' API writes go out with `dryRun=All` ([`api`]), the provider's
//! [`MutationGate`](cloud_provider::MutationGate) stops every mutating cloud call, no Lease is taken and
//! nothing is served. Each controller makes one pass ([`cloud_controllers::ControllerConfig::dry_run`])
//! and the daemon prints the [`report`] and exits with its code.

pub mod api;
pub mod report;

pub use report::{DryRunReport, EXIT_WOULD_CHANGE};
