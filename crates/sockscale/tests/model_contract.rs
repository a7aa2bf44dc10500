//! The model contract: every suite takes its models from the library's table, so a new model
//! cannot skip one. A suite's macro (`conformance!`, `hardening!`, `faults!`: one module of cases
//! a model) is instantiated by `for_every_model!`, whose one list is checked against the table in
//! every suite (`every_model_of_the_table_is_in_the_suite`); a suite that runs its models at run
//! time reads `Model::ALL`. This test reads the suites' source and fails where one lists models
//! by hand instead.

mod support;

use std::path::{Path, PathBuf};

use sockscale_server::Model;

/// The test sources: tests/*.rs and tests/support/*.rs.
fn sources() -> Vec<PathBuf> {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut files: Vec<PathBuf> = [tests.clone(), tests.join("support")]
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    files
}

/// The lists of two or more model names, and nothing else, in `line`: the arguments of a macro
/// call (`suite!(a, b)`) or an array (`["a", "b"]`), each of a, b a model's name.
fn model_lists(line: &str, names: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (open, close) in [("!(", ')'), ("[", ']')] {
        let mut rest = line;
        while let Some(at) = rest.find(open) {
            rest = &rest[at + open.len()..];
            let Some(end) = rest.find(close) else { break };
            let items: Vec<&str> =
                rest[..end].split(',').map(|i| i.trim().trim_matches('"')).filter(|i| !i.is_empty()).collect();
            if items.len() >= 2 && items.iter().all(|i| names.contains(i)) {
                found.push(rest[..end].to_owned());
            }
        }
    }
    found
}

#[test]
fn no_suite_lists_models_by_hand() {
    let names: Vec<&str> = Model::ALL.iter().map(|m| m.name()).collect();
    let mut by_hand = Vec::new();
    for file in sources() {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let name = file.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(&file).display().to_string();
        for (i, line) in text.lines().enumerate() {
            // The one list, in support/mod.rs, checked against the table by every suite.
            if line.contains("for_every_model!(@models") {
                continue;
            }
            for list in model_lists(line, &names) {
                by_hand.push(format!("{name}:{}: {list}", i + 1));
            }
        }
    }
    assert!(
        by_hand.is_empty(),
        "models listed by hand (use for_every_model!(suite), or Model::ALL at run time):\n{}",
        by_hand.join("\n")
    );
}

#[test]
fn every_suite_macro_is_instantiated_for_every_model() {
    let mut missing = Vec::new();
    let mut suites = 0;
    for file in sources() {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        // A suite's macro: one module of cases a model, each naming its model by stringify!.
        for part in text.split("\nmacro_rules! ").skip(1) {
            let name: String = part.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let body = part.split("\n}\n").next().unwrap_or(part);
            if name == "for_every_model" || !body.contains("stringify!($model)") {
                continue;
            }
            suites += 1;
            if !text.contains(&format!("for_every_model!({name})")) {
                missing.push(format!("{}: {name}!", file.display()));
            }
        }
    }
    assert!(missing.is_empty(), "suites not instantiated by for_every_model!:\n{}", missing.join("\n"));
    // conformance, hardening and faults at least: this test must see the suites it guards.
    assert!(suites >= 3, "found {suites} suite macros");
}

#[test]
fn the_scan_sees_a_list_by_hand() {
    let names: Vec<&str> = Model::ALL.iter().map(|m| m.name()).collect();
    let (a, b, c) = (names[0], names[1], names[names.len() - 1]);
    assert_eq!(model_lists(&format!("suite!({a}, {b}, {c});"), &names), [format!("{a}, {b}, {c}")]);
    assert_eq!(model_lists(&format!(r#"for m in ["{a}", "{b}"] {{"#), &names), [format!(r#""{a}", "{b}""#)]);
    assert!(model_lists(&format!(r#"let x = ["{a}", "--proto"];"#), &names).is_empty());
    assert!(model_lists("support::for_every_model!(hardening);", &names).is_empty());
}
