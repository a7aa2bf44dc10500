//! The tables of a run (table.md, the printed summary, the HTML page's tables, the CSVs),
//! drawn from the results alone: both the run and the report read them from here, so neither
//! depends on the other.

use std::fmt::Write as _;

use crate::results::{
    figure, ConnectAttempts, HttpPoint, HttpWorkload, Repeated, Results, Row, RowKind, Spread, WsIdle,
    SOCKET_SLAB_CACHES,
};

/// Why the results are partial, in one paragraph, or None when the run measured everything.
pub fn partial_note(results: &Results) -> Option<String> {
    if !results.interrupted && !results.in_progress {
        return None;
    }
    let measured: Vec<&str> = results.models.iter().map(|m| m.model.as_str()).collect();
    let missing: Vec<&str> =
        results.planned_models.iter().map(String::as_str).filter(|m| !measured.contains(m)).collect();
    let incomplete: Vec<String> = results
        .models
        .iter()
        .filter_map(|m| {
            m.error.as_deref().filter(|e| e.starts_with("interrupted")).map(|e| format!("{} ({e})", m.model))
        })
        .collect();
    let mut note = String::from(if results.in_progress {
        "These results are partial: the run was still going (or was killed) when they were written."
    } else {
        "These results are partial: the run was interrupted."
    });
    if !incomplete.is_empty() {
        let _ = write!(note, " Stopped part-way: {}.", incomplete.join(", "));
    }
    if !missing.is_empty() {
        let _ = write!(note, " Not measured: {}.", missing.join(", "));
    }
    if results.nginx.is_none() {
        note.push_str(" nginx not measured.");
    }
    Some(note)
}

/// One line of what was run: profile, rounds, when, on what machine.
pub fn run_line(results: &Results) -> String {
    let m = &results.machine;
    let rounds = match results.rounds {
        0 | 1 => "1 round (each row and point measured once)".to_owned(),
        n => format!("{n} rounds (each row and point measured {n} times, the models in turn)"),
    };
    format!(
        "Profile `{}`, {rounds}, started {}{}. Machine: {} ({} cores, {} MiB), Linux {}; somaxconn {}; open files {}.",
        results.profile,
        results.started,
        if results.interrupted { " (interrupted)" } else { "" },
        m.cpu_model,
        m.cores,
        m.memory_kib / 1024,
        m.kernel,
        m.somaxconn,
        m.open_files_limit,
    )
}

/// The tables without the verdict or the partial note: the run, Table 6-3, the seed's table
/// beside it, the HTTP, HTTPS, HTTP/2 and HTTP/3 sweeps, WebSocket and UDP. A section with nothing measured says
/// so instead of printing a table header with no columns to fill.
pub fn tables_body_markdown(results: &Results) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "{}\n\n## I/O models (Table 6-3)\n\nRows: flood, rate-limited (blocks of connections, each block limited in total), maximum (connections added in blocks at a fixed rate, rate-limited). Connected is the server's own peak of open connections. Threads counts every thread of the server process, three of which (main, signals, stats) belong to the command line. The kernel memory columns (the counterpart of the seed's non-paged pool) are explained under the table. A client-bound row had the load generator at 90% or more of its cores.\n\n",
        run_line(results)
    );
    if results.models.is_empty() {
        s.push_str("No model was measured.\n\n");
    } else {
        let _ = writeln!(s, "{}", results.table_markdown());
        if let Some(seed) = results.seed_markdown() {
            let _ = writeln!(s, "## {SEED_HEADING}\n\n{seed}");
        }
    }
    for sweep in SWEEPS {
        let _ = write!(
            s,
            "## {} 4 KiB responses by concurrency{}\n\n",
            sweep,
            if sweep == "HTTP" { " (seed 003)" } else { "" }
        );
        if results.has_sweep(sweep) {
            let _ = writeln!(s, "{}", results.sweep_markdown(sweep));
        } else {
            let _ = write!(s, "No {sweep} point was measured.\n\n");
        }
    }
    s.push_str("## WebSocket\n\n");
    if results.has_websocket() {
        s.push_str(&results.ws_markdown());
        s.push('\n');
    } else {
        s.push_str("No WebSocket point was measured.\n\n");
    }
    s.push_str("## UDP echo\n\n");
    if results.models.iter().any(|m| m.udp.is_some()) {
        s.push_str(&results.udp_markdown());
    } else {
        s.push_str("No UDP point was measured.\n");
    }
    s
}

/// The sweeps of the HTTP tables, as [`HttpWorkload::sweep`] names them, in order.
pub const SWEEPS: [&str; 4] = ["HTTP", "HTTPS", "HTTP/2", "HTTP/3"];

/// The heading of the seed's own table.
pub const SEED_HEADING: &str = "The seed's Table 6-3, as printed";

/// What marks a row or point some of whose kept repetitions the machine disturbed.
pub const DISTURBED_MARK: &str = "†";

/// Under a table with a disturbed row or point.
pub const DISTURBED_NOTE: &str = "† The machine was busy during this measurement: other processes used more CPU on the server's or the load generator's cores than the run allowed in at least one of its repetitions, so its figures are not the model's alone. See results.json `interference`.";

/// Under a table with ranges.
pub const SPREAD_NOTE: &str = "A figure with a range in brackets is the median of the repetitions, then their lowest–highest; one without had a single repetition, or all alike.";

/// A figure's cell: its median (with `unit`), then the repetitions' lowest–highest in brackets
/// when there were several and they differ as shown: "138,862/s (137,647–140,100)".
pub fn spread_cell(s: &Spread, show: &dyn Fn(f64) -> String, unit: &str) -> String {
    let median = format!("{}{unit}", show(s.median));
    let (lo, hi) = (show(s.min), show(s.max));
    if s.n < 2 || lo == hi {
        median
    } else {
        format!("{median} ({lo}–{hi})")
    }
}

/// " †" after a row's or point's headline when the machine disturbed it, else nothing.
pub fn disturbed_suffix(item: &dyn Repeated) -> String {
    if item.disturbed_repeats() > 0 {
        format!(" {DISTURBED_MARK}")
    } else {
        String::new()
    }
}

/// The spread of figure `name` of `item`, when `own` (the result's own value of it) says it
/// was measured at all.
pub(crate) fn measured_spread(item: &dyn Repeated, name: &str, own: Option<f64>) -> Option<Spread> {
    let own = own?;
    Some(item.spread_of(name).unwrap_or(Spread::single(own)))
}

/// Whether any row or point of the results had several repetitions that differ.
fn any_spread<'a>(items: impl IntoIterator<Item = &'a dyn Repeated>) -> bool {
    items.into_iter().any(|i| i.spreads().values().any(|s| s.n > 1 && !s.is_single()))
}

/// Who the bottleneck was for a row or point, from its kept repetitions: "client-bound" (all
/// of them), "client-bound in 2 of 3", "server-bound", or nothing when neither.
pub fn bound_note(item: &dyn Repeated, client_bound: bool) -> String {
    let kept = item.kept().len();
    if kept == 0 {
        return if client_bound { "client-bound".into() } else { String::new() };
    }
    let said = |what: &str, n: usize| match n {
        0 => None,
        n if n == kept => Some(what.to_owned()),
        n => Some(format!("{what} in {n} of {kept}")),
    };
    [said("client-bound", item.client_bound_repeats()), said("server-bound", item.server_bound_repeats())]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
}

impl Results {
    /// Table 6-3 as the seed lays it out, one model per block of rows, in markdown, followed
    /// by its notes: where a cell's note went (numbered, under the table, so that no cell
    /// wraps), the spread, disturbed rows, and how the kernel columns were measured. The seed's
    /// own rows are in a table of their own ([`Results::seed_markdown`]).
    pub fn table_markdown(&self) -> String {
        const HEADER: [&str; 12] = [
            "I/O model",
            "Attempted/Connected",
            "Memory Used (KiB, server RSS)",
            "Kernel socket buffers (KiB)",
            "Kernel socket slab (KiB)",
            "CPU Usage (% of one core)",
            "Threads",
            "Throughput (Send/Receive Bytes Per Second)",
            "Latency p50/p99",
            "Errors",
            "Client CPU (% of one core)",
            "Received per server CPU-second",
        ];
        let mut s = String::new();
        let _ = writeln!(s, "| {} |", HEADER.join(" | "));
        let _ = writeln!(s, "|{}", "---|".repeat(HEADER.len()));
        let failed = |s: &mut String, name: &str, error: &str| {
            let _ = writeln!(s, "| {name} | failed: {} |{}", error.replace('|', "/"), " |".repeat(HEADER.len() - 2));
        };
        let mut notes: Vec<String> = Vec::new();
        let mut disturbed = false;
        for m in &self.models {
            if let Some(error) = &m.error {
                if m.rows.is_empty() {
                    failed(&mut s, &m.model, error);
                    continue;
                }
            }
            // A failure after some rows (a later row, the HTTP sweep, UDP) is said under them.
            let failure = m.error.as_ref().filter(|_| !m.rows.is_empty());
            for (i, r) in m.rows.iter().enumerate() {
                let name = if i == 0 { m.model.as_str() } else { "" };
                let errors: u64 = r.errors.values().sum();
                let bound = bound_note(r, r.client_bound);
                let client = if bound.is_empty() {
                    format!("{:.0}%", r.client_cpu_pct)
                } else {
                    format!("{:.0}% ({bound})", r.client_cpu_pct)
                };
                let count = |n: Option<Spread>| {
                    n.map_or_else(|| NOT_MEASURED.to_owned(), |s| spread_cell(&s, &|v| thousands(v.round() as u64), ""))
                };
                let held = measured_spread(r, figure::CONNECTIONS_HELD, r.connected_held().map(|c| c as f64));
                let rss = measured_spread(r, figure::SERVER_RSS_KIB, r.server_rss().map(|k| k as f64));
                let received = measured_spread(r, figure::RECEIVED_BYTES_PER_S, Some(r.received_bytes_per_s))
                    .unwrap_or(Spread::single(r.received_bytes_per_s));
                let per_cpu = measured_spread(r, figure::BYTES_PER_CPU_SECOND, r.bytes_per_cpu_second());
                let note = self.connections_note(&m.model, r);
                let note_mark = if note.is_empty() {
                    String::new()
                } else {
                    notes.push(format!("{}, {}: {note}", m.model, r.kind.map_or("row", RowKind::label)));
                    format!(" [{}]", notes.len())
                };
                let mark = disturbed_suffix(r);
                disturbed |= !mark.is_empty();
                let _ = writeln!(
                    s,
                    "| {name} | {}/{}{note_mark} | {} | {} | {} | {} | {} | {}/{}{mark} | {} | {} | {client} | {} |",
                    thousands(r.attempted),
                    count(held),
                    count(rss),
                    r.kernel_buffers_kib().map_or_else(|| NOT_MEASURED.to_owned(), thousands),
                    r.kernel_slab_kib().map_or_else(|| NOT_MEASURED.to_owned(), signed_thousands),
                    r.server_cpu_pct()
                        .map_or_else(|| NOT_MEASURED.to_owned(), |(min, max)| format!("{min:.0}–{max:.0}%")),
                    r.server_threads().map_or_else(|| NOT_MEASURED.to_owned(), thousands),
                    thousands(r.sent_bytes_per_s as u64),
                    spread_cell(&received, &|v| thousands(v as u64), ""),
                    latency_pair(r.p50_us, r.p99_us),
                    errors_cell(errors, r.connects),
                    per_cpu.map_or_else(|| NOT_MEASURED.to_owned(), |s| spread_cell(&s, &|v| decimal(v / 1e6), " MB")),
                );
            }
            if let Some(error) = failure {
                failed(&mut s, "", error);
            }
        }
        for (i, note) in notes.iter().enumerate() {
            let _ = write!(s, "\n[{}] {note}\n", i + 1);
        }
        if any_spread(self.models.iter().flat_map(|m| &m.rows).map(|r| r as &dyn Repeated)) {
            let _ = writeln!(s, "\n{SPREAD_NOTE} The throughput's range is of the bytes received.");
        }
        if disturbed {
            let _ = writeln!(s, "\n{DISTURBED_NOTE}");
        }
        if self.models.iter().flat_map(|m| &m.rows).any(|r| r.server_procs.unwrap_or(1) > 1) {
            let _ = writeln!(s, "\n{}", PROCS_NOTE.replace("{limit}", &thousands(self.machine.open_files_limit)));
        }
        let _ = write!(s, "\n{}", self.kernel_note());
        if self.models.iter().flat_map(|m| &m.rows).any(Row::has_unsampled) {
            s.push_str(&format!("\n{UNSAMPLED_NOTE}\n"));
        }
        s
    }

    /// The seed's published rows for the counterparts of the models measured, as printed, in a
    /// table of their own with a note on where they come from; `None` when no model measured
    /// has a counterpart.
    pub fn seed_markdown(&self) -> Option<String> {
        let seeds: Vec<&crate::seed::SeedModel> =
            self.models.iter().filter_map(|m| crate::seed::counterpart_of(&m.model)).collect();
        if seeds.is_empty() {
            return None;
        }
        let mut s = String::from("| Seed's I/O model | Here | Attempted/Connected | Memory Used (KB) | Non-paged pool (KB) | CPU Usage | Threads | Throughput (Send/Receive Bytes Per Second) |\n|---|---|---|---|---|---|---|---|\n");
        for seed in seeds {
            for (i, r) in seed.rows.iter().enumerate() {
                let (name, here) = if i == 0 { (seed.name, seed.counterpart) } else { ("", "") };
                let _ = writeln!(
                    s,
                    "| {name} | {here} | {}/{} | {} | {} | {} | {} | {}/{} |",
                    thousands(r.attempted),
                    thousands(r.connected),
                    thousands(r.memory_kb),
                    thousands(r.non_paged_pool_kb),
                    r.cpu,
                    thousands(r.threads),
                    thousands(r.sent_per_s),
                    thousands(r.received_per_s),
                );
            }
        }
        let _ = write!(s, "\n{SEED_NOTE}\n");
        Some(s)
    }

    /// A row's note on its connection counts, said under the table: how many server processes
    /// held them, and for a row that held fewer than it attempted, what stopped it. Empty when
    /// there is nothing to say.
    fn connections_note(&self, model: &str, r: &Row) -> String {
        let mut note = Vec::new();
        if let Some(procs) = r.server_procs.filter(|&n| n > 1) {
            note.push(format!("{procs} server processes"));
        }
        if let Some(why) = self.stopped_by(model, r) {
            note.push(format!("stopped by {why}"));
        }
        note.join("; ")
    }

    /// What kept a row below the connections it attempted, from the limits the server counted
    /// (the one it met most often), else from what the load saw; `None` for a row that held
    /// at least 99% of them (the server's gauge is sampled ten times a second), that has no
    /// connection count, or whose server counters were not kept (older results).
    pub fn stopped_by(&self, model: &str, r: &Row) -> Option<String> {
        let held = r.connected_held()?;
        if held * 100 >= r.attempted * 99 {
            return None;
        }
        let limits = r.server_limits.as_ref()?;
        // --max-conns is the server's own cap: named only when nothing else was met.
        let hit = limits
            .iter()
            .filter(|(name, _)| name.as_str() != "max_conns")
            .max_by_key(|(_, &n)| n)
            .or_else(|| limits.iter().next());
        if let Some((name, _)) = hit {
            return Some(self.limit_named(model, name, r));
        }
        if r.client_bound {
            return Some("the load generator (client-bound)".into());
        }
        // The server is pinned to one core (of two or more): one it used up could not keep
        // every connection answered within the load's timeout.
        if let Some((min, max)) = r.server_cpu_pct().filter(|&(_, max)| max >= 95.0) {
            let errors: u64 = r.errors.values().sum();
            return Some(format!(
                "the server's CPU ({min:.0}–{max:.0}% of its core; {} failed connections or replies)",
                thousands(errors)
            ));
        }
        let errors: u64 = r.errors.values().sum();
        if errors == 0 {
            return Some("the row's time: connections were still being added when it ended".into());
        }
        let (kind, n) = r.errors.iter().max_by_key(|(_, &n)| n)?;
        Some(format!("failing connects ({} {}); the server counted no limit", thousands(*n), kind.replace('_', " ")))
    }

    /// A limit the server counted (`Limit::name`), said with this machine's value of it.
    fn limit_named(&self, model: &str, name: &str, r: &Row) -> String {
        match name {
            "open_files" => format!(
                "the open-files limit (RLIMIT_NOFILE, {} per process)",
                thousands(self.machine.open_files_limit)
            ),
            "system_files" => "the system's open-files limit (fs.file-max)".into(),
            "memory" => "memory (accept failed with ENOBUFS or ENOMEM)".into(),
            "threads" => {
                let smallest = self.machine.thread_limits.iter().min_by_key(|(_, &n)| n);
                let held =
                    r.server_threads().map(|t| format!(", {} threads running", thousands(t))).unwrap_or_default();
                match smallest {
                    Some((limit, n)) => format!("the thread limit ({limit} {}{held})", thousands(*n)),
                    None => format!("the thread limit{held}"),
                }
            }
            "memory_maps" => match self.machine.max_map_count {
                Some(n) => {
                    format!("the memory-map limit of a process (vm.max_map_count {}; a thread takes 4)", thousands(n))
                }
                None => "the memory-map limit of a process (vm.max_map_count; a thread takes 4)".into(),
            },
            "ceiling" => match model.parse::<sockscale_server::Model>().ok().and_then(|m| m.capabilities().ceiling) {
                Some(c) => format!("the model's ceiling ({} {})", c.set_by, thousands(c.descriptors)),
                None => "the model's ceiling".into(),
            },
            "max_conns" => "--max-conns".into(),
            "queue" => "the queue of connections waiting for a worker".into(),
            other => format!("the server's {other} limit"),
        }
    }

    /// How the kernel columns were measured, and why a cell may say "not measured".
    fn kernel_note(&self) -> String {
        let mut note = format!(
            "Kernel socket buffers: /proc/net/sockstat TCP \"mem\" (pages holding socket buffer data, not the sockets themselves), the largest sample minus its value before the load started. Kernel socket slab: the slab caches that hold the sockets themselves ({}, where the kernel has them as caches of their own), from /proc/slabinfo (readable by root only): their slabs at the sample with the largest total minus before the load; a few connections may fit in slabs already there, so this reads true from hundreds of connections up. Both are system-wide: they count the load generator's end of every loopback connection too, and anything else the machine did meanwhile. \"{NOT_MEASURED}\" means the source could not be read, or the results were written before it was measured.",
            SOCKET_SLAB_CACHES.join(", ")
        );
        let reasons: std::collections::BTreeSet<&str> = self
            .models
            .iter()
            .flat_map(|m| &m.rows)
            .filter_map(|r| r.kernel.as_ref()?.slab_unmeasured.as_deref())
            .collect();
        for reason in reasons {
            let _ = write!(note, " Slab not measured: {reason}.");
        }
        note.push('\n');
        note
    }

    /// The seed-003 sweep over plain HTTP by concurrency: responses per second, measured
    /// request latency, and ab's time per request (1 / throughput), each as its own table.
    pub fn http_markdown(&self) -> String {
        self.sweep_markdown("HTTP")
    }

    /// The same sweep over TLS, in tables of its own: keep-alive, and a new connection (a full
    /// handshake) per request.
    pub fn https_markdown(&self) -> String {
        self.sweep_markdown("HTTPS")
    }

    /// The same page over HTTP/2 (h2c and h2 over TLS, streams on each connection), in tables
    /// of its own.
    pub fn http2_markdown(&self) -> String {
        self.sweep_markdown("HTTP/2")
    }

    /// Whether any model (nginx included) has a point of `sweep` ("HTTP", "HTTPS", "HTTP/2":
    /// see [`HttpWorkload::sweep`]).
    pub fn has_sweep(&self, sweep: &str) -> bool {
        self.all_results().any(|m| m.http.iter().any(|p| p.workload().sweep() == sweep))
    }

    /// The tables of one sweep (see [`SWEEPS`]).
    pub fn sweep_markdown(&self, sweep: &str) -> String {
        let in_sweep = |p: &&HttpPoint| p.workload().sweep() == sweep;
        let mut concurrencies: Vec<u64> =
            self.all_results().flat_map(|m| m.http.iter().filter(in_sweep).map(|p| p.concurrency)).collect();
        concurrencies.sort_unstable();
        concurrencies.dedup();
        let workloads: Vec<HttpWorkload> = HttpWorkload::ALL.into_iter().filter(|w| w.sweep() == sweep).collect();
        let tls = workloads.iter().any(|w| w.tls());
        let points = || self.all_results().flat_map(|m| &m.http).filter(in_sweep);
        let table = |cell: &dyn Fn(&HttpPoint) -> String| -> String {
            let mut s = String::new();
            let header: Vec<String> = concurrencies.iter().map(|c| format!("c={c}")).collect();
            let second = match sweep {
                "HTTP" => "keep-alive",
                "HTTPS" => "connection",
                _ => "protocol",
            };
            let _ = writeln!(s, "| model | {second} | {} |", header.join(" | "));
            let _ = writeln!(s, "|---|---|{}", "---|".repeat(concurrencies.len()));
            for m in self.all_results() {
                for &workload in &workloads {
                    let Some(first) = m.http.iter().find(|p| p.workload() == workload) else { continue };
                    let cells: Vec<String> = concurrencies
                        .iter()
                        .map(|c| {
                            m.http
                                .iter()
                                .find(|p| p.concurrency == *c && p.workload() == workload)
                                .map_or_else(|| "—".into(), cell)
                        })
                        .collect();
                    let how = match workload {
                        HttpWorkload::KeepAlive => "yes".to_owned(),
                        HttpWorkload::NewConnection => "no".to_owned(),
                        HttpWorkload::H2c | HttpWorkload::H2Tls | HttpWorkload::H3 => {
                            let name = match workload {
                                HttpWorkload::H3 => "h3 (QUIC)",
                                HttpWorkload::H2Tls => "h2 (TLS)",
                                _ => "h2c",
                            };
                            first.streams.map_or_else(|| name.to_owned(), |n| format!("{name}, {n} streams"))
                        }
                        _ => workload.connection().to_owned(),
                    };
                    let _ = writeln!(s, "| {} | {how} | {} |", m.model, cells.join(" | "));
                }
            }
            // A model that cannot serve HTTP/3 keeps its row, saying why, as uring64's UDP row
            // says it was not measured.
            if sweep == "HTTP/3" {
                for m in self.models.iter().filter(|m| !m.http.iter().any(|p| in_sweep(&p))) {
                    if let Some(why) = Results::cannot_serve_http3(&m.model) {
                        let blank = vec!["—"; concurrencies.len()].join(" | ");
                        let _ = writeln!(s, "| {} | cannot: {why} | {blank} |", m.model);
                    }
                }
            }
            s
        };
        let mut s = String::new();
        if sweep == "HTTP/3" {
            s.push_str("The same page over HTTP/3 (`serve --http3`: QUIC v1 on UDP at the TCP port's number, ALPN h3), each of the c connections carrying its streams concurrently as in the HTTP/2 sweep; the load generator verifies the server's certificate against the run's own CA. Caddy (quic-go, one process pinned like the servers) serves it beside the models when it is found.\n\n");
        }
        if sweep == "HTTP/2" {
            s.push_str("The same page over HTTP/2, as h2load drives it: h2c (prior knowledge, no TLS) and h2 over TLS (ALPN), each of the c connections carrying its streams concurrently; the TLS connections are set up as the HTTPS ones are.\n\n");
        }
        if sweep == "HTTPS" {
            s.push_str("The same page over TLS: the load generator offers TLS 1.3 and 1.2 and verifies the server's certificate (ECDSA P-256, made for the run) against the run's own CA. Keep-alive rows pay one handshake per connection, when it opens; the other rows open a new connection for every request, each a full handshake (`--tls-resume off`: no session is resumed). nginx serves it with OpenSSL, sockscale with rustls.\n\n");
        }
        if tls {
            if let Some(agreed) = self.negotiated(sweep) {
                let _ = write!(s, "{agreed}\n\n");
            }
        }
        s.push_str("### Responses per second\n\nResponses the load generator received per second over the point's measured time; errors are requests that failed or were answered with an error.\n\n");
        s.push_str(&table(&|p| {
            let rate = measured_spread(p, figure::REQUESTS_PER_S, Some(p.requests_per_s))
                .unwrap_or(Spread::single(p.requests_per_s));
            let bound = bound_note(p, p.client_bound);
            format!(
                "{}{}{}{}{}",
                spread_cell(&rate, &|v| thousands(v as u64), ""),
                disturbed_suffix(p),
                if p.errors > 0 { format!(", {} errors", thousands(p.errors)) } else { String::new() },
                if bound.is_empty() { String::new() } else { format!(" ({bound})") },
                handshakes_short(p)
            )
        }));
        let mut notes = Vec::new();
        if any_spread(points().map(|p| p as &dyn Repeated)) {
            notes.push(SPREAD_NOTE);
        }
        if points().any(|p| p.disturbed_repeats() > 0) {
            notes.push(DISTURBED_NOTE);
        }
        for note in notes {
            let _ = write!(s, "\n{note}\n");
        }
        s.push_str(
            "\n### Request latency, ms: p50 / p99 (mean)\n\nEach request from being sent to its whole response being read, from the load generator's histogram.\n\n",
        );
        s.push_str(&table(&|p| match &p.latency {
            Some(l) => format!("{} / {} ({})", decimal(l.p50_ms), decimal(l.p99_ms), decimal(l.mean_ms)),
            None if p.mean_ms > 0.0 => format!("{NOT_MEASURED} (mean {})", decimal(p.mean_ms)),
            None => NOT_MEASURED.into(),
        }));
        s.push_str(
            "\n### Time per request, ms (1 / throughput, as ab reports it)\n\nThe run's duration divided by the responses of all concurrent connections together: a throughput figure, not how long any request took.\n\n",
        );
        s.push_str(&table(&|p| {
            if p.requests_per_s > 0.0 {
                format!("{:.3}", p.ms_per_request)
            } else {
                "no responses".into()
            }
        }));
        if points().any(|p| p.server_cpu_pct.is_some()) {
            s.push_str(
                "\n### Server CPU, % of one core, and responses per server CPU-second\n\nThe server's user and system time while the load ran (/proc/PID/stat before and after), over that time; the server is pinned to its core, so 100% is all of it.\n\n",
            );
            s.push_str(&table(&|p| match p.server_cpu_pct {
                Some(cpu) if cpu > 0.0 => {
                    let own = p.requests_per_s * 100.0 / cpu;
                    let per_cpu =
                        measured_spread(p, figure::RESPONSES_PER_CPU_SECOND, Some(own)).unwrap_or(Spread::single(own));
                    let show = |v: f64| thousands(v.round() as u64);
                    if per_cpu.n > 1 && show(per_cpu.min) != show(per_cpu.max) {
                        format!("{cpu:.0}% ({}; {}–{})", show(per_cpu.median), show(per_cpu.min), show(per_cpu.max))
                    } else {
                        format!("{cpu:.0}% ({})", show(per_cpu.median))
                    }
                }
                Some(cpu) => format!("{cpu:.0}%"),
                None => NOT_MEASURED.into(),
            }));
        }
        if tls && sweep != "HTTP/3" {
            s.push_str(
                "\n### TLS handshakes: full / resumed / failed, and handshake p50 / p99 ms\n\nThe load generator's count of the point's handshakes, and each from its ClientHello to the handshake's end (apart from the requests' latency above, which counts from the request).\n\n",
            );
            s.push_str(&table(&|p| match &p.handshakes {
                Some(h) => {
                    let failures = if h.failures.is_empty() {
                        String::new()
                    } else {
                        let reasons: Vec<String> =
                            h.failures.iter().map(|(why, n)| format!("{why} {}", thousands(*n))).collect();
                        format!(" ({})", reasons.join(", "))
                    };
                    let latency = h.latency.map_or_else(
                        || format!("; {NOT_MEASURED}"),
                        |l| format!("; {} / {}", decimal(l.p50_ms), decimal(l.p99_ms)),
                    );
                    format!(
                        "{} / {} / {}{failures}{latency}",
                        thousands(h.full),
                        thousands(h.resumed),
                        thousands(h.failed)
                    )
                }
                None => NOT_MEASURED.into(),
            }));
        }
        if sweep == "HTTP/3" && points().any(|p| p.quic.is_some()) {
            s.push_str(
                "\n### QUIC: handshakes completed / failed, handshake p50 / p99 ms, RTT p50 ms, packets lost of sent\n\nThe load generator's count of the point's QUIC connections: each handshake from its first Initial to its completion, each connection's smoothed RTT as it ended, and the packets its loss detection declared lost (their frames sent again); in brackets, what a sockscale server counted itself over the point (its final line: requests answered, handshakes, packets it declared lost).\n\n",
            );
            s.push_str(&table(&|p| match &p.quic {
                Some(q) => {
                    let handshake = q.handshake_latency.map_or_else(
                        || NOT_MEASURED.to_owned(),
                        |l| format!("{} / {}", decimal(l.p50_ms), decimal(l.p99_ms)),
                    );
                    let rtt = q.rtt.map_or_else(|| NOT_MEASURED.to_owned(), |l| decimal(l.p50_ms));
                    let server = p.server_quic.map_or_else(String::new, |c| {
                        format!(
                            " (server: {} requests, {} handshakes, {} packets lost)",
                            thousands(c.h3_requests),
                            thousands(c.quic_handshakes),
                            thousands(c.quic_packets_lost)
                        )
                    });
                    format!(
                        "{} / {}; {handshake}; RTT {rtt}; {} lost of {}{server}",
                        thousands(q.handshakes),
                        thousands(q.handshakes_failed),
                        thousands(q.packets_lost),
                        thousands(q.packets_sent)
                    )
                }
                None => NOT_MEASURED.into(),
            }));
        }
        // Said once, under the plain sweep (nginx) or the HTTP/3 sweep (Caddy): it names the
        // sweep that failed.
        let peer = match sweep {
            "HTTP" => self.nginx.as_ref(),
            "HTTP/3" => self.caddy.as_ref(),
            _ => None,
        };
        if let Some(peer) = peer {
            if let Some(error) = &peer.error {
                let _ = writeln!(s, "\n{}: {error}", peer.model);
            }
        }
        s
    }

    /// What each server's handshakes in `sweep` agreed on (version, suite, ALPN), in one paragraph;
    /// `None` when no point recorded it.
    fn negotiated(&self, sweep: &str) -> Option<String> {
        let mut by_model = Vec::new();
        for m in self.all_results() {
            let mut agreed: Vec<String> = m
                .http
                .iter()
                .filter(|p| p.workload().sweep() == sweep)
                .filter_map(|p| p.handshakes.as_ref())
                .flat_map(|h| &h.negotiated)
                .map(|n| match &n.alpn {
                    Some(alpn) => format!("{} {}, ALPN {alpn}", n.version, n.suite),
                    None => format!("{} {}, no ALPN", n.version, n.suite),
                })
                .collect();
            agreed.sort();
            agreed.dedup();
            if !agreed.is_empty() {
                by_model.push(format!("{}: {}", m.model, agreed.join("; ")));
            }
        }
        (!by_model.is_empty()).then(|| format!("Negotiated: {}.", by_model.join("; ")))
    }

    /// Whether any model has a WebSocket echo point or idle WebSockets (none in results from
    /// before schema 3).
    pub fn has_websocket(&self) -> bool {
        self.models.iter().any(|m| !m.ws.is_empty() || m.ws_idle.is_some())
    }

    /// The WebSocket tables: echo messages by concurrency (per second, per server CPU-second,
    /// latency), and idle WebSockets held with the memory each cost.
    pub fn ws_markdown(&self) -> String {
        let mut s = String::new();
        let mut concurrencies: Vec<u64> = self.models.iter().flat_map(|m| m.ws.iter().map(|p| p.concurrency)).collect();
        concurrencies.sort_unstable();
        concurrencies.dedup();
        if !concurrencies.is_empty() {
            let msg_len = self.models.iter().flat_map(|m| &m.ws).map(|p| p.msg_len).max().unwrap_or(0);
            let _ = write!(
                s,
                "### Echo messages per second, and per server CPU-second\n\nEach of c connections, upgraded from HTTP/1.1 (`serve --proto ws`), sends a {} B binary message, masked as a client must, and waits for its echo before the next (`load ws --pipeline 1`); every echo is compared whole with what was sent. The cell: messages echoed per second; in brackets, the server's CPU (% of one core, /proc/PID/stat before and after) and messages per server CPU-second. Errors are failed connections or exchanges and WebSocket protocol errors.\n\n",
                thousands(msg_len)
            );
            let header: Vec<String> = concurrencies.iter().map(|c| format!("c={c}")).collect();
            let table = |s: &mut String, cell: &dyn Fn(&crate::results::WsPoint) -> String| {
                let _ = writeln!(s, "| model | {} |", header.join(" | "));
                let _ = writeln!(s, "|---|{}", "---|".repeat(concurrencies.len()));
                for m in self.models.iter().filter(|m| !m.ws.is_empty()) {
                    let cells: Vec<String> = concurrencies
                        .iter()
                        .map(|c| m.ws.iter().find(|p| p.concurrency == *c).map_or_else(|| "—".into(), cell))
                        .collect();
                    let _ = writeln!(s, "| {} | {} |", m.model, cells.join(" | "));
                }
            };
            table(&mut s, &|p| {
                let rate = measured_spread(p, figure::MESSAGES_PER_S, Some(p.messages_per_s))
                    .unwrap_or(Spread::single(p.messages_per_s));
                let per_cpu = match (p.server_cpu_pct, p.per_cpu_second()) {
                    (Some(cpu), Some(own)) => {
                        let per = measured_spread(p, figure::MESSAGES_PER_CPU_SECOND, Some(own))
                            .unwrap_or(Spread::single(own));
                        format!(" ({cpu:.0}%; {} per CPU-s)", spread_cell(&per, &|v| thousands(v.round() as u64), ""))
                    }
                    (Some(cpu), None) => format!(" ({cpu:.0}%)"),
                    _ => format!(" (server CPU {NOT_MEASURED})"),
                };
                let bound = bound_note(p, p.client_bound);
                format!(
                    "{}/s{}{per_cpu}{}{}",
                    spread_cell(&rate, &|v| thousands(v as u64), ""),
                    disturbed_suffix(p),
                    if p.errors > 0 { format!(", {} errors", thousands(p.errors)) } else { String::new() },
                    if bound.is_empty() { String::new() } else { format!(" ({bound})") },
                )
            });
            s.push_str("\n### Echo message latency, ms: p50 / p99 (mean)\n\nEach message from being sent to its echo's last byte being read, from the load generator's histogram.\n\n");
            table(&mut s, &|p| match &p.latency {
                Some(l) => format!("{} / {} ({})", decimal(l.p50_ms), decimal(l.p99_ms), decimal(l.mean_ms)),
                None => NOT_MEASURED.into(),
            });
            let points = || self.models.iter().flat_map(|m| &m.ws);
            if any_spread(points().map(|p| p as &dyn Repeated)) {
                let _ = write!(s, "\n{SPREAD_NOTE}\n");
            }
            if points().any(|p| p.disturbed_repeats() > 0) {
                let _ = write!(s, "\n{DISTURBED_NOTE}\n");
            }
        }
        let idle: Vec<(&str, &WsIdle)> =
            self.models.iter().filter_map(|m| Some((m.model.as_str(), m.ws_idle.as_ref()?))).collect();
        if let Some((_, first)) = idle.first() {
            if !s.is_empty() {
                s.push('\n');
            }
            let _ = write!(
                s,
                "### Idle WebSockets held, and memory per idle WebSocket\n\n{} connections upgraded and then held with no message (`load ws --idle`), each pinged every {} s and held until the last to open had been pinged. Held: the server's own peak count. Server bytes per idle WebSocket: its resident memory at the largest sample while they were held, minus before any connected, over the connections held (user space: the kernel's socket memory is not in RSS). Kernel bytes per socket: the socket slab caches and socket buffers added (/proc/slabinfo, /proc/net/sockstat), over the TCP sockets added; system-wide, and both ends of every loopback connection are sockets, so one idle WebSocket costs the server's kernel about one of these. Pongs: the server's answers to the load's pings; every connection answered when there are at least as many as upgrades and no ping went unanswered.\n\n",
                thousands(first.attempted),
                decimal(first.ping_interval_s)
            );
            s.push_str("| model | held | server bytes per idle WebSocket | server RSS, KiB (before → peak) | kernel bytes per socket | pings / pongs | every connection answered a ping | errors |\n|---|---|---|---|---|---|---|---|\n");
            for (model, w) in &idle {
                let held = match w.held {
                    Some(h) => {
                        let own = h as f64;
                        let spread =
                            measured_spread(*w, figure::WS_IDLE_HELD, Some(own)).unwrap_or(Spread::single(own));
                        format!(
                            "{} of {}",
                            spread_cell(&spread, &|v| thousands(v.round() as u64), ""),
                            thousands(w.attempted)
                        )
                    }
                    None => format!("{NOT_MEASURED} (the server printed no stats line)"),
                };
                let per_conn = match w.server_bytes_per_connection() {
                    Some(own) => {
                        let spread = measured_spread(*w, figure::SERVER_BYTES_PER_IDLE_WS, Some(own))
                            .unwrap_or(Spread::single(own));
                        format!(
                            "{}{}",
                            spread_cell(&spread, &|v| thousands(v.round() as u64), ""),
                            disturbed_suffix(*w)
                        )
                    }
                    None => NOT_MEASURED.into(),
                };
                let rss = match (w.server_rss_baseline_kib, w.server_rss_peak_kib) {
                    (Some(a), Some(b)) => format!("{} → {}", thousands(a), thousands(b)),
                    _ => NOT_MEASURED.into(),
                };
                let kernel = match w.kernel_bytes_per_socket() {
                    Some(own) => {
                        let spread = measured_spread(*w, figure::KERNEL_BYTES_PER_SOCKET, Some(own))
                            .unwrap_or(Spread::single(own));
                        spread_cell(&spread, &|v| thousands(v.round() as u64), "")
                    }
                    None => match w.kernel.as_ref().and_then(|k| k.slab_unmeasured.as_deref()) {
                        Some(why) => format!("{NOT_MEASURED} ({why})"),
                        None => NOT_MEASURED.into(),
                    },
                };
                let answered = if w.every_connection_answered() {
                    "yes".to_owned()
                } else if w.ping_timeouts > 0 {
                    format!("no: {} pings unanswered", thousands(w.ping_timeouts))
                } else {
                    format!("no: {} pongs for {} upgrades", thousands(w.pongs_received), thousands(w.upgrades))
                };
                let _ = writeln!(
                    s,
                    "| {model} | {held} | {per_conn} | {rss} | {kernel} | {} / {} | {answered} | {} |",
                    thousands(w.pings_sent),
                    thousands(w.pongs_received),
                    thousands(w.errors)
                );
            }
            if any_spread(idle.iter().map(|(_, w)| *w as &dyn Repeated)) {
                let _ = write!(s, "\n{SPREAD_NOTE}\n");
            }
            if idle.iter().any(|(_, w)| w.disturbed_repeats() > 0) {
                let _ = write!(s, "\n{DISTURBED_NOTE}\n");
            }
        }
        s
    }

    pub fn udp_markdown(&self) -> String {
        let nothing = "not measured (nothing sent)";
        let mut s = String::from("| model | datagrams/s sent | datagrams/s received | lost |\n|---|---|---|---|\n");
        for m in &self.models {
            match &m.udp {
                Some(u) if u.sent_nothing() => {
                    let _ = writeln!(s, "| {} | 0 | {nothing} | {nothing} |", m.model);
                }
                Some(u) => {
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {} |",
                        m.model,
                        thousands(u.sent_per_s as u64),
                        thousands(u.received_per_s as u64),
                        thousands(u.lost)
                    );
                }
                // A model left out of the UDP run still has its row, saying so.
                None => {
                    let _ = writeln!(s, "| {} | {NOT_MEASURED} | {NOT_MEASURED} | {NOT_MEASURED} |", m.model);
                }
            }
        }
        s
    }

    pub fn rows_csv(&self) -> String {
        let mut s = format!(
            "model,row,attempted,connected,server_rss_kib,kernel_buffers_kib,kernel_slab_kib,cpu_min_pct,cpu_max_pct,threads,sent_bytes_per_s,received_bytes_per_s,p50_us,p99_us,errors,client_cpu_pct,client_bound,server_procs,stopped_by,error,{REPEAT_COLUMNS},received_bytes_per_s_min,received_bytes_per_s_max,bytes_per_cpu_second,bytes_per_cpu_second_min,bytes_per_cpu_second_max,connected_min,connected_max\n",
        );
        for m in &self.models {
            if m.rows.is_empty() {
                let _ = writeln!(
                    s,
                    "{},,,,,,,,,,,,,,,,,,,\"{}\"{}",
                    m.model,
                    m.error.clone().unwrap_or_default().replace('"', "'"),
                    ",".repeat(REPEAT_COLUMNS.split(',').count() + 7)
                );
            }
            // An empty cell, not 0, where nothing was measured.
            let cell = |v: Option<String>| v.unwrap_or_default();
            for r in &m.rows {
                let timed = latency_timed(r.p50_us, r.p99_us);
                let received = measured_spread(r, figure::RECEIVED_BYTES_PER_S, Some(r.received_bytes_per_s));
                let per_cpu = measured_spread(r, figure::BYTES_PER_CPU_SECOND, r.bytes_per_cpu_second());
                let held = measured_spread(r, figure::CONNECTIONS_HELD, r.connected_held().map(|c| c as f64));
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{},{},{},{},{:.0},{:.0},{},{},{},{:.1},{},{},{},,{},{},{},{},{}",
                    m.model,
                    r.kind.map_or("", RowKind::label),
                    r.attempted,
                    cell(r.connected_held().map(|c| c.to_string())),
                    cell(r.server_rss().map(|k| k.to_string())),
                    cell(r.kernel_buffers_kib().map(|k| k.to_string())),
                    cell(r.kernel_slab_kib().map(|k| k.to_string())),
                    cell(r.server_cpu_pct().map(|(min, _)| format!("{min:.1}"))),
                    cell(r.server_cpu_pct().map(|(_, max)| format!("{max:.1}"))),
                    cell(r.server_threads().map(|t| t.to_string())),
                    r.sent_bytes_per_s,
                    r.received_bytes_per_s,
                    cell(timed.then(|| format!("{:.1}", r.p50_us))),
                    cell(timed.then(|| format!("{:.1}", r.p99_us))),
                    r.errors.values().sum::<u64>(),
                    r.client_cpu_pct,
                    r.client_bound,
                    r.server_procs.unwrap_or(1),
                    cell(self.stopped_by(&m.model, r).map(|why| format!("\"{}\"", why.replace('"', "'")))),
                    repeat_cells(r, r.client_bound),
                    range_cells(received, 0),
                    cell(per_cpu.map(|s| format!("{:.0}", s.median))),
                    range_cells(per_cpu, 0),
                    range_cells(held, 0),
                );
            }
        }
        s
    }

    pub fn http_csv(&self) -> String {
        let mut s = format!(
            "model,concurrency,keepalive,requests_per_s,latency_mean_ms,latency_p50_ms,latency_p99_ms,ms_per_request_1_over_throughput,errors,client_bound,tls,tls_resume,server_cpu_pct,http2,streams,{REPEAT_COLUMNS},requests_per_s_min,requests_per_s_max,responses_per_cpu_second,responses_per_cpu_second_min,responses_per_cpu_second_max,http3,quic_handshakes,quic_handshakes_failed,quic_handshake_p50_ms,quic_rtt_p50_ms,quic_packets_sent,quic_packets_lost\n",
        );
        // Empty cells, not 0, where nothing was measured.
        let opt = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.3}"));
        for m in self.all_results() {
            for p in &m.http {
                let measured_mean = p.latency.map(|l| l.mean_ms).or((p.mean_ms > 0.0).then_some(p.mean_ms));
                let rate = measured_spread(p, figure::REQUESTS_PER_S, Some(p.requests_per_s));
                let per_cpu = measured_spread(p, figure::RESPONSES_PER_CPU_SECOND, p.per_cpu_second());
                let _ = writeln!(
                    s,
                    "{},{},{},{:.0},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    m.model,
                    p.concurrency,
                    p.keepalive,
                    p.requests_per_s,
                    opt(measured_mean),
                    opt(p.latency.map(|l| l.p50_ms)),
                    opt(p.latency.map(|l| l.p99_ms)),
                    opt((p.requests_per_s > 0.0).then_some(p.ms_per_request)),
                    p.errors,
                    p.client_bound,
                    p.tls,
                    p.tls_resume.map_or_else(String::new, |r| r.to_string()),
                    p.server_cpu_pct.map_or_else(String::new, |c| format!("{c:.1}")),
                    p.http2,
                    p.streams.map_or_else(String::new, |n| n.to_string()),
                    repeat_cells(p, p.client_bound),
                    range_cells(rate, 0),
                    per_cpu.map_or_else(String::new, |s| format!("{:.0}", s.median)),
                    range_cells(per_cpu, 0),
                    p.http3,
                    quic_cells(p),
                );
            }
        }
        s
    }
}

/// The QUIC cells of an HTTP/3 point (handshakes, failed, handshake p50, RTT p50, packets
/// sent and lost); empty for the other points.
fn quic_cells(p: &HttpPoint) -> String {
    let Some(q) = &p.quic else { return ",,,,,".to_owned() };
    let ms = |l: Option<crate::results::HttpLatency>| l.map_or_else(String::new, |l| format!("{:.3}", l.p50_ms));
    format!(
        "{},{},{},{},{},{}",
        q.handshakes,
        q.handshakes_failed,
        ms(q.handshake_latency),
        ms(q.rtt),
        q.packets_sent,
        q.packets_lost
    )
}

/// The CSV columns on a row's or point's repetitions.
const REPEAT_COLUMNS: &str = "repetitions,client_bound_repetitions,server_bound_repetitions,disturbed_repetitions";

/// The cells of [`REPEAT_COLUMNS`]: results from before repetitions count as one, client-bound
/// as they said, server-bound unknown.
impl Results {
    /// The WebSocket points as CSV, one line per echo point (`kind` echo) and per idle
    /// measurement (`kind` idle); empty cells where a figure was not measured.
    pub fn ws_csv(&self) -> String {
        let mut s = format!(
            "model,kind,connections,msg_len,messages_per_s,server_cpu_pct,messages_per_cpu_second,latency_p50_ms,latency_p99_ms,held,server_rss_baseline_kib,server_rss_peak_kib,server_bytes_per_idle_ws,kernel_bytes_per_socket,pings_sent,pongs_received,ping_timeouts,every_connection_answered,errors,{REPEAT_COLUMNS}\n"
        );
        let opt = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.3}"));
        let int = |v: Option<u64>| v.map_or_else(String::new, |v| v.to_string());
        for m in &self.models {
            for p in &m.ws {
                let _ = writeln!(
                    s,
                    "{},echo,{},{},{:.0},{},{},{},{},,,,,,,,,,{},{}",
                    m.model,
                    p.concurrency,
                    p.msg_len,
                    p.messages_per_s,
                    opt(p.server_cpu_pct),
                    opt(p.per_cpu_second()),
                    opt(p.latency.map(|l| l.p50_ms)),
                    opt(p.latency.map(|l| l.p99_ms)),
                    p.errors,
                    repeat_cells(p, p.client_bound)
                );
            }
            if let Some(w) = &m.ws_idle {
                let _ = writeln!(
                    s,
                    "{},idle,{},,,,,,,{},{},{},{},{},{},{},{},{},{},{}",
                    m.model,
                    w.attempted,
                    int(w.held),
                    int(w.server_rss_baseline_kib),
                    int(w.server_rss_peak_kib),
                    opt(w.server_bytes_per_connection()),
                    opt(w.kernel_bytes_per_socket()),
                    w.pings_sent,
                    w.pongs_received,
                    w.ping_timeouts,
                    w.every_connection_answered(),
                    w.errors,
                    repeat_cells(w, w.client_bound)
                );
            }
        }
        s
    }
}

fn repeat_cells(item: &dyn Repeated, client_bound: bool) -> String {
    let kept = item.kept();
    if kept.is_empty() {
        return format!("1,{},,", u8::from(client_bound));
    }
    format!(
        "{},{},{},{}",
        kept.len(),
        item.client_bound_repeats(),
        item.server_bound_repeats(),
        item.disturbed_repeats()
    )
}

/// "min,max" of a spread with `decimals`, or two empty cells.
fn range_cells(spread: Option<Spread>, decimals: usize) -> String {
    spread.map_or_else(|| ",".to_owned(), |s| format!("{:.decimals$},{:.decimals$}", s.min, s.max))
}

/// 1234567 → "1,234,567", as the seed prints numbers (the load summary's own).
pub use sockscale_load::report::thousands;

/// What a cell says for a figure that was not measured (never 0).
pub const NOT_MEASURED: &str = "not measured";

const PROCS_NOTE: &str = "\"N server processes\": past the open-files limit ({limit} descriptors per process) the row runs the server as N processes sharing the port with SO_REUSEPORT (`serve --procs N`, as nginx runs workers), each with its own threads; its memory, CPU and threads are sums over them. select runs as one process in every row: its ceiling (FD_SETSIZE) is per process, and that is what its row shows. \"stopped by\" names the limit the server counted most often while refusing connections or pausing accepts (its `limit_*` counters), or else what the load generator saw.";

/// Under the table when some server figure of a row had no sample.
const UNSAMPLED_NOTE: &str = "\"not measured\" in Connected, Memory Used, CPU Usage or Threads: no sample was taken while the row ran. Connected comes from the server's own stats lines, and it printed no stats line; memory, threads and CPU come from /proc/PID/status and /proc/PID/stat, which could not be read (the server exited, or /proc is not readable).";

/// After an HTTPS keep-alive point whose connections did not all get through their handshake
/// within the point: how many did. Its rate then counts the handshakes of a sweep still opening
/// its connections, not requests over connections already open.
fn handshakes_short(p: &HttpPoint) -> String {
    match &p.handshakes {
        Some(h) if p.keepalive && h.full + h.resumed < p.concurrency => format!(
            " (only {} of {} connections through their handshake)",
            thousands(h.full + h.resumed),
            thousands(p.concurrency)
        ),
        _ => String::new(),
    }
}

/// Like [`thousands`], with a minus sign when negative.
pub fn signed_thousands(n: i64) -> String {
    let sign = if n < 0 { "−" } else { "" };
    format!("{sign}{}", thousands(n.unsigned_abs()))
}

fn latency(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.1}ms", us / 1000.0)
    } else {
        format!("{us:.0}us")
    }
}

/// Whether an echo row timed anything. A histogram with nothing in it reports 0 for every
/// percentile, and no timed echo takes 0 µs, so 0/0 means nothing was timed.
fn latency_timed(p50_us: f64, p99_us: f64) -> bool {
    p50_us > 0.0 || p99_us > 0.0
}

/// The errors of a row, and the connect retries behind them when there were any: a refused
/// connection retried with back-off is one error per attempt.
fn errors_cell(errors: u64, connects: Option<ConnectAttempts>) -> String {
    let Some(c) = connects.filter(|c| c.retries > 0 || c.given_up > 0) else { return thousands(errors) };
    let given_up = match c.given_up {
        0 => String::new(),
        n => format!(", {} connections given up", thousands(n)),
    };
    format!("{} ({} connect retries{given_up})", thousands(errors), thousands(c.retries))
}

/// Under the seed's table, where its rows came from.
const SEED_NOTE: &str = "The seed's published Table 6-3 for the counterparts of the models measured here, as printed: an echo server on a Pentium 4 1.7 GHz Xeon with 768 MB under Windows XP, clients on three machines over a 100 Mb hub, connections in blocks of 1,000, rate-limited blocks at 200,000 B/s. Its non-paged pool is kernel memory for sockets and their buffers together (here: the two kernel columns); its rows were limited by its clients as much as by its servers. threadpool, epoll and tokio have no counterpart.";

/// Echo latency p50/p99, or "not measured" when nothing was timed.
fn latency_pair(p50_us: f64, p99_us: f64) -> String {
    if latency_timed(p50_us, p99_us) {
        format!("{}/{}", latency(p50_us), latency(p99_us))
    } else {
        NOT_MEASURED.into()
    }
}

/// About three significant digits, with thousands separators from 100 up: 0.0123 → "0.012",
/// 5.5 → "5.50", 43.29 → "43.3", 1,604.8 → "1,605". Milliseconds in the tables, values on the
/// charts.
pub fn decimal(v: f64) -> String {
    if v >= 100.0 {
        thousands(v.round() as u64)
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{KernelMemory, ModelResult};

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(2198148), "2,198,148");
    }

    /// Results with one epoll model whose rows and points are given as JSON, the way a
    /// results.json of any age holds them.
    /// Results from before WebSocket (schema 1 and 2) say it was not measured; with points, the
    /// WebSocket tables show messages (never "requests") per second and per server CPU-second,
    /// and the idle WebSockets with their bytes per connection and whether every one answered.
    #[test]
    fn websocket_tables_show_messages_and_idle_memory_and_older_results_say_not_measured() {
        let older = epoll_with("", "");
        assert!(tables_body_markdown(&older).contains("## WebSocket\n\nNo WebSocket point was measured."));
        let mut r = epoll_with("", "");
        r.models[0].ws = vec![crate::results::WsPoint {
            concurrency: 100,
            msg_len: 512,
            messages_per_s: 50_000.0,
            upgrades: 100,
            server_cpu_pct: Some(50.0),
            ..Default::default()
        }];
        r.models[0].ws_idle = Some(WsIdle {
            attempted: 1000,
            upgrades: 1000,
            held: Some(1000),
            server_rss_baseline_kib: Some(2000),
            server_rss_peak_kib: Some(2500),
            ping_interval_s: 1.0,
            pings_sent: 1000,
            pongs_received: 1000,
            ..Default::default()
        });
        let md = tables_body_markdown(&r);
        let ws = md.split_once("## WebSocket").unwrap().1.split("## UDP").next().unwrap();
        assert!(ws.contains("| epoll | 50,000/s (50%; 100,000 per CPU-s) |"), "{ws}");
        // (2,500 - 2,000) KiB × 1024 / 1,000 held = 512 B.
        assert!(
            ws.contains("| epoll | 1,000 of 1,000 | 512 | 2,000 → 2,500 | not measured | 1,000 / 1,000 | yes | 0 |"),
            "{ws}"
        );
        assert!(!ws.to_lowercase().contains("requests"), "messages, not requests: {ws}");
        let csv = r.ws_csv();
        let columns = csv.lines().next().unwrap().split(',').count();
        assert!(csv.lines().all(|l| l.split(',').count() == columns), "{csv}");
        assert!(csv.contains("\nepoll,echo,100,512,50000,50.000,100000.000,"), "{csv}");
        assert!(csv.contains("\nepoll,idle,1000,,,,,,,1000,2000,2500,512.000,,1000,1000,0,true,0,"), "{csv}");
        r.models[0].ws_idle.as_mut().unwrap().pongs_received = 999;
        let md = tables_body_markdown(&r);
        assert!(md.contains("| no: 999 pongs for 1,000 upgrades |"), "{md}");
    }

    fn epoll_with(rows: &str, http: &str) -> Results {
        let text = format!(
            r#"{{"schema":1,"profile":"tiny","started":"","finished":"","interrupted":false,
            "machine":{{"cpu_model":"","cores":2,"memory_kib":0,"kernel":"","somaxconn":"","tcp_mem_pages":"","open_files_limit":0,"io_uring":""}},
            "parameters":null,"nginx":null,
            "models":[{{"model":"epoll","error":null,"udp":null,"rows":[{rows}],"http":[{http}]}}]}}"#
        );
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    const ROW: &str = r#""kind":"maximum","attempted":8000,"connected":8000,"client_peak_open":8000,
        "server_rss_kib":6768,"cpu_min_pct":6.0,"cpu_max_pct":12.9,"threads":5,
        "sent_bytes_per_s":1192710.6,"received_bytes_per_s":1192710.6,"p50_us":425.9,"p99_us":3557.3,
        "errors":{},"client_cpu_pct":66.9,"client_cores":1,"client_bound":false,"duration_s":4.1"#;

    /// The seed's rows are a table of their own, after the measured one, as printed, with a
    /// note on where they come from: no "seed:" row among the measured rows (their cells
    /// wrapped over four lines); a run without a counterpart has no seed table.
    #[test]
    fn the_seeds_table_stands_beside_the_measured_rows_not_among_them() {
        let row = format!(r#"{{{ROW},"kernel_tcp_kib":0}}"#);
        let mut r = epoll_with(&row, "");
        r.models[0].model = "uring".into();
        let t = r.table_markdown();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[2].starts_with("| uring | 8,000/8,000 |"), "{t}");
        assert!(!t.contains("seed:") && !t.contains("Overlapped"), "no seed row among the measured: {t}");
        let seed = r.seed_markdown().expect("uring has a counterpart");
        let seed_lines: Vec<&str> = seed.lines().collect();
        assert_eq!(
            seed_lines[2],
            "| Overlapped (completion port) | uring | 7,000/7,000 | 36,160 | 31,128 | 40–50% | 2 | 6,282,473/3,893,507 |"
        );
        assert!(seed_lines[4].starts_with("|  |  | 50,000/49,997 |"), "{seed}");
        assert!(seed.contains("The seed's published Table 6-3 for the counterparts"), "{seed}");
        let cells = |l: &str| l.matches('|').count();
        assert!(seed_lines[..5].iter().all(|l| cells(l) == cells(seed_lines[0])), "{seed}");
        // Every seed cell short enough not to wrap: the longest is the seed's model name.
        assert!(seed_lines[2..5].iter().flat_map(|l| l.split('|')).all(|c| c.trim().chars().count() <= 28), "{seed}");
        let all = crate::verdict::table_md(&r);
        let ours = all.find("## I/O models (Table 6-3)").expect("our table");
        let theirs = all.find(&format!("## {SEED_HEADING}")).expect("the seed's table");
        let http = all.find("## HTTP 4 KiB").expect("the HTTP section");
        assert!(ours < theirs && theirs < http, "the seed's table right after ours: {all}");
        let epoll = epoll_with(&row, "");
        assert!(epoll.seed_markdown().is_none());
        assert!(!tables_body_markdown(&epoll).contains(SEED_HEADING));
    }

    /// A row's refusals are retries of a few connections, and the table says how many.
    #[test]
    fn connect_retries_are_shown_beside_the_errors() {
        let row = ROW.replace(r#""errors":{}"#, r#""errors":{"connect_refused":1200}"#);
        let r =
            epoll_with(&format!(r#"{{{row},"kernel_tcp_kib":0,"connects":{{"attempts":9200,"retries":1200}}}}"#), "");
        let t = r.table_markdown();
        assert!(t.contains("| 1,200 (1,200 connect retries) |"), "{t}");
        let given_up = r#""connects":{"attempts":9200,"retries":1200,"given_up":400}"#;
        let t = epoll_with(&format!(r#"{{{row},"kernel_tcp_kib":0,{given_up}}}"#), "").table_markdown();
        assert!(t.contains("| 1,200 (1,200 connect retries, 400 connections given up) |"), "{t}");
        // Rows from before retries were counted show the errors alone.
        let t = epoll_with(&format!(r#"{{{row},"kernel_tcp_kib":0}}"#), "").table_markdown();
        assert!(t.contains("| 1,200 |") && !t.contains("retries"), "{t}");
    }

    /// The kernel cells of the first data row: (buffers, slab).
    fn kernel_cells(table: &str) -> (String, String) {
        let row = table.lines().nth(2).expect("a data row");
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        (cells[3].to_owned(), cells[4].to_owned())
    }

    #[test]
    fn kernel_memory_that_could_not_be_read_says_not_measured_never_zero() {
        let r = epoll_with(
            &format!(
                r#"{{{ROW},"kernel_tcp_kib":0,"kernel":{{"page_size":4096,"sockstat_baseline":null,"sockstat_peak":null,
                "slab_baseline":null,"slab_peak":null,"slab_unmeasured":"/proc/slabinfo: Permission denied (os error 13)"}}}}"#
            ),
            "",
        );
        let t = r.table_markdown();
        assert_eq!(kernel_cells(&t), ("not measured".into(), "not measured".into()), "{t}");
        assert!(t.contains("Slab not measured: /proc/slabinfo: Permission denied"), "{t}");
        let csv = r.rows_csv();
        assert!(csv.contains(",6768,,,6.0,"), "CSV leaves unmeasured cells empty: {csv}");
    }

    #[test]
    fn kernel_memory_is_the_peak_minus_the_baseline_of_sockstat_and_slabinfo() {
        let cache = |slabs: u64| {
            format!(
                r#"{{"active_objs":{n},"num_objs":{n},"objsize":2368,"objperslab":13,"pagesperslab":8,"num_slabs":{slabs}}}"#,
                n = slabs * 13
            )
        };
        let r = epoll_with(
            &format!(
                r#"{{{ROW},"kernel_tcp_kib":40,"kernel":{{"page_size":4096,
                "sockstat_baseline":{{"inuse":4,"orphan":0,"tw":0,"alloc":4,"mem_pages":10}},
                "sockstat_peak":{{"inuse":16004,"orphan":0,"tw":0,"alloc":16004,"mem_pages":20}},
                "slab_baseline":{{"TCP":{}}},"slab_peak":{{"TCP":{}}},"slab_unmeasured":null}}}}"#,
                cache(2),
                cache(1232)
            ),
            "",
        );
        let t = r.table_markdown();
        // (1232 - 2) slabs of 8 pages of 4 KiB.
        assert_eq!(kernel_cells(&t), ("40".into(), "39,360".into()), "{t}");
        assert_eq!(r.models[0].rows[0].kernel.as_ref().and_then(KernelMemory::sockets_added), Some(16_000));
        let csv = r.rows_csv();
        assert!(csv.contains(",6768,40,39360,6.0,"), "CSV and table agree: {csv}");
    }

    #[test]
    fn results_from_before_kernel_slab_was_measured_still_load_and_say_so() {
        // The README's run of 2026-11-22, kept as written then.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/results-2026-11-22-before-slab.json");
        let r = Results::load(path).expect("results from before the slab was measured load");
        let t = r.table_markdown();
        // blocking at 8,000 connections: sockstat measured 0 buffer pages; slab was not measured.
        let row = t.lines().find(|l| l.contains("8,000/8,000 | 160,768")).expect("blocking maximum row");
        assert!(row.contains("| 160,768 | 0 | not measured |"), "{row}");
    }

    #[test]
    fn echo_rows_with_nothing_timed_say_not_measured_not_zero_latency() {
        let r =
            epoll_with(&format!(r#"{{{ROW},"kernel_tcp_kib":0}}"#).replace("425.9", "0").replace("3557.3", "0"), "");
        let t = r.table_markdown();
        assert!(!t.contains("0us/0us"), "{t}");
        assert!(t.lines().nth(2).is_some_and(|l| l.contains("| not measured | 0 |")), "{t}");
        // The CSV leaves them empty too, not 0.0.
        let csv = r.rows_csv();
        assert!(csv.contains(",1192711,1192711,,,0,66.9,"), "{csv}");
    }

    /// The figures of [`ROW`] the server side measures, as a row whose server was never
    /// sampled holds them: it printed no stats line and its /proc/PID could not be read, so
    /// every one of them is the 0 it started at.
    fn unsampled_row() -> String {
        ROW.replace(r#""connected":8000"#, r#""connected":0"#)
            .replace(r#""server_rss_kib":6768"#, r#""server_rss_kib":0"#)
            .replace(
                r#""cpu_min_pct":6.0,"cpu_max_pct":12.9,"threads":5"#,
                r#""cpu_min_pct":0.0,"cpu_max_pct":0.0,"threads":0"#,
            )
    }

    const NO_KERNEL: &str = r#""kernel_tcp_kib":0,"kernel":{"page_size":4096,"sockstat_baseline":null,"sockstat_peak":null,
        "slab_baseline":null,"slab_peak":null,"slab_unmeasured":"/proc/slabinfo: Permission denied (os error 13)"}"#;

    #[test]
    fn server_figures_with_no_sample_say_not_measured_never_zero() {
        let r = epoll_with(
            &format!(
                r#"{{{},{NO_KERNEL},"samples":{{"connections":0,"rss":0,"threads":0,"cpu":0}}}}"#,
                unsampled_row()
            ),
            "",
        );
        let t = r.table_markdown();
        let row = t.lines().nth(2).expect("a data row");
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells[1], "8,000/not measured", "connected: {row}");
        assert_eq!(cells[2], "not measured", "server RSS: {row}");
        assert_eq!(cells[5], "not measured", "server CPU: {row}");
        assert_eq!(cells[6], "not measured", "threads: {row}");
        // What the load generator measured stands.
        assert_eq!(cells[7], "1,192,710/1,192,710", "{row}");
        assert!(t.contains("no stats line"), "the note says why: {t}");
        let csv = r.rows_csv();
        let line = csv.lines().nth(1).expect("a CSV row");
        assert!(line.starts_with("epoll,maximum,8000,,,,,,,,1192711,1192711,425.9,"), "{line}");
    }

    #[test]
    fn server_figures_sampled_in_part_show_what_was_sampled() {
        // CPU was sampled; the status file (RSS, threads) never read.
        let r = epoll_with(
            &format!(r#"{{{ROW},"kernel_tcp_kib":0,"samples":{{"connections":40,"rss":0,"threads":0,"cpu":3}}}}"#)
                .replace(r#""server_rss_kib":6768"#, r#""server_rss_kib":0"#)
                .replace(r#""threads":5"#, r#""threads":0"#),
            "",
        );
        let t = r.table_markdown();
        let row = t.lines().nth(2).expect("a data row");
        assert!(
            row.starts_with("| epoll | 8,000/8,000 | not measured | 0 | not measured | 6–13% | not measured |"),
            "{row}"
        );
        let csv = r.rows_csv();
        assert!(csv.contains("epoll,maximum,8000,8000,,0,,6.0,12.9,,"), "{csv}");
    }

    #[test]
    fn a_udp_point_that_sent_nothing_measured_no_loss() {
        let mut r = epoll_with("", "");
        r.models[0].udp =
            serde_json::from_str(r#"{"sent_per_s":0.0,"received_per_s":0.0,"lost":0,"sent":0}"#).expect("a UDP point");
        let u = r.udp_markdown();
        assert!(u.contains("| epoll | 0 | not measured (nothing sent) | not measured (nothing sent) |"), "{u}");
        // A point that sent and got nothing back measured exactly that.
        r.models[0].udp = serde_json::from_str(r#"{"sent_per_s":100.0,"received_per_s":0.0,"lost":50,"sent":100}"#)
            .expect("a UDP point");
        assert!(r.udp_markdown().contains("| epoll | 100 | 0 | 50 |"), "{}", r.udp_markdown());
    }

    const POINT: &str = r#""concurrency":10,"keepalive":true,"requests_per_s":58922.3,"mean_ms":0.1692,
        "ms_per_request":0.016971,"errors":0,"client_bound":false"#;

    #[test]
    fn http_tables_show_measured_latency_and_name_time_per_request_for_what_it_is() {
        let r = epoll_with(
            "",
            &format!(
                r#"{{{POINT},"latency":{{"count":58922,"mean_ms":0.1692,"p50_ms":0.151,"p90_ms":0.3,"p99_ms":0.903,"max_ms":4.1}}}}"#
            ),
        );
        let t = r.http_markdown();
        assert!(t.contains("| epoll | yes | 0.151 / 0.903 (0.169) |"), "{t}");
        assert!(t.contains("### Request latency, ms: p50 / p99 (mean)"), "{t}");
        assert!(t.contains("### Time per request, ms (1 / throughput, as ab reports it)"), "{t}");
        assert!(t.contains("| epoll | yes | 0.017 |"), "{t}");
        // 1/throughput never sits beside the rate as if it were a request's time.
        assert!(!t.contains("req/s, 0.017 ms"), "{t}");
        let csv = r.http_csv();
        assert!(csv.lines().next().is_some_and(|h| h.contains("latency_p50_ms,latency_p99_ms")), "{csv}");
        assert!(csv.contains(",0.169,0.151,0.903,0.017,"), "{csv}");
    }

    /// A plain and an HTTPS point of each connection kind, at c=10.
    fn http_and_https() -> Results {
        let point = |keepalive: bool, tls: &str, rps: f64, p50: f64| {
            format!(
                r#"{{"concurrency":10,"keepalive":{keepalive},"requests_per_s":{rps},"mean_ms":0.2,"ms_per_request":{},
                "errors":0,"client_bound":false,"latency":{{"count":1000,"mean_ms":0.2,"p50_ms":{p50},"p90_ms":0.3,"p99_ms":0.9,"max_ms":4.0}}{tls}}}"#,
                1000.0 / rps
            )
        };
        let full = r#","tls":true,"tls_resume":false,"server_cpu_pct":98.0"#;
        let handshakes = r#","handshakes":{"full":1002,"resumed":0,"failed":2,"failures":{"timeout":2},
            "latency":{"count":1002,"mean_ms":1.5,"p50_ms":1.25,"p90_ms":2.0,"p99_ms":3.5,"max_ms":9.0},
            "negotiated":[{"version":"TLSv1.3","suite":"TLS13_AES_256_GCM_SHA384","alpn":"http/1.1","connections":1002}]}"#;
        let points = [
            point(true, "", 50_000.0, 0.15),
            point(false, "", 20_000.0, 0.4),
            point(true, full, 40_000.0, 0.19),
            point(false, &format!("{full}{handshakes}"), 2_000.0, 4.5),
        ];
        epoll_with("", &points.join(","))
    }

    #[test]
    fn https_points_have_tables_of_their_own_labelled_by_connection() {
        let r = http_and_https();
        let http = r.http_markdown();
        assert!(http.contains("| epoll | yes | 50,000 |") && http.contains("| epoll | no | 20,000 |"), "{http}");
        assert!(!http.contains("40,000") && !http.contains("2,000 |"), "no HTTPS point among HTTP's: {http}");
        assert!(!http.contains("Server CPU"), "no plain point has the server's CPU: {http}");
        let https = r.https_markdown();
        assert!(https.contains("| model | connection | c=10 |"), "{https}");
        assert!(https.contains("| epoll | keep-alive | 40,000 |"), "{https}");
        assert!(https.contains("| epoll | new connection per request, full handshake | 2,000 |"), "{https}");
        assert!(
            https.contains("| epoll | new connection per request, full handshake | 4.50 / 0.900 (0.200) |"),
            "{https}"
        );
        assert!(!https.contains("50,000") && !https.contains("20,000"), "no HTTP point among HTTPS's: {https}");
        assert!(https.contains("Negotiated: epoll: TLSv1.3 TLS13_AES_256_GCM_SHA384, ALPN http/1.1."), "{https}");
        assert!(
            https.contains(
                "| epoll | new connection per request, full handshake | 1,002 / 0 / 2 (timeout 2); 1.25 / 3.50 |"
            ),
            "{https}"
        );
        assert!(https.contains("| epoll | keep-alive | not measured |"), "no handshake counts kept: {https}");
        // A keep-alive point whose connections were still handshaking says so after its rate.
        let mut r = r;
        let slow = r.models[0].http.iter_mut().find(|p| p.tls && p.keepalive).expect("an HTTPS keep-alive point");
        slow.handshakes = Some(crate::results::TlsHandshakes { full: 7, ..Default::default() });
        let https = r.https_markdown();
        assert!(
            https.contains("| epoll | keep-alive | 40,000 (only 7 of 10 connections through their handshake) |"),
            "{https}"
        );
        // 2,000 responses/s on 98% of a core: 2,041 per CPU-second.
        assert!(https.contains("| epoll | new connection per request, full handshake | 98% (2,041) |"), "{https}");
        let all = crate::verdict::table_md(&r);
        let (plain, tls) = all.split_once("## HTTPS 4 KiB responses by concurrency").expect("an HTTPS section");
        assert!(plain.contains("## HTTP 4 KiB responses by concurrency") && plain.contains("| epoll | yes | 50,000 |"));
        assert!(
            tls.contains("| epoll | keep-alive | 40,000 (only 7 of 10") && tls.contains("`--tls-resume off`"),
            "{tls}"
        );
        let csv = r.http_csv();
        assert!(
            csv.lines()
                .next()
                .is_some_and(|h| h.contains(",client_bound,tls,tls_resume,server_cpu_pct,http2,streams,repetitions,")),
            "{csv}"
        );
        // One repetition (results from before repetitions), its range that one value.
        assert!(
            csv.contains("epoll,10,false,2000,0.200,4.500,0.900,0.500,0,false,true,false,98.0,false,,1,0,,,2000,2000,2041,2041,2041,false,,,,,,\n"),
            "{csv}"
        );
        assert!(
            csv.contains(
                "epoll,10,true,50000,0.200,0.150,0.900,0.020,0,false,false,,,false,,1,0,,,50000,50000,,,,false,,,,,,\n"
            ),
            "{csv}"
        );
    }

    #[test]
    fn results_from_before_https_have_no_https_rows_and_say_so() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/results-2026-11-22-before-slab.json");
        let r = Results::load(path).expect("results from before HTTPS load");
        assert!(r.all_results().flat_map(|m| &m.http).all(|p| !p.tls && p.tls_resume.is_none()));
        let all = crate::verdict::table_md(&r);
        assert!(all.contains("## HTTPS 4 KiB responses by concurrency\n\nNo HTTPS point was measured."), "{all}");
        assert!(r.http_markdown().contains("| epoll | yes |"), "the HTTP rows stand");
    }

    #[test]
    fn http_points_from_before_percentiles_were_kept_say_not_measured() {
        let r = epoll_with("", &format!("{{{POINT}}}"));
        let t = r.http_markdown();
        assert!(t.contains("| epoll | yes | not measured (mean 0.169) |"), "{t}");
        let csv = r.http_csv();
        assert!(csv.contains(",0.169,,,0.017,"), "{csv}");
    }

    #[test]
    fn a_failure_after_some_rows_is_shown_and_a_model_without_udp_keeps_its_row() {
        let mut r = epoll_with(&format!(r#"{{{ROW},"kernel_tcp_kib":0}}"#), "");
        r.models[0].error = Some("HTTP sweep: the server did not start".into());
        let t = r.table_markdown();
        assert!(t.contains("|  | failed: HTTP sweep: the server did not start |"), "{t}");
        let u = r.udp_markdown();
        assert!(u.contains("| epoll | not measured | not measured | not measured |"), "{u}");
    }

    #[test]
    fn table_uses_the_seed_layout() {
        let r = Results {
            models: vec![ModelResult {
                model: "epoll".into(),
                rows: vec![
                    Row {
                        kind: Some(RowKind::Flood),
                        attempted: 7000,
                        connected: 7000,
                        cpu_min_pct: 40.0,
                        cpu_max_pct: 50.0,
                        threads: 2,
                        ..Row::default()
                    },
                    Row { kind: Some(RowKind::Maximum), attempted: 50000, connected: 49997, ..Row::default() },
                ],
                ..ModelResult::default()
            }],
            ..Results::default()
        };
        let t = r.table_markdown();
        assert!(t.contains("| epoll | 7,000/7,000 |"), "{t}");
        assert!(t.contains("| 40–50% | 2 |"), "{t}");
        assert!(t.contains("|  | 50,000/49,997 |"), "{t}");
    }

    fn maximum_row(held: u64, procs: u64, limits: &str, errors: &str) -> String {
        format!(
            r#"{{"kind":"maximum","attempted":50000,"connected":{held},"client_peak_open":{held},"server_rss_kib":9000,
            "kernel_tcp_kib":0,"cpu_min_pct":1.0,"cpu_max_pct":2.0,"threads":33000,"sent_bytes_per_s":1.0,
            "received_bytes_per_s":1.0,"p50_us":100.0,"p99_us":200.0,"errors":{errors},"client_cpu_pct":40.0,
            "client_cores":1,"client_bound":false,"duration_s":20.0,"server_procs":{procs},"server_limits":{limits}}}"#
        )
    }

    fn one_row(model: &str, row: &str) -> Results {
        let row: Row = serde_json::from_str(row).expect("row");
        Results {
            models: vec![ModelResult { model: model.into(), rows: vec![row], ..ModelResult::default() }],
            machine: crate::results::Machine {
                open_files_limit: 20_000,
                thread_limits: [("kernel.pid_max".to_owned(), 32_768), ("kernel.threads-max".to_owned(), 192_731)]
                    .into_iter()
                    .collect(),
                ..Default::default()
            },
            ..Results::default()
        }
    }

    /// A row that held fewer than it attempted names what stopped it, from the server's own
    /// limit counters, with this machine's value of the limit.
    #[test]
    fn a_short_row_names_the_limit_the_server_met() {
        let blocking =
            one_row("blocking", &maximum_row(16_012, 4, r#"{"threads":9000}"#, r#"{"closed_by_peer":9000}"#));
        let t = blocking.table_markdown();
        // The note under the table, numbered in the cell: the cell stays short.
        assert!(t.contains("| 50,000/16,012 [1] |"), "{t}");
        assert!(
            t.contains("\n[1] blocking, maximum: 4 server processes; stopped by the thread limit (kernel.pid_max 32,768, 33,000 threads running)\n"),
            "{t}"
        );
        assert!(t.contains("sums over them"), "the processes note: {t}");
        let select = one_row("select", &maximum_row(1_020, 1, r#"{"ceiling":48000}"#, "{}"));
        let t = select.table_markdown();
        assert!(t.contains("| 50,000/1,020 [1] |"), "{t}");
        assert!(t.contains("[1] select, maximum: stopped by the model's ceiling (FD_SETSIZE 1,024)"), "{t}");
        assert!(!t.contains("sums over them"), "one process: no processes note: {t}");
        let files = one_row("epoll", &maximum_row(19_100, 1, r#"{"open_files":30,"max_conns":2}"#, "{}"));
        assert!(files.table_markdown().contains("stopped by the open-files limit (RLIMIT_NOFILE, 20,000 per process)"));
        // Nothing counted by the server: what the load saw, and never a guess.
        let none = one_row("epoll", &maximum_row(30_000, 4, "{}", r#"{"connect_timeout":500}"#));
        assert!(none
            .table_markdown()
            .contains("stopped by failing connects (500 connect timeout); the server counted no limit"));
        let busy = one_row(
            "blocking",
            &maximum_row(1_318, 1, "{}", r#"{"reply_timeout":4276}"#)
                .replace(r#""cpu_max_pct":2.0"#, r#""cpu_max_pct":101.0"#),
        );
        assert!(
            busy.table_markdown()
                .contains("stopped by the server's CPU (1–101% of its core; 4,276 failed connections or replies)"),
            "{}",
            busy.table_markdown()
        );
        let time = one_row("epoll", &maximum_row(30_000, 4, "{}", "{}"));
        assert!(time.table_markdown().contains("stopped by the row's time"));
        // Held them all (99%), or no counters kept: nothing said.
        let full = one_row("epoll", &maximum_row(49_600, 4, "{}", "{}"));
        let t = full.table_markdown();
        assert!(!t.contains("; stopped by") && t.contains("[1] epoll, maximum: 4 server processes\n"), "{t}");
        let old = one_row("epoll", &maximum_row(30_000, 1, "null", "{}"));
        assert!(!old.table_markdown().contains("stopped by") && !old.table_markdown().contains("[1]"));
        let csv = blocking.rows_csv();
        let (header, line) = (csv.lines().next().unwrap(), csv.lines().nth(1).unwrap());
        assert!(header.contains(",server_procs,stopped_by,error"), "{csv}");
        assert!(line.contains(",4,\"the thread limit (kernel.pid_max 32,768, 33,000 threads running)\","), "{csv}");
    }

    /// An HTTP point measured `rates.len()` times (per CPU-second at 50% of a core), the
    /// repetitions `disturbed` and `bound` to the client as given.
    fn repeated_point(workload: HttpWorkload, rates: &[f64], disturbed: &[bool], bound: &[bool]) -> HttpPoint {
        use crate::results::{spreads_of, Interference, Repeat};
        let repeats: Vec<Repeat> = rates
            .iter()
            .enumerate()
            .map(|(i, &rate)| Repeat {
                round: i as u32 + 1,
                figures: [
                    (figure::REQUESTS_PER_S.to_owned(), rate),
                    (figure::RESPONSES_PER_CPU_SECOND.to_owned(), rate * 2.0),
                    (figure::SERVER_CPU_PCT.to_owned(), 50.0),
                ]
                .into_iter()
                .collect(),
                client_bound: bound.get(i).copied().unwrap_or(false),
                interference: Some(Interference {
                    disturbed: disturbed.get(i).copied().unwrap_or(false),
                    ..Interference::default()
                }),
                ..Repeat::default()
            })
            .collect();
        let median = rates[crate::results::median_index(rates)];
        HttpPoint {
            concurrency: 10,
            keepalive: workload.keepalive(),
            tls: workload.tls(),
            http2: workload.http2(),
            streams: workload.http2().then_some(16),
            requests_per_s: median,
            ms_per_request: 1000.0 / median,
            server_cpu_pct: Some(50.0),
            client_bound: bound.iter().any(|&b| b),
            spread: spreads_of(&repeats),
            repeats,
            ..HttpPoint::default()
        }
    }

    #[test]
    fn a_spread_cell_is_the_median_then_the_range_when_repetitions_differ() {
        let show = |v: f64| thousands(v.round() as u64);
        let three = Spread::of([137_647.0, 138_862.0, 140_100.0]).unwrap();
        assert_eq!(spread_cell(&three, &show, "/s"), "138,862/s (137,647–140,100)");
        // One repetition, or several that agree as shown: the figure alone.
        assert_eq!(spread_cell(&Spread::single(5.0), &show, "/s"), "5/s");
        assert_eq!(spread_cell(&Spread::of([5.0, 5.2, 4.9]).unwrap(), &show, ""), "5");
    }

    /// Repetitions in the HTTP table: the median with its range, a disturbed point marked and
    /// explained under the table, the bottleneck said with how many of the repetitions; the CSV
    /// has the range, the repetitions and the disturbed count.
    #[test]
    fn sweep_cells_show_the_spread_and_mark_disturbed_and_client_bound_points() {
        let mut r = epoll_with("", "");
        r.models[0].http = vec![
            repeated_point(HttpWorkload::KeepAlive, &[137_647.0, 140_100.0, 138_862.0], &[false, true, false], &[]),
            repeated_point(HttpWorkload::NewConnection, &[20_000.0, 21_000.0, 19_000.0], &[], &[true, true, false]),
        ];
        let t = r.http_markdown();
        assert!(t.contains("| epoll | yes | 138,862 (137,647–140,100) † |"), "{t}");
        assert!(t.contains("| epoll | no | 20,000 (19,000–21,000) (client-bound in 2 of 3) |"), "{t}");
        assert!(t.contains(DISTURBED_NOTE) && t.contains(SPREAD_NOTE), "{t}");
        // Per CPU-second: the median and range of the repetitions' own figures.
        assert!(t.contains("| epoll | yes | 50% (277,724; 275,294–280,200) |"), "{t}");
        let csv = r.http_csv();
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let line: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
        assert_eq!(header.len(), line.len(), "{csv}");
        let at = |name: &str| line[header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name}"))];
        assert_eq!(
            (at("repetitions"), at("disturbed_repetitions"), at("requests_per_s_min"), at("requests_per_s_max")),
            ("3", "1", "137647", "140100")
        );
        let second: Vec<&str> = csv.lines().nth(2).unwrap().split(',').collect();
        assert_eq!(second[header.iter().position(|h| *h == "client_bound_repetitions").unwrap()], "2", "{csv}");
        // No disturbed point, no mark and no note.
        r.models[0].http.truncate(0);
        r.models[0].http.push(repeated_point(HttpWorkload::KeepAlive, &[1.0, 2.0, 3.0], &[], &[]));
        assert!(!r.http_markdown().contains(DISTURBED_MARK), "{}", r.http_markdown());
    }

    /// HTTP/2 points have tables of their own, not mixed into the HTTP or HTTPS ones.
    #[test]
    fn http2_points_have_tables_of_their_own() {
        let mut r = epoll_with("", "");
        r.models[0].http = vec![
            repeated_point(HttpWorkload::KeepAlive, &[50_000.0], &[], &[]),
            repeated_point(HttpWorkload::TlsKeepAlive, &[40_000.0], &[], &[]),
            repeated_point(HttpWorkload::H2c, &[91_000.0], &[], &[]),
            repeated_point(HttpWorkload::H2Tls, &[83_000.0], &[], &[]),
        ];
        let http = r.http_markdown();
        let https = r.https_markdown();
        let h2 = r.http2_markdown();
        assert!(
            http.contains("| epoll | yes | 50,000 |") && !http.contains("91,000") && !http.contains("83,000"),
            "{http}"
        );
        assert!(
            https.contains("| epoll | keep-alive | 40,000 |") && !https.contains("83,000") && !https.contains("h2"),
            "{https}"
        );
        assert!(h2.contains("| model | protocol | c=10 |"), "{h2}");
        assert!(h2.contains("| epoll | h2c, 16 streams | 91,000 |"), "{h2}");
        assert!(h2.contains("| epoll | h2 (TLS), 16 streams | 83,000 |"), "{h2}");
        assert!(!h2.contains("50,000") && !h2.contains("40,000"), "{h2}");
        let all = crate::verdict::table_md(&r);
        let (_, rest) = all.split_once("## HTTPS 4 KiB responses by concurrency").expect("HTTPS");
        let (https_section, h2_section) = rest.split_once("## HTTP/2 4 KiB responses by concurrency").expect("HTTP/2");
        assert!(!https_section.contains("h2c"), "{https_section}");
        assert!(h2_section.contains("| epoll | h2c, 16 streams | 91,000 |"), "{h2_section}");
        let csv = r.http_csv();
        assert!(csv.lines().filter(|l| l.contains(",true,16,")).count() == 2, "the h2 points say so: {csv}");
    }

    /// HTTP/3 points have tables of their own, with their QUIC figures; Caddy beside the
    /// models; a model that cannot serve HTTP/3 keeps a row saying why, and Caddy's skip is said
    /// under the sweep.
    #[test]
    fn http3_points_have_tables_of_their_own_and_a_model_that_cannot_says_why() {
        use crate::results::{HttpLatency, QuicConnections};
        let h3 = |rate: f64| HttpPoint {
            http3: true,
            streams: Some(16),
            quic: Some(QuicConnections {
                version: 1,
                handshakes: 10,
                handshake_latency: Some(HttpLatency { p50_ms: 1.2, p99_ms: 1.6, ..HttpLatency::default() }),
                rtt: Some(HttpLatency { p50_ms: 3.4, ..HttpLatency::default() }),
                packets_sent: 1_280,
                packets_lost: 3,
                ..QuicConnections::default()
            }),
            ..repeated_point(HttpWorkload::H3, &[rate], &[], &[])
        };
        let mut r = epoll_with("", "");
        let server_quic = crate::results::ServerQuic { h3_requests: 14_400, quic_handshakes: 10, quic_packets_lost: 2 };
        r.models[0].http = vec![
            repeated_point(HttpWorkload::H2Tls, &[83_000.0], &[], &[]),
            HttpPoint { server_quic: Some(server_quic), ..h3(48_000.0) },
        ];
        assert_eq!(r.models[0].http[1].workload(), HttpWorkload::H3);
        let cannot = sockscale_server::Model::ALL.into_iter().find(|m| !m.serves_http3());
        if let Some(m) = cannot {
            r.models.push(ModelResult { model: m.name().into(), ..ModelResult::default() });
        }
        r.caddy = Some(ModelResult { model: "caddy".into(), http: vec![h3(6_000.0)], ..ModelResult::default() });
        let h2 = r.http2_markdown();
        assert!(!h2.contains("48,000") && !h2.contains("h3"), "{h2}");
        let t = r.sweep_markdown("HTTP/3");
        assert!(t.contains("| epoll | h3 (QUIC), 16 streams | 48,000 |"), "{t}");
        assert!(t.contains("| caddy | h3 (QUIC), 16 streams | 6,000 |"), "{t}");
        assert!(
            t.contains("| caddy | h3 (QUIC), 16 streams | 10 / 0; 1.20 / 1.60; RTT 3.40; 3 lost of 1,280 |"),
            "{t}"
        );
        assert!(!t.contains("83,000") && !t.contains("TLS handshakes"), "{t}");
        assert!(
            t.contains("| epoll | h3 (QUIC), 16 streams | 10 / 0; 1.20 / 1.60; RTT 3.40; 3 lost of 1,280 (server: 14,400 requests, 10 handshakes, 2 packets lost) |"),
            "{t}"
        );
        if let Some(m) = cannot {
            let why = m.limitation(sockscale_server::Policy::Http3).unwrap_or_default();
            let row = format!("| {} | cannot: {why} | — |", m.name());
            assert_eq!(t.matches(&row).count(), 5, "a row in each of the five tables: {t}");
        }
        let all = crate::verdict::table_md(&r);
        assert!(all.contains("## HTTP/3 4 KiB responses by concurrency"), "{all}");
        let csv = r.http_csv();
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let epoll: Vec<&str> =
            csv.lines().find(|l| l.starts_with("epoll,") && l.contains(",48000,")).unwrap().split(',').collect();
        assert_eq!(header.len(), epoll.len(), "{csv}");
        let at = |name: &str| epoll[header.iter().position(|h| *h == name).unwrap()];
        assert_eq!((at("http3"), at("quic_handshakes"), at("quic_packets_lost")), ("true", "10", "3"), "{csv}");
        assert!(csv.lines().any(|l| l.starts_with("caddy,")), "{csv}");
        // Caddy not found: said once, under the HTTP/3 sweep.
        r.caddy = Some(ModelResult {
            model: "caddy".into(),
            error: Some(crate::caddy::NOT_FOUND.into()),
            ..ModelResult::default()
        });
        let t = r.sweep_markdown("HTTP/3");
        assert!(t.contains(&format!("\ncaddy: {}\n", crate::caddy::NOT_FOUND)), "{t}");
        assert!(!t.contains("| caddy |"), "{t}");
    }

    /// A row's cells with repetitions: held, memory and throughput with their ranges, the
    /// received bytes per server CPU-second (what the summary ranks by) at the end.
    #[test]
    fn echo_rows_show_the_spread_of_their_repetitions() {
        use crate::results::{spreads_of, Repeat};
        let mut r = epoll_with(&format!(r#"{{{ROW},"kernel_tcp_kib":0}}"#), "");
        let row = &mut r.models[0].rows[0];
        let repeats: Vec<Repeat> = [(1.0e6, 7990.0), (1.2e6, 8000.0), (1.1e6, 8000.0)]
            .into_iter()
            .map(|(bytes, held)| Repeat {
                figures: [
                    (figure::RECEIVED_BYTES_PER_S.to_owned(), bytes),
                    (figure::CONNECTIONS_HELD.to_owned(), held),
                    (figure::BYTES_PER_CPU_SECOND.to_owned(), bytes * 10.0),
                ]
                .into_iter()
                .collect(),
                ..Repeat::default()
            })
            .collect();
        row.spread = spreads_of(&repeats);
        row.repeats = repeats;
        let t = r.table_markdown();
        let line = t.lines().nth(2).unwrap();
        assert!(line.starts_with("| epoll | 8,000/8,000 (7,990–8,000) | 6,768 |"), "{line}");
        assert!(line.contains("| 1,192,710/1,100,000 (1,000,000–1,200,000) |"), "{line}");
        assert!(line.ends_with("| 11.0 MB (10.0–12.0) |"), "{line}");
        assert!(t.contains(SPREAD_NOTE), "{t}");
        let csv = r.rows_csv();
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let line: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
        assert_eq!(header.len(), line.len(), "{csv}");
        let at = |name: &str| line[header.iter().position(|h| *h == name).unwrap()];
        assert_eq!(
            (at("repetitions"), at("received_bytes_per_s_min"), at("received_bytes_per_s_max")),
            ("3", "1000000", "1200000")
        );
        assert_eq!(
            (at("connected_min"), at("connected_max"), at("bytes_per_cpu_second")),
            ("7990", "8000", "11000000")
        );
    }
}
