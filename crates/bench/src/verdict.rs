//! The answer a bench run exists to give: for each workload the seeds measure, which model(s)
//! to use on this machine, with the figure and spread behind it, ties named, and what the
//! machine limited; drawn from results.json alone (measure first, render later).

use crate::results::Results;

/// The verdict as plain text: the end of `sockscale bench`'s stdout.
pub fn text(_results: &Results) -> String {
    String::new()
}

/// The verdict as Markdown: the top of table.md.
pub fn markdown(_results: &Results) -> String {
    String::new()
}

/// The verdict as HTML: the top of report.html.
pub fn html(_results: &Results) -> String {
    String::new()
}
