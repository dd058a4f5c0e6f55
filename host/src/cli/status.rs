//! `kubewasm status`: one line per plugin, then one per cached type, from a running host's
//! `/status`.

use std::io::{Read, Write};
use std::process::ExitCode;

use anyhow::Context;
use kubewasm::serve::Status;

/// Arguments of `kubewasm status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// Address of the host's endpoints (its `metricsAddress`).
    #[arg(
        long,
        default_value = "127.0.0.1:9090",
        env = "KUBEWASM_METRICS_ADDRESS"
    )]
    address: String,
}

/// The `/status` of the host at `address`.
pub async fn fetch(address: &str) -> anyhow::Result<Status> {
    let address = address.trim_start_matches("http://").to_owned();
    let body = tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
        let mut stream = std::net::TcpStream::connect(&address)
            .with_context(|| format!("cannot reach the host at {address}"))?;
        write!(
            stream,
            "GET /status HTTP/1.0\r\nHost: {address}\r\nConnection: close\r\n\r\n"
        )?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let (head, body) = response
            .split_once("\r\n\r\n")
            .context("malformed HTTP response")?;
        anyhow::ensure!(
            head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
            "{}",
            head.lines().next().unwrap_or_default()
        );
        Ok(body.to_owned())
    })
    .await??;
    serde_json::from_str(&body).context("malformed /status")
}

/// `kubewasm status`: one line per plugin from the host's `/status`.
pub async fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let status = fetch(&args.address).await?;
    let role = match (&status.sharding, status.leader) {
        (Some(_), true) => "a member and the leader (cluster-scoped work)",
        (Some(_), false) => "a member",
        (None, true) => "delivering",
        (None, false) => "follower (standby)",
    };
    println!(
        "host: {}, {role}",
        if status.ready { "ready" } else { "not ready" },
    );
    if let Some(split) = &status.sharding {
        println!(
            "  sharding by {} in group {}: delivering {} of 64 slices (cut table {}), {} hand-overs, {} members{}",
            split.key,
            split.group,
            split.delivering,
            split.cuts_generation,
            split.handovers,
            split.members.len(),
            if split.renewed {
                ""
            } else {
                " (own Lease not current: delivering nothing)"
            }
        );
        for (member, claims) in &split.members {
            let me = if *member == split.identity {
                " (this one)"
            } else {
                ""
            };
            println!("    {member}{me}: claims {claims} slices");
        }
    }
    for reason in &status.not_ready {
        println!("  not ready: {reason}");
    }
    println!(
        "{:<24} {:<12} {:<10} {:>10} {:>8} {:>7}  LAST ERROR",
        "PLUGIN", "DIGEST", "STATE", "DELIVERED", "FAILED", "QUEUED"
    );
    for p in &status.plugins {
        let state = if p.standby {
            "standby"
        } else if p.degraded {
            "degraded"
        } else if p.synced {
            "running"
        } else {
            "syncing"
        };
        let error = p
            .reload_error
            .as_ref()
            .map(|e| format!("reload failed: {e}"))
            .or_else(|| p.last_error.clone())
            .unwrap_or_default();
        println!(
            "{:<24} {:<12} {:<10} {:>10} {:>8} {:>7}  {error}",
            p.name, p.digest, state, p.delivered, p.failed, p.queued,
        );
    }
    for f in &status.failed_plugins {
        println!(
            "{:<24} {:<12} {:<10} {:>10} {:>8} {:>7}  {}: {}",
            f.name,
            "-",
            "failed",
            0,
            0,
            0,
            f.path.display(),
            f.error
        );
    }
    // What each informer watches: a scope is what the server is asked for.
    println!(
        "{:<36} {:>8} {:>12} {:<7}  SCOPE",
        "RESOURCE", "CACHED", "JSON BYTES", "SYNCED"
    );
    for i in &status.informers {
        println!(
            "{:<36} {:>8} {:>12} {:<7}  {}",
            i.gvk.to_string(),
            i.cached,
            i.cached_bytes,
            if i.synced { "yes" } else { "no" },
            i.scope
        );
    }
    Ok(ExitCode::SUCCESS)
}
