//! The log-message rule: a store crate formats no ticket or run log message — the plans
//! of `desk` and `automation` write every line a person reads on a ticket or a run, and
//! the stores only insert what the plans made.
//!
//! Checked mechanically on the code (not the comments) of `store-sqlite/src` and
//! `store-postgres/src`: a line fails when it names one of the tools a log line is made
//! with — a ticket's human id (`human_id(`), the change descriptions
//! (`fronta_desk::changes`, `describe(`, `diff(`), who made a change (`who(`), a run's
//! step log (`StepLog`) — or formats the "… by {who}" phrase of a log line. A store may
//! still format SQL and the messages of its own failures (a driver error, a row it cannot
//! read), which name none of these.

use crate::Finding;
use crate::walk::{Role, SourceFile};

/// The packages whose sources this rule judges.
pub const STORE_PACKAGES: [&str; 2] = ["fronta-store-sqlite", "fronta-store-postgres"];

/// What a line may not contain, and why.
const MARKERS: [(&str, &str); 7] = [
    (
        "human_id(",
        "a ticket's human id is how a log line names it",
    ),
    (
        "fronta_desk::changes",
        "the change descriptions belong to the desk's plans",
    ),
    ("describe(", "describing a change is the desk plan's"),
    ("diff(", "the change map is the desk plan's"),
    ("who(", "who made a change is the desk plan's phrase"),
    ("StepLog", "a run's step log is the automation executor's"),
    (" by {", "\"… by {who}\" is the phrase of a log line"),
];

pub fn store_log_message_rule(file: &SourceFile) -> Vec<Finding> {
    if file.role != Role::Src || !STORE_PACKAGES.contains(&file.package.as_str()) {
        return Vec::new();
    }
    let mut findings = Vec::new();
    for (index, line) in file.text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        for (marker, why) in MARKERS {
            if code.contains(marker) {
                findings.push(file.finding(
                    Some(index + 1),
                    format!(
                        "`{marker}` in a store: {why} — call a plan of `fronta_desk::plan` or \
                         `fronta_automation` and write the line it returns"
                    ),
                ));
            }
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn planted(package: &str, role: Role, text: &str) -> SourceFile {
        SourceFile {
            package: package.into(),
            role,
            path: PathBuf::from("store-sqlite/src/planted.rs"),
            text: text.into(),
        }
    }

    #[test]
    fn a_store_that_formats_a_ticket_log_line_fails() {
        let file = planted(
            "fronta-store-sqlite",
            Role::Src,
            "//! A store.\nfn log() {\n    let message = format!(\"{} changed by {by}\", ticket.human_id());\n}\n",
        );
        let findings = store_log_message_rule(&file);
        assert_eq!(
            findings.len(),
            2,
            "the human id and the \"by\" phrase are both named: {findings:?}"
        );
        assert!(
            findings.iter().all(|finding| finding.line == Some(3)),
            "at the line that formats it: {findings:?}"
        );
    }

    #[test]
    fn sql_comments_and_other_crates_pass() {
        let sql = planted(
            "fronta-store-postgres",
            Role::Src,
            "//! A store; its docs may say `human_id()`.\nfn rows() {\n    let sql = format!(\"SELECT {COLUMNS} FROM desk_tickets\");\n    // describe(change) happens in the plan\n}\n",
        );
        assert!(
            store_log_message_rule(&sql).is_empty(),
            "SQL and comments are not log messages"
        );
        let plan = planted(
            "fronta-desk",
            Role::Src,
            "fn plan() { format!(\"{} changed by {by}\", ticket.human_id()); }\n",
        );
        assert!(
            store_log_message_rule(&plan).is_empty(),
            "the desk's plans are where log lines are made"
        );
        let test = planted(
            "fronta-store-sqlite",
            Role::Tests,
            "fn reads() { assert!(line.contains(&ticket.human_id())); }\n",
        );
        assert!(
            store_log_message_rule(&test).is_empty(),
            "a store's tests may read log lines"
        );
    }

    #[test]
    fn a_store_naming_the_step_log_fails() {
        let file = planted(
            "fronta-store-postgres",
            Role::Src,
            "use fronta_automation::executor::StepLog;\n",
        );
        assert_eq!(
            store_log_message_rule(&file).len(),
            1,
            "a run's step log is not a store's to write"
        );
    }
}
