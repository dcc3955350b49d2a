//! The dependency-arrows rule: every dependency of a workspace crate on another goes along
//! an arrow that ARCHITECTURE.md allows. The arrows are read from the document itself (its
//! ```` ```arrows ```` block), so the picture a reader trusts and the check are one text.
//!
//! A line of the block is `crate -> a, b | dev: c, d`: the crate's code (normal and build
//! dependencies) may use `a` and `b`; its tests, benches and examples (dev dependencies)
//! may use those and `c`, `d` as well. Names are package names without the `fronta-`
//! prefix. Every member needs a line, and every name must be a member, so a new crate, a
//! renamed one or a stale line fails too. Dependencies outside the workspace are not
//! judged here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::workspace::{DependencyKind, Workspace};
use crate::{Finding, Result, TidyError};

/// Where the arrows are, relative to the workspace root (and what findings about the
/// list itself name).
pub const ARCHITECTURE_FILE: &str = "ARCHITECTURE.md";

/// The opening fence of the block: a fenced block with the info string `arrows`.
const FENCE_OPEN: &str = "```arrows";
const FENCE: &str = "```";

/// What one crate may depend on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Allowed {
    /// Line of ARCHITECTURE.md the crate's arrows are on.
    pub line: usize,
    /// Normal and build dependencies.
    pub code: BTreeSet<String>,
    /// Only for dev dependencies, beyond `code`.
    pub dev: BTreeSet<String>,
}

/// The arrows of ARCHITECTURE.md, by crate name (without `fronta-`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Arrows {
    pub crates: BTreeMap<String, Allowed>,
}

/// The name arrows use for a package: without the `fronta-` prefix.
pub fn short_name(package: &str) -> &str {
    package.strip_prefix("fronta-").unwrap_or(package)
}

impl Arrows {
    /// Reads the one ```` ```arrows ```` block of ARCHITECTURE.md's text.
    pub fn from_architecture(text: &str) -> Result<Arrows> {
        let mut arrows = Arrows::default();
        let mut blocks = 0;
        let mut inside = false;
        for (index, raw) in text.lines().enumerate() {
            let line_number = index + 1;
            let line = raw.trim();
            if !inside {
                if line == FENCE_OPEN {
                    inside = true;
                    blocks += 1;
                }
                continue;
            }
            if line == FENCE {
                inside = false;
                continue;
            }
            if line.is_empty() {
                continue;
            }
            let (name, allowed) = parse_line(line, line_number)?;
            if let Some(earlier) = arrows.crates.insert(name.clone(), allowed) {
                return Err(TidyError::Arrows(format!(
                    "`{name}` has a second line at line {line_number} (the first is at line {})",
                    earlier.line
                )));
            }
        }
        if inside {
            return Err(TidyError::Arrows(
                "the ```arrows block is not closed".to_string(),
            ));
        }
        if blocks != 1 {
            return Err(TidyError::Arrows(format!(
                "expected one ```arrows block, found {blocks}"
            )));
        }
        Ok(arrows)
    }

    /// Reads the arrows from `ARCHITECTURE.md` at the workspace root.
    pub fn load(root: &Path) -> Result<Arrows> {
        let path = root.join(ARCHITECTURE_FILE);
        let text =
            std::fs::read_to_string(&path).map_err(|source| TidyError::Read { path, source })?;
        Arrows::from_architecture(&text)
    }
}

fn parse_line(line: &str, line_number: usize) -> Result<(String, Allowed)> {
    let bad = |reason: &str| {
        TidyError::Arrows(format!(
            "line {line_number} `{line}`: {reason} (expected `crate -> a, b | dev: c`)"
        ))
    };
    let (name, rest) = line
        .split_once("->")
        .or_else(|| line.split_once('→'))
        .ok_or_else(|| bad("no `->`"))?;
    let name = name.trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(bad("the crate's name must be one word"));
    }
    let (code, dev) = match rest.split_once('|') {
        None => (rest, ""),
        Some((code, dev)) => (
            code,
            dev.trim()
                .strip_prefix("dev:")
                .ok_or_else(|| bad("after `|` comes `dev:`"))?,
        ),
    };
    Ok((
        name.to_string(),
        Allowed {
            line: line_number,
            code: names(code),
            dev: names(dev),
        },
    ))
}

fn names(list: &str) -> BTreeSet<String> {
    list.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .collect()
}

/// The rule: every member has a line, every name is a member, and every dependency of a
/// member on a member goes along an allowed arrow (a dev dependency along a code or a dev
/// arrow).
pub fn check_arrows(workspace: &Workspace, arrows: &Arrows) -> Vec<Finding> {
    let mut findings = Vec::new();
    let members: BTreeSet<&str> = workspace
        .members
        .iter()
        .map(|member| short_name(&member.package))
        .collect();

    for (name, allowed) in &arrows.crates {
        let at = |message: String| Finding::new(ARCHITECTURE_FILE, message).at_line(allowed.line);
        if !members.contains(name.as_str()) {
            findings.push(at(format!(
                "`{name}` has arrows but is not a workspace crate"
            )));
        }
        for target in allowed.code.iter().chain(&allowed.dev) {
            if !members.contains(target.as_str()) {
                findings.push(at(format!(
                    "`{name}` may depend on `{target}`, which is not a workspace crate"
                )));
            }
        }
    }

    for member in &workspace.members {
        let name = short_name(&member.package);
        let manifest = member
            .dir
            .strip_prefix(&workspace.root)
            .unwrap_or(&member.dir)
            .join("Cargo.toml");
        let Some(allowed) = arrows.crates.get(name) else {
            findings.push(Finding::new(
                ARCHITECTURE_FILE,
                format!(
                    "`{name}` ({}) has no line in the ```arrows block: say which workspace \
                     crates it may depend on",
                    member.package
                ),
            ));
            continue;
        };
        for dependency in &member.dependencies {
            let target = short_name(&dependency.package);
            let along = match dependency.kind {
                DependencyKind::Normal | DependencyKind::Build => allowed.code.contains(target),
                DependencyKind::Dev => {
                    allowed.code.contains(target) || allowed.dev.contains(target)
                }
            };
            if !along {
                findings.push(Finding::new(
                    manifest.display().to_string(),
                    format!(
                        "`{name}` has a {} dependency on `{target}`, against the arrows of \
                         {ARCHITECTURE_FILE} line {} (code: {}; dev: {})",
                        dependency.kind.name(),
                        allowed.line,
                        shown(&allowed.code),
                        shown(&allowed.dev),
                    ),
                ));
            }
        }
    }
    findings
}

fn shown(names: &BTreeSet<String>) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A planted workspace: `engine` (nothing), `store` (on engine; tests on sim too),
    /// `sim` (on engine).
    const ARCHITECTURE: &str = "\
# Architecture

Some prose that mentions `store -> engine` and is not read.

```arrows
engine ->
store  -> engine | dev: sim
sim    -> engine
```
";

    /// `cargo metadata --no-deps` of the planted workspace, with `deps` as the
    /// dependencies of `fronta-store` (JSON objects).
    fn metadata(store_deps: &str) -> String {
        format!(
            r#"{{
            "workspace_root": "/w",
            "workspace_members": ["e", "s", "m"],
            "packages": [
                {{"id": "e", "name": "fronta-engine", "manifest_path": "/w/engine/Cargo.toml",
                  "dependencies": [{{"name": "serde", "kind": null}}]}},
                {{"id": "s", "name": "fronta-store", "manifest_path": "/w/store/Cargo.toml",
                  "dependencies": [{store_deps}]}},
                {{"id": "m", "name": "fronta-sim", "manifest_path": "/w/sim/Cargo.toml",
                  "dependencies": [{{"name": "fronta-engine", "kind": null}}]}}
            ]}}"#
        )
    }

    fn findings(architecture: &str, store_deps: &str) -> Vec<Finding> {
        let arrows = Arrows::from_architecture(architecture).expect("the planted arrows parse");
        let workspace =
            Workspace::from_metadata(&metadata(store_deps)).expect("the planted metadata parses");
        check_arrows(&workspace, &arrows)
    }

    #[test]
    fn arrows_are_read_from_the_fenced_block_only() {
        let arrows = Arrows::from_architecture(ARCHITECTURE).expect("the planted arrows parse");
        let store = arrows.crates.get("store").expect("store has a line");
        assert_eq!(store.line, 7, "the line the store's arrows are on");
        assert_eq!(
            store.code.iter().collect::<Vec<_>>(),
            ["engine"],
            "the store's code arrows"
        );
        assert_eq!(
            store.dev.iter().collect::<Vec<_>>(),
            ["sim"],
            "the store's dev arrows"
        );
        assert!(
            arrows.crates["engine"].code.is_empty(),
            "an empty list allows nothing"
        );
        assert_eq!(
            arrows.crates.len(),
            3,
            "prose outside the block is not read"
        );
    }

    #[test]
    fn dependencies_along_the_arrows_pass() {
        let found = findings(
            ARCHITECTURE,
            r#"{"name": "fronta-engine", "kind": null}, {"name": "fronta-sim", "kind": "dev"},
               {"name": "fronta-engine", "kind": "dev"}, {"name": "tokio", "kind": null}"#,
        );
        assert!(
            found.is_empty(),
            "code on engine, tests on sim and engine, outside crates unjudged: {found:?}"
        );
    }

    #[test]
    fn a_normal_dependency_against_the_arrows_fails() {
        let found = findings(ARCHITECTURE, r#"{"name": "fronta-sim", "kind": null}"#);
        assert_eq!(found.len(), 1, "one arrow is against the list: {found:?}");
        assert_eq!(
            found[0].place, "store/Cargo.toml",
            "the finding names the manifest"
        );
        assert!(
            found[0].message.contains("normal dependency on `sim`"),
            "the finding names the arrow: {}",
            found[0]
        );
    }

    #[test]
    fn a_build_dependency_counts_as_code() {
        let found = findings(ARCHITECTURE, r#"{"name": "fronta-sim", "kind": "build"}"#);
        assert_eq!(
            found.len(),
            1,
            "a dev arrow does not allow a build dependency: {found:?}"
        );
    }

    #[test]
    fn a_domain_crate_depending_on_a_store_fails() {
        let architecture = ARCHITECTURE.replace("sim    -> engine", "sim    -> engine, store");
        let arrows = Arrows::from_architecture(&architecture).expect("the planted arrows parse");
        // engine depends on the store: the arrow the architecture forbids most.
        let json = metadata("").replace(
            r#"[{"name": "serde", "kind": null}]"#,
            r#"[{"name": "fronta-store", "kind": "dev"}]"#,
        );
        let workspace = Workspace::from_metadata(&json).expect("the planted metadata parses");
        let found = check_arrows(&workspace, &arrows);
        assert_eq!(found.len(), 1, "a dev dependency counts as well: {found:?}");
        assert!(
            found[0]
                .message
                .contains("`engine` has a dev dependency on `store`"),
            "the finding names the arrow: {}",
            found[0]
        );
    }

    #[test]
    fn a_crate_without_a_line_and_a_stale_name_fail() {
        let architecture = ARCHITECTURE
            .replace("sim    -> engine\n", "")
            .replace("engine ->\n", "engine ->\nold -> engine, gone\n");
        let found = findings(&architecture, "");
        let messages: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert!(
            messages
                .iter()
                .any(|m| m.contains("`sim` (fronta-sim) has no line")),
            "a member without a line is found: {messages:?}"
        );
        assert!(
            messages
                .iter()
                .any(|m| m.contains("`old` has arrows but is not a workspace crate")),
            "a line for no member is found: {messages:?}"
        );
        assert!(
            messages
                .iter()
                .any(|m| m.contains("`gone`, which is not a workspace crate")),
            "an arrow to no member is found: {messages:?}"
        );
        assert_eq!(messages.len(), 3, "nothing else is found: {messages:?}");
    }

    #[test]
    fn a_malformed_or_missing_block_is_an_error() {
        for (text, why) in [
            ("no block at all\n", "no block"),
            ("```arrows\nengine ->\n", "an unclosed block"),
            ("```arrows\nengine\n```\n", "a line without an arrow"),
            (
                "```arrows\nengine ->\nengine -> desk\n```\n",
                "a crate twice",
            ),
            (
                "```arrows\nstore -> engine | sim\n```\n",
                "a `|` without `dev:`",
            ),
            (
                "```arrows\nengine ->\n```\n```arrows\ndesk ->\n```\n",
                "two blocks",
            ),
        ] {
            assert!(
                matches!(Arrows::from_architecture(text), Err(TidyError::Arrows(_))),
                "{why} is refused"
            );
        }
    }
}
