//! The tidy rules on the real tree, one `#[test]` per rule: the dependency arrows of
//! ARCHITECTURE.md against `cargo metadata`, the `//!` header of every source file, and
//! no log message formatted in a store crate.
//! The rules themselves (and their tests on planted bad inputs) are in `tidy/src/`.
//!
//! A further rule over source files is one more function here: give [`check_sources`] a
//! `fn(&SourceFile) -> Vec<Finding>` (written in `tidy/src/`, with its planted test) and
//! hand the findings to [`assert_clean`].

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use fronta_tidy::{
    Arrows, Finding, SourceFile, Workspace, check_arrows, check_sources, header_rule, report,
    source_files, store_log_message_rule,
};

/// The workspace root: this crate is one directory below it.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("invariant: the tidy crate is inside the workspace")
        .to_path_buf()
}

/// The cargo running these tests (it sets `CARGO`), else the one that built them.
fn cargo() -> PathBuf {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO")))
}

fn workspace() -> &'static Workspace {
    static WORKSPACE: OnceLock<Workspace> = OnceLock::new();
    WORKSPACE.get_or_init(|| {
        Workspace::load(&cargo(), &root()).expect("cargo metadata describes the workspace")
    })
}

/// Every member's source files, walked once for all the rules.
fn sources() -> &'static [SourceFile] {
    static SOURCES: OnceLock<Vec<SourceFile>> = OnceLock::new();
    SOURCES.get_or_init(|| source_files(workspace()).expect("the member trees can be read"))
}

fn assert_clean(rule: &str, findings: &[Finding]) {
    assert!(
        findings.is_empty(),
        "{rule}: {} finding(s)\n{}",
        findings.len(),
        report(findings)
    );
}

#[test]
fn crates_depend_only_along_the_arrows_of_architecture_md() {
    let workspace = workspace();
    assert!(
        workspace.member("fronta-tidy").is_some() && workspace.members.len() > 1,
        "the metadata holds the whole workspace: {:?}",
        workspace
            .members
            .iter()
            .map(|member| &member.package)
            .collect::<Vec<_>>()
    );
    let arrows = Arrows::load(&root()).expect("ARCHITECTURE.md has one ```arrows block");
    assert_clean(
        "dependency arrows (ARCHITECTURE.md, ```arrows)",
        &check_arrows(workspace, &arrows),
    );
}

#[test]
fn every_source_file_opens_with_a_header() {
    let sources = sources();
    assert!(
        sources
            .iter()
            .any(|file| file.path == Path::new("tidy/tests/tidy.rs")),
        "the walker reaches the members' tests, this file among them"
    );
    assert_clean("`//!` headers", &check_sources(sources, header_rule));
}

#[test]
fn store_crates_format_no_log_message() {
    let sources = sources();
    assert!(
        sources
            .iter()
            .any(|file| file.path == Path::new("store-postgres/src/desk/writes.rs")),
        "the walker reaches the stores' write modules"
    );
    assert_clean(
        "log messages in a store crate (ARCHITECTURE.md, Tidy rules)",
        &check_sources(sources, store_log_message_rule),
    );
}
