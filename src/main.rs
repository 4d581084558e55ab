//! The `steerdns` binary: parses the command line, sets up logging and the runtime, and
//! maps outcomes to exit codes. Everything else lives in the library.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use steerdns::config::schema::Document;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "steerdns", version, about = "Authoritative DNS traffic manager")]
struct Cli {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server.
    Serve {
        #[arg(short, long, default_value = "steerdns.yaml")]
        config: PathBuf,
    },
    /// Load and validate the configuration, profiles and data files.
    Check {
        #[arg(short, long, default_value = "steerdns.yaml")]
        config: PathBuf,
    },
    /// Answer one query offline as the server would, with the decision trace.
    Explain {
        /// Query name, absolute or relative to the only zone.
        name: String,
        /// Query type.
        #[arg(default_value = "A")]
        qtype: String,
        /// The client address (as if sent in EDNS Client Subnet).
        #[arg(long)]
        client: IpAddr,
        /// Treat this endpoint as degraded (profile/endpoint); repeatable.
        #[arg(long)]
        down: Vec<String>,
        #[arg(short, long, default_value = "steerdns.yaml")]
        config: PathBuf,
    },
    /// Print the JSON Schema of steerdns.yaml or of a profile document, for editors.
    Schema {
        #[arg(value_enum)]
        document: SchemaDocument,
    },
    /// Geo database tools.
    Geo {
        #[command(subcommand)]
        command: GeoCommand,
    },
    /// DNSSEC key tools.
    Dnssec {
        #[command(subcommand)]
        command: DnssecCommand,
    },
    /// The profiles held in etcd, and the replicas that serve them.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Check a profiles directory, then write it to etcd in one transaction (keys of files
    /// no longer in it are deleted).
    Push {
        /// The profiles directory.
        dir: PathBuf,
        /// Print the difference with etcd and write nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(short, long, default_value = "steerdns.yaml")]
        config: PathBuf,
    },
    /// Write the profiles held in etcd as files of a directory.
    Pull {
        /// The directory (created when missing; must be empty unless --force).
        dir: PathBuf,
        /// Replace the profile files of a non-empty directory (files not in etcd are
        /// removed).
        #[arg(long)]
        force: bool,
        #[arg(short, long, default_value = "steerdns.yaml")]
        config: PathBuf,
    },
    /// List the registered replicas and the profiles revision each serves; exits 1 when
    /// they disagree.
    Status {
        #[arg(short, long, default_value = "steerdns.yaml")]
        config: PathBuf,
    },
}

#[derive(Subcommand)]
enum DnssecCommand {
    /// Make a new CSK (or a KSK and a ZSK) in BIND's key file format, active from now.
    Keygen {
        /// The zone the key is for.
        #[arg(long)]
        zone: String,
        #[arg(long, value_enum, default_value_t = KeyAlgorithm::Ecdsap256sha256)]
        algorithm: KeyAlgorithm,
        /// Make a KSK (flags 257) and a ZSK (flags 256) instead of one CSK (flags 257).
        #[arg(long)]
        ksk_zsk: bool,
        /// The key directory to write the files into.
        #[arg(short, long, default_value = ".")]
        output: PathBuf,
    },
    /// Print the DS record of each published SEP key of every signed zone.
    Ds {
        #[arg(short, long, default_value = "steerdns.yaml")]
        config: PathBuf,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum KeyAlgorithm {
    /// Algorithm 13.
    #[value(alias = "13")]
    Ecdsap256sha256,
    /// Algorithm 15.
    #[value(alias = "15")]
    Ed25519,
}

#[derive(Clone, Copy, ValueEnum)]
enum SchemaDocument {
    /// steerdns.yaml.
    Config,
    /// One document of a profile file.
    Profile,
}

#[derive(Subcommand)]
enum GeoCommand {
    /// Compile a CSV (network,continent,country,subdivision,latitude,longitude) into an MMDB;
    /// with --asn, a CSV (network,asn,organization) into a GeoLite2-ASN-layout MMDB.
    Build {
        input: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
        /// Build an ASN database (for asn.database) instead of a location database.
        #[arg(long)]
        asn: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    match cli.command {
        Command::Check { config } => match steerdns::commands::check(&config) {
            Ok(summary) => {
                println!("{summary}");
                ExitCode::SUCCESS
            }
            Err(errors) => {
                println!("{errors}");
                ExitCode::from(1)
            }
        },
        Command::Explain { name, qtype, client, down, config } => {
            match steerdns::commands::explain(&config, &name, &qtype, client, &down) {
                Ok(e) => {
                    print!("{e}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Schema { document } => {
            let document = match document {
                SchemaDocument::Config => Document::Config,
                SchemaDocument::Profile => Document::Profile,
            };
            print!("{}", steerdns::commands::schema(document));
            ExitCode::SUCCESS
        }
        Command::Geo { command: GeoCommand::Build { input, output, asn } } => {
            let built = if asn {
                steerdns::geo::asn_build::build_asn(&input, &output)
            } else {
                steerdns::geo::build(&input, &output)
            };
            match built {
                Ok(summary) => {
                    println!("{}: {summary}", output.display());
                    ExitCode::SUCCESS
                }
                Err(errors) => {
                    errors.iter().for_each(|e| println!("{e}"));
                    ExitCode::from(1)
                }
            }
        }
        Command::Dnssec { command } => dnssec(command),
        Command::Cluster { command } => cluster(command),
        Command::Serve { config } => match run_server(config) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                // `{e}`, not `{e:#}`: the server's errors already include their cause.
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        },
    }
}

fn dnssec(command: DnssecCommand) -> ExitCode {
    use steerdns::model::dnssec::Algorithm;
    match command {
        DnssecCommand::Keygen { zone, algorithm, ksk_zsk, output } => {
            let algorithm = match algorithm {
                KeyAlgorithm::Ecdsap256sha256 => Algorithm::EcdsaP256Sha256,
                KeyAlgorithm::Ed25519 => Algorithm::Ed25519,
            };
            match steerdns::commands::dnssec::keygen(&zone, algorithm, ksk_zsk, &output) {
                Ok(made) => {
                    made.iter().for_each(|base| println!("{base}"));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
        DnssecCommand::Ds { config } => match steerdns::commands::dnssec::ds(&config) {
            Ok(lines) if lines.is_empty() => {
                eprintln!("error: no zone in {} is signed (zones[].dnssec)", config.display());
                ExitCode::from(1)
            }
            Ok(lines) => {
                lines.iter().for_each(|l| println!("{l}"));
                ExitCode::SUCCESS
            }
            Err(errors) => {
                println!("{errors}");
                ExitCode::from(1)
            }
        },
    }
}

/// Exit codes: 1 when the profiles or configuration are invalid (nothing written) or the
/// replicas disagree, 2 when etcd or the file system did not let the command finish.
fn cluster(command: ClusterCommand) -> ExitCode {
    use steerdns::commands::cluster::{self, ClusterError};
    let done = match command {
        ClusterCommand::Push { dir, dry_run, config } => {
            cluster::push(&config, &dir, dry_run).map(|pushed| (pushed.to_string(), true))
        }
        ClusterCommand::Pull { dir, force, config } => {
            cluster::pull(&config, &dir, force).map(|pulled| (pulled.to_string(), true))
        }
        ClusterCommand::Status { config } => {
            cluster::status(&config).map(|status| (status.to_string(), status.agreed()))
        }
    };
    match done {
        Ok((text, ok)) => {
            println!("{text}");
            if ok { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
        Err(ClusterError::Invalid(errors)) => {
            println!("{errors}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_server(config: PathBuf) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let served = runtime.block_on(steerdns::server::serve(&config));
    // Dropping the runtime would wait for every blocking task, a reload among them.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    served?;
    Ok(())
}

fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
