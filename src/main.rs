//! Thin entry point: parse, validate, start the watchdog and the runtime,
//! map the outcome to an exit status. See `lib.rs` for the layout.

use std::process::ExitCode;

use clap::Parser;
use leaderrun::cli::{Cli, Command, LogFormat};
use leaderrun::config::RunConfig;
use leaderrun::exit::{self, Exit};
use leaderrun::supervisor::watchdog::Watchdog;
use leaderrun::{cmd, log, run};

fn main() -> ExitCode {
    if json_requested() {
        // Before parsing, so that even a usage error is a JSON line.
        log::init(LogFormat::Json);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_error(e),
    };
    let outcome = match cli.command {
        None => {
            let cfg = match RunConfig::from_args(cli.run) {
                Ok(cfg) => cfg,
                Err(e) => return fail(exit::USAGE, &e),
            };
            log::init(cfg.log_format);
            // Forked while the process still has a single thread.
            let watchdog = match Watchdog::start() {
                Ok(w) => w,
                Err(e) => {
                    return fail(
                        exit::INTERNAL,
                        &format!("cannot start the backstop watchdog: {e}"),
                    );
                }
            };
            runtime().and_then(|rt| rt.block_on(run::run(cfg, watchdog)))
        }
        Some(Command::Status(args)) => runtime().and_then(|rt| rt.block_on(cmd::status::run(args))),
        Some(Command::Release(args)) => {
            log::init(args.log_format);
            runtime().and_then(|rt| rt.block_on(cmd::release::run(args)))
        }
        Some(Command::Doctor(args)) => runtime().and_then(|rt| rt.block_on(cmd::doctor::run(args))),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => match e.downcast_ref::<Exit>() {
            Some(exit) => fail(exit.code, &exit.message),
            None => fail(exit::INTERNAL, &format!("{e:#}")),
        },
    }
}

/// Whether `--log-format json` was typed before `--`.
fn json_requested() -> bool {
    let args: Vec<_> = std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .collect();
    args.iter().any(|a| a == "--log-format=json")
        || args
            .windows(2)
            .any(|w| w[0] == "--log-format" && w[1] == "json")
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// One line on stderr, then the status.
fn fail(code: u8, message: &str) -> ExitCode {
    log::event("error", message, &[("exit", code.into())]);
    ExitCode::from(code)
}

/// Help and version go to stdout with status 0; any other clap error is a
/// one-line usage error.
fn clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ => {
            let text = e.render().to_string();
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("invalid arguments");
            let first = first.trim_start_matches("error: ");
            fail(exit::USAGE, &format!("{first} (see --help)"))
        }
    }
}
