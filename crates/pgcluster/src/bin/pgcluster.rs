//! `pgcluster list` / `pgcluster fetch <major>...`: inspect and pre-fetch PostgreSQL versions.

use std::process::ExitCode;

const USAGE: &str = "usage:
  pgcluster list              list discovered PostgreSQL installations
  pgcluster list --majors     only their major versions, space-separated (for scripts)
  pgcluster fetch <major>...  make sure each major version is available (fetch if missing)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("list") if args.len() == 1 => list(false),
        Some("list") if args.len() == 2 && args[1] == "--majors" => list(true),
        Some("fetch") if args.len() > 1 => fetch(&args[1..]),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn list(majors_only: bool) -> ExitCode {
    match pgcluster::discover() {
        Ok(found) if majors_only => {
            let majors: Vec<String> = found.iter().map(|i| i.major().to_string()).collect();
            println!("{}", majors.join(" "));
            ExitCode::SUCCESS
        }
        Ok(found) => {
            if found.is_empty() {
                eprintln!("no PostgreSQL installation found");
            }
            for inst in found {
                println!(
                    "{}\t{}\t{}\t{}",
                    inst.major(),
                    inst.version(),
                    inst.bindir().display(),
                    inst.source()
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pgcluster: {e}");
            ExitCode::FAILURE
        }
    }
}

fn fetch(majors: &[String]) -> ExitCode {
    let mut ok = true;
    for arg in majors {
        let Ok(major) = arg.parse::<u32>() else {
            eprintln!("pgcluster: not a major version: {arg:?}");
            ok = false;
            continue;
        };
        match pgcluster::ensure(major) {
            Ok(inst) => println!(
                "{}\t{}\t{}\t{}",
                inst.major(),
                inst.version(),
                inst.bindir().display(),
                inst.source()
            ),
            Err(e) => {
                eprintln!("pgcluster: {e}");
                ok = false;
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
