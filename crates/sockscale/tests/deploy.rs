//! deploy/: the Kubernetes manifests are valid against the Kubernetes schemas, and the
//! commands their Jobs run do what the manifests say: N agents, each its segment of one run
//! from the same command line (the index from JOB_COMPLETION_INDEX), then one merge of the
//! directory they wrote.

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::{ServerProc, BIN};

/// Run `ip ARGS`; its stderr on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`ip {}`: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// The machines of a cluster on one host: a namespace each, joined by a bridge in a switch
/// namespace of their own (nothing of the root namespace is touched); removed on drop.
struct Cluster {
    names: Vec<String>,
}

impl Cluster {
    /// `machines` namespaces with 10.79.0.(10 + i)/24 each, or why this host cannot.
    fn new(machines: usize) -> Result<Cluster, String> {
        // SAFETY: geteuid has no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not running as root (network namespaces need it)".into());
        }
        let pid = std::process::id();
        let switch = format!("ssk-{pid}-sw");
        let mut cluster = Cluster { names: vec![switch.clone()] };
        ip(&["netns", "add", &switch])?;
        ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &switch, "link", "set", "br0", "up"])?;
        for i in 0..machines {
            let ns = format!("ssk-{pid}-{i}");
            ip(&["netns", "add", &ns])?;
            cluster.names.push(ns.clone());
            let (inside, port) = (format!("ssk{pid}m{i}"), format!("ssk{pid}p{i}"));
            ip(&["link", "add", &inside, "type", "veth", "peer", "name", &port])?;
            ip(&["link", "set", &inside, "netns", &ns])?;
            ip(&["link", "set", &port, "netns", &switch])?;
            ip(&["-n", &switch, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &switch, "link", "set", &port, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", Cluster::address(i)), "dev", &inside])?;
            ip(&["-n", &ns, "link", "set", &inside, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(cluster)
    }

    fn address(machine: usize) -> String {
        format!("10.79.0.{}", 10 + machine)
    }

    /// The namespace of machine `i`.
    fn ns(&self, machine: usize) -> &str {
        &self.names[machine + 1]
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

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
    assert_eq!(files.len(), 5, "{files:?}");
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
    lines
        .take_while(|l| l.trim_start().starts_with("- "))
        .map(|l| l.trim_start()[2..].trim().trim_matches('"').to_owned())
        .collect()
}

/// The server Deployment's command line serves: the same arguments, on a port of this host.
#[test]
fn the_server_deployments_command_line_serves() {
    let args: Vec<String> = job_args("echo-server.yaml")
        .into_iter()
        .map(|a| if a == "0.0.0.0:9000" { "127.0.0.1:0".to_owned() } else { a })
        .collect();
    assert_eq!(args[0], "serve", "{args:?}");
    let mut cmd = Command::new(BIN);
    cmd.args(&args).env("RUST_LOG", "warn");
    let server = ServerProc::spawn(cmd);
    let mut stream = std::net::TcpStream::connect(server.addr).expect("connect");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    support::echo_byte(&mut stream, 42);
    drop(stream);
    let done = server.stop();
    assert_eq!(done.counter("accepted"), 1, "{:?}", done.stdout);
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

/// Run the Indexed Job's command line `agents` times, as its pods would, side by side: each with
/// its JOB_COMPLETION_INDEX (in the environment and expanded in the arguments) and its report
/// in `segments`; `program(index)` is the command the arguments go to (the binary itself, or
/// the binary inside a namespace). Every agent must succeed.
fn run_agents(agents: usize, vars: &mut HashMap<&str, String>, segments: &Path, program: impl Fn(usize) -> Command) {
    let children: Vec<std::process::Child> = (0..agents)
        .map(|index| {
            vars.insert("JOB_COMPLETION_INDEX", index.to_string());
            let args: Vec<String> = job_args("load-job.yaml")
                .iter()
                .map(|a| expand(a, vars).replace("/segments/", &format!("{}/", segments.display())))
                .collect();
            assert!(args.iter().any(|a| a == &format!("auto/{agents}")), "{args:?}");
            program(index)
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
    run_agents(agents, &mut vars, &segments, |_| Command::new(BIN));
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
    // The Job connects first: every connection was open before the common start.
    assert_eq!((m["pre_start"]["open"].as_u64(), m["pre_start"]["wanted"].as_u64()), (Some(7), Some(7)), "{m}");
    for agent in m["agents"].as_array().unwrap() {
        assert_eq!(agent["client_bound"], false, "{agent}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The cluster played on one machine: three agent "machines" and a server machine, each a
/// network namespace with its own address on one bridge. Every agent runs the Indexed Job's
/// command line with its JOB_COMPLETION_INDEX, from its own address, against the server; the
/// merge Job's command joins what they wrote, and the server saw each agent's connections.
#[test]
fn the_job_runs_as_three_machines_in_namespaces_and_merges() {
    let cluster = match Cluster::new(4) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let mut serve = Command::new("ip");
    serve
        .args(["netns", "exec", cluster.ns(3), BIN, "serve", "--model", "epoll", "--threads", "1", "--listen"])
        .arg(format!("{}:0", Cluster::address(3)))
        .env("RUST_LOG", "warn");
    let server = ServerProc::spawn(serve);
    let dir = std::env::temp_dir().join(format!("sockscale-cluster-{}", std::process::id()));
    let (segments, merged) = (dir.join("segments"), dir.join("merged"));
    std::fs::create_dir_all(&segments).unwrap();
    std::fs::create_dir_all(&merged).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let mut vars: HashMap<&str, String> = HashMap::from([
        ("TARGET", server.addr.to_string()),
        ("CONNECTIONS", "10".to_owned()),
        ("RATE", "1000".to_owned()),
        ("DURATION", "1".to_owned()),
        ("AGENTS", "3".to_owned()),
        ("START_AT", format!("{:.3}", now + 2.0)),
    ]);
    run_agents(3, &mut vars, &segments, |index| {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", cluster.ns(index), BIN]);
        cmd
    });
    let out = Command::new(BIN)
        .args(["load", "merge"])
        .arg(&segments)
        .arg("--json")
        .arg(merged.join("merged.json"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(merged.join("merged.json")).unwrap()).unwrap();
    assert_eq!(m["connections"]["connected"], 10, "{m}");
    assert_eq!(m["errors"].as_object().map(|e| e.values().filter_map(|v| v.as_u64()).sum::<u64>()), Some(0), "{m}");
    let agents = m["agents"].as_array().expect("agents");
    assert_eq!(agents.iter().map(|a| a["completed"].as_u64().unwrap_or(0) > 0).filter(|b| *b).count(), 3, "{m}");
    let done = server.stop();
    // 4 + 3 + 3 connections of the run, and each agent's one probe before it (`preflight`).
    assert_eq!(done.counter("accepted"), 10 + 3, "{:?}", done.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}
