//! The man page and shell completions are generated from the clap definition
//! and checked in. This test regenerates them and fails on any drift.
//!
//! To update them after changing a flag:
//!
//!     LEADERRUN_BLESS=1 cargo test --test docs

use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;
use leaderrun::cli::Cli;

fn generated() -> Vec<(PathBuf, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();

    let mut man = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut man)
        .unwrap();
    out.push((root.join("man/leaderrun.1"), man));

    for (shell, file) in [
        (Shell::Bash, "leaderrun.bash"),
        (Shell::Zsh, "_leaderrun"),
        (Shell::Fish, "leaderrun.fish"),
    ] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "leaderrun", &mut buf);
        out.push((root.join("completions").join(file), buf));
    }
    out
}

#[test]
fn man_page_and_completions_match_the_cli() {
    let bless = std::env::var_os("LEADERRUN_BLESS").is_some();
    let mut drifted = Vec::new();
    for (path, content) in generated() {
        let current = std::fs::read(&path).unwrap_or_default();
        if current != content {
            if bless {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &content).unwrap();
            } else {
                drifted.push(path.display().to_string());
            }
        }
    }
    assert!(
        drifted.is_empty(),
        "generated docs are out of date: {drifted:?}; run `LEADERRUN_BLESS=1 cargo test --test docs` and commit"
    );
}

#[test]
fn man_page_documents_every_exit_status() {
    let man = String::from_utf8(generated().remove(0).1).unwrap();
    for code in ["126", "127", "64", "69", "75", "76", "128+N"] {
        assert!(man.contains(code), "man page lacks exit status {code}");
    }
}

#[test]
fn clap_definition_is_consistent() {
    Cli::command().debug_assert();
}
