//! The workspace's tidy rules: checks of the tree itself (which crate may depend on which,
//! what every source file opens with, that stores format no log message) that `cargo test` runs like any other test.
//!
//! Each rule is a pure function over what it reads — the workspace as `cargo metadata`
//! describes it, the text of ARCHITECTURE.md, one source file — returning [`Finding`]s,
//! so a unit test can plant a bad input and watch it fail. `tests/tidy.rs` runs every
//! rule on the real tree, one `#[test]` per rule. Reading the tree is here too
//! ([`Workspace::load`], [`source_files`]); deciding what is wrong is in the rule modules.
//!
//! Adding a rule over source files is one function `fn(&SourceFile) -> Vec<Finding>`
//! (select the files it judges by [`SourceFile::package`] and [`SourceFile::role`]), a
//! unit test on a planted file, and a `#[test]` in `tests/tidy.rs` that hands it to
//! [`check_sources`]. Say the rule in ARCHITECTURE.md ("Tidy rules").

pub mod arrows;
pub mod headers;
pub mod log_messages;
pub mod walk;
pub mod workspace;

use std::fmt;
use std::path::PathBuf;

pub use arrows::{Arrows, check_arrows};
pub use headers::header_rule;
pub use log_messages::store_log_message_rule;
pub use walk::{Role, SourceFile, check_sources, source_files};
pub use workspace::{DependencyKind, Member, Workspace, WorkspaceDependency};

/// What can stop a rule from judging at all (as opposed to a [`Finding`], which is the
/// rule's verdict on the tree).
#[derive(Debug, thiserror::Error)]
pub enum TidyError {
    #[error("running `{command}` failed: {reason}")]
    Cargo { command: String, reason: String },
    #[error("the workspace metadata is not what `cargo metadata` writes: {0}")]
    Metadata(#[from] serde_json::Error),
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("ARCHITECTURE.md's dependency arrows: {0}")]
    Arrows(String),
}

pub type Result<T, E = TidyError> = std::result::Result<T, E>;

/// One thing a rule found wrong: where (a file, optionally a line, or a crate) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub place: String,
    pub line: Option<usize>,
    pub message: String,
}

impl Finding {
    pub fn new(place: impl Into<String>, message: impl Into<String>) -> Self {
        Finding {
            place: place.into(),
            line: None,
            message: message.into(),
        }
    }

    pub fn at_line(mut self, line: usize) -> Self {
        self.line = Some(line);
        self
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.place, line, self.message),
            None => write!(f, "{}: {}", self.place, self.message),
        }
    }
}

/// The findings as one message, a line each, for a failing test to print.
pub fn report(findings: &[Finding]) -> String {
    findings
        .iter()
        .map(|finding| format!("  {finding}\n"))
        .collect()
}
