//! `captf`: one binary for the manager, the runner and the tools. This file parses arguments
//! and wires subcommands; the work lives in the library crates.
#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// CAPTF, a Cluster API infrastructure provider that runs Terraform or OpenTofu modules in
/// Kubernetes Jobs.
#[derive(Parser, Debug)]
#[command(name = "captf", version = version_string(), disable_version_flag = false)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the version of this binary, its API version and its module contract version.
    Version,
    /// Print the CustomResourceDefinitions of every CAPTF kind as YAML.
    Crds {
        /// Write one file per CRD into this folder (as `config/crd/bases/` holds them) instead
        /// of printing a multi-document stream.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<std::path::PathBuf>,
    },
}

const fn version_string() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("captf: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match cli.command {
        Command::Version => {
            writeln!(stdout, "captf {}", version_string())?;
            writeln!(stdout, "api {}", captf_api::API_VERSION)?;
        }
        Command::Crds { out_dir: None } => {
            stdout.write_all(captf_api::crds::all_yaml()?.as_bytes())?;
        }
        Command::Crds { out_dir: Some(dir) } => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            for crd in captf_api::crds::all() {
                let path = dir.join(captf_api::crds::file_name(&crd));
                std::fs::write(&path, captf_api::crds::to_yaml(&crd)?)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                writeln!(stdout, "wrote {}", path.display())?;
            }
        }
    }
    Ok(())
}
