//! The `kubewasm` binary's agent commands (`check`, `rbac`, SIGTERM on `run`) and the
//! manifests in examples/deploy, which must match what the binary generates.

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kubewasm::config::HostConfig;
use kubewasm_testenv::agent_process::{AgentProcess, resident};

use crate::support;

const KUBEWASM: &str = env!("CARGO_BIN_EXE_kubewasm");

fn run(args: &[&str]) -> std::process::Output {
    Command::new(KUBEWASM)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("kubewasm runs")
}

#[test]
fn deploy_rbac_is_what_kubewasm_rbac_generates() {
    let plugins = support::deployed_plugins();
    let config = support::root().join("examples/deploy/config.yaml");
    let out = run(&[
        "rbac",
        "--plugins",
        plugins.path().to_str().expect("utf-8 path"),
        "--config",
        config.to_str().expect("utf-8 path"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let committed = std::fs::read_to_string(support::root().join("examples/deploy/rbac.yaml"))
        .expect("rbac.yaml");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        committed,
        "regenerate examples/deploy/rbac.yaml with `kubewasm rbac` (see README)"
    );
}

#[test]
fn deploy_manifests_parse_and_the_pod_is_locked_down() {
    let dir = support::root().join("examples/deploy");
    HostConfig::load(&dir.join("config.yaml")).expect("the host configuration is valid");
    let mut kinds = Vec::new();
    for file in [
        "namespace.yaml",
        "rbac.yaml",
        "deployment.yaml",
        "kustomization.yaml",
    ] {
        let text = std::fs::read_to_string(dir.join(file)).expect("readable");
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let value: serde_json::Value =
                serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{file}: {e}"));
            kinds.push(value["kind"].as_str().unwrap_or("Kustomization").to_owned());
        }
    }
    assert_eq!(
        kinds,
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Role",
            "RoleBinding",
            "Deployment",
            "Kustomization"
        ]
    );
    let text = std::fs::read_to_string(dir.join("deployment.yaml")).expect("readable");
    let deployment: k8s_openapi::api::apps::v1::Deployment =
        serde_yaml_ng::from_str(&text).expect("a Deployment");
    let pod = deployment
        .spec
        .and_then(|s| s.template.spec)
        .expect("a pod spec");
    assert_eq!(
        pod.security_context.and_then(|s| s.run_as_non_root),
        Some(true)
    );
    let container = &pod.containers[0];
    let security = container
        .security_context
        .clone()
        .expect("container securityContext");
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    let probe_path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|h| h.path.clone())
    };
    assert_eq!(
        probe_path(&container.readiness_probe).as_deref(),
        Some("/readyz")
    );
    assert_eq!(
        probe_path(&container.liveness_probe).as_deref(),
        Some("/healthz")
    );
    let resources = container.resources.clone().expect("resources");
    assert!(resources.requests.is_some() && resources.limits.is_some());
}

#[test]
fn check_prints_what_a_plugin_reads_and_refuses_a_broken_file() {
    let plugins = support::deployed_plugins();
    let config = support::root().join("examples/deploy/config.yaml");
    let plugin = plugins.path().join("deployment-view.wasm");
    // `kubewasm check PLUGIN [--config FILE]`.
    let check_with = |plugin: &std::path::Path, config: Option<&std::path::Path>| {
        let mut args = vec!["check", plugin.to_str().expect("utf-8 path")];
        if let Some(config) = config {
            args.extend(["--config", config.to_str().expect("utf-8 path")]);
        }
        run(&args)
    };
    let check = |plugin: &std::path::Path| check_with(plugin, Some(&config));
    let out = check(&plugin);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "plugin deployment-view",
        "apps/v1/Deployment  (namespaces shop; every label)",
        "index: v1/Event \"involved-uid\" on /involvedObject/uid",
        "v1/Pod  get, list, watch",
        "may write:\n  nothing: its writes answer `denied`",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    assert!(!stdout.contains("warning"), "{stdout}");
    // What of each object a plugin reads: pod-phase declares the phase alone.
    assert!(
        stdout.contains("reads of each apps/v1/Deployment: whole objects"),
        "{stdout}"
    );
    let phase = plugins.put("phase", kubewasm_plugin_artifacts::POD_PHASE);
    let out = check_with(&phase, None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("reads of each v1/Pod: metadata and /status/phase\n"),
        "{stdout}"
    );
    // cargo writes deployment_view.wasm; the configuration names deployment-view.
    let renamed = plugins.put("deployment_view", &plugin);
    let out = check(&renamed);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("warning: the configuration has no entry plugins.deployment_view but one for plugins.deployment-view"),
        "{stdout}"
    );
    // Write grants are listed as the configuration gives them.
    let writes = plugins.path().join("writes.yaml");
    std::fs::write(
        &writes,
        "plugins:\n  labeler:\n    grants:\n      http: [hooks.example.com, 127.0.0.1:8080]\n      writes:\n        - {resources: [v1/Pod], verbs: [patch], subresources: [status], namespaces: [shop]}\n",
    )
    .expect("write");
    let labeler = plugins.put("labeler", kubewasm_plugin_artifacts::LABELER);
    let out = check_with(&labeler, Some(&writes));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("may write:\n  patch on v1/Pod (and status) in namespaces shop\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("may send HTTP to: hooks.example.com (ports 80, 443), 127.0.0.1:8080\n"),
        "{stdout}"
    );
    // Schedules and resyncs as they will run: the manifest's, or the operator's over them.
    let pod_age = plugins.put("pod-age", kubewasm_plugin_artifacts::POD_AGE);
    let out = check_with(&pod_age, None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("schedule \"summary\": */5 * * * * (tick on the leading replica)"),
        "{stdout}"
    );
    let moved = plugins.path().join("schedules.yaml");
    std::fs::write(
        &moved,
        "plugins:\n  pod-age:\n    resyncSeconds: 0\n    schedules:\n      summary: {cron: '@every 30s'}\n      nightly: {cron: '0 3 * * *', jitterSeconds: 60}\n",
    )
    .expect("write");
    let out = check_with(&pod_age, Some(&moved));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "resync: off\n",
        "schedule \"summary\": @every 30s (configured, tick on the leading replica)",
        "schedule \"nightly\": 0 3 * * *, up to 60s of jitter (configured, tick on the leading replica)",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    assert!(
        !stdout.contains("*/5"),
        "the operator's cron replaces the manifest's: {stdout}"
    );
    let broken = plugins.path().join("broken.wasm");
    std::fs::write(&broken, b"not a component").expect("write");
    let out = check_with(&broken, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("broken") && stderr.contains("broken.wasm"),
        "{stderr}"
    );
}

/// `kubewasm run` with `args`, once it says its plugins are ready: the process and its
/// output lines so far.
fn run_until_ready(args: &[&std::ffi::OsStr]) -> (AgentProcess, Vec<String>) {
    run_until_line(args, "plugins ready")
}

/// `kubewasm run` with `args`, once it has printed a line holding `marker`.
fn run_until_line(args: &[&std::ffi::OsStr], marker: &str) -> (AgentProcess, Vec<String>) {
    let agent = AgentProcess::start(KUBEWASM.as_ref(), args).expect("kubewasm runs");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut lines = Vec::new();
    while !lines.iter().any(|l: &String| l.contains(marker)) {
        assert!(Instant::now() < deadline, "never {marker:?}: {lines:#?}");
        if let Some((_, line)) = agent.next_line(Duration::from_millis(100)) {
            lines.push(line);
        }
    }
    (agent, lines)
}

/// The lines `agent` printed since the last look.
fn more_lines(agent: &AgentProcess) -> impl Iterator<Item = String> {
    agent.take_lines().into_iter().map(|(_, line)| line)
}

#[test]
fn sigterm_stops_delivery_and_exits_zero() {
    let plugins = support::deployed_plugins();
    let cluster = support::root().join("examples/cluster");
    let (mut agent, mut lines) = run_until_ready(&[
        "--plugins".as_ref(),
        plugins.path().as_os_str(),
        "--cluster".as_ref(),
        cluster.as_os_str(),
    ]);
    let (exited_ok, _) = agent.terminate(Duration::from_secs(15)).expect("exits");
    lines.extend(more_lines(&agent));
    assert!(exited_ok, "{lines:#?}");
    assert!(
        lines.iter().any(|l| l.contains("shutting down")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("plugin unloaded")),
        "delivery stopped: {lines:#?}"
    );
}

#[test]
fn top_shows_what_each_plugin_costs_from_a_running_host() {
    let plugins = support::deployed_plugins();
    let cluster = support::root().join("examples/cluster");
    let address = support::free_address().to_string();
    let (mut agent, _) = run_until_ready(&[
        "--plugins".as_ref(),
        plugins.path().as_os_str(),
        "--cluster".as_ref(),
        cluster.as_os_str(),
        "--metrics-address".as_ref(),
        address.as_ref(),
    ]);
    let out = run(&[
        "top",
        "--once",
        "--every",
        "0.3",
        "--sort",
        "memory",
        "--address",
        &address,
    ]);
    let _ = agent.kill();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("kubewasm top:") && lines[0].contains("by memory"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("PLUGIN") && lines[1].contains("PEAK MiB"),
        "{stdout}"
    );
    let names: Vec<&str> = lines[2..]
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for plugin in ["pod-phase", "deployment-view"] {
        assert!(names.contains(&plugin), "{plugin} missing: {stdout}");
    }
    // Ordered by the memory column (the seventh), highest first.
    let memory: Vec<f64> = lines[2..]
        .iter()
        .filter_map(|l| l.split_whitespace().nth(6)?.parse().ok())
        .collect();
    assert_eq!(memory.len(), names.len(), "{stdout}");
    assert!(memory.windows(2).all(|w| w[0] >= w[1]), "{stdout}");
    // A host that does not answer is a clear error.
    let refused = run(&["top", "--once", "--address", "127.0.0.1:1"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("cannot reach the host at 127.0.0.1:1"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// A `kubewasm run` of copies of `plugins` (file name, artifact) with `config`, over a
/// cluster folder of `config_maps` ConfigMaps, once it is ready.
struct Hosted {
    agent: AgentProcess,
    lines: Vec<String>,
    _dirs: (kubewasm_testenv::PluginFolder, tempfile::TempDir),
}

fn host_with(plugins: &[(&str, &str)], config: &str, config_maps: usize) -> Hosted {
    let dir = kubewasm_testenv::PluginFolder::new();
    for (name, artifact) in plugins {
        dir.put(name, artifact);
    }
    let config_file = dir.path().join("config.yaml");
    fs::write(&config_file, config).expect("write");
    let cluster = tempfile::tempdir().expect("temp dir");
    for i in 0..config_maps {
        fs::write(
            cluster.path().join(format!("cm-{i}.yaml")),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}, namespace: t}}\n"),
        )
        .expect("write");
    }
    let (agent, lines) = run_until_ready(&[
        "--plugins".as_ref(),
        dir.path().as_os_str(),
        "--cluster".as_ref(),
        cluster.path().as_os_str(),
        "--config".as_ref(),
        config_file.as_os_str(),
    ]);
    Hosted {
        agent,
        lines,
        _dirs: (dir, cluster),
    }
}

#[test]
fn plugins_own_metrics_reach_a_real_collector_over_otlp() {
    let runtime = support::tokio();
    let collector = runtime
        .block_on(kubewasm_testenv::otel::Collector::start())
        .expect("collector");
    // The flooding plugin makes series until its bound of 5 refuses the next.
    let config = format!(
        "otlpMetrics: {{endpoint: '{}', intervalSeconds: 1}}\nplugins:\n  flood:\n    config: {{mode: metric-flood}}\n    limits: {{metricSeries: 5}}\n",
        collector.endpoint
    );
    let Hosted { mut agent, .. } =
        host_with(&[("flood", kubewasm_plugin_artifacts::HOSTILE)], &config, 3);
    let wanted = [
        "Name: kubewasm_custom_flood_seen_total",
        "-> plugin: Str(flood)",
        "-> digest: Str(",
        "DataType: Sum",
        "IsMonotonic: true",
        "AggregationTemporality: Cumulative",
    ];
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let output = collector.output();
        let missing: Vec<&&str> = wanted.iter().filter(|w| !output.contains(**w)).collect();
        if missing.is_empty() {
            // At most its 5 series, whatever it asked for.
            let last = output
                .rsplit("Name: kubewasm_custom_flood_seen_total")
                .next()
                .unwrap_or_default();
            let points = last.split("Metric #").next().unwrap_or_default();
            let count = points.matches("NumberDataPoints #").count();
            assert!((1..=5).contains(&count), "{count} series in:\n{points}");
            break;
        }
        assert!(
            Instant::now() < end,
            "the collector did not print {missing:?}:\n{}",
            collector.log_tail(80)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    agent.terminate(Duration::from_secs(30)).expect("exits");
}

#[test]
fn sigterm_exits_within_the_shutdown_timeout_while_a_call_is_stuck() {
    // The hostile plugin loops in every call, and its deadline is a minute: a shutdown that
    // waited for the call would take that minute.
    let Hosted {
        mut agent,
        mut lines,
        ..
    } = host_with(
        &[("stuck", kubewasm_plugin_artifacts::HOSTILE)],
        "shutdownTimeoutSeconds: 1\nplugins:\n  stuck:\n    config: {mode: loop}\n    limits: {deadlineMs: 60000}\n",
        1,
    );
    // Let the first call start and get stuck.
    std::thread::sleep(Duration::from_millis(500));
    let (exited_ok, took) = agent.terminate(Duration::from_secs(30)).expect("exits");
    lines.extend(more_lines(&agent));
    assert!(exited_ok, "{lines:#?}");
    assert!(
        took < Duration::from_secs(1) + Duration::from_secs(1) + Duration::from_millis(900),
        "exited {took:?} after SIGTERM (shutdown timeout 1 s): {lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("exiting anyway")),
        "{lines:#?}"
    );
}

#[test]
fn hostile_plugins_keep_the_host_under_their_caps_plus_100_mib() {
    // Three hostile plugins (one allocating until its cap, one sending 1 MiB query
    // arguments, one logging 1 MiB messages and failing with 1 MiB errors) beside a good one,
    // each with the default 64 MiB cap.
    let hostile = kubewasm_plugin_artifacts::HOSTILE;
    let Hosted {
        mut agent,
        mut lines,
        ..
    } = host_with(
        &[
            ("alloc", hostile),
            ("args", hostile),
            ("flood", hostile),
            ("good", kubewasm_plugin_artifacts::AUDIT_LOG),
        ],
        "plugins:\n  alloc:\n    config: {mode: alloc}\n    limits: {maxAttempts: 2}\n  args:\n    config: {mode: huge-args}\n  flood:\n    config: {mode: huge-log}\n",
        3,
    );
    let count = |lines: &[String], plugin: &str, text: &str| {
        lines
            .iter()
            .filter(|l| l.contains(&format!("plugin={plugin}")) && l.contains(text))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    // A given-up line is several lines long (the trap's backtrace); its last carries the
    // plugin and the attempt count.
    while count(&lines, "alloc", "attempts=2") < 3
        || count(&lines, "args", "huge kind") < 3
        || count(&lines, "flood", "fields-dropped") < 3
        || count(&lines, "good", "added") < 3
    {
        assert!(
            Instant::now() < deadline,
            "never saw every event: {lines:#?}"
        );
        if let Some((_, line)) = agent.next_line(Duration::from_millis(100)) {
            lines.push(line);
        }
    }
    // `good` has no entry of its own: run says so once, when it loads.
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("no entry plugins.good (it names alloc, args, flood)"))
            .count(),
        1,
        "{lines:#?}"
    );
    let (_, peak) = resident(agent.id()).expect("running");
    let (exited_ok, _) = agent.terminate(Duration::from_secs(30)).expect("exits");
    assert!(exited_ok);
    let bound = 4 * (64 << 20) + (100 << 20);
    assert!(
        peak < bound,
        "peak RSS {} MiB, over the caps plus 100 MiB ({} MiB)",
        peak >> 20,
        bound >> 20
    );
    eprintln!("peak RSS {} MiB (bound {} MiB)", peak >> 20, bound >> 20);
}

#[test]
fn sigterm_while_a_plugin_compiles_exits_at_once() {
    // Eight functions of 140,000 constant additions each: about a minute of compiling on two
    // cores, within every shape limit. SIGTERM stops the compiling process, not waits for it.
    let function = "i32.const 100000\ni32.add\n".repeat(140_000);
    let functions: String = (0..8)
        .map(|i| {
            format!("(func (export \"f{i}\") (param i32) (result i32) local.get 0 {function})")
        })
        .collect();
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(
        dir.path().join("bomb.wasm"),
        format!("(component (core module {functions}))"),
    )
    .expect("write");
    let config = dir.path().join("config.yaml");
    fs::write(
        &config,
        "shutdownTimeoutSeconds: 2\ncompileMemoryMiB: 8192\n",
    )
    .expect("write");
    let cluster = tempfile::tempdir().expect("temp dir");
    let cache = dir.path().join("cache");
    let (mut agent, _) = run_until_line(
        &[
            "--plugins".as_ref(),
            dir.path().as_os_str(),
            "--cluster".as_ref(),
            cluster.path().as_os_str(),
            "--config".as_ref(),
            config.as_os_str(),
            "--cache-dir".as_ref(),
            cache.as_os_str(),
        ],
        "compiling to machine code",
    );
    let (exited_ok, took) = agent.terminate(Duration::from_secs(10)).expect("exits");
    let rest: Vec<String> = more_lines(&agent).collect();
    assert!(exited_ok, "{rest:#?}");
    assert!(
        took < Duration::from_secs(3),
        "took {took:?} to stop: {rest:#?}"
    );
}

#[test]
fn healthz_answers_from_the_start_while_a_large_folder_is_read() {
    // 20,000 manifests take seconds to read: a liveness probe must get its answer meanwhile.
    let cluster = tempfile::tempdir().expect("temp dir");
    let data = "x".repeat(400);
    for i in 0..20_000 {
        fs::write(
            cluster.path().join(format!("cm-{i}.yaml")),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}, namespace: t}}\ndata: {{v: {data}}}\n"),
        )
        .expect("write");
    }
    let plugins = kubewasm_testenv::PluginFolder::new();
    let address = support::free_address();
    let started = Instant::now();
    let mut child = Command::new(KUBEWASM)
        .args(["run", "--plugins"])
        .arg(plugins.path())
        .arg("--cluster")
        .arg(cluster.path())
        .arg("--metrics-address")
        .arg(address.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubewasm runs");
    let healthy = loop {
        let (code, _) = support::http_get(address, "/healthz");
        if code == 200 {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no /healthz");
        std::thread::sleep(Duration::from_millis(5));
    };
    let (code, body) = support::http_get(address, "/readyz");
    let _ = child.kill();
    let _ = child.wait();
    eprintln!("/healthz answered {healthy:?} after the start");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("starting"),
        "still reading the folder: {body}"
    );
}

#[test]
fn webhooks_print_yaml_alone_on_stdout_and_logs_without_colour_on_stderr() {
    let plugins = kubewasm_testenv::PluginFolder::new();
    plugins.put("image-policy", kubewasm_plugin_artifacts::IMAGE_POLICY);
    // A cold cache: the compile log lines that used to precede the YAML are written.
    let cache = tempfile::tempdir().expect("temp dir");
    let out = Command::new(KUBEWASM)
        .args(["webhooks", "--plugins"])
        .arg(plugins.path())
        .arg("--cache-dir")
        .arg(cache.path())
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .output()
        .expect("kubewasm runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.is_empty(), "the log is on stderr");
    assert!(
        !stdout.contains('\u{1b}') && !stderr.contains('\u{1b}'),
        "no colour codes where no terminal is: {stdout:?} {stderr:?}"
    );
    let documents: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&stdout)
        .map(|d| serde::Deserialize::deserialize(d).expect("each document is YAML"))
        .collect();
    assert!(
        documents
            .iter()
            .all(|d| d["kind"] == "ValidatingWebhookConfiguration"),
        "stdout holds the configurations and nothing else: {stdout}"
    );
}

/// `kubewasm run` as a user who cannot list some folders of the cluster folder: a folder
/// locked from the start and one locked while it runs are each one line, and the host goes
/// on delivering (root reads every folder, so the binary runs as `nobody` under root).
#[test]
fn a_folder_that_cannot_be_listed_is_one_line_and_the_host_goes_on() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let open = |p: &std::path::Path, mode: u32| {
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).expect("chmod")
    };
    open(dir.path(), 0o755);
    let (cluster, plugins) = (dir.path().join("cluster"), dir.path().join("plugins"));
    for sub in ["cluster/locked", "cluster/later", "plugins", "home"] {
        fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
    }
    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: shop}}\nstatus: {{phase: Running}}\n"
        )
    };
    fs::write(cluster.join("a.yaml"), pod("a")).expect("write");
    fs::write(cluster.join("locked/b.yaml"), pod("b")).expect("write");
    fs::write(cluster.join("later/c.yaml"), pod("c")).expect("write");
    fs::copy(
        kubewasm_plugin_artifacts::POD_PHASE,
        plugins.join("pod-phase.wasm"),
    )
    .expect("copy");
    // The binary too, where `nobody` can run it whatever the checkout's permissions.
    let program = dir.path().join("kubewasm");
    fs::copy(KUBEWASM, &program).expect("copy the binary");
    let root = std::os::unix::fs::MetadataExt::uid(&fs::metadata("/proc/self").expect("proc")) == 0;
    let mut command = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        c.arg(&program);
        c
    } else {
        Command::new(&program)
    };
    for entry in walk(dir.path()) {
        open(&entry, if entry.is_dir() { 0o777 } else { 0o666 });
    }
    open(&program, 0o755);
    open(&cluster.join("locked"), 0o000);
    let mut child = command
        .args(["run", "--plugins"])
        .arg(&plugins)
        .arg("--cluster")
        .arg(&cluster)
        .arg("--cache-dir")
        .arg(dir.path().join("home"))
        .env("HOME", dir.path().join("home"))
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubewasm runs");
    let log = child.stderr.take().expect("stderr");
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(log)).map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let wait_for = |what: &str, seen: &mut Vec<String>| {
        let until = Instant::now() + Duration::from_secs(120);
        while Instant::now() < until {
            if let Ok(line) = lines.recv_timeout(Duration::from_millis(100)) {
                seen.push(line);
                if seen.last().is_some_and(|l| l.contains(what)) {
                    return;
                }
            }
        }
        panic!("no {what:?} in:\n{}", seen.join("\n"));
    };
    wait_for("pod=shop/c", &mut seen);
    // Locked while it runs: its pod is kept, not deleted.
    open(&cluster.join("later"), 0o000);
    fs::write(
        cluster.join("a.yaml"),
        pod("a").replace("Running", "Failed"),
    )
    .expect("write");
    wait_for("to=Failed", &mut seen);
    std::thread::sleep(Duration::from_secs(1));
    seen.extend(lines.try_iter());
    let still_running = child.try_wait().expect("wait").is_none();
    let _ = child.kill();
    let _ = child.wait();
    open(&cluster.join("locked"), 0o755);
    open(&cluster.join("later"), 0o755);
    let text = seen.join("\n");
    assert!(still_running, "the host went on:\n{text}");
    for folder in ["locked", "later"] {
        let said = seen
            .iter()
            .filter(|l| l.contains(&format!("cluster/{folder}")))
            .count();
        assert_eq!(said, 1, "one line for {folder}:\n{text}");
    }
    assert!(!text.contains("pod deleted"), "nothing deleted:\n{text}");
    assert!(!text.contains("pod=shop/b"), "b is not readable:\n{text}");
}

/// Every entry under `dir`, folders included.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

/// `kubewasm promote NAME` renames the candidate over the serving file, and names what is
/// missing when it cannot.
#[test]
fn promote_replaces_a_plugin_by_its_candidate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let promote = |name: &str| {
        std::process::Command::new(KUBEWASM)
            .args(["promote", name, "--plugins"])
            .arg(dir.path())
            .output()
            .expect("kubewasm runs")
    };
    std::fs::write(dir.path().join("labeler.wasm"), b"old").expect("write");
    let missing = promote("labeler");
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success());
    assert!(
        stderr.contains("labeler.candidate.wasm: no candidate of plugin labeler"),
        "{stderr}"
    );
    std::fs::write(dir.path().join("labeler.candidate.wasm"), b"new").expect("write");
    let done = promote("labeler");
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert_eq!(
        std::fs::read(dir.path().join("labeler.wasm")).expect("read"),
        b"new"
    );
    assert!(!dir.path().join("labeler.candidate.wasm").exists());
}
