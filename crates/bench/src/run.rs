//! `sockscale bench`: every model through the seed's rows, the HTTP sweep (with nginx when
//! installed) and UDP, written out as it goes.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use sockscale_server::Model;

use crate::harness::{Children, Harness};
use crate::nginx;
use crate::profile::Profile;
use crate::results::{ModelResult, Results, RowKind, SCHEMA};

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

/// Run the bench; results are written to `out_dir` after every model.
pub fn run(cfg: &BenchConfig, interrupted: &AtomicBool, children: Children) -> std::io::Result<Results> {
    std::fs::create_dir_all(&cfg.out_dir)?;
    let scratch = cfg.out_dir.join(".scratch");
    std::fs::create_dir_all(&scratch)?;
    let harness = Harness {
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
        ..Results::default()
    };
    let http_points = cfg.profile.http_concurrency.len() * 2;
    let total_steps = cfg.models.len() * (3 + http_points + 1) + http_points;
    let mut progress = Progress { shown: cfg.progress && std::io::stderr().is_terminal(), done: 0, total: total_steps };
    for &model in &cfg.models {
        if harness.interrupted() {
            break;
        }
        let result = bench_model(&harness, model, &mut progress);
        results.models.push(result);
        save(&cfg.out_dir, &results)?;
    }
    if !harness.interrupted() {
        progress.show("nginx: HTTP sweep");
        results.nginx = Some(nginx::sweep(&harness, || progress.step()));
    }
    results.interrupted = harness.interrupted();
    results.finished = utc_now();
    save(&cfg.out_dir, &results)?;
    progress.finish();
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(results)
}

fn bench_model(h: &Harness<'_>, model: Model, progress: &mut Progress) -> ModelResult {
    let name = model.name();
    let mut result = ModelResult { model: name.into(), ..ModelResult::default() };
    if let Some(reason) = model.unavailable() {
        result.error = Some(format!("unavailable here: {reason}"));
        progress.skip(3 + h.profile.http_concurrency.len() * 2 + 1);
        return result;
    }
    for kind in [RowKind::Flood, RowKind::RateLimited, RowKind::Maximum] {
        if h.interrupted() {
            return result;
        }
        progress.show(&format!("{name}: {}", kind.label()));
        match h.row(name, kind) {
            Ok(row) => result.rows.push(row),
            Err(e) if !h.interrupted() => {
                result.error = Some(format!("{} row: {e}", kind.label()));
                break;
            }
            Err(_) => return result,
        }
        progress.step();
    }
    if h.interrupted() {
        return result;
    }
    progress.show(&format!("{name}: HTTP sweep"));
    match h.start_server(name, "http", &[]) {
        Ok(server) => {
            let port = server.port;
            match h.http_sweep(port, || progress.step()) {
                Ok(points) => result.http = points,
                Err(e) => result.error = Some(format!("HTTP sweep: {e}")),
            }
            h.stop_server(server);
        }
        Err(e) => result.error = Some(format!("HTTP sweep: {e}")),
    }
    if model.serves_udp() && !h.interrupted() {
        progress.show(&format!("{name}: UDP"));
        match h.udp(name) {
            Ok(point) => result.udp = Some(point),
            Err(e) => result.error = Some(format!("UDP: {e}")),
        }
    }
    progress.step();
    result
}

/// Write the raw JSON, the CSVs and the markdown tables.
pub fn save(dir: &Path, results: &Results) -> std::io::Result<()> {
    let json = serde_json::to_string_pretty(results).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("results.json"), json + "\n")?;
    std::fs::write(dir.join("rows.csv"), results.rows_csv())?;
    std::fs::write(dir.join("http.csv"), results.http_csv())?;
    std::fs::write(dir.join("table.md"), tables_markdown(results))?;
    Ok(())
}

/// All tables, as the report and README show them.
pub fn tables_markdown(results: &Results) -> String {
    let m = &results.machine;
    format!(
        "Machine: {} ({} cores, {} MiB), Linux {}; somaxconn {}; open files {}. Profile `{}`, {}{}.\n\n## I/O models (Table 6-3)\n\nRows: flood, rate-limited (blocks of connections, each block limited in total), maximum (connections added in blocks at a fixed rate, rate-limited). Connected is the server's own peak of open connections. Threads counts every thread of the server process, three of which (main, signals, stats) belong to the command line. Kernel TCP memory is /proc/net/sockstat's, the counterpart of the seed's non-paged pool. A client-bound row had the load generator at 90% or more of its cores.\n\n{}\n## HTTP 4 KiB responses by concurrency (seed 003)\n\n{}\n## UDP echo\n\n{}",
        m.cpu_model,
        m.cores,
        m.memory_kib / 1024,
        m.kernel,
        m.somaxconn,
        m.open_files_limit,
        results.profile,
        results.started,
        if results.interrupted { " (interrupted)" } else { "" },
        results.table_markdown(),
        results.http_markdown(),
        results.udp_markdown()
    )
}

struct Progress {
    shown: bool,
    done: usize,
    total: usize,
}

impl Progress {
    fn show(&self, what: &str) {
        if !self.shown {
            return;
        }
        let width = 30;
        let filled = (self.done * width / self.total.max(1)).min(width);
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r[{}{}] {:>3}%  {what:<40}",
            "#".repeat(filled),
            " ".repeat(width - filled),
            self.done * 100 / self.total.max(1)
        );
        let _ = err.flush();
    }

    fn step(&mut self) {
        self.done += 1;
    }

    fn skip(&mut self, n: usize) {
        self.done += n;
    }

    fn finish(&self) {
        if self.shown {
            let _ = writeln!(std::io::stderr(), "\r{:<80}", "bench finished");
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
