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
    /// No run (or other row) with that id: it never existed or retention deleted it.
    #[error("not found")]
    NotFound,
    /// An owner-checked write was refused (fencing).
    #[error("lease lost: another worker owns this run now, or it has finished")]
    LeaseLost,
    /// The write would break a uniqueness rule, e.g. a manual retry of a run whose unique
    /// key another live run holds; nothing was written.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The store refused the input as malformed; nothing was written.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The database is busy or unreachable; the same call may succeed later.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// Anything else the database answered (a bug or a broken schema, not a passing
    /// outage); retrying will not help.
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
    /// The enqueue names a kind the dispatcher does not know (not registered).
    #[error("unknown kind {kind:?}: no handler is registered for it")]
    UnknownKind {
        /// The kind asked for.
        kind: String,
    },
    /// An enqueue asked for fewer than zero retries.
    #[error("max_retries must be zero or more, got {0}")]
    NegativeMaxRetries(i64),
    /// A registration or worker setting makes no sense (an empty or duplicate kind, a lease
    /// or timeout under 1 ms, a limit out of range); the message names it.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A payload refused at enqueue by its kind's check (for a typed kind: it does not
    /// decode as the kind's type), or a typed payload that does not encode or decode.
    #[error("invalid payload for kind {kind:?}: {reason}")]
    Payload {
        /// The kind the payload was for.
        kind: String,
        /// What is wrong with it (the check's message, or serde's).
        reason: String,
    },
    /// An enqueue with a bad field (a tenant or unique key that is empty or too long,
    /// `max_retries` too large), or a store that answered nonsense.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The store failed; see [`StoreError`] (`Unavailable` may succeed when repeated).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A result whose error defaults to [`EngineError`].
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
