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

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `cmd`'s output if it ends within `limit` and succeeds.
fn run_bounded(cmd: &mut Command, limit: std::time::Duration) -> Option<std::process::Output> {
    let mut child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().ok()?;
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().ok()?.is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().ok().filter(|o| o.status.success())
}

/// The Dockerfile's instructions, a continued line (`\`) joined, comments left out: each as
/// (INSTRUCTION, rest) by stage, a stage starting at its FROM.
fn dockerfile_stages(text: &str) -> Vec<Vec<(String, String)>> {
    let mut joined = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && pending.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => {
                pending.push_str(line);
                joined.push(std::mem::take(&mut pending));
            }
        }
    }
    let mut stages: Vec<Vec<(String, String)>> = Vec::new();
    for instruction in joined {
        let (word, rest) = instruction.split_once(' ').unwrap_or((&instruction, ""));
        let word = word.to_ascii_uppercase();
        if word == "FROM" {
            stages.push(Vec::new());
        }
        let stage = stages.last_mut().expect("an instruction before the first FROM");
        stage.push((word, rest.split_whitespace().collect::<Vec<_>>().join(" ")));
    }
    stages
}

/// deploy/Dockerfile builds an image whose binary runs. Where a container engine answers
/// (`docker info` succeeds) the image is built and its binary asked its version; elsewhere
/// (no daemon, as on the machines this project is built on, which cannot pull a base image)
/// each build step is checked against the repository instead, and the test says which.
#[test]
fn the_dockerfile_builds_or_its_steps_agree_with_the_repository() {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("deploy/Dockerfile")).expect("deploy/Dockerfile");
    let stages = dockerfile_stages(&text);
    let mut checked = Vec::new();
    let engine = run_bounded(Command::new("docker").arg("info"), std::time::Duration::from_secs(20)).is_some();
    if engine {
        let tag = format!("sockscale-test:{}", std::process::id());
        let build = Command::new("docker")
            .args(["build", "-f", "deploy/Dockerfile", "-t", &tag, "."])
            .current_dir(&root)
            .output()
            .unwrap();
        assert!(build.status.success(), "docker build: {}", String::from_utf8_lossy(&build.stderr));
        let run = Command::new("docker").args(["run", "--rm", &tag, "--version"]).output().unwrap();
        let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
        let ours = Command::new(BIN).arg("--version").output().unwrap();
        assert_eq!(String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&ours.stdout), "the image's binary");
        eprintln!(
            "built deploy/Dockerfile with docker and ran its binary: {}",
            String::from_utf8_lossy(&run.stdout).trim()
        );
        return;
    }
    checked
        .push("no container engine answers `docker info`: the image was not built; its steps were checked".to_owned());

    assert_eq!(stages.len(), 2, "a build stage and the final one: {stages:?}");
    let (build, last) = (&stages[0], &stages[1]);
    let find = |stage: &[(String, String)], word: &str| -> Vec<String> {
        stage.iter().filter(|(w, _)| w == word).map(|(_, rest)| rest.clone()).collect()
    };

    // The base image's Rust is at least the workspace's rust-version.
    let from = &find(build, "FROM")[0];
    let rust = from.strip_prefix("rust:").and_then(|r| r.split(['-', ' ']).next()).expect("FROM rust:VERSION-…");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let wanted = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_owned())
        .expect("rust-version in Cargo.toml");
    let version = |v: &str| -> Vec<u32> { v.split('.').map(|n| n.parse().unwrap()).collect() };
    assert!(version(rust) >= version(&wanted), "the image's Rust {rust} is older than rust-version {wanted}");
    checked.push(format!("base image rust:{rust} >= the workspace's rust-version {wanted}"));

    // The build context is the repository's root, with what --locked needs and without target/.
    let workdir = find(build, "WORKDIR").pop().expect("WORKDIR");
    assert_eq!(find(build, "COPY"), [". ."], "the whole context is copied into {workdir}");
    for needed in ["Cargo.toml", "Cargo.lock", "crates/sockscale/Cargo.toml"] {
        assert!(root.join(needed).is_file(), "{needed} is not in the build context");
    }
    let ignore = std::fs::read_to_string(root.join(".dockerignore")).expect(".dockerignore beside the context");
    let ignored: Vec<&str> = ignore.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    assert!(ignored.contains(&"/target"), "target/ (gigabytes of build output) is sent as context: {ignored:?}");
    for kept in ["Cargo.lock", "/Cargo.lock", "/crates", "crates"] {
        assert!(!ignored.contains(&kept), ".dockerignore leaves out {kept}, which the build needs");
    }
    checked.push(format!(
        "COPY . . into {workdir}: Cargo.toml, Cargo.lock and the crates are in the context; .dockerignore leaves out /target"
    ));

    // The build command: the README's and the header comment's, for a package and a target that
    // exist, and the binary it copies is where cargo puts it.
    let env = find(build, "ENV").join(" ");
    assert!(env.contains("-C target-feature=+crt-static"), "a static binary for the empty final stage: {env}");
    let run = find(build, "RUN").pop().expect("RUN");
    let (cargo, copy) = run.split_once(" && ").expect("RUN cargo build … && cp …");
    let words: Vec<&str> = cargo.split_whitespace().collect();
    assert_eq!(&words[..3], ["cargo", "build", "--release"], "{cargo}");
    assert!(words.contains(&"--locked"), "the build is reproducible from Cargo.lock: {cargo}");
    let after = |flag: &str| {
        words.iter().position(|w| *w == flag).map(|i| words[i + 1]).unwrap_or_else(|| panic!("{flag} in {cargo}"))
    };
    let (package, triple) = (after("-p"), after("--target"));
    let package_manifest =
        std::fs::read_to_string(root.join("crates").join(package).join("Cargo.toml")).expect("the package's manifest");
    assert!(package_manifest.contains(&format!("name = \"{package}\"")), "no package {package}");
    assert!(
        text.contains(&format!("cargo build --release --locked -p {package} --target {triple}")),
        "the header's command differs"
    );
    checked.push(format!("RUN {cargo}: package {package} exists, --locked"));

    let rustc = |args: &[&str]| -> String {
        let out = Command::new("rustc").args(args).output().expect("rustc");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(rustc(&["--print", "target-list"]).lines().any(|t| t == triple), "rustc knows no target {triple}");
    let sysroot = rustc(&["--print", "sysroot"]);
    let std_here = Path::new(sysroot.trim()).join("lib/rustlib").join(triple).join("lib").is_dir();
    let host = rustc(&["-vV"]).lines().find_map(|l| l.strip_prefix("host: ").map(str::to_owned)).unwrap_or_default();
    // The image is amd64; its host is the triple, as here where the test runs on x86_64.
    assert!(std_here, "rust-std for {triple} is not installed here (rustup target add {triple})");
    checked.push(format!("--target {triple}: rustc knows it and its rust-std is installed (host {host})"));

    let binary = format!("target/{triple}/release/{package}");
    let (cp, dest) = copy.strip_prefix("cp ").and_then(|c| c.split_once(' ')).expect("cp FROM TO");
    assert_eq!(cp, binary, "the binary cargo builds is {binary}");
    assert!(
        !Path::new(&root).join(".cargo/config.toml").exists() && !env.contains("CARGO_TARGET_DIR"),
        "target dir moved"
    );
    checked.push(format!("cp {binary} {dest}: the path cargo writes with --target"));

    // The final stage copies that file and runs it.
    assert_eq!(find(last, "FROM"), ["scratch"]);
    let copied = find(last, "COPY").pop().expect("COPY --from");
    assert_eq!(copied, format!("--from=build {dest} {dest}"), "the final stage copies the built binary");
    assert!(from.ends_with(" AS build") || from.ends_with(" as build"), "the build stage is named build: {from}");
    let entry = find(last, "ENTRYPOINT").pop().expect("ENTRYPOINT");
    assert_eq!(entry, format!("[\"{dest}\"]"), "the entry point is the copied binary");
    checked.push(format!("final stage: scratch, COPY --from=build {dest}, ENTRYPOINT [\"{dest}\"]"));
    eprintln!("deploy/Dockerfile checked:\n  {}", checked.join("\n  "));
}
