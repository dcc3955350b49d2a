//! The service desk: tenants with API tokens, groups and members with capacity, ticket
//! types with statuses and custom fields, tickets on three axes (one `status`, explicit
//! `closed`, free `tags`) with a log, and incidents with a tenant face and an admin face.
//!
//! This crate holds the model, the pure rules (status in the type, least-busy choice,
//! ticket numbers, token hashing) and the [`DeskStore`] port. It knows no SQL, no HTTP
//! and nothing of how runs are executed; stores implement the port.

pub mod access;
pub mod changes;
pub mod model;
pub mod overlay;
pub mod plan;
pub mod rules;
pub mod store;
pub mod token;

pub use model::*;
pub use store::{DeskError, DeskStore, UsedBy};
