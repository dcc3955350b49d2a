//! How a store's own failures read as the desk's errors, the same on every store: the
//! stores implement the run port (`StoreError`) and the desk and automation ports
//! (`DeskError`) over one database, and a desk write that fails in the engine's part (a
//! pool, a transaction, a run insert) or in the driver answers with these kinds.

use fronta_desk::DeskError;
use fronta_engine::StoreError;

/// The store's own failure (pool, writer, transaction, run insert) as a desk error: the
/// kind stays; `NotFound` and `LeaseLost` cannot come from a desk write and read as
/// `Internal`.
pub fn desk_error(err: StoreError) -> DeskError {
    match err {
        StoreError::Conflict(message) => DeskError::Conflict(message),
        StoreError::Invalid(message) => DeskError::Invalid(message),
        StoreError::Unavailable(message) => DeskError::Unavailable(message),
        StoreError::Internal(message) => DeskError::Internal(message),
        other @ (StoreError::NotFound | StoreError::LeaseLost) => {
            DeskError::Internal(other.to_string())
        }
    }
}

/// A driver error (already mapped by the store to a `StoreError`) as a desk error:
/// connection trouble, lock timeouts and deadlocks stay `Unavailable`, integrity
/// violations `Conflict`, anything else is `Internal` — absent rows are handled where
/// they can happen, so a stray "no rows" is a bug, and a driver's "invalid" is never the
/// caller's.
pub fn desk_error_of_driver(err: StoreError) -> DeskError {
    match err {
        StoreError::Unavailable(message) => DeskError::Unavailable(message),
        StoreError::Conflict(message) => DeskError::Conflict(message),
        other => DeskError::Internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drivers_invalid_is_internal_while_the_stores_own_invalid_stays() {
        assert_eq!(
            desk_error_of_driver(StoreError::Invalid("bad bind".into())),
            DeskError::Internal("invalid: bad bind".into()),
            "a driver's invalid is the store's bug"
        );
        assert_eq!(
            desk_error(StoreError::Invalid("bad run".into())),
            DeskError::Invalid("bad run".into()),
            "a refused run insert is the caller's"
        );
        assert_eq!(
            desk_error_of_driver(StoreError::Unavailable("locked".into())),
            DeskError::Unavailable("locked".into()),
            "retryable stays retryable"
        );
    }
}
