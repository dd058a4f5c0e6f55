//! `kubewasm check`: what one plugin subscribes to, queries and indexes, and what it may read.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use kubewasm::gvk::Gvk;
use kubewasm::informer::index::IndexFunc;

use super::{engine, inspect_file, load_config};
use kubewasm::plugins::manifest::with_configured;

/// Arguments of `kubewasm check`.
#[derive(clap::Args)]
pub struct CheckArgs {
    /// The plugin component.
    plugin: PathBuf,
    /// Host configuration file, for the plugin's configuration and grants.
    #[arg(long, env = "KUBEWASM_CONFIG")]
    config: Option<PathBuf>,
    /// Folder for compiled plugin code (see `run`).
    #[arg(long, env = "KUBEWASM_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
}

/// `kubewasm check`.
pub async fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(args.config.as_deref())?;
    let (file, inspection) = inspect_file(
        &args.plugin,
        &config,
        &engine(args.cache_dir.as_deref(), &config)?,
    )
    .await?;
    let name = &file.name;
    let m = &inspection.manifest;
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line(format!(
        "plugin {name} (version {}) from {}: valid",
        file.digest(),
        args.plugin.display()
    ));
    if let Some(warning) = config.plugins.missing_entry(name) {
        line(format!("warning: {warning}"));
    }
    line("subscribes to:".into());
    for (gvk, filter) in &m.subscriptions {
        let namespaces = if filter.namespaces.is_empty() {
            "all namespaces".to_owned()
        } else {
            format!("namespaces {}", filter.namespaces.join(", "))
        };
        let selector = filter.selector.to_string();
        let selector = if selector.is_empty() {
            "every label".to_owned()
        } else {
            format!("labels {selector}")
        };
        let changes = match &filter.changes {
            Some(c) => format!("; updates only when {} change", c.pointers().join(", ")),
            None => String::new(),
        };
        line(format!("  {gvk}  ({namespaces}; {selector}{changes})"));
    }
    if m.subscriptions.is_empty() {
        line("  nothing".into());
    }
    let subscribed: BTreeSet<&Gvk> = m.subscriptions.iter().map(|(g, _)| g).collect();
    let queried: Vec<String> = m
        .cached
        .iter()
        .filter(|g| !subscribed.contains(g))
        .map(Gvk::to_string)
        .collect();
    line(format!(
        "queries (besides its subscriptions): {}",
        if queried.is_empty() {
            "none".to_owned()
        } else {
            queried.join(", ")
        }
    ));
    // What of each object the plugin declared it reads: all the host keeps for it.
    for gvk in &m.cached {
        line(format!("reads of each {gvk}: {}", m.scope(gvk).keep()));
    }
    for index in &m.indexes {
        if let IndexFunc::JsonPointer(pointer) = &index.func {
            line(format!(
                "index: {} {:?} on {pointer}",
                index.gvk, index.name
            ));
        }
    }
    let settings = config.plugins.settings(name);
    line(format!(
        "resync: {}",
        settings
            .resync_with(m.resync)
            .map_or_else(|| "off".to_owned(), |d| format!("every {d:?}"))
    ));
    for schedule in with_configured(&m.schedules, &settings.schedules) {
        let by = if settings.schedules.contains(&schedule) {
            "configured, "
        } else {
            ""
        };
        line(format!(
            "schedule {:?}: {}{} ({by}tick on the leading replica)",
            schedule.name,
            schedule.text,
            if schedule.jitter.is_zero() {
                String::new()
            } else {
                format!(", up to {:?} of jitter", schedule.jitter)
            }
        ));
    }
    let limits = &config.plugins.settings(name).limits.state;
    line(format!(
        "state: {}",
        if m.state {
            format!(
                "declared (at most {} KiB, {} entries, {} KiB a value; kept by the leader)",
                limits.bytes >> 10,
                limits.entries,
                limits.value_bytes >> 10
            )
        } else {
            "not declared".to_owned()
        }
    ));
    match &m.admission {
        Some(a) => {
            line(format!(
                "admission: {} webhook at /admit/{name}, failurePolicy {}, timeout {:?}",
                if a.mutating { "mutating" } else { "validating" },
                if a.fail_open { "Ignore" } else { "Fail" },
                a.timeout
            ));
            for rule in &a.rules {
                let operations: Vec<&str> = rule.operations.iter().map(|o| o.as_str()).collect();
                line(format!(
                    "  {}  {}{}",
                    rule.gvk,
                    operations.join(", "),
                    if rule.subresources.is_empty() {
                        String::new()
                    } else {
                        format!(" (and {})", rule.subresources.join(", "))
                    }
                ));
            }
        }
        None => line("admission: none".into()),
    }
    line(format!(
        "may read ({}):",
        args.config.as_ref().map_or_else(
            || "no configuration: whatever its manifest declares except Secrets".to_owned(),
            |c| format!("under {}", c.display())
        )
    ));
    for gvk in &m.cached {
        line(format!("  {gvk}  get, list, watch"));
    }
    for gvk in inspection.denied() {
        line(format!(
            "  {gvk}  DENIED: not granted to plugins.{name}; its queries answer `denied`"
        ));
    }
    let secrets = &inspection.ctx.secrets;
    if !secrets.is_empty() {
        let mut secrets: Vec<&String> = secrets.iter().collect();
        secrets.sort();
        line(format!(
            "  Secrets, only: {}",
            secrets
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let writes = &config.plugins.settings(name).grants.writes;
    line("may write:".into());
    if writes.is_empty() {
        line(format!(
            "  nothing: its writes answer `denied` (grant them in plugins.{name}.grants.writes)"
        ));
    }
    for grant in writes {
        line(format!("  {grant}"));
    }
    let hosts = &config.plugins.settings(name).grants.http;
    line(format!(
        "may send HTTP to: {}",
        if hosts.is_empty() {
            format!("no host (grant hosts in plugins.{name}.grants.http)")
        } else {
            hosts
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        }
    ));
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}
