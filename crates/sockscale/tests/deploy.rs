//! deploy/: the Kubernetes manifests are valid against the Kubernetes schemas, and the
//! commands their Jobs run do what the manifests say: N agents, each its segment of one run
//! from the same command line (the index from JOB_COMPLETION_INDEX), then one merge of the
//! directory they wrote.

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::{ServerProc, BIN};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes")
}

fn manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy_dir())
        .expect("deploy/kubernetes")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// Offline validation with the `kubernetes-validate` package (its schemas ship with it; .ci/run
/// installs it with pip where it can). Without it the case says so and checks nothing.
#[test]
fn kubernetes_manifests_validate_against_the_schemas() {
    if Command::new("kubernetes-validate").arg("--version").output().is_err() {
        eprintln!("skipped: kubernetes-validate is not installed (pip install kubernetes-validate)");
        return;
    }
    let files = manifests();
    assert_eq!(files.len(), 4, "{files:?}");
    let out = Command::new("kubernetes-validate").arg("--strict").args(&files).output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // The validator can fail: a misspelt field of the Job is refused.
    let job = std::fs::read_to_string(deploy_dir().join("load-job.yaml")).unwrap();
    let bad = std::env::temp_dir().join(format!("sockscale-bad-job-{}.yaml", std::process::id()));
    std::fs::write(&bad, job.replace("completionMode: Indexed", "completionMod: Indexed")).unwrap();
    let out = Command::new("kubernetes-validate").arg("--strict").arg(&bad).output().unwrap();
    let _ = std::fs::remove_file(&bad);
    assert!(!out.status.success(), "a misspelt field passed validation");
}

/// The `data:` of run-config.yaml: `key: "value"` lines.
fn config_values() -> HashMap<String, String> {
    let text = std::fs::read_to_string(deploy_dir().join("run-config.yaml")).unwrap();
    text.lines()
        .skip_while(|l| !l.starts_with("data:"))
        .skip(1)
        .filter(|l| l.starts_with("  ") && !l.trim_start().starts_with('#'))
        .filter_map(|l| l.trim().split_once(": "))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
        .collect()
}

/// The first container's `args:` list of a manifest, one `- item` a line.
fn job_args(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(deploy_dir().join(file)).unwrap();
    let mut lines = text.lines().skip_while(|l| l.trim() != "args:" && !l.trim().starts_with("args: ["));
    let first = lines.next().expect("an args: list");
    if let Some(inline) = first.trim().strip_prefix("args: [") {
        return inline.trim_end_matches(']').split(", ").map(|a| a.trim_matches('"').to_owned()).collect();
    }
    lines.take_while(|l| l.trim_start().starts_with("- ")).map(|l| l.trim_start()[2..].trim().to_owned()).collect()
}

/// `$(NAME)` replaced from `vars`, as the kubelet expands a container's args.
fn expand(arg: &str, vars: &HashMap<&str, String>) -> String {
    let mut out = arg.to_owned();
    for (name, value) in vars {
        out = out.replace(&format!("$({name})"), value);
    }
    assert!(!out.contains("$("), "{arg}: a variable the manifest does not define");
    out
}

/// The Jobs' own command lines, run as the cluster would run them: the ConfigMap's values with
/// a local target and small totals, three agents with JOB_COMPLETION_INDEX 0, 1, 2 and the
/// same --start-at, their reports in one directory, then the merge Job's command over it.
#[test]
fn the_jobs_command_lines_run_every_segment_and_merge_them() {
    let config = config_values();
    for key in ["target", "connections", "rate", "duration", "agents", "start-at"] {
        assert!(config.contains_key(key), "run-config.yaml has no {key}: {config:?}");
    }
    let server = ServerProc::start("epoll", &["--proto", "echo"]);
    let dir = std::env::temp_dir().join(format!("sockscale-deploy-{}", std::process::id()));
    let (segments, merged) = (dir.join("segments"), dir.join("merged"));
    std::fs::create_dir_all(&segments).unwrap();
    std::fs::create_dir_all(&merged).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let agents = 3;
    let mut vars: HashMap<&str, String> = HashMap::from([
        ("TARGET", server.addr.to_string()),
        ("CONNECTIONS", "7".to_owned()),
        ("RATE", "700".to_owned()),
        ("DURATION", "1".to_owned()),
        ("AGENTS", agents.to_string()),
        ("START_AT", format!("{:.3}", now + 1.5)),
    ]);
    let children: Vec<std::process::Child> = (0..agents)
        .map(|index| {
            vars.insert("JOB_COMPLETION_INDEX", index.to_string());
            let args: Vec<String> = job_args("load-job.yaml")
                .iter()
                .map(|a| expand(a, &vars).replace("/segments/", &format!("{}/", segments.display())))
                .collect();
            assert!(args.iter().any(|a| a == "auto/3"), "{args:?}");
            Command::new(BIN)
                .args(&args)
                .env("JOB_COMPLETION_INDEX", index.to_string())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, mut child) in children.into_iter().enumerate() {
        assert!(child.wait().unwrap().success(), "agent {i}");
    }
    let args: Vec<String> = job_args("merge-job.yaml")
        .iter()
        .map(|a| {
            if a == "/segments" {
                segments.display().to_string()
            } else {
                a.replace("/merged/", &format!("{}/", merged.display()))
            }
        })
        .collect();
    let out = Command::new(BIN).args(&args).output().unwrap();
    assert!(out.status.success(), "merge {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(merged.join("merged.json")).unwrap()).unwrap();
    assert_eq!(m["connections"]["connected"], 7, "{m}");
    assert_eq!(m["agents"].as_array().map(Vec::len), Some(agents), "{m}");
    let _ = std::fs::remove_dir_all(&dir);
}
