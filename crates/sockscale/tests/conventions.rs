//! The conventions of a Rust command line tool, and numbers people read: shell completions, man
//! pages, licence files, a changelog that names the version, stats lines without a hundred
//! zeros, result files readable alike, and one exit status for an interrupted run.

mod support;

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{ServerProc, BIN};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sockscale-conv-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `sockscale ARGS` to the end: its stdout, or a panic with its stderr.
fn stdout_of(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(out.status.success(), "sockscale {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn found(tool: &str) -> bool {
    Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

#[test]
fn bash_sources_the_completion_and_registers_it() {
    if !found("bash") {
        eprintln!("skipped: bash is not installed");
        return;
    }
    let script = format!("source <('{BIN}' completions bash) && complete -p sockscale");
    let out = Command::new("bash").args(["-c", &script]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("-F _sockscale sockscale"), "{said}");
    // The script completes the subcommands and their flags.
    let bash = stdout_of(&["completions", "bash"]);
    for word in ["serve", "load", "bench", "--stats-interval", "--allow-errors", "completions", "man"] {
        assert!(bash.contains(word), "the bash completion lacks {word}");
    }
    assert!(stdout_of(&["completions", "zsh"]).starts_with("#compdef sockscale"));
    assert!(stdout_of(&["completions", "fish"]).contains("complete -c sockscale"));
    let out = Command::new(BIN).args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "an unknown shell is a usage error");
}

/// groff's rendering of a page as plain text, with every warning on (a malformed page warns).
fn render_man(page: &[u8]) -> String {
    let mut groff = Command::new("groff")
        .args(["-k", "-man", "-Tutf8", "-ww", "-P-cbou"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    groff.stdin.take().unwrap().write_all(page).unwrap();
    let out = groff.wait_with_output().unwrap();
    let warnings = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && warnings.trim().is_empty(), "groff: {warnings}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_man_pages_render() {
    if !found("groff") {
        eprintln!("skipped: groff is not installed (apt-get install groff-base)");
        return;
    }
    let top = render_man(stdout_of(&["man"]).as_bytes());
    for part in ["NAME", "SYNOPSIS", "sockscale-serve(1)", "sockscale-load(1)", "sockscale-bench(1)"] {
        assert!(top.contains(part), "the top page has no {part}:\n{top}");
    }
    assert!(!top.contains("sockscale-help(1)"), "a page named that is never written:\n{top}");
    let dir = temp_dir("man");
    let said = stdout_of(&["man", "--out", dir.to_str().unwrap()]);
    let mut pages: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    pages.sort();
    for page in ["sockscale.1", "sockscale-serve.1", "sockscale-load-http.1", "sockscale-bench.1", "sockscale-man.1"] {
        assert!(pages.iter().any(|p| p == page), "no {page} in {pages:?}");
    }
    assert!(said.starts_with(&format!("{} pages in ", pages.len())), "{said}");
    for page in &pages {
        let text = render_man(&std::fs::read(dir.join(page)).unwrap());
        assert!(text.contains("SYNOPSIS"), "{page}:\n{text}");
    }
    let serve = render_man(&std::fs::read(dir.join("sockscale-serve.1")).unwrap());
    assert!(serve.contains("--stats-interval"), "{serve}");
    let load = render_man(&std::fs::read(dir.join("sockscale-load-echo.1")).unwrap());
    let flat = load.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("NOTES Errors: ") && flat.contains("Exit status: 0 when"),
        "the help's exit statuses:\n{load}"
    );
    // man(1) itself reads it, where it is installed.
    if found("man") {
        let out =
            Command::new("man").arg("-l").arg(dir.join("sockscale-serve.1")).env("MANPAGER", "cat").output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("sockscale-serve"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_licence_files_are_the_ones_cargo_toml_names() {
    let manifest = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
    assert!(manifest.contains(r#"license = "MIT OR Apache-2.0""#), "the licence changed: update the files");
    let mit = std::fs::read_to_string(repo_root().join("LICENSE-MIT")).expect("LICENSE-MIT");
    assert!(mit.contains("Permission is hereby granted, free of charge, to any"), "{mit}");
    assert!(mit.contains("Copyright (c) the sockscale authors"), "{mit}");
    let apache = std::fs::read_to_string(repo_root().join("LICENSE-APACHE")).expect("LICENSE-APACHE");
    for part in [
        "Apache License",
        "Version 2.0, January 2004",
        "http://www.apache.org/licenses/",
        "END OF TERMS AND CONDITIONS",
    ] {
        assert!(apache.contains(part), "LICENSE-APACHE has no {part:?}");
    }
    // The whole text: its nine sections, not an excerpt.
    assert!(apache.contains("9. Accepting Warranty or Additional Liability."));
}

/// The CHANGELOG follows Keep a Changelog: Unreleased first, then the releases newest first, the
/// newest being the version the binary reports.
#[test]
fn the_changelogs_newest_release_is_the_binarys_version() {
    let changelog = std::fs::read_to_string(repo_root().join("CHANGELOG.md")).expect("CHANGELOG.md");
    assert!(changelog.contains("https://keepachangelog.com/"), "say which format it follows");
    let headings: Vec<&str> = changelog.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(headings.first().copied(), Some("## [Unreleased]"), "{headings:?}");
    let released = headings.get(1).unwrap_or_else(|| panic!("no released version: {headings:?}"));
    // `## [0.1.0] - 2026-11-26`
    let (version, date) = released
        .strip_prefix("## [")
        .and_then(|r| r.split_once("] - "))
        .unwrap_or_else(|| panic!("not `## [VERSION] - DATE`: {released}"));
    assert!(date.len() == 10 && date.as_bytes()[4] == b'-' && date.as_bytes()[7] == b'-', "{released}");
    let said = stdout_of(&["--version"]);
    assert_eq!(said.trim(), format!("sockscale {version}"), "CHANGELOG.md's newest release against --version");
    // Every release after it is older: the headings go newest first.
    let versions: Vec<Vec<u64>> = headings[1..]
        .iter()
        .filter_map(|h| h.strip_prefix("## [")?.split_once(']'))
        .map(|(v, _)| v.split('.').map(|n| n.parse().unwrap_or_else(|_| panic!("version {v}"))).collect())
        .collect();
    assert!(versions.windows(2).all(|w| w[0] > w[1]), "{headings:?}");
}

/// Periodic stats lines show what moved; `--stats-all` shows every counter; the final line
/// keeps every counter (scripts and the --procs parent read it).
#[test]
fn stats_lines_show_the_counters_that_moved() {
    for all in [false, true] {
        let mut args = vec!["--stats-interval", "0.1"];
        if all {
            args.push("--stats-all");
        }
        let mut server = ServerProc::start("epoll", &args);
        let mut c = server.connect();
        support::echo_byte(&mut c, 7);
        let counted = server.wait_for_line(Duration::from_secs(10), |l| l.starts_with("stats accepted=1 "));
        assert!(counted, "no stats line counts the connection");
        drop(c);
        let done = server.stop();
        let line = done.stdout.iter().find(|l| l.starts_with("stats accepted=1 ")).unwrap();
        let fields: Vec<&str> = line["stats ".len()..].split(' ').collect();
        let final_line = done.stdout.iter().find(|l| l.starts_with("final ")).unwrap();
        let every = final_line.split(' ').count() - 1;
        if all {
            assert_eq!(fields.len(), every, "{line}");
            assert!(fields.contains(&"limit_threads=0"), "{line}");
        } else {
            assert!(fields.starts_with(&["accepted=1", "refused=0"]), "{line}");
            let zeros: Vec<&&str> = fields[3..].iter().filter(|f| f.ends_with("=0")).collect();
            assert!(zeros.is_empty(), "zero counters past the head: {zeros:?} in {line}");
            assert!(fields.iter().any(|f| f.starts_with("bytes_in=")), "{line}");
            assert!(fields.len() < 12 && every > 60, "{} of {every}: {line}", fields.len());
        }
        assert!(final_line.contains(" limit_threads=0 "), "the final line has every counter: {final_line}");
    }
    let out = Command::new(BIN).args(["serve", "--stats-all"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "--stats-all without --stats-interval");
}

/// A command with the umask 022, as a login shell has.
fn with_umask_022(cmd: &mut Command) -> &mut Command {
    // SAFETY: umask(2) is async-signal-safe and cannot fail.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0o022);
            Ok(())
        })
    }
}

/// Every file under `dir` with its permission bits.
fn modes(dir: &Path) -> Vec<(String, u32)> {
    let mut modes: Vec<(String, u32)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| (e.file_name().into_string().unwrap(), e.metadata().unwrap().permissions().mode() & 0o777))
        .collect();
    modes.sort();
    modes
}

/// A run's files are all readable alike: the JSON and CSV as the PNG and HTML beside them
/// (0666 less the umask, 0644 here), for bench and for load.
#[test]
fn a_runs_files_are_all_readable_alike() {
    let dir = temp_dir("modes");
    let bench = dir.join("bench");
    let out = with_umask_022(Command::new(BIN).args([
        "bench",
        "--profile",
        "tiny",
        "--rounds",
        "1",
        "--models",
        "epoll",
        "--out",
    ]))
    .arg(&bench)
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files = modes(&bench);
    for name in ["results.json", "rows.csv", "http.csv", "table.md", "report.html", "throughput.png"] {
        assert!(files.iter().any(|(n, _)| n == name), "no {name}: {files:?}");
    }
    let odd: Vec<String> = files.iter().filter(|(_, mode)| *mode != 0o644).map(|(n, m)| format!("{n} {m:o}")).collect();
    assert!(odd.is_empty(), "files not 0644 under umask 022: {odd:?}");

    let server = ServerProc::start("epoll", &["--proto", "echo"]);
    let load = dir.join("load");
    std::fs::create_dir_all(&load).unwrap();
    let out =
        with_umask_022(Command::new(BIN).args(["load", "echo", &server.addr.to_string(), "-c", "2", "-n", "200"]))
            .arg("--json")
            .arg(load.join("run.json"))
            .arg("--html")
            .arg(load.join("run.html"))
            .arg("--hdr-log")
            .arg(load.join("run.hlog"))
            .output()
            .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files = modes(&load);
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(files.iter().all(|(_, mode)| *mode == 0o644), "{files:?}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Send `signal` once `ready` says so (bounded), then wait (bounded) for the exit.
fn interrupt(
    child: &mut std::process::Child,
    signal: i32,
    ready: impl Fn() -> bool,
    what: &str,
) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "{what}: never got going");
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{what}: ended before the signal: {status}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    sockscale_sys::signal_process(child.id(), signal).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}: did not stop within 30 s of the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The signal's default action in the child, whatever the test inherited (a test run in the
/// background ignores SIGINT, and an ignored SIGINT is ignored across exec).
fn default_signals(cmd: &mut Command) -> &mut Command {
    // SAFETY: signal(2) is async-signal-safe; SIG_DFL installs no handler code.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        })
    }
}

/// An interrupted load writes what it measured and exits 128 + the signal: 130 for SIGINT, 143
/// for SIGTERM, one process or many (`--procs`).
#[test]
fn an_interrupted_load_writes_its_report_and_exits_with_the_signals_status() {
    let server = ServerProc::start("epoll", &["--proto", "echo"]);
    let dir = temp_dir("load-int");
    for (signal, procs, status) in [(libc::SIGINT, "1", 130), (libc::SIGTERM, "1", 143), (libc::SIGINT, "2", 130)] {
        let what = format!("load --procs {procs}, signal {signal}");
        let json = dir.join(format!("{signal}-{procs}.json"));
        let mut load = Command::new(BIN);
        load.args(["load", "echo", &server.addr.to_string(), "-c", "2", "-d", "30", "--procs", procs])
            .arg("--json")
            .arg(&json)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let began = Instant::now();
        let mut load = default_signals(&mut load).spawn().unwrap();
        // Measuring for a second: the connections are open and exchanging.
        let got = interrupt(&mut load, signal, || began.elapsed() > Duration::from_millis(1500), &what);
        let out = load.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(got.code(), Some(status), "{what}: {stderr}");
        assert!(began.elapsed() < Duration::from_secs(20), "{what}: stopped early");
        assert!(stderr.contains(&format!("(exit status {status})")), "{what}: {stderr}");
        let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert!(report["requests"]["completed"].as_u64().unwrap_or(0) > 0, "{what}: {report}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("completed"), "{what}: the summary is printed");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An interrupted bench stops its processes, writes what it measured and exits 130 as load does.
#[test]
fn an_interrupted_bench_writes_its_results_and_exits_130() {
    let dir = temp_dir("bench-int");
    let mut bench = Command::new(BIN);
    bench
        .args(["bench", "--profile", "tiny", "--rounds", "1", "--models", "epoll,select", "--out"])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut bench = default_signals(&mut bench).spawn().unwrap();
    let results = dir.join("results.json");
    // Once the first step's results are saved.
    let status = interrupt(&mut bench, libc::SIGINT, || results.exists(), "bench");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut bench.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted by SIGINT: the rows measured before are in"), "{stderr}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    assert_eq!(r["interrupted"], true, "{r}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--help` says so, for each command that can be interrupted.
#[test]
fn the_help_names_the_interrupted_exit_status() {
    for args in [["load", "echo"], ["load", "http"], ["load", "udp"], ["bench", "--help"]] {
        let mut args = args.to_vec();
        if args[1] != "--help" {
            args.push("--help");
        }
        let help = stdout_of(&args);
        let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains("Exit status:") && flat.contains("130 when stopped by SIGINT"), "{args:?}: {help}");
        assert!(flat.contains("143 by SIGTERM"), "{args:?}: {help}");
    }
}
