//! `sockscale man`: the manual page, generated from the same definitions as `--help`.
//!
//! Like git and cargo, a command with subcommands gets a page for each (`man sockscale-serve`,
//! `man sockscale-load-http`); without `--out` the top page is printed, as `rg --generate man`
//! prints rg's, for `sockscale man | man -l -`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, CommandFactory};

use crate::cli::Cli;

#[derive(Debug, Args)]
#[command(after_help = "Install, for example:
  sockscale man --out ~/.local/share/man/man1     (then: man sockscale, man sockscale-serve)
or read it now: sockscale man | man -l -")]
pub struct ManArgs {
    /// Write one page per command into DIR (sockscale.1, sockscale-serve.1,
    /// sockscale-load-http.1, …) instead of printing the top page
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub fn run(args: &ManArgs) -> Result<()> {
    // No page for clap's `help` subcommand, and none named in the top page's list.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    match &args.out {
        None => {
            let page = render(cmd).context("cannot render the manual page")?;
            super::completions::write_stdout(&page)
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create --out {}", dir.display()))?;
            // Built, every subcommand knows its full name (sockscale-load-http) for its page.
            cmd.build();
            let mut pages = Vec::new();
            write_pages(&cmd, dir, &mut pages).with_context(|| format!("cannot write pages into {}", dir.display()))?;
            crate::output::say!("{} pages in {}: {}", pages.len(), dir.display(), pages.join(" "));
            Ok(())
        }
    }
}

/// The page of `cmd` and of each of its visible subcommands, their file names in `pages`.
fn write_pages(cmd: &clap::Command, dir: &Path, pages: &mut Vec<String>) -> std::io::Result<()> {
    let name = clap_mangen::Man::new(cmd.clone()).get_filename();
    std::fs::write(dir.join(&name), render(cmd.clone())?)?;
    pages.push(name);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, pages)?;
    }
    Ok(())
}

/// The page of `cmd`, its after-help text (errors, exit statuses, examples) under NOTES, the
/// man-pages(7) heading for it, where clap_mangen names it EXTRA.
fn render(cmd: clap::Command) -> std::io::Result<Vec<u8>> {
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut page)?;
    let text = String::from_utf8_lossy(&page).replace("\n.SH EXTRA\n", "\n.SH NOTES\n");
    Ok(text.into_bytes())
}
