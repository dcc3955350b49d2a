//! The desk's writes as pure plans: what a store read → what to write, which log lines
//! to append and what to announce, or the domain error. Every message a person reads on a
//! ticket, every check of a request and every branch of a write is decided here, once;
//! the stores (SQLite, Postgres) read what a plan needs inside their transaction, call it
//! and write what it says. Nothing here touches storage, and nothing here knows SQL.
//!
//! The checks shared by every write (a text must not be blank, a name is 1–200
//! characters, a name lookup that found a row means "taken") live at the top; the plans
//! of each write follow.

use crate::rules;
use crate::store::{DeskError, DeskResult};

/// `what` must not be empty or only white space (`Invalid`, naming `what`).
pub fn check_text(what: &str, text: &str) -> DeskResult<()> {
    if text.trim().is_empty() {
        Err(DeskError::Invalid(format!("{what} must not be empty")))
    } else {
        Ok(())
    }
}

/// A name of 1–[`rules::MAX_NAME_CHARS`] characters, not only white space (`Invalid`).
pub fn check_name(what: &str, name: &str) -> DeskResult<()> {
    rules::check_name(what, name).map_err(DeskError::Invalid)
}

/// Whether a lookup by name found a row: `NotFound` is "free", other errors pass through.
pub fn taken<T>(lookup: DeskResult<T>) -> DeskResult<bool> {
    match lookup {
        Ok(_) => Ok(true),
        Err(DeskError::NotFound(_)) => Ok(false),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_text_is_refused_naming_what_it_is() {
        let err = check_text("ticket title", "  ").expect_err("blank");
        assert_eq!(
            err,
            DeskError::Invalid("ticket title must not be empty".into()),
            "names the field"
        );
        assert!(
            check_text("ticket title", "x").is_ok(),
            "any other text is fine"
        );
    }

    #[test]
    fn a_lookup_that_found_nothing_means_the_name_is_free() {
        assert_eq!(taken(Ok(1)), Ok(true), "found: taken");
        assert_eq!(
            taken::<()>(Err(DeskError::NotFound("group"))),
            Ok(false),
            "not found: free"
        );
        assert_eq!(
            taken::<()>(Err(DeskError::Unavailable("down".into()))),
            Err(DeskError::Unavailable("down".into())),
            "other errors pass through"
        );
    }
}
