//! Errors of the engine layer. Stores map their driver errors to [`StoreError`] kinds.

use thiserror::Error;

/// The claim this write belonged to is no longer ours: another owner holds the run, or it
/// is finished. The handler must stop and abandon the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("lease lost: another worker owns this run now, or it has finished")]
pub struct LeaseLost;

/// What a store can answer besides success.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    /// An owner-checked write was refused (fencing).
    #[error("lease lost: another worker owns this run now, or it has finished")]
    LeaseLost,
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("invalid: {0}")]
    Invalid(String),
    /// The database is busy or unreachable; the same call may succeed later.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    #[error("storage error: {0}")]
    Internal(String),
}

impl From<LeaseLost> for StoreError {
    fn from(_: LeaseLost) -> Self {
        StoreError::LeaseLost
    }
}

/// Errors of the engine's own API (registration, enqueue, configuration).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EngineError {
    #[error("unknown kind {kind:?}: no handler is registered for it")]
    UnknownKind { kind: String },
    #[error("max_retries must be zero or more, got {0}")]
    NegativeMaxRetries(i64),
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A payload refused at enqueue by its kind's check (for a typed kind: it does not
    /// decode as the kind's type), or a typed payload that does not encode or decode.
    #[error("invalid payload for kind {kind:?}: {reason}")]
    Payload { kind: String, reason: String },
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
