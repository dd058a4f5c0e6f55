//! Plugins pulled from a real OCI registry (CNCF distribution, TLS and basic auth, on
//! loopback), checked by digest and by cosign signatures made by the real cosign.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::config::HostConfig;
use kubewasm::plugins::PluginStatus;
use kubewasm::wasm::logging::MemorySink;
use kubewasm_testenv::oci::{Cosign, KeyPair, Registry};

use crate::support;

const WAIT: Duration = Duration::from_secs(60);
const REPO: &str = "plugins/audit-log";

/// The audit-log component under another content hash (a new version).
fn version(tag: &str) -> Vec<u8> {
    kubewasm_plugin_artifacts::variant(kubewasm_plugin_artifacts::AUDIT_LOG, tag)
}

/// A folder with the registry's CA, a pull secret (with `password`, or the right one) and a
/// cluster folder holding one ConfigMap.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new(registry: &Registry, password: Option<&str>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        registry
            .write_client_files(dir.path(), password)
            .expect("write");
        for sub in ["cluster", "plugins", "cache"] {
            std::fs::create_dir(dir.path().join(sub)).expect("mkdir");
        }
        std::fs::write(
            dir.path().join("cluster/cm.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: shop}\ndata: {a: b}\n",
        )
        .expect("write");
        Self { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// A configuration pulling audit-log from `reference`, with `extra` source fields.
    fn config(&self, reference: &str, extra: &str) -> HostConfig {
        let yaml = format!(
            "plugins:\n  audit-log:\n    source:\n      oci: {reference}\n      caFile: {}\n      pullSecret: {}\n      pollSeconds: 1\n{extra}",
            self.path("ca.pem"),
            self.path("regcred.json"),
        );
        HostConfig::parse(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
    }

    async fn agent(&self, config: HostConfig) -> (Agent, kubewasm::plugins::folder::SyncReport) {
        let sink = Arc::new(MemorySink::default());
        let mut options = AgentOptions::new(
            Cluster::Folder(self.dir.path().join("cluster")),
            config,
            sink,
        );
        options.compiled_cache = Some(self.dir.path().join("cache"));
        let mut agent = Agent::start(options).await.expect("the agent starts");
        let report = agent
            .follow_plugins(&self.dir.path().join("plugins"))
            .await
            .expect("follow plugins");
        (agent, report)
    }
}

fn status(agent: &Agent) -> PluginStatus {
    support::plugin_status(agent, "audit-log")
}

/// Waits until `check` holds for audit-log's status; panics with the status otherwise.
async fn wait_for(
    agent: &Agent,
    what: &str,
    check: impl Fn(&PluginStatus) -> bool,
) -> PluginStatus {
    let start = Instant::now();
    loop {
        let status = status(agent);
        if check(&status) {
            return status;
        }
        assert!(start.elapsed() < WAIT, "{what}: {status:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Why audit-log's source failed: its reload error when a version is loaded, else the error
/// of the failed plugin.
fn failure(agent: &Agent) -> String {
    let failed = agent.plugins().failed();
    status(agent)
        .reload_error
        .or_else(|| {
            failed
                .into_iter()
                .find(|f| f.name == "audit-log")
                .map(|f| f.error)
        })
        .unwrap_or_default()
}

fn short(wasm: &[u8]) -> String {
    kubewasm::plugins::digest(wasm)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_tag_is_verified_and_swapped_in_and_bad_artifacts_keep_the_old_version() {
    let registry = Registry::start().await.expect("registry");
    let cosign = Cosign::new().expect("cosign");
    let keys = tempfile::tempdir().expect("temp dir");
    let ours = cosign
        .generate_key_pair(&keys.path().join("ours"))
        .expect("keys");
    let theirs = cosign
        .generate_key_pair(&keys.path().join("theirs"))
        .expect("keys");
    let push_signed = async |tag: &str, wasm: &[u8], key: Option<&KeyPair>| {
        let digest = registry
            .push_component(REPO, tag, wasm)
            .await
            .expect("push");
        if let Some(key) = key {
            cosign.sign(&registry, REPO, &digest, key).expect("sign");
        }
        digest
    };
    let v1 = version("v1");
    let d1 = push_signed("stable", &v1, Some(&ours)).await;

    let files = Files::new(&registry, None);
    let reference = format!("oci://{}/{REPO}:stable", registry.address);
    let key = format!("      cosignKey: {}\n", ours.public.display());
    let (agent, report) = files.agent(files.config(&reference, &key)).await;
    assert_eq!(
        report.loaded,
        vec!["audit-log".to_owned()],
        "{:#?}",
        status(&agent)
    );
    let loaded = status(&agent);
    assert_eq!(loaded.digest, short(&v1));
    assert_eq!(
        loaded.path.display().to_string(),
        format!("oci://{}/{REPO}@{d1}", registry.address),
        "status names the manifest digest that was loaded"
    );

    // The tag moves to a signed version: pulled, verified and swapped in.
    let v2 = version("v2");
    let d2 = push_signed("stable", &v2, Some(&ours)).await;
    let swapped = wait_for(&agent, "the moved tag is swapped in", |s| {
        s.digest == short(&v2)
    })
    .await;
    assert_eq!(swapped.reloads, 1);
    assert!(swapped.path.display().to_string().ends_with(&d2));
    assert_eq!(swapped.reload_error, None);

    // Unsigned, signed by another key, not a component: each refused, v2 keeps serving.
    let cases: [(&str, Vec<u8>, Option<&KeyPair>, &str); 2] = [
        (
            "unsigned",
            version("v3"),
            None,
            "is not signed: no cosign signature at tag sha256-",
        ),
        (
            "foreign",
            version("v4"),
            Some(&theirs),
            "none by the configured ECDSA P-256 key",
        ),
    ];
    for (case, wasm, key, expected) in cases {
        let digest = push_signed("stable", &wasm, key).await;
        let refused = wait_for(&agent, case, |s| {
            s.reload_error
                .as_deref()
                .is_some_and(|e| e.contains(expected))
        })
        .await;
        let error = refused.reload_error.clone().unwrap_or_default();
        assert!(
            error.contains(&digest[7..19]) || error.contains(&digest),
            "{case}: {error}"
        );
        assert_eq!(
            refused.digest,
            short(&v2),
            "{case}: the old version keeps serving"
        );
    }
    let image = registry
        .push_layers(
            REPO,
            "stable",
            "application/vnd.oci.image.config.v1+json",
            b"{}",
            &[("application/vnd.oci.image.layer.v1.tar+gzip", b"not wasm")],
        )
        .await
        .expect("push an image");
    cosign.sign(&registry, REPO, &image, &ours).expect("sign");
    let refused = wait_for(&agent, "a container image", |s| {
        s.reload_error
            .as_deref()
            .is_some_and(|e| e.contains("not a wasm artifact"))
    })
    .await;
    assert_eq!(refused.digest, short(&v2));

    // Back to a good version: the error clears.
    let v5 = version("v5");
    push_signed("stable", &v5, Some(&ours)).await;
    let healed = wait_for(&agent, "a good version again", |s| s.digest == short(&v5)).await;
    assert_eq!(healed.reload_error, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digests_pin_what_loads_and_a_pinned_signed_plugin_restarts_from_the_cache_without_the_registry()
 {
    let mut registry = Registry::start().await.expect("registry");
    let v1 = version("pinned-1");
    let d1 = registry
        .push_component(REPO, "v1", &v1)
        .await
        .expect("push");
    let cosign = Cosign::new().expect("cosign");
    let keys = tempfile::tempdir().expect("temp dir");
    let key = cosign.generate_key_pair(keys.path()).expect("keys");
    cosign.sign(&registry, REPO, &d1, &key).expect("sign");
    let signed = format!("      cosignKey: {}\n", key.public.display());
    let files = Files::new(&registry, None);

    // A tag whose manifest is not the expected digest is refused, naming both.
    let other = format!("sha256:{}", "0".repeat(64));
    let tagged = format!("oci://{}/{REPO}:v1", registry.address);
    let (agent, report) = files
        .agent(files.config(&tagged, &format!("      digest: {other}\n")))
        .await;
    assert_eq!(report.failed, vec!["audit-log".to_owned()]);
    let error = failure(&agent);
    assert!(
        error.contains(&format!("expected digest {other}, got {d1}")),
        "{error}"
    );
    drop(agent);

    // By digest, signature checked: loads, and is cached; then the registry goes away and
    // the pinned plugin still starts, from the cache (its signature verified once).
    let pinned = format!("oci://{}/{REPO}@{d1}", registry.address);
    for registry_up in [true, false] {
        if !registry_up {
            registry.stop();
        }
        let (agent, report) = files.agent(files.config(&pinned, &signed)).await;
        let loaded = status(&agent);
        assert_eq!(report.loaded, vec!["audit-log".to_owned()], "{loaded:#?}");
        assert_eq!(loaded.digest, short(&v1), "registry up: {registry_up}");
    }
    // A tag cannot be resolved offline: a clear connection error.
    let (agent, report) = files.agent(files.config(&tagged, "")).await;
    assert_eq!(report.failed, vec!["audit-log".to_owned()]);
    let error = failure(&agent);
    assert!(error.contains("cannot reach https://"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_and_trust_failures_are_named() {
    let registry = Registry::start().await.expect("registry");
    registry
        .push_component(REPO, "v1", &version("auth"))
        .await
        .expect("push");
    let reference = format!("oci://{}/{REPO}:v1", registry.address);

    // Each source with one thing wrong, and what its failure must say.
    let files = Files::new(&registry, None);
    let wrong = Files::new(&registry, Some("not-the-password"));
    let (ca, secret, bad_secret) = (
        files.path("ca.pem"),
        files.path("regcred.json"),
        wrong.path("regcred.json"),
    );
    for (source, expected) in [
        (
            format!("{{oci: '{reference}', caFile: {ca}, pullSecret: {bad_secret}}}"),
            ["HTTP 401", "refused the credentials"],
        ),
        (
            format!("{{oci: '{reference}', caFile: {ca}}}"),
            ["HTTP 401", "pullSecret"],
        ),
        (
            format!("{{oci: '{reference}', pullSecret: {secret}}}"),
            ["cannot reach", "certificate"],
        ),
    ] {
        let yaml = format!("plugins:\n  audit-log:\n    source: {source}\n");
        let (agent, _) = files.agent(HostConfig::parse(&yaml).expect("config")).await;
        let error = failure(&agent);
        assert!(
            expected.iter().all(|e| error.contains(e)),
            "{source}: {error}"
        );
    }

    // A plugin file of the same name in the folder does not displace the registry's.
    let files = Files::new(&registry, None);
    std::fs::copy(
        kubewasm_plugin_artifacts::AUDIT_LOG,
        Path::new(&files.path("plugins")).join("audit-log.wasm"),
    )
    .expect("copy");
    let (agent, report) = files.agent(files.config(&reference, "")).await;
    assert_eq!(report.loaded, vec!["audit-log".to_owned()]);
    assert!(
        status(&agent)
            .path
            .display()
            .to_string()
            .starts_with("oci://")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubewasm_rbac_pulls_registry_plugins_to_read_what_they_need() {
    let registry = Registry::start().await.expect("registry");
    registry
        .push_component(REPO, "v1", &version("rbac"))
        .await
        .expect("push");
    let files = Files::new(&registry, None);
    let yaml = format!(
        "plugins:\n  audit-log:\n    source: {{oci: 'oci://{}/{REPO}:v1', caFile: {}, pullSecret: {}}}\n",
        registry.address,
        files.path("ca.pem"),
        files.path("regcred.json"),
    );
    std::fs::write(files.path("config.yaml"), yaml).expect("write");
    let (config, plugins) = (files.path("config.yaml"), files.path("plugins"));
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_kubewasm"))
            .args(["rbac", "--config", &config, "--plugins", &plugins])
            .env("RUST_LOG", "warn")
            .output()
            .expect("kubewasm rbac")
    })
    .await
    .expect("join");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("for the plugins audit-log"), "{text}");
    assert!(
        text.contains("- configmaps"),
        "audit-log reads ConfigMaps: {text}"
    );
}
