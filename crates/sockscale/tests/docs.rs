//! The front page and the docs as a newcomer meets them: a README read in five minutes, whose
//! first screen holds the two commands and the install; links that lead somewhere; the seeds
//! every page and output names by number, cited by title and author; and the times the docs
//! give agreeing with the ones `bench -h` gives.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_sockscale");

/// The README's longest allowed: a front page, not a reference.
const README_MAX_LINES: usize = 200;
/// No line a reader has to scroll sideways for (tables and image captions included).
const README_MAX_LINE_CHARS: usize = 200;
/// What a terminal or a repository page shows before the first scroll.
const FIRST_SCREEN_LINES: usize = 40;

/// The command that runs the bench on its default scenario from a fresh clone.
const BENCH_COMMAND: &str = "cargo run --release -p sockscale -- bench";
/// The command that runs the tests; CI (`.ci/run`) runs the same line.
const TEST_COMMAND: &str = "cargo test --workspace --locked";
const INSTALL_COMMAND: &str = "cargo install --path crates/sockscale";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// README.md and every docs/*.md, as (path relative to the root, text).
fn pages() -> Vec<(String, String)> {
    let mut pages = vec![("README.md".to_owned(), read("README.md"))];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    for path in docs {
        let name = format!("docs/{}", path.file_name().and_then(|n| n.to_str()).expect("a UTF-8 name"));
        pages.push((name.clone(), read(&name)));
    }
    pages
}

/// Lines outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// Every Markdown link or image target in prose: the text between `](` and the next `)`.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            targets.push(rest[..end].trim().to_owned());
            rest = &rest[end..];
        }
    }
    targets
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose(text).iter().filter(|l| l.starts_with('#')).map(|l| anchor(l.trim_start_matches('#'))).collect()
}

#[test]
fn the_readme_is_a_front_page() {
    let readme = read("README.md");
    let lines: Vec<&str> = readme.lines().collect();
    assert!(
        lines.len() <= README_MAX_LINES,
        "README.md has {} lines; a front page read in five minutes has at most {README_MAX_LINES}: move reference \
         into docs/",
        lines.len()
    );
    for (i, line) in lines.iter().enumerate() {
        let chars = line.chars().count();
        assert!(
            chars <= README_MAX_LINE_CHARS,
            "README.md:{} is {chars} characters (at most {README_MAX_LINE_CHARS})",
            i + 1
        );
    }
}

#[test]
fn the_first_screen_holds_the_two_commands_and_the_install() {
    let readme = read("README.md");
    let first_screen: Vec<&str> = readme.lines().take(FIRST_SCREEN_LINES).collect();
    for command in [BENCH_COMMAND, TEST_COMMAND] {
        assert!(
            first_screen.iter().any(|l| l.trim() == command),
            "README.md's first {FIRST_SCREEN_LINES} lines have no line `{command}`"
        );
    }
    assert!(
        first_screen.iter().any(|l| l.trim_start().starts_with(INSTALL_COMMAND)),
        "README.md's first {FIRST_SCREEN_LINES} lines have no `{INSTALL_COMMAND}`"
    );
    let ci = read(".ci/run");
    assert!(
        ci.lines().any(|l| l.trim() == TEST_COMMAND),
        ".ci/run does not run the README's test command `{TEST_COMMAND}`"
    );
}

#[test]
fn every_relative_link_leads_somewhere() {
    let pages = pages();
    let mut broken = Vec::new();
    for (name, text) in &pages {
        let dir = Path::new(name).parent().unwrap_or(Path::new(""));
        for target in link_targets(text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((path, fragment)) => (path, Some(fragment)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() { root().join(name) } else { root().join(dir).join(path) };
            if !file.exists() {
                broken.push(format!("{name}: ({target}): no {}", file.display()));
                continue;
            }
            if let Some(fragment) = fragment {
                let Ok(linked) = std::fs::read_to_string(&file) else {
                    broken.push(format!("{name}: ({target}): #{fragment} into something not text"));
                    continue;
                };
                if !anchors(&linked).contains(fragment) {
                    broken.push(format!("{name}: ({target}): no heading #{fragment}"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Every seed number the docs, the README or the program's own output use ("seed 004",
/// "seeds 000/001"), from the pages and the sources of the crates.
fn seed_numbers_used() -> BTreeSet<String> {
    let mut texts: Vec<String> = pages().into_iter().map(|(_, t)| t).collect();
    let mut dirs = vec![root().join("crates")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                texts.push(std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }
    let mut used = BTreeSet::new();
    for text in &texts {
        for (at, _) in text.match_indices("seed") {
            // "seed 004", "seed-003", "seeds 000/001", "seed 002's"
            let rest = &text[at + "seed".len()..];
            let rest = rest.strip_prefix('s').unwrap_or(rest);
            let Some(rest) = rest.strip_prefix(' ').or_else(|| rest.strip_prefix('-')) else { continue };
            let run: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '/').collect();
            used.extend(run.split('/').filter(|n| n.len() == 3).map(str::to_owned));
        }
    }
    used
}

#[test]
fn the_seeds_are_cited_by_name() {
    let seeds = read("docs/seeds.md");
    for cited in [
        "Network Programming for Microsoft Windows",
        "Anthony Jones",
        "Jim Ohlund",
        "Microsoft Press",
        "Network Programming for the Microsoft .NET Framework",
        "Table 6-3",
        "Table 14-1",
        "Table 14-2",
        "CodeProject",
    ] {
        assert!(seeds.contains(cited), "docs/seeds.md does not name {cited:?}");
    }
    let used = seed_numbers_used();
    assert!(used.contains("004") && used.contains("000"), "the seed numbers in use were not found: {used:?}");
    for number in &used {
        assert!(
            seeds.contains(&format!("| **{number}** |")),
            "\"seed {number}\" is used in the docs or the program's output, but docs/seeds.md has no row for it"
        );
    }
    let readme = read("README.md");
    assert!(readme.contains("docs/seeds.md"), "README.md does not link docs/seeds.md");
}

/// `bench -h` states the default profile's measured times; docs/bench.md's profile table must
/// give the same measurements, so the help and the docs never disagree.
#[test]
fn the_bench_times_in_the_help_are_the_docs_times() {
    let out = Command::new(BIN).args(["bench", "--help"]).output().expect("run sockscale bench --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    let measured = help.split("measured ").nth(1).expect("bench --help states the default profile's measured time");
    let measured = &measured[..measured.find(')').expect("the measured times end with ')'")];
    let docs = read("docs/bench.md").split_whitespace().collect::<Vec<_>>().join(" ");
    for time in measured.split(" and ") {
        assert!(docs.contains(time), "bench --help says the default profile measured {time:?}; docs/bench.md does not");
    }
}
