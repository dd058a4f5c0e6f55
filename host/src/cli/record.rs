//! `kubewasm record`: a cluster's objects and changes, captured as a test file for
//! `kubewasm test` to replay.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kubewasm::agent::kube_client;
use kubewasm::gvk::Gvk;
use kubewasm::object::Transform;
use kubewasm::source::Source;
use kubewasm::source::kube::KubeSource;
use kubewasm::testing::record::record;

/// Arguments of `kubewasm record`.
#[derive(clap::Args)]
pub struct RecordArgs {
    /// Resource types to record, as apiVersion/Kind (`v1/Pod`, `apps/v1/Deployment`).
    #[arg(long = "type", required = true, value_parser = Gvk::parse)]
    types: Vec<Gvk>,
    /// How long to record changes after the initial state, in seconds (Ctrl-C ends sooner).
    #[arg(long = "for", default_value_t = 60)]
    seconds: u64,
    /// Most changes to record.
    #[arg(long, default_value_t = 10_000)]
    events: usize,
    /// Where to write the test file (default: standard output).
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Kubeconfig file (default: in-cluster, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long)]
    context: Option<String>,
}

/// `kubewasm record`.
pub async fn record_cmd(args: RecordArgs) -> anyhow::Result<ExitCode> {
    let client = kube_client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let tasks = tokio::runtime::Handle::current();
    let source: Arc<dyn Source> = Arc::new(KubeSource::new(client, Transform::default(), tasks));
    let stop = async {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(args.seconds)) => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    let recording = record(source, &args.types, args.events, stop).await;
    let types: Vec<String> = args.types.iter().map(Gvk::to_string).collect();
    let what = format!(
        "{} for up to {} s, {} steps",
        types.join(", "),
        args.seconds,
        recording.steps.len()
    );
    let text = recording.to_yaml(&what)?;
    match &args.output {
        Some(path) => {
            std::fs::write(path, text).with_context(|| path.display().to_string())?;
            eprintln!(
                "recorded {} steps into {}",
                recording.steps.len(),
                path.display()
            );
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}
