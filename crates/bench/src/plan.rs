//! `sockscale plan`: capacity arithmetic in the style of seed 004's Tables 14-1 and 14-2, and
//! predictions from measured results.
//!
//! Table 14-1: memory for asynchronous I/O is connections × operations outstanding per
//! connection × (buffer size + per-operation context); the seed's example uses 16 KiB buffers
//! and a 200-byte context, 16,584 bytes an operation. Table 14-2: the bandwidth each connection
//! gets is the link's bytes per second divided among the connections.
//!
//! With measured results the same question is answered from what this machine did: the growth
//! of server memory, kernel socket memory and CPU per connection between the measured rows is
//! extrapolated to the target connection count. The HTTP and HTTPS sweeps add what one server
//! core served, and the CPU a full TLS handshake for every one of the target's connections
//! would take.

use std::fmt::Write as _;

use sockscale_server::Model;

use crate::results::{figure, HttpPoint, HttpWorkload, Interval, ModelResult, Repeated, Results, Row, RowKind};
use crate::tables::thousands;

/// One line of Table 14-1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLine {
    pub connections: u64,
    pub operations: u64,
    /// None when the product does not fit in 64 bits (a printed saturated figure would be false).
    pub bytes: Option<u64>,
}

/// Memory for `connections` × `operations` outstanding, each a buffer plus a context.
pub fn memory(connections: u64, operations: u64, buffer: u64, context: u64) -> MemoryLine {
    MemoryLine {
        connections,
        operations,
        bytes: buffer.checked_add(context).and_then(|per_op| connections.checked_mul(operations)?.checked_mul(per_op)),
    }
}

/// Bytes as the tables print them, or that they are past counting.
fn bytes_cell(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "more than 2^64 (too large to count)".into(), thousands)
}

/// One line of Table 14-2.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BandwidthLine {
    pub connections: u64,
    pub megabits: f64,
    pub bytes_per_s_per_connection: f64,
}

/// The share of a `megabits` link each of `connections` gets, in bytes per second.
pub fn bandwidth(connections: u64, megabits: f64) -> BandwidthLine {
    BandwidthLine {
        connections,
        megabits,
        bytes_per_s_per_connection: megabits * 1e6 / 8.0 / connections.max(1) as f64,
    }
}

pub fn memory_table(connections: &[u64], operations: &[u64], buffer: u64, context: u64) -> String {
    let mut s = format!(
        "Memory for asynchronous I/O: {} bytes per operation ({} buffer + {} context)\n\n| Total Connections | Operations Per Connection | Total Memory (Bytes) |\n|---|---|---|\n",
        bytes_cell(buffer.checked_add(context)),
        thousands(buffer),
        thousands(context)
    );
    for &ops in operations {
        for &c in connections {
            let line = memory(c, ops, buffer, context);
            let _ =
                writeln!(s, "| {} | {} | {} |", thousands(line.connections), line.operations, bytes_cell(line.bytes));
        }
    }
    s
}

pub fn bandwidth_table(connections: &[u64], megabits: &[f64]) -> String {
    let mut s = String::from("Bandwidth per connection\n\n| Total Connections | Network Bandwidth (megabits) | Bytes/Second per Connection |\n|---|---|---|\n");
    for &mb in megabits {
        for &c in connections {
            let line = bandwidth(c, mb);
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                thousands(c),
                mb,
                thousands(line.bytes_per_s_per_connection.round() as u64)
            );
        }
    }
    s
}

/// A straight line through measured points: `fixed` once per server process, plus
/// `per_connection` for each connection. Fitted by least squares, so fixed costs (threads of
/// the command line, the binary's own memory) are not mistaken for costs of a connection.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub fixed: f64,
    pub per_connection: f64,
    /// The connection counts the line was fitted through, smallest first.
    pub through: Vec<u64>,
}

impl Line {
    /// The value for `connections` spread over `processes` server processes.
    pub fn at(&self, connections: u64, processes: u64) -> f64 {
        self.fixed * processes as f64 + self.per_connection * connections as f64
    }
}

/// A figure derived from measured rows, or why it could not be.
pub type Derived = Result<Line, String>;

/// The least-squares fit of `value = fixed · processes + per_connection · connections` through
/// `points` (connections, server processes, value). With every row on one process it is the
/// ordinary line with an intercept; a row served by several processes (past the open-files
/// limit) counts the fixed cost once per process. Refuses what the points cannot tell: a
/// per-connection cost needs two connection counts, and a negative cost (per connection or per
/// process) is no cost anything has: the rows do not fit the line, and it is said how they went.
pub fn fit(points: &[(u64, u64, f64)], unit: &str) -> Derived {
    let line = least_squares(points)?;
    let sorted = by_connections(points);
    if line.per_connection < 0.0 {
        return Err(format!(
            "the line through the rows has a negative cost per connection ({:.2} {unit}), which no connection has: {}",
            line.per_connection,
            course(&sorted, unit)
        ));
    }
    if line.fixed < 0.0 {
        return Err(format!(
            "the line through the rows has a negative fixed cost ({} {unit} per server process), which no process has: {}",
            signed(line.fixed),
            course(&sorted, unit)
        ));
    }
    Ok(line)
}

fn by_connections(points: &[(u64, u64, f64)]) -> Vec<(u64, u64, f64)> {
    let mut sorted = points.to_vec();
    sorted.sort_by_key(|p| (p.0, p.1));
    sorted
}

/// The least-squares line of [`fit`], unchecked: refused only when the points cannot tell a
/// connection's cost from the fixed cost.
fn least_squares(points: &[(u64, u64, f64)]) -> Derived {
    let mut xs: Vec<u64> = points.iter().map(|p| p.0).collect();
    xs.sort_unstable();
    xs.dedup();
    match xs.len() {
        0 => return Err("no rows".into()),
        1 => {
            return Err(format!(
                "measured at {} connections only: a connection's cost cannot be told from the fixed cost",
                thousands(xs[0])
            ))
        }
        _ => {}
    }
    // The normal equations of the two unknowns.
    let (mut spp, mut spx, mut sxx, mut spy, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, p, y) in points {
        let (x, p) = (x as f64, p.max(1) as f64);
        spp += p * p;
        spx += p * x;
        sxx += x * x;
        spy += p * y;
        sxy += x * y;
    }
    let det = spp * sxx - spx * spx;
    if det.abs() <= f64::EPSILON * spp * sxx {
        return Err("every row has the same connections per server process: a connection's cost cannot be told from the fixed cost".into());
    }
    let fixed = (spy * sxx - spx * sxy) / det;
    let per_connection = (spp * sxy - spx * spy) / det;
    Ok(Line { fixed, per_connection, through: xs })
}

/// Kernel socket memory, fitted as [`fit`] does with what its measurement is taken into account.
/// The baseline is read with the server already listening, so a server process adds no kernel
/// socket memory of its own: a line with a negative fixed cost is fitted again through zero (a
/// cost per connection alone), and the second value says so. A negative cost per connection is
/// named for what it is here: the slab and the buffers are counted system-wide, and what the
/// rest of the machine allocated and freed while the rows ran outweighed the connections.
fn kernel_fit(points: &[(u64, u64, f64)]) -> (Derived, Option<String>) {
    let line = match least_squares(points) {
        Ok(line) => line,
        Err(why) => return (Err(why), None),
    };
    let sorted = by_connections(points);
    let per_row = sorted
        .iter()
        .enumerate()
        .map(|(i, p)| {
            format!("{:.2}{} at {}", p.2 / p.0.max(1) as f64, if i == 0 { " KiB" } else { "" }, thousands(p.0))
        })
        .collect::<Vec<_>>()
        .join(", ");
    if line.per_connection < 0.0 {
        return (
            Err(format!(
                "measurement noise: the line through the rows has a negative cost per connection ({:.2} KiB), which no connection has: {}, or per connection {per_row}. The socket slab and buffers are counted system-wide, so what the rest of the machine allocated and freed while each row ran is in its figure, and here it outweighs the connections' share",
                line.per_connection,
                course(&sorted, "KiB")
            )),
            None,
        );
    }
    if line.fixed >= 0.0 {
        return (Ok(line), None);
    }
    let (sxy, sxx) =
        points.iter().fold((0.0, 0.0), |(sxy, sxx), &(x, _, y)| (sxy + x as f64 * y, sxx + (x as f64).powi(2)));
    let through_zero = Line { fixed: 0.0, per_connection: sxy / sxx, through: line.through };
    let note = format!(
        "the least-squares line has a negative fixed cost ({} KiB per server process), but the baseline is read with the server listening, so a process adds none of its own: fitted through zero instead, {:.2} KiB a connection (the rows: {per_row})",
        signed(line.fixed),
        through_zero.per_connection
    );
    (Ok(through_zero), Some(note))
}

/// A figure rounded to a whole number with its sign and thousands separators: "-239".
fn signed(v: f64) -> String {
    let n = v.round();
    format!("{}{}", if n < 0.0 { "-" } else { "" }, thousands(n.abs() as u64))
}

/// Which way a figure went between its first and last row, said from the numbers themselves.
fn direction(first: f64, last: f64) -> &'static str {
    match first.total_cmp(&last) {
        std::cmp::Ordering::Less => "rises",
        std::cmp::Ordering::Greater => "falls",
        std::cmp::Ordering::Equal => "stays",
    }
}

/// The rows a refused line went through, as they were measured: "it rises from the first row
/// to the last (56,816 KiB at 7,000 connections on 1 process, 214,416 KiB at 50,000 on 4)".
/// `points` are sorted by connections.
fn course(points: &[(u64, u64, f64)], unit: &str) -> String {
    let rows: Vec<String> = points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let procs = p.1.max(1);
            let on = if i == 0 {
                format!(" connections on {procs} process{}", if procs == 1 { "" } else { "es" })
            } else {
                format!(" on {procs}")
            };
            format!("{} {unit} at {}{on}", signed(p.2), thousands(p.0))
        })
        .collect();
    let (first, last) = (points[0].2, points[points.len() - 1].2);
    format!("it {} from the first row to the last ({})", direction(first, last), rows.join(", "))
}

/// Server CPU in proportion to traffic, from the rows paced at the same traffic per connection
/// (so a connection is a unit of traffic): the range of costs per connection that puts every
/// row's prediction within that row's own spread. No fixed cost: a server with no traffic uses
/// next to no CPU, and two rows with about the same connections per process (12,000 on one,
/// 50,000 on four) cannot tell one from a connection's anyway.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuLine {
    /// % of one core per connection, the least and the most every row allows.
    pub low: f64,
    pub high: f64,
    /// The connection counts of the rows it was derived from, smallest first.
    pub through: Vec<u64>,
    /// Rows whose steady figure (after the last connect) was not available, with why: their
    /// whole range, connects included, stood for it.
    pub unsteady: Vec<(u64, &'static str)>,
    /// For each row (by connections): the repetitions whose steady intervals it was read from,
    /// of those kept.
    pub repeats: Vec<(u64, usize, usize)>,
    /// The widest a reading was taken either way for the clock tick it is counted in, % of one
    /// core; `None` when the intervals' lengths were not recorded.
    pub tick: Option<f64>,
}

impl CpuLine {
    /// % of one core for `connections`, least and most.
    pub fn at(&self, connections: u64) -> (f64, f64) {
        (self.low * connections as f64, self.high * connections as f64)
    }
}

/// One row's CPU as the plan reads it: the lowest and highest of its steady intervals over the
/// repetitions that have some, or, when none has, its whole range and why.
struct CpuRow {
    held: u64,
    /// % of one core, the lowest and highest reading.
    low: f64,
    high: f64,
    /// % of one core per connection, the lowest and highest reading over the connections its
    /// own repetition held.
    per_low: f64,
    per_high: f64,
    /// Repetitions read, of those kept.
    used: usize,
    kept: usize,
    unsteady: Option<&'static str>,
    tick: Option<f64>,
}

/// Each steady interval's lowest and highest CPU, % of one core, and the most a reading was
/// taken either way for its clock tick (`None` without the intervals' lengths).
type SteadyReadings = (Vec<(f64, f64)>, Option<f64>);

/// A held count within this fraction of the peak counts as the peak: the rule of
/// [`Row::steady_cpu`], which gives the values but not the intervals' lengths this needs.
const STEADY_FRACTION: f64 = 0.99;

/// The steady readings of one repetition's `intervals` (the rule of [`Row::steady_cpu`]: the
/// intervals that began and ended with the server at its peak count, within 1%), each as the
/// lowest and highest CPU it can have been, % of one core, and the widest such allowance.
///
/// /proc/PID/stat counts CPU in clock ticks (`hz` a second) and each read truncates, so the
/// CPU an interval measured is right to within one tick either way: at the few % of a core a
/// paced row uses, one tick over a 0.65 s interval is 1.5% of a core, as much as the reading.
/// Two intervals printed 3.0% and 3.0% were anything from 2 to 4. Without the intervals'
/// lengths (results from before they were kept) the readings stand as printed.
fn steady_readings(intervals: &[Interval], hz: f64) -> Result<SteadyReadings, &'static str> {
    let peak = intervals
        .iter()
        .filter_map(|i| i.held)
        .max()
        .filter(|&p| p > 0)
        .ok_or("no interval with the server's count of its connections")?;
    let at_peak = |i: &Interval| i.held.is_some_and(|h| h as f64 >= STEADY_FRACTION * peak as f64);
    let mut tick: Option<f64> = None;
    let readings: Vec<(f64, f64)> = intervals
        .windows(2)
        .filter(|w| at_peak(&w[0]) && at_peak(&w[1]))
        .map(|w| match (w[0].at_s, w[1].at_s) {
            (Some(start), Some(end)) if end > start && hz > 0.0 => {
                let one = 100.0 / (hz * (end - start));
                tick = Some(tick.map_or(one, |t: f64| t.max(one)));
                ((w[1].cpu_pct - one).max(0.0), w[1].cpu_pct + one)
            }
            _ => (w[1].cpu_pct, w[1].cpu_pct),
        })
        .collect();
    if readings.is_empty() {
        return Err("no interval after the last connect (the count of connections never settled)");
    }
    Ok((readings, tick))
}

fn cpu_row(held: u64, r: &Row, hz: f64) -> Option<CpuRow> {
    // Each kept repetition with its own count of connections; results from before repetitions
    // are one, the row itself.
    let kept = r.kept();
    let sources: Vec<(u64, Option<&Vec<Interval>>)> = if kept.is_empty() {
        vec![(held, r.intervals.as_ref())]
    } else {
        kept.iter()
            .map(|rep| {
                let own = rep.figures.get(figure::CONNECTIONS_HELD).map(|&h| h.round() as u64).filter(|&h| h > 0);
                (own.unwrap_or(held), rep.intervals.as_ref())
            })
            .collect()
    };
    let mut row = CpuRow {
        held,
        low: f64::INFINITY,
        high: f64::NEG_INFINITY,
        per_low: f64::INFINITY,
        per_high: f64::NEG_INFINITY,
        used: 0,
        kept: sources.len(),
        unsteady: None,
        tick: None,
    };
    let mut why = None;
    for (own, intervals) in sources {
        let read = intervals
            .ok_or("no per-interval samples (results written before they were kept)")
            .and_then(|iv| steady_readings(iv, hz));
        match read {
            Ok((readings, tick)) => {
                row.used += 1;
                row.tick = match (row.tick, tick) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                for (low, high) in readings {
                    row.low = row.low.min(low);
                    row.high = row.high.max(high);
                    row.per_low = row.per_low.min(low / own as f64);
                    row.per_high = row.per_high.max(high / own as f64);
                }
            }
            Err(w) => {
                why.get_or_insert(w);
            }
        }
    }
    if row.used > 0 {
        return Some(row);
    }
    // No repetition settled: the row's whole range (the median repetition's) stands for it.
    let (low, high) = r.server_cpu_pct()?;
    Some(CpuRow { low, high, per_low: low / held as f64, per_high: high / held as f64, unsteady: why, ..row })
}

/// `low`–`high`, each as `show` prints it, or one figure when both print alike: "0.31–0.31"
/// is one figure.
fn range(low: f64, high: f64, show: impl Fn(f64) -> String) -> String {
    let (low, high) = (show(low), show(high));
    if low == high {
        low
    } else {
        format!("{low}–{high}")
    }
}

/// The CPU line through `rows`, checked against each of them: refused when no single cost per
/// connection puts every row within its own spread.
fn cpu_line(rows: &[CpuRow]) -> Result<CpuLine, String> {
    let mut through: Vec<u64> = rows.iter().map(|r| r.held).collect();
    through.sort_unstable();
    through.dedup();
    match through.len() {
        0 => return Err("no rows".into()),
        1 => {
            return Err(format!(
            "measured at {} connections only: that the cost grows with traffic cannot be checked against a second row",
            thousands(through[0])
        ))
        }
        _ => {}
    }
    let pct = |v: f64| format!("{v:.1}%");
    let floor = rows.iter().max_by(|a, b| a.per_low.total_cmp(&b.per_low)).expect("rows");
    let ceiling = rows.iter().min_by(|a, b| a.per_high.total_cmp(&b.per_high)).expect("rows");
    let (low, high) = (floor.per_low, ceiling.per_high);
    if low > high {
        // The cost that puts the one row at its lowest puts the other past its highest.
        return Err(format!(
            "no cost per connection fits every row: the {} row's {} of a core over {} connections is more per connection than the {} row's {} over {}, so a line through one misses the other's spread",
            thousands(floor.held),
            range(floor.low, floor.high, pct),
            thousands(floor.held),
            thousands(ceiling.held),
            range(ceiling.low, ceiling.high, pct),
            thousands(ceiling.held)
        ));
    }
    let mut unsteady: Vec<(u64, &'static str)> = rows.iter().filter_map(|r| Some((r.held, r.unsteady?))).collect();
    unsteady.sort_unstable();
    let mut repeats: Vec<(u64, usize, usize)> = rows.iter().map(|r| (r.held, r.used, r.kept)).collect();
    repeats.sort_unstable();
    let tick = rows.iter().filter_map(|r| r.tick).reduce(f64::max);
    Ok(CpuLine { low, high, through, unsteady, repeats, tick })
}

/// What `target` connections would cost one model, each figure derived from its measured rows.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelPlan {
    pub model: String,
    /// Why the model cannot hold the target at all (its own ceiling, or this machine's limits).
    pub refused: Option<String>,
    /// Server resident memory, KiB.
    pub server_kib: Derived,
    /// The server's share of kernel socket memory (slab and buffers), KiB.
    pub kernel_kib: Derived,
    /// Server CPU at the rate-limited rows' traffic per connection.
    pub cpu: Result<CpuLine, String>,
    pub threads: Derived,
    /// For each figure fitted through some rows but not all it should have been, the figure and
    /// the connection counts of the rows left out because no sample gave it there.
    pub unsampled: Vec<(&'static str, Vec<u64>)>,
    /// The connection counts of the measured rows, smallest first.
    pub rows_at: Vec<u64>,
    /// Largest connection count measured.
    pub measured: u64,
    /// How a figure was derived other than the table's paragraph says (kernel memory fitted
    /// through zero), and why.
    pub kernel_note: Option<String>,
    /// How many repetitions stand behind each figure, in words; `None` for results from before
    /// repetitions (one each).
    pub repetitions: Option<String>,
}

/// The server's share of the kernel memory a row measured, KiB: socket slab plus socket buffers.
///
/// Both are counted system-wide, so on loopback they hold the client's end of every connection
/// too; the server's share is its connections over all the sockets the run added. Results from
/// before the slab was measured have only sockstat's buffer pages, where zero with connections
/// open is a sample that did not see them (an established socket always holds kernel memory),
/// not a cost.
fn kernel_kib(row: &Row) -> Option<f64> {
    match &row.kernel {
        Some(k) => {
            let slab = k.slab_kib()?.max(0) as f64;
            let buffers = k.buffers_kib().unwrap_or(0) as f64;
            let sockets = k.sockets_added().filter(|&n| n > 0)?;
            let share = (row.connected as f64 / sockets as f64).min(1.0);
            Some((slab + buffers) * share)
        }
        None => (row.kernel_tcp_kib > 0).then_some(row.kernel_tcp_kib as f64),
    }
}

/// Server processes `target` connections take under the open-files limit recorded with the
/// results (one descriptor per connection), or 1 when no limit was recorded.
pub fn processes(results: &Results, target: u64) -> u64 {
    match results.machine.open_files_limit {
        0 => 1,
        limit => target.div_ceil(limit).max(1),
    }
}

/// The rows a plan can use: those where the server reported connections held. A row without
/// its count has no place on the connections axis. Each with the median of the connections its
/// repetitions held (the row's own count in results from before repetitions).
fn held_rows(m: &ModelResult) -> Vec<(u64, &Row)> {
    m.rows
        .iter()
        .filter(|r| r.connected_held().is_some())
        .filter_map(|r| {
            let held = r.spread_of(figure::CONNECTIONS_HELD).map_or(r.connected, |s| s.median.round() as u64);
            (held > 0).then_some((held, r))
        })
        .collect()
}

/// The same rows, each with the connections its own (the median) repetition held: the one the
/// figures that repetitions do not keep (kernel memory, threads) come from.
fn own_rows<'a>(rows: &[(u64, &'a Row)]) -> Vec<(u64, &'a Row)> {
    rows.iter().map(|&(held, r)| (Some(r.connected).filter(|&c| c > 0).unwrap_or(held), r)).collect()
}

/// "3 at each row", or "3 at 1,000, 2 at 3,000" when the rows differ.
fn per_row_counts(counts: &[(u64, String)]) -> String {
    match counts.first() {
        Some((_, first)) if counts.iter().all(|(_, c)| c == first) => format!("{first} at each row"),
        _ => counts.iter().map(|(at, c)| format!("{c} at {}", thousands(*at))).collect::<Vec<_>>().join(", "),
    }
}

/// How many repetitions stand behind each figure of `rows`, in words; `None` when no row has
/// repetitions.
fn repetitions(rows: &[(u64, &Row)], cpu: &Result<CpuLine, String>) -> Option<String> {
    if rows.iter().all(|(_, r)| r.repeats.is_empty()) {
        return None;
    }
    let memory: Vec<(u64, String)> = rows
        .iter()
        .map(|&(held, r)| (held, r.spread_of(figure::SERVER_RSS_KIB).map_or(0, |s| s.n).to_string()))
        .collect();
    let mut parts = vec![format!(
        "server memory and connections held are the medians of each row's repetitions ({})",
        per_row_counts(&memory)
    )];
    if let Ok(line) = cpu {
        let used: Vec<(u64, String)> =
            line.repeats.iter().map(|&(at, used, kept)| (at, format!("{used} of {kept}"))).collect();
        parts.push(format!("CPU is read from the steady intervals of its repetitions ({})", per_row_counts(&used)));
    }
    parts.push("kernel socket memory and threads are the median repetition's (repetitions keep no such figure)".into());
    Some(parts.join("; "))
}

/// The line through one figure of `rows`. `value` is `None` for a row that does not enter this
/// figure by design, and `Some(None)` for one where no sample gave it: that row stays out of
/// the fit (its 0 is no measurement), and its connection count is returned.
fn derive(rows: &[(u64, &Row)], unit: &str, value: &dyn Fn(&Row) -> Option<Option<f64>>) -> (Derived, Vec<u64>) {
    let mut points = Vec::new();
    let mut unsampled = Vec::new();
    for &(held, r) in rows {
        match value(r) {
            Some(Some(v)) => points.push((held, r.server_procs.unwrap_or(1), v)),
            Some(None) => unsampled.push(held),
            None => {}
        }
    }
    if points.is_empty() && !unsampled.is_empty() {
        return (Err("not measured (no sample in any row)".into()), Vec::new());
    }
    (fit(&points, unit), unsampled)
}

/// The plan for one model, or None when it has no measured rows.
pub fn model_plan(results: &Results, m: &ModelResult, target: u64) -> Option<ModelPlan> {
    let rows = held_rows(m);
    let measured = rows.iter().map(|&(held, _)| held).max()?;
    let mut rows_at: Vec<u64> = rows.iter().map(|&(held, _)| held).collect();
    rows_at.sort_unstable();
    rows_at.dedup();
    let mut unsampled = Vec::new();
    let mut gaps = |what: &'static str, (line, left_out): (Derived, Vec<u64>)| {
        if !left_out.is_empty() {
            unsampled.push((what, left_out));
        }
        line
    };
    let own = own_rows(&rows);
    let server_kib =
        gaps("server memory", derive(&rows, "KiB", &|r| Some(r.spread_of(figure::SERVER_RSS_KIB).map(|s| s.median))));
    let (kernel_kib, kernel_note) = match own.iter().find(|(_, r)| kernel_kib(r).is_none()) {
        None => kernel_fit(
            &own.iter()
                .filter_map(|&(held, r)| Some((held, r.server_procs.unwrap_or(1), kernel_kib(r)?)))
                .collect::<Vec<_>>(),
        ),
        Some((held, _)) => (
            Err(format!("not measured (no kernel socket memory recorded with {} connections open)", thousands(*held))),
            None,
        ),
    };
    // CPU only from the rows whose traffic per connection is the same (paced blocks): the flood
    // row's cost is its traffic, not its connections. A row with no CPU sample stays out.
    let hz = sockscale_sys::clock_ticks_per_second() as f64;
    let mut cpu_rows = Vec::new();
    let mut cpu_unsampled = Vec::new();
    for &(held, r) in rows.iter().filter(|(_, r)| r.kind != Some(RowKind::Flood)) {
        match cpu_row(held, r, hz) {
            Some(c) => cpu_rows.push(c),
            None => cpu_unsampled.push(held),
        }
    }
    let cpu = if cpu_rows.is_empty() && !cpu_unsampled.is_empty() {
        Err("not measured (no sample in any row)".to_owned())
    } else {
        cpu_line(&cpu_rows)
    };
    let threads = gaps("threads", derive(&own, "threads", &|r| Some(r.server_threads().map(|t| t as f64))));
    if cpu.is_ok() && !cpu_unsampled.is_empty() {
        unsampled.push(("CPU", cpu_unsampled));
    }
    let repetitions = repetitions(&rows, &cpu);
    let mut plan = ModelPlan {
        model: m.model.clone(),
        refused: None,
        server_kib,
        kernel_kib,
        cpu,
        threads,
        unsampled,
        rows_at,
        measured,
        kernel_note,
        repetitions,
    };
    plan.refused = refusal(results, &plan, target);
    Some(plan)
}

/// Why `plan`'s model cannot hold `target` connections: the model's own ceiling, then the
/// machine's thread limits and memory, as recorded with the results.
fn refusal(results: &Results, plan: &ModelPlan, target: u64) -> Option<String> {
    let model = plan.model.as_str();
    if let Some(ceiling) = plan.model.parse::<Model>().ok().and_then(|m| m.capabilities().ceiling) {
        if target > ceiling.descriptors {
            return Some(format!(
                "{model} cannot hold {} connections: {} is {}",
                thousands(target),
                ceiling.set_by,
                thousands(ceiling.descriptors)
            ));
        }
    }
    let procs = processes(results, target);
    if let Ok(line) = &plan.threads {
        let threads = line.at(target, procs).round() as u64;
        let limit = results.machine.thread_limits.iter().min_by_key(|(_, &n)| n);
        if let Some((name, &limit)) = limit.filter(|(_, &n)| threads > n) {
            return Some(format!(
                "{model} cannot hold {} connections here: it would need about {} threads ({}), over {name} {}",
                thousands(target),
                thousands(threads),
                per_connection_threads(line),
                thousands(limit)
            ));
        }
    }
    let memory_kib = results.machine.memory_kib;
    if let Ok(line) = &plan.server_kib {
        let need = line.at(target, procs) + plan.kernel_kib.as_ref().map_or(0.0, |k| k.at(target, procs));
        if memory_kib > 0 && need > memory_kib as f64 {
            return Some(format!(
                "{model} cannot hold {} connections here: it would need about {} MiB of memory, over the machine's {} MiB",
                thousands(target),
                thousands((need / 1024.0).round() as u64),
                thousands(memory_kib / 1024)
            ));
        }
    }
    None
}

/// Threads a connection adds, as the fit says it: "2.0 per connection", "1 per 64 connections",
/// "fixed".
fn per_connection_threads(line: &Line) -> String {
    match line.per_connection {
        p if p < 1e-6 => "fixed".into(),
        p if p >= 0.5 => format!("{p:.1} per connection"),
        p => format!("1 per {:.0} connections", 1.0 / p),
    }
}

/// A derived figure in a table cell: the value at the target and the cost per connection, or
/// "not measured" and a footnote number for why.
fn cell<T>(
    figure: &Result<T, String>,
    value: impl Fn(&T) -> String,
    notes: &mut Vec<String>,
    model: &str,
    what: &str,
) -> String {
    match figure {
        Ok(line) => value(line),
        Err(why) => {
            notes.push(format!("{model}, {what}: {why}"));
            if why.starts_with("not measured") {
                "not measured".into()
            } else if why.starts_with("measurement noise") {
                "not derivable (measurement noise)".into()
            } else {
                "not derivable".into()
            }
        }
    }
}

/// Why a model has no plan: its failure, or what its rows lack.
fn unplanned(m: &ModelResult) -> String {
    if let Some(error) = &m.error {
        return error.clone();
    }
    if !m.rows.is_empty() && m.rows.iter().all(|r| r.connected_held().is_none()) {
        return "the server reported no count of its connections in any row".into();
    }
    "no row with a connection held".into()
}

/// Predict what `target` connections need, for every model with measured rows: each figure is
/// the least-squares line through that model's measured rows, evaluated at the target; models
/// that cannot hold the target say why instead.
pub fn predict(results: &Results, target: u64) -> Result<String, PlanError> {
    let plans: Vec<(&ModelResult, Option<ModelPlan>)> =
        results.models.iter().map(|m| (m, model_plan(results, m, target))).collect();
    if plans.iter().all(|(_, p)| p.is_none()) {
        let rows: Vec<&Row> = results.models.iter().flat_map(|m| &m.rows).collect();
        let uncounted = rows.iter().filter(|r| r.connected_held().is_none()).count();
        return Err(PlanError::NoRows {
            why: if results.models.is_empty() {
                "it lists no models".into()
            } else if uncounted > 0 && uncounted == rows.len() {
                "no model has a row with its connections counted by the server".into()
            } else if uncounted > 0 {
                format!(
                    "no model has a row with a connection held ({uncounted} rows have no count of the server's connections)"
                )
            } else {
                "no model has a row with a connection held".into()
            },
        });
    }
    let procs = processes(results, target);
    let machine = &results.machine;
    let mut s = format!(
        "Predicted needs for {} connections, from the run of {} on {} ({} cores, {} MiB){}\n\n",
        thousands(target),
        results.started,
        machine.cpu_model,
        machine.cores,
        thousands(machine.memory_kib / 1024),
        if results.interrupted {
            ", an interrupted run: only the models measured before are here"
        } else if results.in_progress {
            ", a run that had not finished: only the models measured so far are here"
        } else {
            ""
        }
    );
    let rate = per_connection_traffic(results);
    let traffic = rate.map_or_else(
        || "the rate-limited rows' traffic".to_owned(),
        |b| format!("{} B/s per connection", thousands(b)),
    );
    let _ = writeln!(
        s,
        "| model | server memory | kernel socket memory (server's share) | CPU, cores (at {traffic}) | threads | fitted through (connections) |\n|---|---|---|---|---|---|"
    );
    let mut notes = Vec::new();
    let mut refused = Vec::new();
    for (m, plan) in &plans {
        let Some(p) = plan else {
            let _ = writeln!(s, "| {} | not measured: {} | | | | |", m.model, unplanned(m).replace('|', "/"));
            continue;
        };
        if let Some(why) = &p.refused {
            refused.push(why.clone());
            let _ = writeln!(s, "| {} | cannot hold {} (below) | | | | |", p.model, thousands(target));
            continue;
        }
        let mib = |l: &Line| {
            format!(
                "{} MiB ({:.2} KiB/connection)",
                thousands((l.at(target, procs) / 1024.0).round() as u64),
                l.per_connection
            )
        };
        let server = cell(&p.server_kib, mib, &mut notes, &p.model, "server memory");
        let kernel = cell(&p.kernel_kib, mib, &mut notes, &p.model, "kernel socket memory");
        let cpu = cell(
            &p.cpu,
            |l| {
                let (low, high) = l.at(target);
                let per = match rate {
                    Some(rate) if rate > 0 => {
                        let mb = 1e6 / rate as f64;
                        format!("{}% of a core per MB/s", range(l.low * mb, l.high * mb, |v| format!("{v:.1}")))
                    }
                    _ => format!(
                        "{}% of a core per 1,000 connections",
                        range(l.low * 1000.0, l.high * 1000.0, |v| format!("{v:.2}"))
                    ),
                };
                format!("{} ({per})", range(low / 100.0, high / 100.0, |v| format!("{v:.2}")))
            },
            &mut notes,
            &p.model,
            "CPU",
        );
        let threads = cell(
            &p.threads,
            |l| format!("{} ({})", thousands(l.at(target, procs).round() as u64), per_connection_threads(l)),
            &mut notes,
            &p.model,
            "threads",
        );
        for (what, left_out) in &p.unsampled {
            let at = left_out.iter().map(|&c| thousands(c)).collect::<Vec<_>>().join(", ");
            notes.push(format!(
                "{}, {what}: not measured with {at} connections open (no sample), so that row is left out of the fit",
                p.model
            ));
        }
        if let Some(note) = &p.kernel_note {
            notes.push(format!("{}, kernel socket memory: {note}", p.model));
        }
        if let Some(note) = &p.repetitions {
            notes.push(format!("{}, repetitions: {note}", p.model));
        }
        if let Ok(l) = &p.cpu {
            let mut reasons: Vec<&str> = l.unsteady.iter().map(|&(_, why)| why).collect();
            reasons.dedup();
            for why in reasons {
                let at: Vec<String> =
                    l.unsteady.iter().filter(|&&(_, w)| w == why).map(|&(c, _)| thousands(c)).collect();
                notes.push(format!(
                    "{}, CPU: the steady figure (after the last connect) is not available at {} connections, {why}: each of those rows' whole range, its connects included, stands for it",
                    p.model,
                    at.join(", ")
                ));
            }
            let cores = l.at(target).1 / 100.0;
            if cores > machine.cores as f64 && machine.cores > 0 {
                notes.push(format!(
                    "{}: up to {cores:.1} cores is more than the {} this machine has",
                    p.model, machine.cores
                ));
            }
        }
        let range = p.rows_at.iter().map(|&c| thousands(c)).collect::<Vec<_>>().join(", ");
        let smallest = p.rows_at.first().copied().unwrap_or(p.measured);
        let basis = if target > p.measured {
            format!("{range}; extrapolated ×{:.1}", target as f64 / p.measured as f64)
        } else if target < smallest {
            format!("{range}; extrapolated below the smallest")
        } else {
            range
        };
        let _ = writeln!(s, "| {} | {server} | {kernel} | {cpu} | {threads} | {basis} |", p.model);
    }
    s.push_str(
        "\nServer memory, kernel socket memory and threads are each the least-squares line (a fixed cost per server process plus a cost per connection) through the model's measured rows, evaluated at the target; a line with a negative cost is not derivable. Where a row was measured several times, server memory and the connections held are the medians of its repetitions. CPU is in proportion to traffic, from the rows paced at the same traffic per connection (not the flood row), each read over its steady part, the intervals after its last connect, in every repetition that has one: the range is every cost per connection that puts each of those rows within its own lowest–highest interval, and where none does it is not derivable. Each interval's CPU is counted in clock ticks, so it is taken as right to within one tick either way (one tick over a 0.65 s interval is 1.5% of a core). A figure is extrapolated when the target is beyond the largest count measured or below the smallest (last column): past the largest the server may meet limits the measured rows could not show. Kernel socket memory is the socket slab plus socket buffers the run added, counted system-wide, times the server's connections over all the sockets the run added (on loopback the client's ends are half of them); its baseline is read with the server listening, so where the line through the rows has a negative fixed cost it is fitted through zero instead (said below).\n",
    );
    if results.models.iter().flat_map(|m| &m.rows).all(|r| r.repeats.is_empty()) {
        s.push_str("\nThese results keep one repetition a row (written before repetitions, or a run of one round): every figure stands on one measurement of each row.\n");
    }
    if procs > 1 {
        let _ = writeln!(
            s,
            "\n{} connections need {} descriptors; the open-files limit recorded with these results is {} per process, so it takes {procs} server processes (the fixed costs above are counted {procs} times), or a higher limit (ulimit -n).",
            thousands(target),
            thousands(target),
            thousands(machine.open_files_limit)
        );
    } else if machine.open_files_limit == 0 {
        s.push_str(
            "\nThe open-files limit was not recorded with these results: the number of processes needed is unknown.\n",
        );
    }
    if machine.thread_limits.is_empty() {
        s.push_str("\nThe machine's thread limits were not recorded with these results: thread counts are not checked against them.\n");
    }
    if !refused.is_empty() {
        s.push('\n');
        for why in refused {
            let _ = writeln!(s, "{why}.");
        }
    }
    if !notes.is_empty() {
        s.push('\n');
        for note in notes {
            let _ = writeln!(s, "- {note}");
        }
    }
    if let Some(http) = http_capacity(results, target) {
        s.push('\n');
        s.push_str(&http);
    }
    if let Some(ws) = ws_capacity(results, target) {
        s.push('\n');
        s.push_str(&ws);
    }
    Ok(s)
}

/// What the WebSocket points measured, model by model: the memory `target` idle WebSockets
/// would take at the bytes per idle WebSocket measured (server user space, and the kernel's
/// socket memory of the server's end), and the most echo messages per server CPU-second.
/// `None` when the results have no WebSocket point (before schema 3).
pub fn ws_capacity(results: &Results, target: u64) -> Option<String> {
    let measured: Vec<&ModelResult> =
        results.models.iter().filter(|m| !m.ws.is_empty() || m.ws_idle.is_some()).collect();
    if measured.is_empty() {
        return None;
    }
    let mib = |bytes: f64| format!("{} MiB", thousands((bytes / (1024.0 * 1024.0)).round() as u64));
    let mut s = format!(
        "WebSocket, as measured: {} idle WebSockets at the bytes each took when the bench held its idle WebSockets (extrapolated in proportion), and the most echo messages per server CPU-second\n\n| model | idle WebSockets measured | {} idle: server user space | {} idle: kernel, the server's sockets | echo messages per server CPU-second |\n|---|---|---|---|---|\n",
        thousands(target),
        thousands(target),
        thousands(target)
    );
    for m in measured {
        let idle = m.ws_idle.as_ref();
        let held = idle.map_or_else(
            || "not measured".to_owned(),
            |w| {
                let answered = if w.every_connection_answered() {
                    "each answered a ping"
                } else {
                    "not every one answered a ping"
                };
                w.held.map_or_else(
                    || format!("held not measured, {answered}"),
                    |h| format!("{} held, {answered}", thousands(h)),
                )
            },
        );
        let server = idle.and_then(|w| {
            let per = w.spread_of(figure::SERVER_BYTES_PER_IDLE_WS)?.median;
            Some(format!("{} ({} B each)", mib(per * target as f64), thousands(per.round() as u64)))
        });
        let kernel = idle.and_then(|w| {
            let per = w.spread_of(figure::KERNEL_BYTES_PER_SOCKET)?.median;
            Some(format!("{} ({} B a socket)", mib(per * target as f64), thousands(per.round() as u64)))
        });
        let messages =
            m.ws.iter()
                .filter_map(|p| Some((p, p.spread_of(figure::MESSAGES_PER_CPU_SECOND)?.median)))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map_or_else(
                    || "not measured".to_owned(),
                    |(p, v)| format!("{} at c={}", thousands(v.round() as u64), thousands(p.concurrency)),
                );
        let _ = writeln!(
            s,
            "| {} | {held} | {} | {} | {messages} |",
            m.model,
            server.unwrap_or_else(|| "not measured".into()),
            kernel.unwrap_or_else(|| "not measured".into())
        );
    }
    s.push_str("\nServer user space is the server's resident memory added per idle WebSocket held; the kernel column counts one socket per connection (the server's end) at the socket slab caches and buffers added per TCP socket, which the bench reads system-wide over both ends of its loopback connections. Both grow in proportion only as far as the machine's limits allow (open files, ports, net.ipv4.tcp_mem); bench/c1m.py --proto ws measures a million on one machine.\n");
    Some(s)
}

/// The best point of one HTTP workload for one model: the most responses per second over the
/// sweep's concurrencies.
fn best(m: &ModelResult, workload: HttpWorkload) -> Option<&HttpPoint> {
    m.http
        .iter()
        .filter(|p| p.workload() == workload && p.requests_per_s > 0.0)
        .max_by(|a, b| a.requests_per_s.total_cmp(&b.requests_per_s))
}

/// A best point in a cell: its rate, where it was reached, and what qualifies it.
fn rate_cell(m: &ModelResult, workload: HttpWorkload) -> String {
    match best(m, workload) {
        Some(p) => format!(
            "{}/s at c={}{}{}",
            thousands(p.requests_per_s.round() as u64),
            thousands(p.concurrency),
            if p.errors > 0 { format!(", {} errors", thousands(p.errors)) } else { String::new() },
            if p.client_bound { " (client-bound: at least)" } else { "" }
        ),
        None if m.http.iter().any(|p| p.workload() == workload) => "no responses".into(),
        None => "not measured".into(),
    }
}

/// Server CPU-seconds for `target` full handshakes, from the best HTTPS point with a new
/// connection per request: at its full handshakes per server CPU-second when the server's CPU
/// was read, else at its rate (the server's whole core assumed).
fn handshakes_cell(m: &ModelResult, target: u64) -> String {
    let Some(p) = best(m, HttpWorkload::TlsFullHandshake) else {
        return "not measured".into();
    };
    let (per_cpu_s, how) = match p.server_cpu_pct.filter(|&c| c > 0.0) {
        Some(cpu) => (p.requests_per_s * 100.0 / cpu, format!("{:.0}% of its core", cpu)),
        None => (p.requests_per_s, "server CPU not measured: its whole core assumed".to_owned()),
    };
    let seconds = target as f64 / per_cpu_s;
    format!(
        "{} s ({} handshakes per CPU-second at c={}, {how})",
        crate::tables::decimal(seconds),
        thousands(per_cpu_s.round() as u64),
        thousands(p.concurrency)
    )
}

/// What the HTTP and HTTPS sweeps measured, model by model, as a capacity table: the best
/// responses per second of each workload on the server's one core, and what a reconnect of
/// every one of `target` connections (a full handshake each) would cost at the measured rate.
/// `None` when the results have no HTTP point.
pub fn http_capacity(results: &Results, target: u64) -> Option<String> {
    let measured: Vec<&ModelResult> = results.all_results().filter(|m| !m.http.is_empty()).collect();
    if measured.is_empty() {
        return None;
    }
    let mut s = format!(
        "HTTP and HTTPS on one server core, as measured (4 KiB responses; the best point of each sweep, not extrapolated), and the server CPU that {} full TLS handshakes take (extrapolated from the best point with a new connection per request)\n\n| model | HTTP keep-alive | HTTPS keep-alive | HTTP, new connection per request | HTTPS, new connection per request (full handshake) | {} full handshakes, server CPU-seconds |\n|---|---|---|---|---|---|\n",
        thousands(target),
        thousands(target)
    );
    for m in measured {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            m.model,
            rate_cell(m, HttpWorkload::KeepAlive),
            rate_cell(m, HttpWorkload::TlsKeepAlive),
            rate_cell(m, HttpWorkload::NewConnection),
            rate_cell(m, HttpWorkload::TlsFullHandshake),
            handshakes_cell(m, target)
        );
    }
    s.push_str("\nEach rate is the most responses per second over the sweep's concurrencies, with the server pinned to one core and the load generator on the others; a client-bound point was limited by the load generator, so the server's rate is at least that. Over HTTPS with a new connection per request every response costs a full handshake (the load resumes no session), so that column is the rate of full handshakes the server completed: its most only where its CPU was near all of its core, which is why the last column counts handshakes per server CPU-second instead. The last column extrapolates it to every one of the target's connections coming back at once (a restart, a failover): the server CPU-seconds their handshakes take at the handshakes per CPU-second measured (seconds on one core; a server that spreads them over N cores takes 1/N of the time). It leaves out the load generator's own cost of verifying each certificate, which the bench spends on its other cores.\n");
    if results.all_results().all(|m| m.http.iter().all(|p| !p.tls)) {
        s.push_str("\nThese results have no HTTPS point (written before HTTPS was measured, or the HTTPS sweep failed): HTTPS is not measured.\n");
    }
    Some(s)
}

/// The bytes per second each connection sent in the rate-limited rows, from the run's
/// parameters (`block_rate` shared by `block` connections), when they were recorded.
fn per_connection_traffic(results: &Results) -> Option<u64> {
    let p = &results.parameters;
    let (rate, block) = (p.get("block_rate")?.as_u64()?, p.get("block")?.as_u64()?);
    (block > 0).then(|| rate / block)
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("the results hold nothing to predict from: {why}")]
    NoRows { why: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http_point(concurrency: u64, workload: HttpWorkload, requests_per_s: f64, cpu: Option<f64>) -> HttpPoint {
        HttpPoint {
            concurrency,
            keepalive: workload.keepalive(),
            tls: workload.tls(),
            tls_resume: workload.tls().then_some(false),
            requests_per_s,
            server_cpu_pct: cpu,
            client_bound: requests_per_s == 9_000.0,
            ..HttpPoint::default()
        }
    }

    /// The WebSocket capacity: the target's idle WebSockets at the bytes measured for each, the
    /// best echo messages per server CPU-second; none for results without WebSocket points.
    #[test]
    fn ws_capacity_scales_the_measured_bytes_per_idle_websocket() {
        let mut r = Results::default();
        r.models.push(ModelResult { model: "epoll".into(), ..ModelResult::default() });
        assert_eq!(ws_capacity(&r, 1_000_000), None, "no WebSocket point: no table");
        let per_cpu = |c: u64, v: f64| crate::results::WsPoint {
            concurrency: c,
            messages_per_s: v / 2.0,
            server_cpu_pct: Some(50.0),
            ..Default::default()
        };
        r.models[0].ws = vec![per_cpu(10, 80_000.0), per_cpu(100, 120_000.0)];
        r.models[0].ws_idle = Some(crate::results::WsIdle {
            attempted: 2048,
            upgrades: 2048,
            held: Some(2048),
            // 1 MiB added over 2,048 held: 512 B each.
            server_rss_baseline_kib: Some(1024),
            server_rss_peak_kib: Some(2048),
            pings_sent: 2048,
            pongs_received: 2048,
            ..Default::default()
        });
        let table = ws_capacity(&r, 1_048_576).expect("a table");
        let epoll = table.lines().find(|l| l.starts_with("| epoll |")).expect("epoll's line");
        assert_eq!(
            epoll,
            "| epoll | 2,048 held, each answered a ping | 512 MiB (512 B each) | not measured | 120,000 at c=100 |",
            "{table}"
        );
    }

    /// The HTTP and HTTPS capacity: the best point of each workload, and the CPU of a full
    /// handshake for each of the target's connections, from plain values.
    #[test]
    fn plan_shows_http_and_https_capacity_and_the_cpu_of_a_handshake_per_connection() {
        use HttpWorkload::*;
        let mut r = results(vec![epoll()]);
        r.models[0].http = vec![
            http_point(10, KeepAlive, 40_000.0, Some(100.0)),
            http_point(100, KeepAlive, 50_000.0, Some(100.0)),
            http_point(10, NewConnection, 9_000.0, Some(60.0)),
            http_point(10, TlsKeepAlive, 30_000.0, Some(100.0)),
            http_point(100, TlsKeepAlive, 20_000.0, Some(100.0)),
            // 2,000 full handshakes a second on 80% of the core: 2,500 per CPU-second, so
            // 50,000 take 20 s of it.
            http_point(10, TlsFullHandshake, 2_000.0, Some(80.0)),
            http_point(100, TlsFullHandshake, 1_500.0, Some(100.0)),
        ];
        r.nginx = Some(ModelResult {
            model: "nginx".into(),
            http: vec![http_point(10, KeepAlive, 60_000.0, None), http_point(10, TlsFullHandshake, 1_000.0, None)],
            ..ModelResult::default()
        });
        let text = predict(&r, 50_000).expect("a plan");
        assert!(
            text.contains("| epoll | 50,000/s at c=100 | 30,000/s at c=10 | 9,000/s at c=10 (client-bound: at least) | 2,000/s at c=10 | 20.0 s (2,500 handshakes per CPU-second at c=10, 80% of its core) |"),
            "{text}"
        );
        // nginx's CPU not read: its whole core assumed, and said so.
        assert!(
            text.contains("| nginx | 60,000/s at c=10 | not measured | not measured | 1,000/s at c=10 | 50.0 s (1,000 handshakes per CPU-second at c=10, server CPU not measured: its whole core assumed) |"),
            "{text}"
        );
        assert!(!text.contains("have no HTTPS point"), "{text}");
        // Results from before HTTPS: the HTTP capacity, and HTTPS said to be not measured.
        r.models[0].http.retain(|p| !p.tls);
        r.nginx = None;
        let text = predict(&r, 50_000).expect("a plan");
        assert!(text.contains("| epoll | 50,000/s at c=100 | not measured | 9,000/s at c=10 (client-bound: at least) | not measured | not measured |"), "{text}");
        assert!(text.contains("These results have no HTTPS point"), "{text}");
        // No HTTP point at all: no such table.
        r.models[0].http.clear();
        assert!(!predict(&r, 50_000).expect("a plan").contains("HTTP and HTTPS on one server core"));
    }

    /// Every figure of seed 004's Table 14-1 (16 KiB buffers, a 200-byte context).
    #[test]
    fn memory_matches_table_14_1() {
        let per_op = (16384, 200);
        for (connections, ops, total) in [
            (10, 10, 1_658_400u64),
            (1_000, 10, 165_840_000),
            (50_000, 10, 8_292_000_000),
            (10, 2, 331_680),
            (1_000, 2, 33_168_000),
            (50_000, 2, 1_658_400_000),
        ] {
            assert_eq!(memory(connections, ops, per_op.0, per_op.1).bytes, Some(total), "{connections} x {ops}");
        }
        let table = memory_table(&[10, 1000, 50000], &[10, 2], 16384, 200);
        assert!(table.contains("| 50,000 | 10 | 8,292,000,000 |"), "{table}");
        assert!(table.contains("16,584 bytes per operation"), "{table}");
    }

    /// Past 64 bits the table says so, rather than print a saturated (false) figure or panic.
    #[test]
    fn memory_past_64_bits_is_not_a_number() {
        assert_eq!(memory(u64::MAX, 10, 16384, 200).bytes, None);
        assert_eq!(memory(10, 10, 16384, u64::MAX).bytes, None);
        let table = memory_table(&[u64::MAX], &[2], 16384, 200);
        assert!(table.contains("| 18,446,744,073,709,551,615 | 2 | more than 2^64 (too large to count) |"), "{table}");
        let table = memory_table(&[10], &[2], 16384, u64::MAX);
        assert!(table.contains("more than 2^64 (too large to count) bytes per operation"), "{table}");
    }

    /// Every figure of seed 004's Table 14-2.
    #[test]
    fn bandwidth_matches_table_14_2() {
        for (connections, megabits, per_connection) in [
            (100, 10.0, 12_500.0),
            (1_000, 10.0, 1_250.0),
            (50_000, 10.0, 25.0),
            (100, 100.0, 125_000.0),
            (1_000, 100.0, 12_500.0),
            (50_000, 100.0, 250.0),
        ] {
            assert_eq!(bandwidth(connections, megabits).bytes_per_s_per_connection, per_connection);
        }
    }

    use crate::results::{Machine, ModelResult, Row};

    fn row(kind: RowKind, connected: u64, rss: u64, kernel: u64, threads: u64, cpu: f64) -> Row {
        Row {
            kind: Some(kind),
            attempted: connected,
            connected,
            server_rss_kib: rss,
            kernel_tcp_kib: kernel,
            threads,
            cpu_min_pct: cpu * 0.8,
            cpu_max_pct: cpu,
            ..Row::default()
        }
    }

    fn model(name: &str, rows: Vec<Row>) -> ModelResult {
        ModelResult { model: name.into(), rows, ..ModelResult::default() }
    }

    /// Three rows of a fixed-thread model: 3,000 KiB + 1 KiB per connection, 2 KiB of kernel
    /// memory per connection, 5 threads whatever the load; CPU 16–20% at 3,000 connections and
    /// 36–45% at 8,000, which 0.0053–0.0056% a connection fits.
    fn epoll() -> ModelResult {
        model(
            "epoll",
            vec![
                row(RowKind::Flood, 1000, 4000, 2000, 5, 90.0),
                row(RowKind::RateLimited, 3000, 6000, 6000, 5, 20.0),
                row(RowKind::Maximum, 8000, 11000, 16000, 5, 45.0),
            ],
        )
    }

    fn results(models: Vec<ModelResult>) -> Results {
        Results {
            models,
            machine: Machine { cores: 4, memory_kib: 64 << 20, open_files_limit: 100_000, ..Machine::default() },
            ..Results::default()
        }
    }

    /// A maximum row served by four processes carries four fixed costs: the fit takes them
    /// out before it weighs a connection (3,000 KiB a process + 1 KiB a connection here).
    #[test]
    fn rows_served_by_several_processes_count_the_fixed_cost_once_each() {
        let points = [(1000, 1, 4000.0), (3000, 1, 6000.0), (50_000, 4, 62_000.0)];
        let line = fit(&points, "KiB").unwrap();
        assert!((line.fixed - 3000.0).abs() < 1e-6 && (line.per_connection - 1.0).abs() < 1e-9, "{line:?}");
        // Read as if on one process, the same rows would put the fixed costs on the connections.
        let naive = fit(&[(1000, 1, 4000.0), (3000, 1, 6000.0), (50_000, 1, 62_000.0)], "KiB").unwrap();
        assert!(naive.per_connection > 1.1, "{naive:?}");
        // Every row with the same connections per process cannot tell the two apart.
        let same = fit(&[(1000, 1, 4000.0), (4000, 4, 16_000.0)], "KiB").unwrap_err();
        assert!(same.contains("same connections per server process"), "{same}");
    }

    #[test]
    fn the_fit_keeps_fixed_costs_apart_from_per_connection_costs() {
        let line = fit(&[(1000, 1, 4000.0), (3000, 1, 6000.0), (8000, 1, 11000.0)], "KiB").unwrap();
        assert_eq!((line.fixed.round(), line.per_connection), (3000.0, 1.0));
        assert_eq!(line.through, [1000, 3000, 8000]);
        assert_eq!(line.at(50_000, 1), 53_000.0);
        assert_eq!(line.at(50_000, 3), 59_000.0, "the fixed cost once per process");
        let one = fit(&[(1000, 1, 4000.0), (1000, 1, 4100.0)], "KiB").unwrap_err();
        assert!(one.contains("1,000 connections only"), "{one}");
        let falls = fit(&[(1000, 1, 7168.0), (8000, 1, 2440.0)], "KiB").unwrap_err();
        assert!(
            falls.contains("negative cost per connection (-0.68 KiB), which no connection has: it falls from the first row to the last (7,168 KiB at 1,000 connections on 1 process, 2,440 KiB at 8,000 on 1)"),
            "{falls}"
        );
    }

    /// A fixed-thread model keeps its threads and its fixed memory at the target: the old
    /// prediction multiplied the slope alone and printed 0 threads.
    #[test]
    fn fixed_costs_and_every_measured_figure_reach_the_prediction() {
        let table = predict(&results(vec![epoll()]), 50_000).unwrap();
        assert!(
            table.contains(
                "| epoll | 52 MiB (1.00 KiB/connection) | 98 MiB (2.00 KiB/connection) | 2.67–2.81 (5.33–5.62% of a core per 1,000 connections) | 5 (fixed) | 1,000, 3,000, 8,000; extrapolated ×6.2 |"
            ),
            "{table}"
        );
        assert!(table.contains("CPU, cores (at the rate-limited rows' traffic)"), "{table}");
        assert!(!table.contains(" 0 MiB"), "{table}");
    }

    #[test]
    fn threads_per_connection_are_fitted_from_the_rows() {
        let blocking = model(
            "blocking",
            vec![
                row(RowKind::Flood, 1000, 20_000, 3000, 2005, 50.0),
                row(RowKind::RateLimited, 3000, 60_000, 9000, 6005, 10.0),
                row(RowKind::Maximum, 8000, 160_000, 24_000, 16_005, 25.0),
            ],
        );
        let poll64 = model(
            "poll64",
            vec![
                row(RowKind::Flood, 640, 5000, 1000, 14, 50.0),
                row(RowKind::RateLimited, 6400, 9000, 10_000, 104, 10.0),
            ],
        );
        let table = predict(&results(vec![blocking.clone(), poll64]), 50_000).unwrap();
        assert!(table.contains("| 100,005 (2.0 per connection) |"), "{table}");
        assert!(table.contains("| 785 (1 per 64 connections) |"), "{table}");
        assert!(table.contains("poll64, CPU: measured at 6,400 connections only"), "{table}");

        // Past the machine's thread limit, a thread-per-connection model is refused.
        let mut r = results(vec![blocking]);
        r.machine.thread_limits.insert("kernel.threads-max".into(), 60_000);
        r.machine.thread_limits.insert("RLIMIT_NPROC".into(), 90_000);
        let table = predict(&r, 50_000).unwrap();
        assert!(
            table.contains(
                "blocking cannot hold 50,000 connections here: it would need about 100,005 threads (2.0 per connection), over kernel.threads-max 60,000."
            ),
            "{table}"
        );
        assert!(!table.contains("100,005 (2.0"), "no figures for a refused model: {table}");
    }

    #[test]
    fn select_is_refused_past_fd_setsize() {
        let select = model(
            "select",
            vec![row(RowKind::Flood, 1000, 5280, 7168, 4, 100.0), row(RowKind::RateLimited, 1017, 5228, 4096, 4, 57.0)],
        );
        let table = predict(&results(vec![select.clone(), epoll()]), 50_000).unwrap();
        assert!(table.contains("select cannot hold 50,000 connections: FD_SETSIZE is 1,024."), "{table}");
        assert!(table.contains("| select | cannot hold 50,000 (below) |"), "{table}");
        // Within its ceiling it is planned like any other.
        let table = predict(&results(vec![select]), 1000).unwrap();
        assert!(!table.contains("cannot hold"), "{table}");
    }

    #[test]
    fn memory_beyond_the_machine_is_refused() {
        let mut r = results(vec![epoll()]);
        r.machine.memory_kib = 100 << 10;
        let table = predict(&r, 50_000).unwrap();
        assert!(
            table.contains(
                "epoll cannot hold 50,000 connections here: it would need about 149 MiB of memory, over the machine's 100 MiB."
            ),
            "{table}"
        );
    }

    #[test]
    fn unmeasured_kernel_memory_is_said_so_never_zero() {
        let mut m = epoll();
        m.rows[1].kernel_tcp_kib = 0;
        let table = predict(&results(vec![m]), 50_000).unwrap();
        assert!(table.contains("| 52 MiB (1.00 KiB/connection) | not measured |"), "{table}");
        assert!(table.contains(
            "epoll, kernel socket memory: not measured (no kernel socket memory recorded with 3,000 connections open)"
        ));
    }

    /// Kernel memory comes from the socket slab and buffers the run added, the server's share
    /// of them: on loopback the run added two sockets per connection, so half. The old plan
    /// read sockstat's buffer pages alone, 0 for idle connections.
    #[test]
    fn kernel_memory_is_the_servers_share_of_the_measured_slab_and_buffers() {
        use crate::results::{KernelMemory, SlabCache, SockstatTcp};
        // One 4 KiB page per slab holding one 2 KiB socket: 4 KiB of slab per socket, two
        // sockets per connection, plus 1 page of buffers per 1,000 connections.
        let kernel = |connections: u64| {
            let cache =
                |slabs: u64| SlabCache { num_slabs: slabs, pagesperslab: 1, objsize: 2048, ..SlabCache::default() };
            let tcp = |alloc: u64, mem_pages: u64| SockstatTcp { alloc, mem_pages, ..SockstatTcp::default() };
            KernelMemory {
                page_size: 4096,
                sockstat_baseline: Some(tcp(10, 5)),
                sockstat_peak: Some(tcp(10 + 2 * connections, 5 + connections / 1000)),
                slab_baseline: Some([("TCP".to_owned(), cache(100))].into()),
                slab_peak: Some([("TCP".to_owned(), cache(100 + 2 * connections))].into()),
                slab_unmeasured: None,
            }
        };
        let mut m = epoll();
        for r in &mut m.rows {
            r.kernel_tcp_kib = 0;
            r.kernel = Some(kernel(r.connected));
        }
        let table = predict(&results(vec![m]), 50_000).unwrap();
        // 4 KiB of slab per connection plus 2 KiB of buffers per 1,000: 4.002 KiB a connection,
        // 195 MiB at 50,000.
        assert!(table.contains("| 52 MiB (1.00 KiB/connection) | 195 MiB (4.00 KiB/connection) |"), "{table}");
    }

    /// `row` with the figures the harness samples from the server marked by how many samples
    /// each came from (`[connections, rss, threads, cpu]`); a figure with none is the 0 it
    /// started at.
    fn sampled(row: &Row, counts: [u64; 4]) -> Row {
        let mut v = serde_json::to_value(row).expect("a row serializes");
        let [connections, rss, threads, cpu] = counts;
        v["samples"] = serde_json::json!({"connections": connections, "rss": rss, "threads": threads, "cpu": cpu});
        if connections == 0 {
            v["connected"] = 0.into();
        }
        if rss == 0 {
            v["server_rss_kib"] = 0.into();
        }
        if threads == 0 {
            v["threads"] = 0.into();
        }
        if cpu == 0 {
            v["cpu_min_pct"] = 0.0.into();
            v["cpu_max_pct"] = 0.0.into();
        }
        serde_json::from_value(v).expect("a row deserializes")
    }

    /// The 3,000-connection row's /proc/PID could not be read: its RSS, threads and CPU are
    /// zeros no sample gave, and the lines go through the other rows.
    #[test]
    fn a_figure_no_sample_gave_stays_out_of_the_fit() {
        let mut m = epoll();
        m.rows[1] = sampled(&m.rows[1], [20, 0, 0, 0]);
        let table = predict(&results(vec![m]), 50_000).unwrap();
        assert!(
            table.contains(
                "| epoll | 52 MiB (1.00 KiB/connection) | 98 MiB (2.00 KiB/connection) | not derivable | 5 (fixed) |"
            ),
            "{table}"
        );
        assert!(
            table.contains("epoll, server memory: not measured with 3,000 connections open (no sample), so that row is left out of the fit"),
            "{table}"
        );
        assert!(table.contains("epoll, CPU: measured at 8,000 connections only"), "{table}");
    }

    #[test]
    fn a_figure_no_row_sampled_is_not_measured_never_zero() {
        let mut m = epoll();
        for r in &mut m.rows {
            *r = sampled(r, [20, 4, 0, 3]);
        }
        let table = predict(&results(vec![m]), 50_000).unwrap();
        assert!(table.contains("| 2.67–2.81 (5.33–5.62% of a core per 1,000 connections) | not measured | 1,000, 3,000, 8,000; extrapolated ×6.2 |"), "{table}");
        assert!(table.contains("epoll, threads: not measured (no sample in any row)"), "{table}");
        assert!(!table.contains("0 (fixed)"), "{table}");
    }

    /// Without the server's own count there is no connection count to fit against: the model
    /// is not measured, and the plan does not say no connection was held.
    #[test]
    fn rows_without_the_servers_connection_count_are_not_measured() {
        let mut m = epoll();
        for r in &mut m.rows {
            *r = sampled(r, [0, 4, 4, 3]);
        }
        let err = predict(&results(vec![m.clone()]), 50_000).unwrap_err().to_string();
        assert!(err.contains("no model has a row with its connections counted by the server"), "{err}");
        let table = predict(&results(vec![m, epoll_named("poll")]), 50_000).unwrap();
        assert!(
            table.contains("| epoll | not measured: the server reported no count of its connections in any row |"),
            "{table}"
        );
    }

    fn epoll_named(name: &str) -> ModelResult {
        ModelResult { model: name.into(), ..epoll() }
    }

    #[test]
    fn past_the_open_files_limit_it_takes_more_processes() {
        let mut r = results(vec![epoll()]);
        r.machine.open_files_limit = 20_000;
        r.parameters = serde_json::json!({"block": 1000, "block_rate": 200_000});
        let table = predict(&r, 50_000).unwrap();
        assert!(table.contains("so it takes 3 server processes"), "{table}");
        // 3 × 3,000 KiB fixed + 50,000 KiB = 59,000 KiB; 15 threads; CPU has no fixed cost a
        // process, and at 200 B/s a connection 5,000 connections are 1 MB/s.
        assert!(table.contains("| epoll | 58 MiB (1.00 KiB/connection) |"), "{table}");
        assert!(table.contains("| 2.67–2.81 (26.7–28.1% of a core per MB/s) | 15 (fixed) |"), "{table}");
        assert!(table.contains("CPU, cores (at 200 B/s per connection)"), "{table}");
    }

    #[test]
    fn within_the_measured_range_nothing_is_called_extrapolated() {
        let table = predict(&results(vec![epoll()]), 5000).unwrap();
        assert!(table.contains("| 1,000, 3,000, 8,000 |"), "{table}");
        assert!(!table.lines().any(|l| l.starts_with("| epoll") && l.contains("extrapolated")), "{table}");
        let table = predict(&results(vec![epoll()]), 100).unwrap();
        assert!(table.contains("| 1,000, 3,000, 8,000; extrapolated below the smallest |"), "{table}");
    }

    /// A figure the rows cannot give does not hide which rows were measured.
    #[test]
    fn the_measured_rows_are_named_when_a_figure_is_not_derivable() {
        let mut m = epoll();
        m.rows[2].server_rss_kib = 3000;
        let table = predict(&results(vec![m]), 50_000).unwrap();
        assert!(table.contains("| epoll | not derivable |"), "{table}");
        assert!(table.contains("| 1,000, 3,000, 8,000; extrapolated ×6.2 |"), "{table}");
        assert!(
            table.contains("epoll, server memory: the line through the rows has a negative cost per connection (-0.23 KiB), which no connection has: it falls from the first row to the last (4,000 KiB at 1,000 connections on 1 process, 6,000 KiB at 3,000 on 1, 3,000 KiB at 8,000 on 1)"),
            "{table}"
        );
    }

    #[test]
    fn partial_runs_are_named() {
        let mut r = results(vec![epoll()]);
        r.in_progress = true;
        assert!(predict(&r, 50_000).unwrap().contains("a run that had not finished"));
        r.in_progress = false;
        r.interrupted = true;
        assert!(predict(&r, 50_000).unwrap().contains("an interrupted run"));
    }

    #[test]
    fn results_with_no_rows_are_an_error() {
        let mut failed = model("epoll", vec![]);
        failed.error = Some("flood row: the server did not start".into());
        let err = predict(&results(vec![failed.clone()]), 50_000).unwrap_err().to_string();
        assert!(err.contains("no model has a row with a connection held"), "{err}");
        assert!(predict(&results(vec![]), 50_000).unwrap_err().to_string().contains("lists no models"));
        // One failed model among measured ones keeps its reason in the table.
        let table = predict(&results(vec![failed, epoll()]), 50_000).unwrap();
        assert!(table.contains("| epoll | not measured: flood row: the server did not start |"), "{table}");
    }

    /// The epoll rows of the full run of 2026-11-23 (docs/images/bench-full-results.json,
    /// trimmed to epoll): flood at 7,000, rate-limited at 12,000 on one process, maximum at
    /// 50,000 on four.
    fn full_run() -> Results {
        serde_json::from_str(include_str!("testdata/bench-full-epoll.json")).expect("the full run's results")
    }

    fn full_row(r: &Results, kind: RowKind) -> &Row {
        r.models[0].rows.iter().find(|row| row.kind == Some(kind)).expect("the row")
    }

    /// The old CPU line went through the highest interval of the 12,000 row (one process) and
    /// of the 50,000 row (four): 3.1 cores at 50,000 with a fixed cost of about -239% of a core
    /// a process. Such a line is refused, and why is said.
    #[test]
    fn the_full_runs_old_cpu_line_is_not_derivable() {
        let r = full_run();
        let (rate, max) = (full_row(&r, RowKind::RateLimited), full_row(&r, RowKind::Maximum));
        let points = [(12_000, 1, rate.cpu_max_pct), (50_000, 4, max.cpu_max_pct)];
        let why = fit(&points, "% of a core").unwrap_err();
        assert!(why.contains("negative fixed cost (-2"), "{why}");
        assert!(why.contains("% of a core per server process), which no process has"), "{why}");
        assert!(
            why.contains("it rises from the first row to the last (7 % of a core at 12,000 connections on 1 process, 69 % of a core at 50,000 on 4)"),
            "{why}"
        );
    }

    /// The kernel socket memory of those rows rises; the line through them is refused for its
    /// negative cost per connection, and the refusal says "rises", from the numbers, and names
    /// it measurement noise with each row's cost per connection.
    #[test]
    fn the_full_runs_kernel_memory_line_says_it_rises() {
        let table = predict(&full_run(), 50_000).unwrap();
        assert!(
            table.contains("- epoll, kernel socket memory: measurement noise: the line through the rows has a negative cost per connection (-0.59 KiB), which no connection has: it rises from the first row to the last (56,816 KiB at 7,000 connections on 1 process, 55,444 KiB at 12,000 on 1, 214,416 KiB at 50,000 on 4), or per connection 8.12 KiB at 7,000, 4.62 at 12,000, 4.29 at 50,000. The socket slab and buffers are counted system-wide"),
            "{table}"
        );
        assert!(!table.contains("falls"), "{table}");
    }

    /// CPU at 50,000 agrees with the 50,000 row (23–69% of a core), and at 12,000 with the
    /// 12,000 row: the old plan said 3.1 cores. These rows have no per-interval samples, so the
    /// plan says their steady part is not available and what stands for it.
    #[test]
    fn the_full_runs_cpu_at_50000_agrees_with_its_own_50000_row() {
        let r = full_run();
        let plan = model_plan(&r, &r.models[0], 50_000).expect("epoll has rows");
        let cpu = plan.cpu.expect("a CPU line");
        for (kind, held) in [(RowKind::RateLimited, 12_000), (RowKind::Maximum, 50_000)] {
            let row = full_row(&r, kind);
            let (low, high) = cpu.at(held);
            assert!(
                row.cpu_min_pct <= low && high <= row.cpu_max_pct,
                "{low:.1}–{high:.1}% at {held} against the row's {:.1}–{:.1}%",
                row.cpu_min_pct,
                row.cpu_max_pct
            );
        }
        let table = predict(&r, 50_000).unwrap();
        assert!(
            table.contains("| epoll | 35 MiB (0.52 KiB/connection) | not derivable (measurement noise) | 0.23–0.29 (2.3–2.9% of a core per MB/s) | 23 (1 per 3563 connections) | 7,000, 12,000, 50,000 |"),
            "{table}"
        );
        assert!(
            table.contains("- epoll, CPU: the steady figure (after the last connect) is not available at 12,000, 50,000 connections, no per-interval samples (results written before they were kept): each of those rows' whole range, its connects included, stands for it"),
            "{table}"
        );
        assert!(!table.contains("cores is more than"), "{table}");
        assert!(table.contains("extrapolated"), "a plan says what it extrapolates: {table}");
    }

    /// With per-interval samples the CPU comes from the intervals after the last connect: the
    /// ramp's 69% no longer widens the 50,000 row, and nothing is said to be unavailable.
    #[test]
    fn cpu_comes_from_the_intervals_after_the_last_connect() {
        use crate::results::Interval;
        let iv = |cpu_pct: f64, held: u64| Interval { cpu_pct, held: Some(held), rss_kib: None, at_s: None };
        let mut r = full_run();
        for row in &mut r.models[0].rows {
            row.intervals = match row.kind {
                Some(RowKind::RateLimited) => {
                    Some(vec![iv(20.0, 5000), iv(30.0, 12_000), iv(5.5, 12_000), iv(6.5, 12_000), iv(6.0, 12_000)])
                }
                Some(RowKind::Maximum) => Some(
                    [(40.0, 10_000), (69.0, 25_000), (60.0, 40_000), (55.0, 50_000)]
                        .into_iter()
                        .chain([(24.0, 50_000), (26.0, 50_000), (25.0, 50_000)])
                        .map(|(c, h)| iv(c, h))
                        .collect(),
                ),
                _ => None,
            };
        }
        let plan = model_plan(&r, &r.models[0], 50_000).unwrap();
        let cpu = plan.cpu.unwrap();
        assert!(cpu.unsteady.is_empty(), "{cpu:?}");
        // 12,000 at 5.5–6.5% and 50,000 at 24–26% (the ramp's intervals left out): a
        // connection costs at least 24/50,000 and at most 26/50,000 of a core.
        let (low, high) = cpu.at(50_000);
        assert!((low - 24.0).abs() < 1e-9 && (high - 26.0).abs() < 1e-9, "{low}–{high}");
        let table = predict(&r, 50_000).unwrap();
        assert!(table.contains("| 0.24–0.26 (2.4–2.6% of a core per MB/s) |"), "{table}");
        assert!(!table.contains("steady figure"), "{table}");
        // A 50,000 row whose steady part costs more per connection than the 12,000 row allows:
        // no line fits both, and none is printed.
        for row in &mut r.models[0].rows {
            if row.kind == Some(RowKind::Maximum) {
                row.intervals = Some(vec![iv(60.0, 50_000), iv(60.0, 50_000), iv(62.0, 50_000)]);
            }
        }
        let table = predict(&r, 50_000).unwrap();
        assert!(table.contains("| not derivable | 23 (1 per 3563 connections) |"), "{table}");
        assert!(
            table.contains("- epoll, CPU: no cost per connection fits every row: the 50,000 row's 60.0%–62.0% of a core over 50,000 connections is more per connection than the 12,000 row's 5.5%–6.5% over 12,000"),
            "{table}"
        );
    }
    use crate::results::{Repeat, Spread};

    /// One repetition of a row: the connections it held and its intervals (no lengths, so each
    /// reading stands as printed).
    fn repeat(round: u32, held: u64, cpu: &[f64], replaced: bool) -> Repeat {
        let iv = |cpu_pct: f64| Interval { cpu_pct, held: Some(held), rss_kib: None, at_s: None };
        Repeat {
            round,
            figures: [(figure::CONNECTIONS_HELD.to_owned(), held as f64)].into(),
            replaced,
            // The first interval has the connects in it; the rest are steady.
            intervals: Some(std::iter::once(iv(50.0)).chain(cpu.iter().map(|&c| iv(c))).collect()),
            ..Repeat::default()
        }
    }

    /// The epoll rows with each paced row's repetitions set: `rate` and `max` list each
    /// repetition's steady readings.
    fn repeated(rate: &[&[f64]], max: &[&[f64]]) -> ModelResult {
        let mut m = epoll();
        for r in &mut m.rows {
            let (held, reps) = match r.kind {
                Some(RowKind::RateLimited) => (3000, rate),
                Some(RowKind::Maximum) => (8000, max),
                _ => continue,
            };
            r.repeats = reps.iter().enumerate().map(|(i, cpu)| repeat(i as u32 + 1, held, cpu, false)).collect();
            r.intervals = r.repeats[0].intervals.clone();
        }
        m
    }

    /// One repetition of each row cannot be fitted (3,000 at 6% is 0.0020% a connection, 8,000
    /// at 12% is 0.0015%); with a second, the union of their steady intervals (5–6% and 12–14%)
    /// admits 0.00167–0.00175% a connection, and the plan says how many repetitions it read.
    #[test]
    fn the_union_of_the_repetitions_intervals_fits_where_one_repetition_does_not() {
        let one = predict(&results(vec![repeated(&[&[6.0, 6.0]], &[&[12.0, 12.0]])]), 50_000).unwrap();
        assert!(one.contains("| 98 MiB (2.00 KiB/connection) | not derivable | 5 (fixed) |"), "{one}");
        assert!(
            one.contains("- epoll, CPU: no cost per connection fits every row: the 3,000 row's 6.0% of a core over 3,000 connections is more per connection than the 8,000 row's 12.0% over 8,000"),
            "a range whose ends print alike prints once: {one}"
        );
        let two =
            predict(&results(vec![repeated(&[&[6.0, 6.0], &[5.0, 5.5]], &[&[12.0, 12.0], &[13.0, 14.0]])]), 50_000)
                .unwrap();
        // 50,000 × 5/3,000 = 83.3% and 50,000 × 14/8,000 = 87.5%.
        assert!(two.contains("| 0.83–0.88 (1.67–1.75% of a core per 1,000 connections) |"), "{two}");
        assert!(
            two.contains("; CPU is read from the steady intervals of its repetitions (2 of 2 at each row); kernel socket memory and threads are the median repetition's (repetitions keep no such figure)"),
            "{two}"
        );
        assert!(!two.contains("keep one repetition a row"), "{two}");
    }

    /// A repetition that was disturbed and measured again is shown, not counted: its readings do
    /// not widen the row's range.
    #[test]
    fn a_replaced_repetition_stays_out_of_the_cpu_range() {
        let mut m = repeated(&[&[6.0, 6.0], &[5.0, 5.5]], &[&[12.0, 12.0], &[13.0, 14.0]]);
        m.rows[2].repeats.push(repeat(3, 8000, &[40.0, 1.0], true));
        let table = predict(&results(vec![m]), 50_000).unwrap();
        assert!(table.contains("| 0.83–0.88 (1.67–1.75% of a core per 1,000 connections) |"), "{table}");
        assert!(table.contains("2 of 2 at each row"), "{table}");
    }

    /// A repetition whose count never settled is left out of the CPU range, and the plan says how
    /// many of the row's repetitions were read.
    #[test]
    fn repetitions_without_a_steady_interval_are_counted_out() {
        let mut m = repeated(&[&[6.0, 6.0], &[5.0, 5.5]], &[&[12.0, 12.0], &[13.0, 14.0]]);
        let mut ramp = repeat(3, 8000, &[], false);
        ramp.intervals = Some(
            [(2000, 30.0), (5000, 60.0), (8000, 99.0)]
                .into_iter()
                .map(|(held, cpu_pct)| Interval { cpu_pct, held: Some(held), rss_kib: None, at_s: None })
                .collect(),
        );
        m.rows[2].repeats.push(ramp);
        let table = predict(&results(vec![m]), 50_000).unwrap();
        assert!(table.contains("| 0.83–0.88 (1.67–1.75% of a core per 1,000 connections) |"), "{table}");
        assert!(
            table.contains(
                "CPU is read from the steady intervals of its repetitions (2 of 2 at 3,000, 2 of 3 at 8,000)"
            ),
            "{table}"
        );
    }

    /// Every cost per connection exactly 0.01% of a core: the cores at the target and the cost
    /// print once each, not "5.00–5.00".
    #[test]
    fn a_range_whose_ends_print_alike_prints_one_figure() {
        let table = predict(&results(vec![repeated(&[&[30.0, 30.0]], &[&[80.0, 80.0]])]), 50_000).unwrap();
        assert!(table.contains("| 5.00 (10.00% of a core per 1,000 connections) |"), "{table}");
        assert!(!table.contains("5.00–5.00"), "{table}");
        assert_eq!(range(0.314, 0.306, |v| format!("{v:.2}")), "0.31");
        assert_eq!(range(0.30, 0.31, |v| format!("{v:.2}")), "0.30–0.31");
    }

    /// Server memory goes through the medians of the repetitions, with the connections held
    /// theirs too: the median repetition's own 11,000 KiB is not what the line goes through.
    #[test]
    fn server_memory_goes_through_the_repetitions_medians() {
        let mut m = epoll();
        let spread = |v: f64| Spread { min: v - 500.0, median: v, max: v + 900.0, n: 3 };
        for (r, (held, rss)) in m.rows.iter_mut().zip([(1000.0, 4000.0), (3000.0, 6000.0), (8000.0, 11_000.0)]) {
            r.server_rss_kib = 1; // the median repetition's own, which the line must not use
            r.spread = [
                (figure::SERVER_RSS_KIB.to_owned(), spread(rss)),
                (figure::CONNECTIONS_HELD.to_owned(), Spread { min: held, median: held, max: held, n: 3 }),
            ]
            .into();
            r.repeats = (1..=3).map(|round| Repeat { round, ..Repeat::default() }).collect();
        }
        let table = predict(&results(vec![m]), 50_000).unwrap();
        assert!(table.contains("| epoll | 52 MiB (1.00 KiB/connection) |"), "{table}");
        assert!(
            table.contains(
                "server memory and connections held are the medians of each row's repetitions (3 at each row)"
            ),
            "{table}"
        );
    }

    /// The plan's steady intervals are those of `Row::steady_cpu`, whose rule it repeats to
    /// have each interval's length.
    #[test]
    fn the_steady_readings_are_the_rows_steady_intervals() {
        let iv = |cpu_pct: f64, held: u64| Interval { cpu_pct, held: Some(held), rss_kib: None, at_s: None };
        for intervals in [
            vec![iv(60.0, 5000), iv(69.0, 10_000), iv(30.0, 14_900), iv(24.0, 15_000), iv(26.0, 14_990), iv(9.0, 300)],
            vec![iv(60.0, 5000), iv(69.0, 10_000), iv(30.0, 15_000)],
            vec![iv(3.0, 3000), iv(1.5, 3000), iv(3.1, 3000)],
        ] {
            let row = Row { intervals: Some(intervals.clone()), ..Row::default() };
            let ours =
                steady_readings(&intervals, 100.0).map(|(r, _)| r.iter().map(|&(low, _)| low).collect::<Vec<_>>());
            assert_eq!(ours, row.steady_cpu());
        }
    }

    /// The epoll and uring rows of a default run on 2026-11-26 (2 cores, beside another build;
    /// one repetition a row): every paced row's intervals are 1–4 clock ticks of CPU. Read as
    /// printed, epoll's 3,000 row (1.5–3.1%) costs more a connection than its 8,000 row (3.0%),
    /// and the plan said "not derivable"; each reading within a tick either way, both fit.
    #[test]
    fn the_default_runs_cpu_is_derivable_within_a_clock_tick() {
        let r: Results = serde_json::from_str(include_str!("../testdata/default-2026-11-26-epoll-uring.json"))
            .expect("the default run's results");
        let epoll = r.models.iter().find(|m| m.model == "epoll").expect("epoll");
        let rate = epoll.rows.iter().find(|row| row.kind == Some(RowKind::RateLimited)).expect("rate-limited row");
        let max = epoll.rows.iter().find(|row| row.kind == Some(RowKind::Maximum)).expect("maximum row");
        let rows = [cpu_row(3000, rate, 100.0).unwrap(), cpu_row(8000, max, 100.0).unwrap()];
        assert!(rows.iter().all(|r| r.unsteady.is_none() && r.used == 1));
        let line = cpu_line(&rows).expect("a CPU line");
        // The 8,000 row's 2.99% over one 1 s interval is 2–4 ticks' worth: at most 3.99/8,000.
        assert!((line.high - 3.99 / 8000.0).abs() < 1e-6, "{line:?}");
        // As printed (no tick allowed either way), no line fits.
        let as_printed = [cpu_row(3000, rate, 0.0).unwrap(), cpu_row(8000, max, 0.0).unwrap()];
        assert!(cpu_line(&as_printed).unwrap_err().contains("no cost per connection fits every row"));

        let table = predict(&r, 50_000).unwrap();
        assert!(table.contains("| epoll | 31 MiB (0.27 KiB/connection) | 257 MiB (5.18 KiB/connection) | 0.12–0.25 (1.2–2.5% of a core per MB/s) | 15 (fixed) |"), "{table}");
        // uring's kernel memory: the line's fixed cost is negative, so it goes through zero.
        assert!(table.contains("| uring | 36 MiB (0.30 KiB/connection) | 289 MiB (5.92 KiB/connection) |"), "{table}");
        assert!(
            table.contains("- uring, kernel socket memory: the least-squares line has a negative fixed cost (-828 KiB per server process), but the baseline is read with the server listening, so a process adds none of its own: fitted through zero instead, 5.92 KiB a connection (the rows: 6.95 KiB at 1,000, 4.97 at 3,000, 6.03 at 8,000)"),
            "{table}"
        );
        assert!(!table.lines().any(|l| l.starts_with("| ") && l.contains("not derivable")), "{table}");
        assert!(!table.contains("- epoll") && !table.contains("uring, CPU"), "nothing else to say: {table}");
        assert!(table.contains("These results keep one repetition a row"), "{table}");
    }
}
