//! Link settings of the release `fronta` binary on Linux: its debug sections (the line
//! tables of the workspace crates, see the root Cargo.toml's `[profile.release]`) are
//! compressed with zlib, which std's backtraces, gdb, perf and addr2line all read, and
//! the linker runs at `-O2` (zlib's stronger level in lld, merged string tails).
//! Debug builds link as before: nothing here runs for them.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let release = std::env::var("PROFILE").is_ok_and(|profile| profile == "release");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if release && linux {
        println!("cargo::rustc-link-arg-bin=fronta=-Wl,--compress-debug-sections=zlib");
        println!("cargo::rustc-link-arg-bin=fronta=-Wl,-O2");
    }
}
