//! Tests of the AWS provider against a real AWS API peer: moto's server (PyPI `moto[server]`), started once
//! for this test binary on a free port of 127.0.0.1 (see `common`). Every test seeds a VPC of its own through
//! the AWS SDK and uses a cluster ID of its own, so tests run in parallel without seeing each other.

mod classic;
mod common;
mod controllers;
mod dry_run;
mod fail_safe;
mod instances;
mod load_balancers;
mod nlb_security_groups;
mod nlb_takeover;
mod routes;
mod rule_budget;
mod setup;
mod takeover;
mod upstream_peer;
mod volumes;
