//! `kubewasm finalizers release`: removes a controller plugin's finalizer
//! (`kubewasm.dev/<plugin>`) from every object of a type, for an operator who removed the
//! plugin and wants the objects it held to go.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kubewasm::agent::kube_client;
use kubewasm::gvk::Gvk;

/// Arguments of `kubewasm finalizers`.
#[derive(clap::Args)]
pub struct FinalizersArgs {
    /// What to do.
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Remove plugin PLUGIN's finalizer from every object of a type that carries it.
    Release(ReleaseArgs),
}

#[derive(clap::Args)]
struct ReleaseArgs {
    /// The plugin's name (its finalizer is `kubewasm.dev/PLUGIN`).
    plugin: String,
    /// The type its controller reconciles, as apiVersion/Kind (`v1/Namespace`).
    #[arg(long = "type", value_parser = Gvk::parse)]
    gvk: Gvk,
    /// Print what would be released, change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Kubeconfig file (default: in-cluster, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long)]
    context: Option<String>,
}

/// `kubewasm finalizers`.
pub async fn finalizers(args: FinalizersArgs) -> anyhow::Result<ExitCode> {
    let Action::Release(args) = args.action;
    let client = kube_client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let finalizer = kubewasm::controller::finalizer(&args.plugin);
    let gvk = GroupVersionKind::gvk(&args.gvk.group, &args.gvk.version, &args.gvk.kind);
    let (resource, _) = kube::discovery::pinned_kind(&client, &gvk)
        .await
        .with_context(|| format!("{}: not served by this cluster", args.gvk))?;
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let listed = all
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing {}", args.gvk))?;
    let mut released = 0usize;
    for object in listed.items {
        let held = object.metadata.finalizers.as_deref().unwrap_or_default();
        let Some(i) = held.iter().position(|f| *f == finalizer) else {
            continue;
        };
        let name = object.metadata.name.clone().unwrap_or_default();
        let namespace = object.metadata.namespace.clone();
        let shown = kubewasm::object::object_key(namespace.as_deref(), &name);
        if args.dry_run {
            println!("would release {} {shown}", args.gvk);
            released += 1;
            continue;
        }
        let api: Api<DynamicObject> = match &namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        // Conditional on the version read, as the host removes it: a newer object is read
        // again by a second run, never a finalizer of another's removed.
        let ops = serde_json::json!([
            {"op": "replace", "path": "/metadata/resourceVersion",
             "value": object.metadata.resource_version.clone().unwrap_or_default()},
            {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
        ]);
        let patch: json_patch::Patch = serde_json::from_value(ops)?;
        api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .with_context(|| format!("releasing {} {shown}", args.gvk))?;
        println!("released {} {shown}", args.gvk);
        released += 1;
    }
    let verb = if args.dry_run {
        "would release"
    } else {
        "released"
    };
    println!("{verb} {released} objects of {} from {finalizer}", args.gvk);
    Ok(ExitCode::SUCCESS)
}
