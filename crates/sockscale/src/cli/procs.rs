//! Several processes as one: `load --procs N` and `serve --procs N`.
//!
//! The per-process open-files limit (20,000 here) caps what one process can hold, so both the
//! load generator and the server can run as N processes. The parent re-executes this binary
//! with the same arguments plus a hidden `--proc-slot K/N`, puts each child in its own process
//! group (so a terminal's Ctrl-C reaches only the parent, which then forwards exactly one
//! SIGTERM), and combines what the children report: load reports are merged (counters and
//! histograms add), server `final` counters are summed.

use crate::output::{note, say};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use sockscale_load::{Progress, Report};
use sockscale_proto::quic::QuicKeys;
use sockscale_server::TerminationSignals;
use sockscale_sys as sys;

/// The arguments after the program name, minus the flags the parent owns.
pub(super) fn child_args(argv: &[String], drop_flags: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for arg in argv.iter().skip(1) {
        if skip_value {
            skip_value = false;
            continue;
        }
        // A long flag's value follows it or an '='; a short flag's (`-l`) may also be attached
        // (`-l:8080`).
        let attached = |f: &str| match f.strip_prefix("--") {
            Some(_) => arg.starts_with(&format!("{f}=")),
            None => arg.starts_with(f),
        };
        if let Some(flag) = drop_flags.iter().find(|f| arg == *f || attached(f)) {
            skip_value = arg == flag;
            continue;
        }
        out.push(arg.clone());
    }
    out
}

/// Start a child in a process group of its own (a terminal's Ctrl-C reaches only this process,
/// which forwards it) that is sent SIGTERM if this process dies without forwarding anything
/// (SIGKILL, the OOM killer): an orphaned server worker would hold the port, an orphaned load
/// process go on sending. Called from the main thread only, which lives as long as the process:
/// the kernel ties the signal to the thread that started the child.
/// `inherit`: close-on-exec descriptors of this process that this child alone inherits.
fn spawn(args: &[String], extra: &[String], stdin: Stdio, inherit: &[RawFd]) -> Result<Child> {
    let exe = std::env::current_exe().context("cannot find this program to start child processes")?;
    let parent = std::process::id();
    let mut cmd = Command::new(exe);
    cmd.args(args).args(extra).stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::inherit()).process_group(0);
    let inherit = inherit.to_vec();
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe calls
    // (prctl, getppid, fcntl), allocating nothing (the descriptors were copied before the fork).
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &inherit {
                sys::keep_across_exec(fd)?;
            }
            sys::terminate_with_parent(parent)
        });
    }
    cmd.spawn().context("cannot start a child process")
}

/// Forward SIGINT/SIGTERM received by this process to the children as SIGTERM.
fn forward_signals(pids: Arc<Mutex<Vec<u32>>>, stopping: Arc<AtomicBool>, on_signal: fn(i32)) -> Result<()> {
    let signals = TerminationSignals::block().context("cannot block SIGINT/SIGTERM")?;
    std::thread::Builder::new().name("sockscale-signals".into()).spawn(move || {
        while let Ok(signal) = signals.wait() {
            on_signal(signal);
            stopping.store(true, Ordering::SeqCst);
            for &pid in pids.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                let _ = sys::signal_process(pid, libc::SIGTERM);
            }
        }
    })?;
    Ok(())
}

/// Run a load as `n` processes and merge their reports.
pub fn run_load_children(
    n: usize,
    argv: &[String],
    progress: Progress,
    hdr_log: Option<&std::path::Path>,
) -> Result<Report> {
    let dir = std::env::temp_dir().join(format!(
        "sockscale-load-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let args = child_args(argv, &["--procs", "--json", "--hdr-log", "--html"]);
    let pids = Arc::new(Mutex::new(Vec::new()));
    let stopping = Arc::new(AtomicBool::new(false));
    forward_signals(pids.clone(), stopping, crate::cli::interrupted::record)?;
    let live = Arc::new(Mutex::new(vec![(0u64, 0u64, 0u64); n]));
    // --connect-before-start: each child says when its connections are open (or ends), and
    // all begin together at the parent's word, given once every child has said so.
    let gate = Arc::new(Gate::default());
    let mut children = Vec::with_capacity(n);
    let mut paths = Vec::with_capacity(n);
    for k in 0..n {
        let path = dir.join(format!("slot-{k}.json"));
        let mut extra =
            vec!["--proc-slot".to_owned(), format!("{k}/{n}"), "--json".to_owned(), path.display().to_string()];
        if hdr_log.is_some() {
            extra.extend(["--hdr-log".to_owned(), dir.join(format!("slot-{k}.hlog")).display().to_string()]);
        }
        let mut child = spawn(&args, &extra, Stdio::piped(), &[])?;
        pids.lock().unwrap_or_else(|e| e.into_inner()).push(child.id());
        if let Some(input) = child.stdin.take() {
            gate.words.lock().unwrap_or_else(|e| e.into_inner()).push(Box::new(input));
        }
        if let Some(out) = child.stdout.take() {
            let (live, gate) = (live.clone(), gate.clone());
            std::thread::spawn(move || {
                // A child that ended without saying it was ready must not hold the others.
                if !read_progress(k, out, &live, &gate) {
                    gate.settled(n);
                }
            });
        }
        children.push(child);
        paths.push(path);
    }
    let done = Arc::new(AtomicBool::new(false));
    let show = progress == Progress::Line && std::io::stderr().is_terminal();
    let printer = {
        let (live, done) = (live.clone(), done.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut last = (0u64, Instant::now());
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_secs(1));
                if !show || done.load(Ordering::SeqCst) {
                    continue;
                }
                let (open, completed, errors) = live
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .fold((0, 0, 0), |a, l| (a.0 + l.0, a.1 + l.1, a.2 + l.2));
                let rate = (completed - last.0.min(completed)) as f64 / last.1.elapsed().as_secs_f64();
                last = (completed, Instant::now());
                note!(
                    "\r[{:>4}s] {n} processes  connections {open:>7}  completed {completed:>11}  {rate:>10.0}/s  errors {errors:>6}   ",
                    started.elapsed().as_secs()
                );
                let _ = std::io::stderr().flush();
            }
            if show {
                note!("\n");
            }
        })
    };
    let mut failed = Vec::new();
    for (k, child) in children.iter_mut().enumerate() {
        let status = child.wait().context("cannot wait for a load process")?;
        if !status.success() {
            failed.push(format!("process {k} ({status})"));
        }
    }
    done.store(true, Ordering::SeqCst);
    let _ = printer.join();
    let reports: Vec<Report> = paths
        .iter()
        .filter(|p| p.exists())
        .map(|p| Report::load(&p.display().to_string()))
        .collect::<Result<_, _>>()?;
    let merged_log = match &hdr_log {
        Some(out) => merge_children_logs(&dir, n, out),
        None => Ok(()),
    };
    let _ = std::fs::remove_dir_all(&dir);
    if !failed.is_empty() {
        bail!("load processes failed: {}", failed.join(", "));
    }
    merged_log?;
    Ok(Report::merge(&reports)?)
}

/// The children's interval logs, added interval by interval into the one asked for.
fn merge_children_logs(dir: &std::path::Path, n: usize, out: &std::path::Path) -> Result<()> {
    let mut logs = Vec::with_capacity(n);
    for k in 0..n {
        let path = dir.join(format!("slot-{k}.hlog"));
        if let Ok(bytes) = std::fs::read(&path) {
            logs.push(sockscale_load::hlog::read(&bytes, &path.display().to_string())?);
        }
    }
    let mut file = std::fs::File::create(out).with_context(|| format!("cannot write --hdr-log {}", out.display()))?;
    sockscale_load::hlog::merge(&logs, &mut file)?;
    Ok(())
}

/// The start of a `--procs` run's measured phase, for `--connect-before-start`.
#[derive(Default)]
struct Gate {
    /// Each child's standard input: a line on it says "begin".
    words: Mutex<Vec<Box<dyn Write + Send>>>,
    /// Children that are ready or have ended.
    settled: Mutex<usize>,
}

impl Gate {
    /// One more child is ready (or gone); the last one opens the gate for all.
    fn settled(&self, n: usize) {
        let mut settled = self.settled.lock().unwrap_or_else(|e| e.into_inner());
        *settled += 1;
        if *settled == n {
            for input in self.words.lock().unwrap_or_else(|e| e.into_inner()).iter_mut() {
                // A child that has ended cannot read it, and needs not.
                let _ = input.write_all(b"go\n").and_then(|()| input.flush());
            }
        }
    }
}

/// In a `--procs` child with `--connect-before-start`: say that every connection is open,
/// then wait for the parent's word (or for its end, or a stop: then begin at once).
pub fn ready_then_wait_for_go(stop: &AtomicBool) {
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{{\"ready\":true}}");
        let _ = out.flush();
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        let _ = tx.send(());
    });
    while !stop.load(Ordering::Relaxed) {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            _ => return,
        }
    }
}

/// Follow a child's progress lines; true if it said it was ready.
fn read_progress(k: usize, out: std::process::ChildStdout, live: &Mutex<Vec<(u64, u64, u64)>>, gate: &Gate) -> bool {
    let n = live.lock().unwrap_or_else(|e| e.into_inner()).len();
    let mut ready = false;
    for line in BufReader::new(out).lines().map_while(Result::ok) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
        if v["ready"].as_bool() == Some(true) && !ready {
            ready = true;
            gate.settled(n);
            continue;
        }
        let p = &v["progress"];
        let get = |name: &str| p[name].as_u64().unwrap_or(0);
        if let Some(slot) = live.lock().unwrap_or_else(|e| e.into_inner()).get_mut(k) {
            *slot = (get("open"), get("completed"), get("errors"));
        }
    }
    ready
}

/// One line from a worker of `serve --procs`.
enum WorkerLine {
    Listening(usize),
    Final(String),
    Other(usize, String),
    Exited(usize, u32),
}

/// Run `sockscale serve` as `n` worker processes sharing the port with SO_REUSEPORT, or, on a
/// Unix socket, the listener `reservation` holds, which every worker inherits. Worker K serves
/// the reservation's K-th range of UDP sockets, if the port has UDP, and is told where they
/// stand in the port's steered group; with `--http3`, every worker is given `quic_keys`
/// through a pipe.
pub fn run_serve_children(
    n: usize,
    argv: &[String],
    reservation: sockscale_server::Reservation,
    quic_keys: Option<QuicKeys>,
) -> Result<()> {
    let args = child_args(argv, &["--procs", "--listen", "-l"]);
    let addr = reservation.local_addr().clone();
    let mut listen = vec!["--listen".to_owned(), addr.to_string()];
    if let Some(fd) = reservation.inherited_fd() {
        listen.extend(["--listen-fd".to_owned(), fd.to_string()]);
    }
    let pids = Arc::new(Mutex::new(vec![0u32; n]));
    let stopping = Arc::new(AtomicBool::new(false));
    // A signal is how a server is meant to stop: not an interruption.
    forward_signals(pids.clone(), stopping.clone(), |_| {})?;
    let (tx, rx) = mpsc::channel();
    let start_worker = |k: usize| -> Result<u32> {
        let mut extra = [&listen[..], &["--proc-slot".to_owned(), format!("{k}/{n}")]].concat();
        let mut inherit = Vec::new();
        let udp = reservation.udp_fds(k);
        if !udp.is_empty() {
            let list: Vec<String> = udp.iter().map(ToString::to_string).collect();
            extra.extend(["--udp-fd".to_owned(), list.join(",")]);
            inherit.extend(&udp);
        }
        match reservation.steering(k) {
            Some(sockscale_server::GroupSteering::From(index)) => {
                extra.extend(["--udp-steering".to_owned(), index.to_string()]);
            }
            Some(sockscale_server::GroupSteering::Refused) => {
                extra.extend(["--udp-steering".to_owned(), "refused".to_owned()]);
            }
            None => {}
        }
        // The keys go through a pipe the worker inherits, not its arguments (which `ps` shows
        // to every user) nor its environment (which it would keep, and pass on). They are
        // written before the worker starts: far less than a pipe holds, so this cannot block.
        let keys_pipe = match &quic_keys {
            Some(keys) => {
                let (read, write) = sys::pipe().context("cannot make a pipe for a worker's QUIC keys")?;
                std::fs::File::from(write).write_all(&keys.to_bytes()).context("cannot pass the QUIC keys")?;
                extra.extend(["--quic-keys-fd".to_owned(), read.as_raw_fd().to_string()]);
                inherit.push(read.as_raw_fd());
                Some(read)
            }
            None => None,
        };
        let mut child = spawn(&args, &extra, Stdio::null(), &inherit)?;
        drop(keys_pipe);
        let pid = child.id();
        let out = child.stdout.take().context("worker stdout")?;
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let msg = if line.starts_with("listening on ") {
                    WorkerLine::Listening(k)
                } else if let Some(rest) = line.strip_prefix("final ") {
                    WorkerLine::Final(rest.to_owned())
                } else {
                    WorkerLine::Other(k, line)
                };
                let _ = tx.send(msg);
            }
            let _ = child.wait();
            let _ = tx.send(WorkerLine::Exited(k, pid));
        });
        Ok(pid)
    };
    // Spawning and recording a worker happen under the lock the signal forwarder takes, and a
    // worker started after a stop began is told at once: no worker can miss the SIGTERM.
    let launch = |k: usize| -> Result<()> {
        let mut table = pids.lock().unwrap_or_else(|e| e.into_inner());
        let pid = start_worker(k)?;
        table[k] = pid;
        if stopping.load(Ordering::SeqCst) {
            let _ = sys::signal_process(pid, libc::SIGTERM);
        }
        Ok(())
    };
    for k in 0..n {
        launch(k)?;
    }
    let mut ready = 0;
    let mut served = vec![false; n];
    let mut failed_start = None;
    let mut running = n;
    let mut finals: Vec<String> = Vec::new();
    let mut last_restart: HashMap<usize, Instant> = HashMap::new();
    while running > 0 {
        let Ok(msg) = rx.recv() else { break };
        match msg {
            WorkerLine::Listening(k) => {
                served[k] = true;
                ready += 1;
                if ready == n {
                    say!("listening on {addr}");
                }
            }
            WorkerLine::Final(counters) => finals.push(counters),
            WorkerLine::Other(k, line) => say!("[worker {k}] {line}"),
            WorkerLine::Exited(k, pid) => {
                let current = pids.lock().unwrap_or_else(|e| e.into_inner())[k];
                if current != pid {
                    continue;
                }
                if stopping.load(Ordering::SeqCst) {
                    running -= 1;
                    continue;
                }
                if !served[k] {
                    // It failed to start (a busy --metrics port, say, in its own error line
                    // above): a new one would fail the same way, once a second, forever.
                    stopping.store(true, Ordering::SeqCst);
                    for &pid in pids.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                        let _ = sys::signal_process(pid, libc::SIGTERM);
                    }
                    failed_start.get_or_insert(k);
                    running -= 1;
                    continue;
                }
                // A worker died: start another in its slot, at most once a second.
                let wait =
                    last_restart.get(&k).map_or(Duration::ZERO, |t| Duration::from_secs(1).saturating_sub(t.elapsed()));
                std::thread::sleep(wait);
                tracing::warn!(worker = k, "worker {k} (pid {pid}) exited; starting a new one");
                last_restart.insert(k, Instant::now());
                match launch(k) {
                    Ok(()) => {}
                    Err(e) => {
                        tracing::error!(error = format!("{e:#}"), "cannot restart worker {k}");
                        running -= 1;
                    }
                }
            }
        }
    }
    // Held until every worker is gone, so a restarted worker finds its port still ours.
    drop(reservation);
    if let Some(k) = failed_start {
        bail!("worker {k} of {n} exited before it was serving (its error is above); stopped the others");
    }
    say!("final {}", sum_counters(&finals));
    Ok(())
}

/// Add up `key=value` counter lines.
fn sum_counters(lines: &[String]) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut sums: HashMap<String, i64> = HashMap::new();
    for line in lines {
        for (k, v) in line.split_whitespace().filter_map(|kv| kv.split_once('=')) {
            if !sums.contains_key(k) {
                order.push(k.to_owned());
            }
            *sums.entry(k.to_owned()).or_default() += v.parse::<i64>().unwrap_or(0);
        }
    }
    order.iter().map(|k| format!("{k}={}", sums[k])).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_args_drop_parent_flags() {
        let argv: Vec<String> = ["sockscale", "load", "echo", "a:1", "--procs", "3", "--json=x", "-c", "9"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(child_args(&argv, &["--procs", "--json"]), ["load", "echo", "a:1", "-c", "9"]);
        let argv: Vec<String> =
            ["sockscale", "serve", "-l", ":0", "-t", "2", "-l:1", "-l=:2", "--listen=:3", "-m", "epoll"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        assert_eq!(child_args(&argv, &["--procs", "--listen", "-l"]), ["serve", "-t", "2", "-m", "epoll"]);
    }

    #[test]
    fn counters_add_up() {
        let lines = vec!["accepted=2 closed_peer=1".to_owned(), "accepted=3 closed_peer=0".to_owned()];
        assert_eq!(sum_counters(&lines), "accepted=5 closed_peer=1");
    }

    /// A child's standard input, as the test sees what the parent wrote to it.
    #[derive(Clone, Default)]
    struct Input(Arc<Mutex<Vec<u8>>>);

    impl Write for Input {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The word to begin goes to every child once, and only when the last of them is ready
    /// or gone.
    #[test]
    fn the_gate_opens_when_every_child_is_ready_or_gone() {
        let inputs: Vec<Input> = (0..3).map(|_| Input::default()).collect();
        let gate = Gate::default();
        for input in &inputs {
            gate.words.lock().unwrap().push(Box::new(input.clone()));
        }
        let said =
            || inputs.iter().map(|i| String::from_utf8(i.0.lock().unwrap().clone()).unwrap()).collect::<Vec<_>>();
        gate.settled(3);
        gate.settled(3);
        assert_eq!(said(), ["", "", ""], "two of three ready: nobody begins");
        gate.settled(3);
        assert_eq!(said(), ["go\n", "go\n", "go\n"]);
    }
}
