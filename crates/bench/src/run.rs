//! `sockscale bench`: every model through the seed's rows, the HTTP and HTTPS sweeps (with
//! nginx when installed) and UDP, written out as it goes.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use sockscale_server::Model;

use crate::harness::{Children, Harness, Scheme};
use crate::nginx;
use crate::profile::Profile;
use crate::results::{HttpPoint, ModelResult, Results, RowKind, SCHEMA};
use crate::tables::thousands;

pub struct BenchConfig {
    /// The sockscale binary to run as server and load.
    pub exe: PathBuf,
    pub profile: Profile,
    pub models: Vec<Model>,
    pub out_dir: PathBuf,
    /// Pin servers to these cores and the load to the others (all cores when there is one).
    pub server_cpus: Vec<usize>,
    pub client_cpus: Vec<usize>,
    pub progress: bool,
}

impl BenchConfig {
    /// Server on core 0, load on the rest, as the benchmark scripts do.
    pub fn split_cores() -> (Vec<usize>, Vec<usize>) {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cores < 2 {
            (vec![0], vec![0])
        } else {
            (vec![0], (1..cores).collect())
        }
    }
}

/// Run the bench; results are written to `out_dir` after every model, marked in progress
/// until the run ends.
pub fn run(cfg: &BenchConfig, interrupted: &AtomicBool, children: Children) -> std::io::Result<Results> {
    std::fs::create_dir_all(&cfg.out_dir)?;
    let scratch = cfg.out_dir.join(".scratch");
    std::fs::create_dir_all(&scratch)?;
    // The HTTPS points' certificate, made for this run and removed with the scratch directory.
    let certificate = make_certificate(&scratch.join("tls"));
    let harness = Harness {
        certificate,
        exe: cfg.exe.clone(),
        profile: &cfg.profile,
        server_cpus: cfg.server_cpus.clone(),
        client_cpus: cfg.client_cpus.clone(),
        interrupted,
        children,
        scratch: scratch.clone(),
    };
    let mut results = Results {
        schema: SCHEMA,
        profile: cfg.profile.name.into(),
        started: utc_now(),
        machine: crate::machine::describe(),
        parameters: serde_json::to_value(&cfg.profile).unwrap_or_default(),
        planned_models: cfg.models.iter().map(|m| m.name().to_owned()).collect(),
        in_progress: true,
        ..Results::default()
    };
    let nginx_steps = cfg.profile.http_points() + cfg.profile.https_points();
    let total_steps = cfg.models.len() * steps_per_model(&cfg.profile) + nginx_steps;
    let shown = match (cfg.progress, std::io::stderr().is_terminal()) {
        (false, _) => Shown::Off,
        (true, true) => Shown::Bar,
        (true, false) => Shown::Lines,
    };
    let mut progress = Progress::new(shown, total_steps);
    for &model in &cfg.models {
        if harness.interrupted() {
            break;
        }
        let result = bench_model(&harness, model, &mut progress);
        results.models.push(result);
        save(&cfg.out_dir, &results)?;
    }
    if !harness.interrupted() {
        results.nginx = Some(bench_nginx(&harness, &mut progress));
    }
    results.interrupted = harness.interrupted();
    results.in_progress = false;
    results.finished = utc_now();
    save(&cfg.out_dir, &results)?;
    progress.finish(results.interrupted);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(results)
}

/// Steps of one model: three rows, the HTTP and HTTPS points, UDP.
fn steps_per_model(profile: &Profile) -> usize {
    3 + profile.http_points() + profile.https_points() + 1
}

/// A private CA and a leaf it signed for 127.0.0.1 and localhost (ECDSA P-256), written into
/// `dir` as ca.pem, cert.pem and key.pem; or why not, which the HTTPS points then report.
fn make_certificate(dir: &Path) -> Result<sockscale_tls::CertificateFiles, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let certificate = sockscale_tls::TestCertificate::generate(&["localhost".into(), "127.0.0.1".into()])
        .map_err(|e| e.to_string())?;
    certificate.write(dir).map_err(|e| e.to_string())
}

/// The plain HTTP sweep and the HTTPS sweep, in that order.
fn sweeps(profile: &Profile) -> [(&'static str, usize); 2] {
    [("HTTP", profile.http_points()), ("HTTPS", profile.https_points())]
}

/// The scheme of a sweep named by [`sweeps`], or why HTTPS cannot be measured.
fn scheme_of<'a>(h: &'a Harness<'_>, what: &str) -> Result<Scheme<'a>, String> {
    match what {
        "HTTP" => Ok(Scheme::Http),
        _ => match &h.certificate {
            Ok(files) => Ok(Scheme::Https { ca: &files.ca }),
            Err(e) => Err(format!("no certificate: {e}")),
        },
    }
}

/// How one sweep ended.
struct Swept {
    points: Vec<HttpPoint>,
    error: Option<String>,
    /// Interrupted before its last point.
    interrupted: bool,
}

/// One sweep of `n` points, each a step of the progress named "{label} point K of N": every
/// step is ended here, done, failed, interrupted, or abandoned with the rest.
fn sweep_steps(
    h: &Harness<'_>,
    progress: &mut Progress,
    label: &str,
    n: usize,
    run: impl FnOnce(&mut dyn FnMut()) -> Result<Vec<HttpPoint>, String>,
) -> Swept {
    if n == 0 {
        return Swept { points: Vec::new(), error: None, interrupted: false };
    }
    let mut point = 0;
    progress.begin(format!("{label} point 1 of {n}"));
    let mut tick = || {
        point += 1;
        progress.end(Outcome::Done);
        if point < n {
            progress.begin(format!("{label} point {} of {n}", point + 1));
        }
    };
    let result = run(&mut tick);
    let (points, error) = match result {
        Ok(points) => (points, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let interrupted = point < n && h.interrupted();
    if point < n {
        match &error {
            _ if interrupted => progress.end(Outcome::Interrupted),
            Some(e) => progress.end(Outcome::Failed(e)),
            None => progress.end(Outcome::Failed("ended before its last point")),
        }
        progress.abandon(n - point - 1, &format!("{label}: rest of the sweep not measured"));
    }
    Swept { points, error, interrupted }
}

/// Say first that a result was interrupted, before whatever else went wrong.
fn interrupted_first(to: &mut Option<String>, what: String) {
    *to = Some(match to.take() {
        Some(e) => format!("{what}; {e}"),
        None => what,
    });
}

/// Add `error` to what a result already says went wrong.
fn add_error(to: &mut Option<String>, error: String) {
    match to {
        Some(e) => {
            e.push_str("; ");
            e.push_str(&error);
        }
        None => *to = Some(error),
    }
}

/// nginx's HTTP and HTTPS sweeps, a fresh nginx for each, or why it has none.
fn bench_nginx(h: &Harness<'_>, progress: &mut Progress) -> ModelResult {
    let mut result = ModelResult { model: "nginx".into(), ..ModelResult::default() };
    let steps: usize = sweeps(h.profile).iter().map(|(_, n)| n).sum();
    if !nginx::installed() {
        progress.abandon(steps, &format!("nginx: {}", nginx::NOT_INSTALLED));
        result.error = Some(nginx::NOT_INSTALLED.into());
        return result;
    }
    let mut left = steps;
    run_sweeps(h, progress, &mut result, "nginx", &mut left, |what, tick| nginx::sweep(h, scheme_of(h, what)?, tick));
    result
}

/// The HTTP and HTTPS sweeps of one server (`name`), `sweep` measuring each (given "HTTP" or
/// "HTTPS"): points into `result`, errors beside them, `left` steps counted down. false: the
/// run was interrupted (the steps left are abandoned, `result` says where).
fn run_sweeps(
    h: &Harness<'_>,
    progress: &mut Progress,
    result: &mut ModelResult,
    name: &str,
    left: &mut usize,
    mut sweep: impl FnMut(&str, &mut dyn FnMut()) -> Result<Vec<HttpPoint>, String>,
) -> bool {
    for (what, n) in sweeps(h.profile) {
        if h.interrupted() {
            interrupted_first(&mut result.error, format!("interrupted before the {what} sweep"));
            progress.abandon(*left, &format!("{name}: not measured (interrupted)"));
            return false;
        }
        let swept = sweep_steps(h, progress, &format!("{name}: {what}"), n, |tick| sweep(what, tick));
        *left -= n;
        result.http.extend(swept.points);
        if let Some(e) = swept.error.filter(|_| !swept.interrupted) {
            add_error(&mut result.error, format!("{what} sweep: {e}"));
        }
        if swept.interrupted {
            interrupted_first(&mut result.error, format!("interrupted during the {what} sweep"));
            progress.abandon(*left, &format!("{name}: not measured (interrupted)"));
            return false;
        }
    }
    true
}

fn row_label(name: &str, kind: RowKind, p: &Profile) -> String {
    match kind {
        RowKind::Flood => format!("{name}: flood, {} connections", thousands(p.flood_conns)),
        RowKind::RateLimited => format!("{name}: rate-limited, {} connections", thousands(p.rate_conns)),
        RowKind::Maximum => format!("{name}: maximum, up to {} connections", thousands(p.max_conns)),
    }
}

fn bench_model(h: &Harness<'_>, model: Model, progress: &mut Progress) -> ModelResult {
    let name = model.name();
    let mut result = ModelResult { model: name.into(), ..ModelResult::default() };
    let steps = steps_per_model(h.profile);
    if let Some(reason) = model.unavailable() {
        let why = format!("unavailable here: {reason}");
        progress.abandon(steps, &format!("{name}: skipped, {why}"));
        result.error = Some(why);
        return result;
    }
    let mut left = steps;
    for kind in [RowKind::Flood, RowKind::RateLimited, RowKind::Maximum] {
        if h.interrupted() {
            result.error = Some(format!("interrupted before the {} row", kind.label()));
            progress.abandon(left, &format!("{name}: not measured (interrupted)"));
            return result;
        }
        progress.begin(row_label(name, kind, h.profile));
        match h.row(name, kind) {
            Ok(row) => {
                result.rows.push(row);
                progress.end(Outcome::Done);
            }
            Err(e) if !h.interrupted() => {
                progress.end(Outcome::Failed(&e));
                result.error = Some(format!("{} row: {e}", kind.label()));
                progress.abandon(left - 1, &format!("{name}: not measured after the failed {} row", kind.label()));
                return result;
            }
            Err(_) => {
                progress.end(Outcome::Interrupted);
                result.error = Some(format!("interrupted during the {} row", kind.label()));
                progress.abandon(left - 1, &format!("{name}: not measured (interrupted)"));
                return result;
            }
        }
        left -= 1;
    }
    let swept_all = run_sweeps(h, progress, &mut result, name, &mut left, |what, tick| {
        let scheme = scheme_of(h, what)?;
        let tls: Vec<String> = match &h.certificate {
            Ok(files) if what == "HTTPS" => vec![
                "--tls-cert".into(),
                files.cert.display().to_string(),
                "--tls-key".into(),
                files.key.display().to_string(),
            ],
            _ => Vec::new(),
        };
        let extra: Vec<&str> = tls.iter().map(String::as_str).collect();
        let server = h.start_server(name, "http", &extra)?;
        let swept = h.http_sweep(server.port, Some(server.pid()), scheme, tick);
        h.stop_server(server);
        swept
    });
    if !swept_all {
        return result;
    }
    if !model.serves_udp() {
        let why = model.limitation(sockscale_server::Policy::Udp).unwrap_or("no UDP");
        progress.abandon(left, &format!("{name}: UDP skipped: {why}"));
    } else if h.interrupted() {
        result.error.get_or_insert_with(|| "interrupted before UDP".into());
        progress.abandon(left, &format!("{name}: not measured (interrupted)"));
    } else {
        progress.begin(format!("{name}: UDP echo"));
        match h.udp(name) {
            Ok(point) => {
                result.udp = Some(point);
                progress.end(Outcome::Done);
            }
            Err(e) => {
                progress.end(Outcome::Failed(&e));
                result.error = Some(format!("UDP: {e}"));
            }
        }
    }
    result
}

/// Write the raw JSON, the CSVs and the markdown tables, each replacing the last whole (a
/// temporary file renamed over it), so a reader or a killed run never leaves half a file.
pub fn save(dir: &Path, results: &Results) -> std::io::Result<()> {
    let json = serde_json::to_string_pretty(results).map_err(std::io::Error::other)?;
    write_atomically(&dir.join("results.json"), (json + "\n").as_bytes())?;
    write_atomically(&dir.join("rows.csv"), results.rows_csv().as_bytes())?;
    write_atomically(&dir.join("http.csv"), results.http_csv().as_bytes())?;
    write_atomically(&dir.join("table.md"), crate::tables::tables_markdown(results).as_bytes())?;
    Ok(())
}

/// Write `path` whole or not at all: a temporary file in the same directory, renamed over it.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Why the output directory cannot take a run's files.
#[derive(Debug, thiserror::Error)]
pub enum OutDirError {
    #[error("--out {0}: already holds a bench's results.json (a new run would mix its files with the old run's): choose another directory or remove it")]
    Taken(String),
    #[error("--out {path}: cannot create the directory")]
    Create { path: String, source: std::io::Error },
    #[error("--out {path}: cannot write files there")]
    Write { path: String, source: std::io::Error },
}

/// Make sure `dir` can take a run's files, before the run: a directory that cannot be written
/// must fail in a second, not after minutes of measuring.
pub fn prepare_out_dir(dir: &Path) -> Result<(), OutDirError> {
    let path = dir.display().to_string();
    if dir.join("results.json").exists() {
        return Err(OutDirError::Taken(path));
    }
    std::fs::create_dir_all(dir).map_err(|source| OutDirError::Create { path: path.clone(), source })?;
    // A probe file: permissions and read-only filesystems show up here.
    let probe = dir.join(format!(".sockscale-probe-{}", std::process::id()));
    std::fs::File::create_new(&probe).map_err(|source| OutDirError::Write { path, source })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Draw the charts and the page (see [`crate::report::render`]) into a staging directory,
/// then move each file into `dir`: every file there is whole, and an interrupted or failed
/// drawing leaves the previous files, not half-written ones.
pub fn render_report(results: &Results, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    // "results.json" has the parent "": the current directory.
    let at = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    std::fs::create_dir_all(at)?;
    let staging = tempfile::Builder::new().prefix(".report-").tempdir_in(at)?;
    let drawn = crate::report::render(results, staging.path()).map_err(std::io::Error::other)?;
    let mut written = Vec::with_capacity(drawn.len());
    for file in drawn {
        let Some(name) = file.file_name() else { continue };
        let to = dir.join(name);
        std::fs::rename(&file, &to)?;
        written.push(to);
    }
    Ok(written)
}

/// How a step ended.
enum Outcome<'a> {
    Done,
    Failed(&'a str),
    Interrupted,
}

/// How progress is shown on stderr.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shown {
    /// A live bar redrawn in place: stderr is a terminal.
    Bar,
    /// One plain line per step: CI logs, a pipe, a file.
    Lines,
    Off,
}

/// Progress through the run's steps: a live bar on a terminal; otherwise (CI logs, a pipe) one
/// plain line per step, begun when the step starts and ended with its outcome and time.
struct Progress {
    shown: Shown,
    done: usize,
    total: usize,
    current: Option<Instant>,
}

impl Progress {
    fn new(shown: Shown, total: usize) -> Progress {
        Progress { shown, done: 0, total, current: None }
    }

    /// "[ 3/57]", the counter padded to the width of the total.
    fn counter(&self, first: usize, last: usize) -> String {
        let width = self.total.to_string().len();
        if first == last {
            format!("[{first:>width$}/{}]", self.total)
        } else {
            format!("[{first:>width$}-{last}/{}]", self.total)
        }
    }

    fn begin(&mut self, what: String) {
        self.current = Some(Instant::now());
        let mut err = std::io::stderr().lock();
        if self.shown == Shown::Bar {
            let width = 30;
            let filled = (self.done * width / self.total.max(1)).min(width);
            let _ = write!(
                err,
                // Erase the line first: a shorter label must not leave the end of a longer one
                // (a stray ")" after "bench finished").
                "\r\x1b[2K[{}{}] {:>3}%  {what}",
                "#".repeat(filled),
                " ".repeat(width - filled),
                self.done * 100 / self.total.max(1)
            );
        } else if self.shown == Shown::Lines {
            let _ = write!(err, "{} {what} … ", self.counter(self.done + 1, self.done + 1));
        }
        let _ = err.flush();
    }

    fn end(&mut self, outcome: Outcome<'_>) {
        self.done += 1;
        let elapsed = self.current.take().map_or(Duration::ZERO, |t| t.elapsed());
        if self.shown != Shown::Lines {
            return;
        }
        let secs = elapsed.as_secs_f64();
        let line = match outcome {
            Outcome::Done => format!("done in {secs:.1} s"),
            Outcome::Failed(why) => format!("failed after {secs:.1} s: {why}"),
            Outcome::Interrupted => format!("interrupted after {secs:.1} s"),
        };
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{line}");
        let _ = err.flush();
    }

    /// Count `n` steps that will not run, saying why once.
    fn abandon(&mut self, n: usize, why: &str) {
        if n == 0 {
            return;
        }
        if self.shown == Shown::Lines {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{} {why}", self.counter(self.done + 1, self.done + n));
            let _ = err.flush();
        }
        self.done += n;
    }

    fn finish(&self, interrupted: bool) {
        let what = if interrupted { "bench interrupted" } else { "bench finished" };
        let line = format!("{what}: {} of {} steps", self.done, self.total);
        let mut err = std::io::stderr().lock();
        if self.shown == Shown::Bar {
            let _ = writeln!(err, "\r\x1b[2K{line}");
        } else if self.shown == Shown::Lines {
            let _ = writeln!(err, "{line}");
        }
    }
}

/// The current UTC time as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs();
    let (y, mo, d, h, mi, s) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02} UTC")
}

/// A timestamp for directory names: `YYYYMMDD-HHMMSS`.
pub fn stamp() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs();
    let (y, mo, d, h, mi, s) = civil(secs);
    format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}")
}

/// Seconds since the epoch to a UTC calendar date and time (Howard Hinnant's algorithm).
fn civil(secs: u64) -> (i64, u64, u64, u64, u64, u64) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097) as u64;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe as i64 + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn civil_dates() {
        assert_eq!(super::civil(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(super::civil(1_700_000_000), (2023, 11, 14, 22, 13, 20));
        assert_eq!(super::civil(951_782_400), (2000, 2, 29, 0, 0, 0));
    }
}
