//! A problem found in an automation: where (a JSON-ish path such as
//! `steps[2].then[0].input.status`) and what, in words a person can act on.
//!
//! Both the parser ([`crate::Automation::from_json`]) and the validator
//! ([`crate::validate::validate`]) speak in problems and list every one they find, so a
//! user fixes a broken automation in one round instead of one error per save.

use serde::Serialize;

/// One thing wrong with an automation.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Where: `name`, `trigger.params[1].path`, `steps[2].then[0].input.status`; the
    /// empty string for the document itself.
    pub path: String,
    /// What is wrong, naming the offending value.
    pub message: String,
}

impl Problem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Several problems as one error (for `?` and for serde's `try_from`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", join(.0))]
pub struct Problems(pub Vec<Problem>);

fn join(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(Problem::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// `path.key`, or `key` at the root.
pub(crate) fn field_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// `path[index]`.
pub(crate) fn index_path(path: &str, index: usize) -> String {
    format!("{path}[{index}]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_displays_path_then_message() {
        let problem = Problem::new("steps[0].op", "unknown op \"x\"");
        assert_eq!(
            problem.to_string(),
            "steps[0].op: unknown op \"x\"",
            "a problem reads as path: message"
        );
        assert_eq!(
            Problem::new("", "not an object").to_string(),
            "not an object",
            "a problem of the whole document has no path prefix"
        );
    }

    #[test]
    fn problems_join_with_semicolons() {
        let problems = Problems(vec![Problem::new("a", "one"), Problem::new("b", "two")]);
        assert_eq!(
            problems.to_string(),
            "a: one; b: two",
            "several problems read as one line"
        );
    }
}
