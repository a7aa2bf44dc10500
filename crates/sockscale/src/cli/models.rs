//! `sockscale models`, and `--model` for `serve`: both read the models' capabilities from the
//! library's one table (`sockscale_server::model::CAPABILITIES`) rather than restating them.

use std::ffi::OsStr;

use anyhow::Result;
use clap::builder::{PossibleValue, TypedValueParser};
use clap::error::ErrorKind;
use clap::Args;
use sockscale_server::{Capabilities, Config, Model, TLS_FILE_BODY};

use crate::output::say;

#[derive(Debug, Args)]
pub struct ModelsArgs {
    /// Print JSON, for machines
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
    /// Print the Markdown table of docs/models.md (without the machine-dependent availability)
    #[arg(long)]
    pub markdown: bool,
}

pub fn run(args: &ModelsArgs) -> Result<()> {
    if args.markdown {
        say!("{}", markdown());
        return Ok(());
    }
    let rows: Vec<Row> = Model::ALL.into_iter().map(Row::new).collect();
    if args.json {
        let json: Vec<_> = rows.iter().map(Row::json).collect();
        say!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        say!("{}", text(&rows));
    }
    Ok(())
}

/// `--model`: parsed with the library's `FromStr` (one line listing the valid names on a
/// mistake), with one line of help per model in `--help`.
#[derive(Debug, Clone, Copy)]
pub struct ModelParser;

impl TypedValueParser for ModelParser {
    type Value = Model;

    fn parse_ref(&self, cmd: &clap::Command, arg: Option<&clap::Arg>, value: &OsStr) -> Result<Model, clap::Error> {
        let arg = arg.map_or_else(|| "--model".to_owned(), ToString::to_string);
        let Some(text) = value.to_str() else {
            let message = format!("invalid value for '{arg}': not UTF-8\n");
            return Err(clap::Error::raw(ErrorKind::InvalidUtf8, message).with_cmd(cmd));
        };
        text.parse::<Model>().map_err(|e| {
            clap::Error::raw(ErrorKind::InvalidValue, format!("invalid value '{text}' for '{arg}': {e}\n"))
                .with_cmd(cmd)
        })
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(Model::ALL.into_iter().map(|m| PossibleValue::new(m.name()).help(help_line(m.capabilities())))))
    }
}

/// One line for `serve --help`: the threads, the seed counterpart, and what the model cannot do.
fn help_line(c: &Capabilities) -> String {
    let seed = c.seed.unwrap_or("the core engine, no seed counterpart");
    let mut line = format!("threads: {}; {}", c.threads, seed);
    match c.cannot {
        [] => line.push_str("; honours every policy"),
        cannot => {
            let what: Vec<_> = cannot.iter().map(|l| format!("{} ({})", l.policy, l.why)).collect();
            line.push_str(&format!("; cannot: {}", what.join(", ")));
        }
    }
    // A policy list alone would say select can do everything; its ceiling is what a user meets.
    if let Some(ceiling) = &c.ceiling {
        line.push_str(&format!(
            "; at most {} descriptors per process ({}), connections included",
            ceiling.descriptors, ceiling.set_by
        ));
    }
    plain(&line)
}

fn default_model() -> Model {
    Config::default().model
}

/// The data is written for Markdown; a terminal gets it without the backticks.
fn plain(s: &str) -> String {
    s.replace('`', "")
}

/// One model as the text and JSON outputs show it.
struct Row {
    caps: &'static Capabilities,
    unavailable: Option<String>,
}

impl Row {
    fn new(model: Model) -> Row {
        Row { caps: model.capabilities(), unavailable: model.unavailable() }
    }

    fn name(&self) -> String {
        if self.caps.model == default_model() {
            format!("{} (default)", self.caps.name)
        } else {
            self.caps.name.to_owned()
        }
    }

    fn seed(&self) -> &'static str {
        self.caps.seed.unwrap_or("—")
    }

    fn udp(&self) -> &'static str {
        if self.caps.model.serves_udp() {
            "yes"
        } else {
            "no"
        }
    }

    fn cannot(&self) -> String {
        match self.caps.cannot {
            [] => "—".to_owned(),
            cannot => cannot.iter().map(|l| l.policy.name()).collect::<Vec<_>>().join(", "),
        }
    }

    fn available(&self) -> &'static str {
        if self.unavailable.is_none() {
            "yes"
        } else {
            "no"
        }
    }

    fn json(&self) -> serde_json::Value {
        let c = self.caps;
        serde_json::json!({
            "name": c.name,
            "default": c.model == default_model(),
            "seed": c.seed,
            "family": c.family.name(),
            "threads": c.threads.name(),
            "threads_detail": plain(c.thread_detail),
            "waits": plain(c.waits),
            "udp": c.model.serves_udp(),
            "http2": c.model.serves_http2(),
            "http3": c.model.serves_http3(),
            "cannot_honour": c.cannot.iter().map(|l| serde_json::json!({
                "policy": l.policy.name(),
                "why": plain(l.why),
            })).collect::<Vec<_>>(),
            "known_limits": c.limits.iter().map(|l| plain(l)).collect::<Vec<_>>(),
            "available": self.unavailable.is_none(),
            "unavailable": self.unavailable,
            "tls_file_body": plain(TLS_FILE_BODY),
        })
    }
}

/// A summary table, then each model in full.
fn text(rows: &[Row]) -> String {
    let header = ["model", "seed counterpart", "family", "threads", "UDP", "cannot honour", "available here"];
    let cells: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            [
                r.name(),
                r.seed().to_owned(),
                r.caps.family.name().to_owned(),
                r.caps.threads.to_string(),
                r.udp().to_owned(),
                r.cannot(),
                r.available().to_owned(),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &cells {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[&str]| {
        let padded: Vec<String> =
            cells.iter().zip(widths).map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count()))).collect();
        padded.join("  ").trim_end().to_owned()
    };
    let mut out = vec![line(&header)];
    for row in &cells {
        out.push(line(&row.each_ref().map(String::as_str)));
    }
    out.push(String::new());
    out.push(field("every model", &plain(TLS_FILE_BODY)));
    out.push(field("HTTP/2", &plain(&http2_line(rows.iter().map(|r| r.caps.model)))));
    out.push(field("HTTP/3", &plain(&http3_line(rows.iter().map(|r| r.caps.model)))));
    for r in rows {
        let c = r.caps;
        out.push(String::new());
        out.push(format!("{}: {}", r.name(), c.seed.unwrap_or("the core engine, no seed counterpart")));
        out.push(field("threads", &plain(c.thread_detail)));
        out.push(field("waits", &plain(c.waits)));
        let cannot = match c.cannot {
            [] => "nothing: every policy is honoured".to_owned(),
            cannot => cannot.iter().map(|l| format!("{}: {}", l.policy, plain(l.why))).collect::<Vec<_>>().join("\n"),
        };
        out.push(field("cannot honour", &cannot));
        let limits = if c.limits.is_empty() { "none known".to_owned() } else { plain(&c.limits.join("\n")) };
        out.push(field("known limits", &limits));
        let available = match &r.unavailable {
            None => "yes".to_owned(),
            Some(reason) => format!("no: {reason}"),
        };
        out.push(field("available here", &available));
    }
    out.join("\n")
}

/// `  label:  value`, each line of the value wrapped at 100 columns under the first.
fn field(label: &str, value: &str) -> String {
    const INDENT: usize = 18;
    const WIDTH: usize = 100;
    let mut out = String::new();
    let mut first = true;
    for item in value.lines() {
        for (i, piece) in wrap(item, WIDTH - INDENT).into_iter().enumerate() {
            let lead = match (first, i) {
                (true, _) => format!("  {:<w$}", format!("{label}:"), w = INDENT - 2),
                (false, 0) => " ".repeat(INDENT),
                (false, _) => " ".repeat(INDENT + 2),
            };
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&lead);
            out.push_str(&piece);
            first = false;
        }
    }
    out
}

/// Greedy word wrap.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// Which models serve HTTP/2 (`--proto http`, h2c with prior knowledge and h2 over TLS).
fn http2_line(models: impl Iterator<Item = Model>) -> String {
    let (yes, no): (Vec<Model>, Vec<Model>) = models.partition(|m| m.serves_http2());
    let names = |ms: &[Model]| ms.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ");
    let mut line = format!(
        "`--proto http` serves HTTP/2 (h2c with prior knowledge, h2 over TLS by ALPN; `--http2 off` refuses it) on {}",
        if no.is_empty() { format!("every model ({})", names(&yes)) } else { names(&yes) }
    );
    if !no.is_empty() {
        line.push_str(&format!("; not on {}", names(&no)));
    }
    line
}

/// Which models serve `--http3` (QUIC on UDP beside the TCP listener).
fn http3_line(models: impl Iterator<Item = Model>) -> String {
    let (yes, no): (Vec<Model>, Vec<Model>) = models.partition(|m| m.serves_http3());
    let names = |ms: &[Model]| ms.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ");
    let mut line = format!(
        "`--http3` serves HTTP/3 on UDP at the TCP port's number, each UDP socket read by one thread, on {}",
        names(&yes)
    );
    if !no.is_empty() {
        line.push_str(&format!("; not on {} (see its row)", names(&no)));
    }
    line
}

/// The models table of docs/models.md.
fn markdown() -> String {
    let mut out = vec![
        "| `--model` | seed counterpart | threads | how readiness or completion is delivered | UDP | cannot honour | known limits |"
            .to_owned(),
        "|---|---|---|---|---|---|---|".to_owned(),
    ];
    for model in Model::ALL {
        let c = model.capabilities();
        let name = if model == default_model() { format!("`{}` (default)", c.name) } else { format!("`{}`", c.name) };
        let seed = c.seed.unwrap_or("— (the core engine)");
        let udp = if model.serves_udp() { "yes" } else { "no" };
        let cannot = match c.cannot {
            [] => "—".to_owned(),
            cannot => cannot.iter().map(|l| format!("{}: {}", l.policy, l.why)).collect::<Vec<_>>().join("; "),
        };
        let limits = if c.limits.is_empty() { "none known".to_owned() } else { c.limits.join("; ") };
        out.push(format!("| {name} | {seed} | {} | {} | {udp} | {cannot} | {limits} |", c.thread_detail, c.waits));
    }
    out.push(String::new());
    out.push(format!("Every model: {TLS_FILE_BODY}."));
    out.push(String::new());
    out.push(format!("HTTP/2: {}.", http2_line(Model::ALL.into_iter())));
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_every_word_within_the_width() {
        let text = "a signal per segment costs more than an epoll wake-up under bulk traffic";
        let lines = wrap(text, 20);
        assert!(lines.iter().all(|l| l.chars().count() <= 20), "{lines:?}");
        assert_eq!(lines.join(" "), text);
        assert_eq!(wrap("", 20), [""]);
    }

    #[test]
    fn every_model_gets_a_help_line_and_a_markdown_row() {
        let values: Vec<_> = ModelParser.possible_values().expect("values").collect();
        assert_eq!(values.len(), Model::ALL.len());
        let md = markdown();
        for model in Model::ALL {
            assert!(md.contains(&format!("| `{}`", model.name())), "{md}");
        }
        let uring64 = help_line(Model::Uring64.capabilities());
        assert!(uring64.contains("; cannot: active-set (") && uring64.contains("), udp (a UDP socket"), "{uring64}");
    }
}
