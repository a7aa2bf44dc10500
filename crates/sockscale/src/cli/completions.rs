//! `sockscale completions SHELL`: the shell's completion script for every subcommand and flag,
//! printed to stdout, as `rg --generate complete-bash` and `fd --gen-completions` do.

use anyhow::Result;
use clap::{Args, CommandFactory};
use clap_complete::Shell;

use crate::cli::Cli;

#[derive(Debug, Args)]
#[command(after_help = "Install, for example:
  bash: sockscale completions bash > ~/.local/share/bash-completion/completions/sockscale
  zsh:  sockscale completions zsh > ~/.zfunc/_sockscale   (with fpath+=~/.zfunc before compinit)
  fish: sockscale completions fish > ~/.config/fish/completions/sockscale.fish
or for this shell only (bash): source <(sockscale completions bash)")]
pub struct CompletionsArgs {
    /// The shell to complete in
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn run(args: &CompletionsArgs) -> Result<()> {
    let mut cmd = Cli::command();
    let name = cmd.get_name().to_owned();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, name, &mut script);
    write_stdout(&script)
}

/// `bytes` to stdout; a reader that stopped reading (`| head`) is not an error.
pub(super) fn write_stdout(bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("cannot write to stdout"))
        }
        _ => Ok(()),
    }
}
