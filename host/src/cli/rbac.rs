//! `kubewasm rbac`: the least-privilege RBAC for the plugins of a folder.

use std::process::ExitCode;

use kubewasm::rbac;

use super::FolderArgs;

/// Arguments of `kubewasm rbac`.
#[derive(clap::Args)]
pub struct RbacArgs {
    #[command(flatten)]
    folder: FolderArgs,
    /// Name of the ClusterRole and its binding.
    #[arg(long, default_value = "kubewasm")]
    name: String,
    /// Namespace of the host's service account.
    #[arg(long, default_value = "kubewasm")]
    namespace: String,
    /// The host's service account.
    #[arg(long, default_value = "kubewasm")]
    service_account: String,
    /// Also grant what leader election needs (a Lease in the namespace); implied by
    /// `leaderElection.enabled` in the configuration.
    #[arg(long)]
    leader_elect: bool,
}

/// Whether the leader keeps something of this plugin's in a ConfigMap: its state, or when
/// its schedules last ticked.
fn keeps_state(
    manifest: &kubewasm::plugins::manifest::PluginManifest,
    settings: &kubewasm::plugins::PluginSettings,
) -> bool {
    manifest.state || !manifest.schedules.is_empty() || !settings.schedules.is_empty()
}

/// `kubewasm rbac`.
pub async fn rbac(args: RbacArgs) -> anyhow::Result<ExitCode> {
    let super::Folder { config, loaded, .. } = args.folder.inspect("RBAC").await?;
    let mut types = rbac::Reads::default();
    let mut names = Vec::new();
    let mut writes = Vec::new();
    let mut plugin_state = false;
    for (file, inspection) in loaded {
        inspection.manifest.add_reads(&mut types);
        plugin_state |= keeps_state(&inspection.manifest, config.plugins.settings(&file.name));
        writes.extend(config.plugins.settings(&file.name).grants.writes.clone());
        names.push(file.name);
    }
    let identity = rbac::Identity {
        name: args.name,
        namespace: args.namespace,
        service_account: args.service_account,
        leader_election: args.leader_elect || config.elects(),
        sharding: config.sharding.enabled.then_some(config.sharding.key),
        plugin_resources: config.plugin_resources,
        plugin_state,
    };
    let sources = format!("the plugins {}", names.join(", "));
    print!("{}", rbac::render(&types, &writes, &identity, &sources));
    Ok(ExitCode::SUCCESS)
}
