//! The file walker every source-file rule shares: each `*.rs` under a member's `src/`,
//! `tests/`, `benches/` and `examples/`, read once, with the crate and the role it has
//! there, and [`check_sources`] to run one rule over them. Build scripts and directories
//! outside those four (fixtures, `node_modules`, `target`) are not walked.

use std::path::{Path, PathBuf};

use crate::workspace::Workspace;
use crate::{Finding, Result, TidyError};

/// Which of a crate's source trees a file is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Src,
    Tests,
    Benches,
    Examples,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Src, Role::Tests, Role::Benches, Role::Examples];

    pub fn dir(self) -> &'static str {
        match self {
            Role::Src => "src",
            Role::Tests => "tests",
            Role::Benches => "benches",
            Role::Examples => "examples",
        }
    }
}

/// One source file of a member, as the rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// The package name of its crate (`fronta-store-sqlite`).
    pub package: String,
    pub role: Role,
    /// Relative to the workspace root (`store-sqlite/src/desk.rs`): what findings name.
    pub path: PathBuf,
    pub text: String,
}

impl SourceFile {
    /// A finding about this file (`line` counts from 1).
    pub fn finding(&self, line: Option<usize>, message: impl Into<String>) -> Finding {
        let finding = Finding::new(self.path.display().to_string(), message);
        match line {
            Some(line) => finding.at_line(line),
            None => finding,
        }
    }
}

/// Directories never walked, wherever they are: other ecosystems' trees and build output.
const SKIPPED_DIRS: [&str; 2] = ["node_modules", "target"];

/// Every source file of every member, sorted by path.
pub fn source_files(workspace: &Workspace) -> Result<Vec<SourceFile>> {
    let mut files = Vec::new();
    for member in &workspace.members {
        for role in Role::ALL {
            let dir = member.dir.join(role.dir());
            if !dir.is_dir() {
                continue;
            }
            let mut paths = Vec::new();
            rust_files(&dir, &mut paths)?;
            for path in paths {
                let text = std::fs::read_to_string(&path).map_err(|source| TidyError::Read {
                    path: path.clone(),
                    source,
                })?;
                files.push(SourceFile {
                    package: member.package.clone(),
                    role,
                    path: path
                        .strip_prefix(&workspace.root)
                        .map(Path::to_path_buf)
                        .unwrap_or(path),
                    text,
                });
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

fn rust_files(dir: &Path, paths: &mut Vec<PathBuf>) -> Result<()> {
    let read_error = |source| TidyError::Read {
        path: dir.to_path_buf(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(read_error)? {
        let entry = entry.map_err(read_error)?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let kind = entry.file_type().map_err(read_error)?;
        if kind.is_dir() {
            if !name.starts_with('.') && !SKIPPED_DIRS.contains(&name.as_ref()) {
                rust_files(&path, paths)?;
            }
        } else if kind.is_file() && name.ends_with(".rs") {
            paths.push(path);
        }
    }
    Ok(())
}

/// Runs one rule over the files, its findings in file order.
pub fn check_sources(
    files: &[SourceFile],
    rule: impl Fn(&SourceFile) -> Vec<Finding>,
) -> Vec<Finding> {
    files.iter().flat_map(rule).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::Member;

    #[test]
    fn walker_reads_the_four_trees_and_skips_the_rest() {
        let dir = tempfile::TempDir::new().expect("a temporary directory");
        let root = dir.path().to_path_buf();
        let files = [
            ("store/src/lib.rs", true),
            ("store/src/deep/er/mod.rs", true),
            ("store/tests/cases.rs", true),
            ("store/benches/claim.rs", true),
            ("store/examples/demo.rs", true),
            ("store/build.rs", false),
            ("store/src/notes.md", false),
            ("store/tests/node_modules/pkg/x.rs", false),
            ("store/tests/.hidden/x.rs", false),
            ("store/fixtures/x.rs", false),
        ];
        for (path, _) in files {
            let path = root.join(path);
            let parent = path.parent().expect("a planted file has a directory");
            std::fs::create_dir_all(parent).expect("the planted tree is written");
            std::fs::write(&path, "//! planted\n").expect("a planted file is written");
        }
        let workspace = Workspace {
            root: root.clone(),
            members: vec![Member {
                package: "fronta-store".into(),
                dir: root.join("store"),
                dependencies: Vec::new(),
            }],
        };
        let walked = source_files(&workspace).expect("the planted tree is walked");
        let mut expected: Vec<PathBuf> = files
            .iter()
            .filter(|(_, walked)| *walked)
            .map(|(path, _)| PathBuf::from(path))
            .collect();
        expected.sort();
        let paths: Vec<PathBuf> = walked.iter().map(|file| file.path.clone()).collect();
        assert_eq!(
            paths, expected,
            "the .rs files of src, tests, benches, examples"
        );
        let bench = walked
            .iter()
            .find(|file| file.path.ends_with("claim.rs"))
            .expect("the bench is walked");
        assert_eq!(bench.role, Role::Benches, "a file knows its tree");
        assert_eq!(bench.package, "fronta-store", "a file knows its crate");
        assert_eq!(bench.text, "//! planted\n", "a file's text is read");
    }

    #[test]
    fn check_sources_collects_every_files_findings_in_order() {
        let file = |path: &str| SourceFile {
            package: "fronta-x".into(),
            role: Role::Src,
            path: PathBuf::from(path),
            text: String::new(),
        };
        let files = [file("a.rs"), file("b.rs")];
        let found = check_sources(&files, |file| {
            vec![file.finding(Some(1), "one"), file.finding(None, "two")]
        });
        let shown: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            ["a.rs:1: one", "a.rs: two", "b.rs:1: one", "b.rs: two"],
            "each file's findings, in file order"
        );
    }
}
