//! The workspace as `cargo metadata --no-deps` describes it: its root, its member crates,
//! their directories and their dependencies on one another. Dependencies outside the
//! workspace are dropped here; no rule of this crate judges them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

use crate::{Result, TidyError};

/// How a crate depends on another: what its code may use, or what only its tests,
/// benches and examples may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DependencyKind {
    Normal,
    Build,
    Dev,
}

impl DependencyKind {
    pub fn name(self) -> &'static str {
        match self {
            DependencyKind::Normal => "normal",
            DependencyKind::Build => "build",
            DependencyKind::Dev => "dev",
        }
    }
}

/// A dependency of a member on another member, by the other's package name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct WorkspaceDependency {
    pub package: String,
    pub kind: DependencyKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The package name (`fronta-engine`).
    pub package: String,
    /// The directory holding its `Cargo.toml`.
    pub dir: PathBuf,
    pub dependencies: Vec<WorkspaceDependency>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    pub root: PathBuf,
    /// Sorted by package name.
    pub members: Vec<Member>,
}

#[derive(Deserialize)]
struct Metadata {
    workspace_root: PathBuf,
    workspace_members: Vec<String>,
    packages: Vec<Package>,
}

#[derive(Deserialize)]
struct Package {
    id: String,
    name: String,
    manifest_path: PathBuf,
    dependencies: Vec<Dependency>,
}

#[derive(Deserialize)]
struct Dependency {
    /// The package depended on (a rename keeps its real name here).
    name: String,
    /// `null` for a normal dependency, else `"dev"` or `"build"`.
    kind: Option<String>,
}

impl Workspace {
    /// Runs `cargo metadata` on the workspace whose root manifest is `root/Cargo.toml`,
    /// with `cargo` the binary to run (in a test, the `CARGO` that runs the test). Offline
    /// and without dependencies: it reads the manifests and resolves nothing.
    pub fn load(cargo: &Path, root: &Path) -> Result<Workspace> {
        let manifest = root.join("Cargo.toml");
        let mut command = Command::new(cargo);
        command
            .args([
                "metadata",
                "--format-version",
                "1",
                "--no-deps",
                "--offline",
            ])
            .arg("--manifest-path")
            .arg(&manifest);
        let shown = format!(
            "{} metadata --format-version 1 --no-deps --offline --manifest-path {}",
            cargo.display(),
            manifest.display()
        );
        let output = command.output().map_err(|error| TidyError::Cargo {
            command: shown.clone(),
            reason: error.to_string(),
        })?;
        if !output.status.success() {
            return Err(TidyError::Cargo {
                command: shown,
                reason: format!(
                    "{}: {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                ),
            });
        }
        Workspace::from_metadata(&String::from_utf8_lossy(&output.stdout))
    }

    /// Reads the JSON that `cargo metadata --format-version 1` writes.
    pub fn from_metadata(json: &str) -> Result<Workspace> {
        let metadata: Metadata = serde_json::from_str(json)?;
        let member_ids: BTreeSet<&str> = metadata
            .workspace_members
            .iter()
            .map(String::as_str)
            .collect();
        let packages: Vec<&Package> = metadata
            .packages
            .iter()
            .filter(|package| member_ids.contains(package.id.as_str()))
            .collect();
        let names: BTreeSet<&str> = packages
            .iter()
            .map(|package| package.name.as_str())
            .collect();
        let mut members: Vec<Member> = packages
            .iter()
            .map(|package| {
                let mut dependencies: Vec<WorkspaceDependency> = package
                    .dependencies
                    .iter()
                    .filter(|dependency| names.contains(dependency.name.as_str()))
                    .map(|dependency| WorkspaceDependency {
                        package: dependency.name.clone(),
                        kind: match dependency.kind.as_deref() {
                            Some("dev") => DependencyKind::Dev,
                            Some("build") => DependencyKind::Build,
                            _ => DependencyKind::Normal,
                        },
                    })
                    .collect();
                dependencies.sort();
                dependencies.dedup();
                Member {
                    package: package.name.clone(),
                    dir: package
                        .manifest_path
                        .parent()
                        .map(Path::to_path_buf)
                        .unwrap_or_else(|| metadata.workspace_root.clone()),
                    dependencies,
                }
            })
            .collect();
        members.sort_by(|a, b| a.package.cmp(&b.package));
        Ok(Workspace {
            root: metadata.workspace_root,
            members,
        })
    }

    pub fn member(&self, package: &str) -> Option<&Member> {
        self.members.iter().find(|member| member.package == package)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const METADATA: &str = r#"{
        "workspace_root": "/w",
        "workspace_members": ["path+file:///w/a#0.1.0", "path+file:///w/b#0.1.0"],
        "packages": [
            {"id": "path+file:///w/a#0.1.0", "name": "a", "manifest_path": "/w/a/Cargo.toml",
             "dependencies": [
                {"name": "b", "kind": null},
                {"name": "b", "kind": "dev"},
                {"name": "serde", "kind": null},
                {"name": "b", "kind": "build", "rename": "b_build"}
             ]},
            {"id": "path+file:///w/b#0.1.0", "name": "b", "manifest_path": "/w/b/Cargo.toml",
             "dependencies": []}
        ],
        "resolve": null,
        "version": 1
    }"#;

    #[test]
    fn metadata_keeps_members_and_their_arrows_between_members_only() {
        let workspace = Workspace::from_metadata(METADATA).expect("the planted metadata parses");
        assert_eq!(workspace.root, PathBuf::from("/w"), "the workspace root");
        let a = workspace.member("a").expect("member a is read");
        assert_eq!(a.dir, PathBuf::from("/w/a"), "a member's directory");
        assert_eq!(
            a.dependencies,
            vec![
                WorkspaceDependency {
                    package: "b".into(),
                    kind: DependencyKind::Normal
                },
                WorkspaceDependency {
                    package: "b".into(),
                    kind: DependencyKind::Build
                },
                WorkspaceDependency {
                    package: "b".into(),
                    kind: DependencyKind::Dev
                },
            ],
            "every kind of arrow to a member, none to serde"
        );
    }

    #[test]
    fn metadata_that_is_not_cargos_is_an_error() {
        let answer = Workspace::from_metadata(r#"{"packages": []}"#);
        assert!(
            matches!(answer, Err(TidyError::Metadata(_))),
            "missing fields are refused, not read as an empty workspace: {answer:?}"
        );
    }
}
