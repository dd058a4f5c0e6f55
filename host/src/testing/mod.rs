//! `kubewasm test`: one plugin run in a real host against a scripted sequence of cluster
//! states (a manifests folder the runner rewrites), each state's log lines and writes checked
//! against what the test file expects.
//!
//! Every object of a state is one file of a private folder, so a step replaces or removes
//! exactly the objects it names; the folder is rescanned after each step, as a change on disk
//! is. A step is over when the plugin has settled: every event handled or given up, no retry
//! pending, and nothing new for [`QUIET`]. Writes go to the folder's memory (and come back as
//! events within the same step), and are recorded as the plugin sent them.

pub mod check;
pub mod compare;
pub mod record;
pub mod spec;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;

use crate::agent::{Agent, AgentOptions, Cluster};
use crate::object::Transform;
use crate::plugins::PluginStatus;
use crate::source::manifests::parse;
use crate::source::manifests::{ManifestFolder, manifest_files};
use crate::wasm::logging::MemorySink;
use crate::write::{Refusal, Write, Writer};
use check::SentWrite;
use spec::{Reference, Spec, Step};

/// How long a plugin must stay idle, with nothing new, for a step to be over.
pub const QUIET: Duration = Duration::from_millis(250);

/// How a test is run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Folder of compiled plugin code reused across runs; `None`: compile every time.
    pub compiled_cache: Option<PathBuf>,
    /// Longest a step may take to settle.
    pub step_timeout: Duration,
}

/// What one step produced, and where it differs from what it expects.
#[derive(Debug, Clone, PartialEq)]
pub struct StepResult {
    /// The step's name.
    pub name: String,
    /// Log lines it produced.
    pub lines: usize,
    /// Writes sent during it.
    pub writes: usize,
    /// Those writes, as reports show them, in the order sent.
    pub sent: Vec<String>,
    /// The plugin's state after it (empty when it keeps none).
    pub state: std::collections::BTreeMap<String, String>,
    /// The answer to its admission review, if it sent one.
    pub answer: Option<crate::admission::review::Answer>,
    /// The differences, one readable line each; empty when it passed.
    pub problems: Vec<String>,
}

impl StepResult {
    /// True when the step produced what it expects.
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The folder writer, recording each write it is sent.
struct Recorder {
    folder: Arc<ManifestFolder>,
    sent: Mutex<Vec<SentWrite>>,
}

impl Writer for Recorder {
    fn send(&self, plugin: &str, write: &Write) -> Result<(), Refusal> {
        let result = self.folder.send(plugin, write);
        if result.is_ok() {
            self.sent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(SentWrite::of(write));
        }
        result
    }

    /// Checked by the folder and not recorded: a plugin in dry-run mode writes nothing.
    fn dry_run(
        &self,
        plugin: &str,
        write: &Write,
        within: std::time::Duration,
    ) -> Result<Option<serde_json::Value>, Refusal> {
        self.folder.dry_run(plugin, write, within)
    }
}

/// A private folder, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> anyhow::Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "kubewasm-test-{what}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The file of one object in the state folder.
fn object_file(dir: &Path, r: &Reference) -> PathBuf {
    let safe = |s: &str| s.replace(['/', '.', ':'], "_");
    dir.join(format!(
        "{}.{}.{}.{}.json",
        safe(&r.api_version),
        r.kind,
        safe(r.namespace.as_deref().unwrap_or("_")),
        r.name
    ))
}

/// Every object of the manifests in `folder` (read as the manifests folder source reads it);
/// a bad document is an error naming its file and place.
fn read_cluster(folder: &Path, out: &mut Vec<(Reference, Value)>) -> anyhow::Result<()> {
    std::fs::read_dir(folder).with_context(|| format!("cluster folder {}", folder.display()))?;
    let (files, _not_regular) = manifest_files(folder);
    for path in files {
        let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
        let json = path.extension().is_some_and(|e| e == "json");
        for item in parse::items(&text, json) {
            let place = format!("{} {}", path.display(), item.place);
            let value = item.value.map_err(|e| anyhow::anyhow!("{place}: {e}"))?;
            let reference = Reference::of(&value).map_err(|e| anyhow::anyhow!("{place}: {e}"))?;
            out.push((reference, value));
        }
    }
    Ok(())
}

/// Writes a step's changes into the state folder.
fn change(dir: &Path, step: &Step) -> anyhow::Result<()> {
    for (reference, object) in &step.apply {
        let path = object_file(dir, reference);
        std::fs::write(&path, serde_json::to_vec_pretty(object)?)
            .with_context(|| path.display().to_string())?;
    }
    for reference in &step.delete {
        let path = object_file(dir, reference);
        std::fs::remove_file(&path).with_context(|| {
            format!(
                "step {:?}: cannot delete {}: no such object in the state",
                step.name,
                reference.display()
            )
        })?;
    }
    Ok(())
}

fn status_of(agent: &Agent, name: &str) -> Option<PluginStatus> {
    agent
        .plugins()
        .status()
        .into_iter()
        .find(|p| p.name == name)
}

/// Waits until the plugin has settled; its status then, or why it did not settle.
async fn settle(
    agent: &Agent,
    name: &str,
    sink: &MemorySink,
    recorder: &Recorder,
    timeout: Duration,
) -> Result<PluginStatus, String> {
    let start = Instant::now();
    let mut last = None;
    let mut since = Instant::now();
    loop {
        let status = status_of(agent, name).ok_or("the plugin is not loaded")?;
        let mark = (
            status.delivered,
            controller_calls(&status),
            status.failed,
            status.given_up,
            status.writes_failed,
            status.writes_denied,
            sink.records().len(),
            recorder
                .sent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .len(),
        );
        // `idle` also says no key waits but those requeued for later.
        let ready = status.synced && status.idle && status.queued == 0;
        if !ready || last != Some(mark) {
            last = Some(mark);
            since = Instant::now();
        } else if since.elapsed() >= QUIET {
            return Ok(status);
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "did not settle within {timeout:?}: synced={} queued={} retrying={} last error: {}",
                status.synced,
                status.queued,
                !status.idle,
                status.last_error.as_deref().unwrap_or("none")
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `ran` says of the plugin's status that what was asked (`what`) was called.
async fn ran(
    agent: &Agent,
    name: &str,
    what: &str,
    ran: impl Fn(&PluginStatus) -> bool,
    timeout: Duration,
) -> Result<PluginStatus, String> {
    let start = Instant::now();
    loop {
        let now = status_of(agent, name).ok_or("the plugin is not loaded")?;
        if ran(&now) {
            return Ok(now);
        }
        if start.elapsed() > timeout {
            return Err(format!("{what} did not run within {timeout:?}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Calls of `reconcile` and `finalize` so far, failed ones included.
fn controller_calls(status: &PluginStatus) -> u64 {
    ["reconcile", "finalize"]
        .iter()
        .filter_map(|kind| status.calls.get(*kind))
        .map(|h| h.count)
        .sum()
}

/// Sends `review` to plugin `name` as the webhook server would, and its answer.
async fn send_review(
    agent: &Agent,
    name: &str,
    review: &spec::Review,
) -> Result<crate::admission::review::Answer, String> {
    let admitter = agent
        .plugins()
        .admitter(name)
        .ok_or_else(|| format!("plugin {name} declares no admission"))?;
    let object = review.object.as_ref().or(review.old_object.as_ref());
    let text = |pointer: &str| {
        object
            .and_then(|o| o.pointer(pointer))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (api_version, kind) = (text("/apiVersion"), text("/kind"));
    let gvk = crate::gvk::Gvk::from_api_version(&api_version, &kind);
    let body = serde_json::json!({
        "apiVersion": crate::admission::review::API_VERSION,
        "kind": "AdmissionReview",
        "request": {
            "uid": "kubewasm-test",
            "operation": review.operation,
            "kind": {"group": gvk.group, "version": gvk.version, "kind": gvk.kind},
            "resource": {"group": gvk.group, "version": gvk.version,
                         "resource": crate::rbac::plural(&gvk)},
            "namespace": text("/metadata/namespace"),
            "name": text("/metadata/name"),
            "object": review.object,
            "oldObject": review.old_object,
            "userInfo": {"username": review.user.as_deref().unwrap_or("tester")},
            "dryRun": review.dry_run,
        },
    });
    let parsed =
        crate::admission::review::parse(body.to_string().as_bytes()).map_err(|e| e.to_string())?;
    let until = Instant::now() + crate::admission::budget(admitter.admission.timeout);
    tokio::task::spawn_blocking(move || crate::admission::decide(&admitter, &parsed, until).0)
        .await
        .map_err(|e| e.to_string())
}

/// Runs `spec`, handing each step's result to `report` as it ends.
pub async fn run(
    spec: &Spec,
    options: &Options,
    mut report: impl FnMut(&StepResult),
) -> anyhow::Result<Vec<StepResult>> {
    let state = TempDir::new("state")?;
    let plugins = TempDir::new("plugins")?;
    let mut initial = Vec::new();
    if let Some(cluster) = &spec.cluster {
        read_cluster(cluster, &mut initial)?;
    }
    for (reference, object) in &initial {
        std::fs::write(
            object_file(&state.0, reference),
            serde_json::to_vec_pretty(object)?,
        )?;
    }
    let mut steps = spec.steps.iter();
    let first = steps.next().context("no steps")?;
    // The clock the plugin and the host read: the file's, else the system's (an earlier file
    // of the same `kubewasm test` may have set it).
    match first.now.or(spec.now) {
        Some(at) => crate::clock::set(at),
        None => crate::clock::reset(),
    }
    change(&state.0, first)?;
    let folder = Arc::new(ManifestFolder::snapshot_in(
        &state.0,
        Transform::default(),
        &spec.host.default_namespace,
    )?);
    if let Some((path, error)) = folder.errors().into_iter().next() {
        anyhow::bail!("{}: {error}", path.display());
    }
    let recorder = Arc::new(Recorder {
        folder: folder.clone(),
        sent: Mutex::default(),
    });
    let sink = Arc::new(MemorySink::default());
    let cluster = Cluster::Source(folder.clone(), Some(recorder.clone() as Arc<dyn Writer>));
    let mut config = spec.host.clone();
    // The plugin folder is private: the file carries the plugin's name.
    config.plugins_dir = None;
    let agent_options = AgentOptions {
        compiled_cache: options.compiled_cache.clone(),
        ..AgentOptions::new(cluster, config, sink.clone())
    };
    let mut agent = Agent::start(agent_options).await?;
    // A test runs schedules with `tick:` steps only: a cron falling due mid-test (pod-age's
    // `*/5 * * * *` at a five-minute boundary) would log a tick no step asked for.
    agent.plugins().run_schedules_on_demand_only();
    if let Some(seed) = &spec.state {
        agent
            .plugins()
            .state_of(&spec.name)
            .whole()
            .replace(seed.clone());
    }
    let file = plugins.0.join(format!("{}.wasm", spec.name));
    std::fs::copy(&spec.plugin, &file)
        .with_context(|| format!("plugin {}", spec.plugin.display()))?;
    let loaded = agent.follow_plugins(&plugins.0).await?;
    if !loaded.failed.is_empty() {
        let error = agent
            .plugins()
            .status()
            .into_iter()
            .find_map(|p| p.reload_error)
            .unwrap_or_else(|| "see the log".to_owned());
        anyhow::bail!("plugin {} did not load: {error}", spec.plugin.display());
    }

    let mut results = Vec::new();
    let (mut lines_seen, mut writes_seen, mut given_up) = (0, 0, 0);
    let mut step = first;
    loop {
        // A step that changes nothing starts where the last one settled: a tick runs at once.
        let unchanged =
            !std::ptr::eq(step, first) && step.apply.is_empty() && step.delete.is_empty();
        let asks = step.tick.is_some() || !step.reconcile.is_empty();
        let mut settled = match status_of(&agent, &spec.name) {
            Some(status) if unchanged && asks => Ok(status),
            _ => settle(&agent, &spec.name, &sink, &recorder, options.step_timeout).await,
        };
        let mut problems = Vec::new();
        if let (Some(schedule), Ok(before)) = (&step.tick, &settled) {
            match agent.plugins().tick(&spec.name, schedule) {
                Ok(()) => {
                    let done =
                        |now: &PluginStatus| now.ticks > before.ticks || now.failed > before.failed;
                    settled = ran(&agent, &spec.name, "the tick", done, options.step_timeout)
                        .await
                        .and(
                            settle(&agent, &spec.name, &sink, &recorder, options.step_timeout)
                                .await,
                        );
                }
                Err(e) => problems.push(format!("tick: {e}")),
            }
        }
        if let (false, Ok(before)) = (step.reconcile.is_empty(), &settled) {
            let (from, mut asked) = (controller_calls(before), 0);
            // A key named twice is queued, and reconciled, once.
            let keys: std::collections::BTreeSet<_> = step
                .reconcile
                .iter()
                .map(|r| crate::object::object_key(r.namespace.as_deref(), &r.name))
                .collect();
            for key in keys {
                match agent.plugins().reconcile(&spec.name, &key) {
                    Ok(()) => asked += 1,
                    Err(e) => problems.push(format!("reconcile: {e}")),
                }
            }
            let done = |now: &PluginStatus| controller_calls(now) >= from + asked;
            settled = ran(&agent, &spec.name, "reconcile", done, options.step_timeout)
                .await
                .and(settle(&agent, &spec.name, &sink, &recorder, options.step_timeout).await);
        }
        let answer = match &step.review {
            Some(review) => match send_review(&agent, &spec.name, review).await {
                Ok(answer) => Some(answer),
                Err(e) => {
                    problems.push(format!("review: {e}"));
                    None
                }
            },
            None => None,
        };
        let lines = sink.records().split_off(lines_seen);
        let writes =
            recorder.sent.lock().unwrap_or_else(PoisonError::into_inner)[writes_seen..].to_vec();
        lines_seen += lines.len();
        writes_seen += writes.len();
        match settled {
            Err(e) => problems.push(e),
            Ok(status) => {
                let new = status.given_up - given_up;
                given_up = status.given_up;
                if new != step.expect.given_up {
                    problems.push(format!(
                        "events given up: {new}, expected {}; last error: {}",
                        step.expect.given_up,
                        status.last_error.as_deref().unwrap_or("none")
                    ));
                }
            }
        }
        if let Some(wanted) = &step.expect.logs {
            let diff = check::logs(wanted, &lines);
            if !diff.is_empty() {
                problems.push("logs (- expected, not logged; + logged, not expected):".into());
                problems.extend(diff.into_iter().map(|l| format!("  {l}")));
            }
        }
        if let Some(wanted) = &step.expect.writes {
            let diff = check::writes(wanted, &writes);
            if !diff.is_empty() {
                problems.push("writes (- expected, not sent; + sent, not expected):".into());
                problems.extend(diff.into_iter().map(|l| format!("  {l}")));
            }
        }
        let kept = agent.plugins().state_of(&spec.name).whole().snapshot();
        if let Some(wanted) = &step.expect.state
            && *wanted != kept
        {
            problems.push(format!(
                "state: {}, expected {}",
                serde_json::to_string(&kept).unwrap_or_default(),
                serde_json::to_string(wanted).unwrap_or_default()
            ));
        }
        if let Some(wanted) = &step.expect.state_includes {
            problems.extend(check::state_keys(wanted, &kept));
        }
        if let (Some(wanted), Some(answer)) = (&step.expect.admission, &answer) {
            problems.extend(check::answer(wanted, answer));
        }
        for wanted in step.expect.objects.iter().flatten() {
            problems.extend(check::object(wanted, &folder));
        }
        for gone in step.expect.absent.iter().flatten() {
            if folder
                .object(&gone.gvk(), gone.namespace.as_deref(), &gone.name)
                .is_some()
            {
                problems.push(format!("{}: still there, expected gone", gone.display()));
            }
        }
        let result = StepResult {
            name: step.name.clone(),
            lines: lines.len(),
            writes: writes.len(),
            sent: writes.iter().map(SentWrite::show).collect(),
            state: kept,
            answer,
            problems,
        };
        report(&result);
        results.push(result);
        let Some(next) = steps.next() else { break };
        step = next;
        if let Some(at) = step.now {
            crate::clock::set(at);
        }
        change(&state.0, step)?;
        let folder = folder.clone();
        tokio::task::spawn_blocking(move || folder.rescan()).await?;
    }
    let host = agent.plugins().clone();
    tokio::task::spawn_blocking(move || host.shutdown()).await?;
    Ok(results)
}
