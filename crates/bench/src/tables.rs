//! The markdown tables of a run (table.md, the printed summary, the HTML page's tables), drawn
//! from the results alone: both the run and the report read them from here, so neither depends
//! on the other.

use std::fmt::Write as _;

use crate::results::Results;

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

/// All tables, as the report and README show them. A section with nothing measured says so
/// instead of printing a table header with no columns to fill.
pub fn tables_markdown(results: &Results) -> String {
    let m = &results.machine;
    let mut s = String::new();
    if let Some(note) = partial_note(results) {
        let _ = write!(s, "## Partial results\n\n{note}\n\n");
    }
    let _ = write!(
        s,
        "Machine: {} ({} cores, {} MiB), Linux {}; somaxconn {}; open files {}. Profile `{}`, {}{}.\n\n## I/O models (Table 6-3)\n\nRows: flood, rate-limited (blocks of connections, each block limited in total), maximum (connections added in blocks at a fixed rate, rate-limited). Connected is the server's own peak of open connections. Threads counts every thread of the server process, three of which (main, signals, stats) belong to the command line. The kernel memory columns (the counterpart of the seed's non-paged pool) are explained under the table. A client-bound row had the load generator at 90% or more of its cores.\n\n",
        m.cpu_model,
        m.cores,
        m.memory_kib / 1024,
        m.kernel,
        m.somaxconn,
        m.open_files_limit,
        results.profile,
        results.started,
        if results.interrupted { " (interrupted)" } else { "" },
    );
    if results.models.is_empty() {
        s.push_str("No model was measured.\n\n");
    } else {
        let _ = writeln!(s, "{}", results.table_markdown());
    }
    s.push_str("## HTTP 4 KiB responses by concurrency (seed 003)\n\n");
    if results.all_results().any(|m| !m.http.is_empty()) {
        let _ = writeln!(s, "{}", results.http_markdown());
    } else {
        s.push_str("No HTTP point was measured.\n\n");
    }
    s.push_str("## UDP echo\n\n");
    if results.models.iter().any(|m| m.udp.is_some()) {
        s.push_str(&results.udp_markdown());
    } else {
        s.push_str("No UDP point was measured.\n");
    }
    s
}
