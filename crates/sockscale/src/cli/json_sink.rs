//! Where `load --json` and `load merge --json` write their report: a file or standard output.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sockscale_load::Report;

use crate::output::say;

/// Where `--json` goes. A file is opened (not truncated) before the run, so a path that cannot
/// be written is found at once; it is removed again if the run fails before writing it and it
/// did not exist before.
pub(super) enum JsonSink {
    Stdout,
    File { path: PathBuf, file: File, created: bool, written: bool },
}

impl JsonSink {
    pub(super) fn open(path: &Path) -> Result<JsonSink> {
        if path.as_os_str() == "-" {
            return Ok(JsonSink::Stdout);
        }
        let existed = path.exists();
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("cannot write --json {}", path.display()))?;
        Ok(JsonSink::File { path: path.to_owned(), file, created: !existed, written: false })
    }

    pub(super) fn write(self, report: &Report) -> Result<()> {
        self.write_text(serde_json::to_string_pretty(report)? + "\n")
    }

    pub(super) fn write_text(mut self, text: String) -> Result<()> {
        match &mut self {
            // A closed stdout only loses what the reader chose not to read.
            JsonSink::Stdout => say!("{}", text.trim_end()),
            JsonSink::File { path, file, written, .. } => {
                file.set_len(0)
                    .and_then(|()| file.write_all(text.as_bytes()))
                    .with_context(|| format!("cannot write --json {}", path.display()))?;
                *written = true;
            }
        }
        Ok(())
    }
}

impl Drop for JsonSink {
    fn drop(&mut self) {
        if let JsonSink::File { path, created: true, written: false, .. } = self {
            let _ = std::fs::remove_file(path);
        }
    }
}
