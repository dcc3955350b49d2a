//! The header rule: every source file opens with a `//!` comment saying what it owns —
//! its first non-blank line is `//!` with some text in the comment it opens. Attributes,
//! `use` lines or a plain `//` comment before it do not count as a header.

use crate::Finding;
use crate::walk::SourceFile;

pub fn header_rule(file: &SourceFile) -> Vec<Finding> {
    let mut lines = file
        .text
        .lines()
        .enumerate()
        .skip_while(|(_, line)| line.trim().is_empty());
    let Some((index, first)) = lines.next() else {
        return vec![file.finding(
            None,
            "the file is empty: open it with a `//!` header saying what it owns",
        )];
    };
    if !first.trim_start().starts_with("//!") {
        return vec![file.finding(
            Some(index + 1),
            "the first line is not a `//!` header: open the file with what it owns",
        )];
    }
    let header_says_something = std::iter::once(first)
        .chain(
            lines
                .map(|(_, line)| line)
                .take_while(|line| line.trim_start().starts_with("//!")),
        )
        .any(|line| {
            !line
                .trim_start()
                .trim_start_matches("//!")
                .trim()
                .is_empty()
        });
    if header_says_something {
        Vec::new()
    } else {
        vec![file.finding(
            Some(index + 1),
            "the `//!` header is blank: say what the file owns",
        )]
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::walk::Role;

    fn planted(text: &str) -> SourceFile {
        SourceFile {
            package: "fronta-x".into(),
            role: Role::Src,
            path: PathBuf::from("x/src/planted.rs"),
            text: text.into(),
        }
    }

    #[test]
    fn a_file_opening_with_a_header_passes() {
        for text in [
            "//! The planted module.\n\nuse std::fmt;\n",
            "\n\n//! After blank lines.\n",
            "//!\n//! The text may start on the second line.\n",
        ] {
            assert!(
                header_rule(&planted(text)).is_empty(),
                "a header is found in {text:?}"
            );
        }
    }

    #[test]
    fn a_file_without_a_header_fails() {
        let found = header_rule(&planted("\nuse std::fmt;\n//! too late\n"));
        assert_eq!(found.len(), 1, "one finding: {found:?}");
        assert_eq!(
            found[0].to_string(),
            "x/src/planted.rs:2: the first line is not a `//!` header: open the file with what it owns",
            "the finding names the file and the line"
        );
    }

    #[test]
    fn attributes_or_plain_comments_before_the_header_fail() {
        for text in [
            "#![allow(dead_code)]\n//! The planted module.\n",
            "// The planted module.\n",
            "/// An item's doc, not the file's.\nfn x() {}\n",
        ] {
            assert_eq!(
                header_rule(&planted(text)).len(),
                1,
                "no header in {text:?}"
            );
        }
    }

    #[test]
    fn an_empty_file_or_a_blank_header_fails() {
        for text in ["", "\n \n", "//!\n//!   \nuse std::fmt;\n"] {
            assert_eq!(
                header_rule(&planted(text)).len(),
                1,
                "no header text in {text:?}"
            );
        }
    }
}
