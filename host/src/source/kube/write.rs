//! Writes to the API server: server-side apply with the plugin's field manager, merge and
//! JSON patches (subresources included), create, delete with a uid precondition, and Events
//! (events.k8s.io/v1) whose repeats are folded into a series. Requests are built here and
//! sent as they are (not through kube's `Api`), so that with traces on each write's requests
//! carry its span's `traceparent` (see `traces.rs`) and its answer's status is known.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event;
use kube::Resource as _;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
    Preconditions, PropagationPolicy,
};
use kube::core::Request;
use kube::discovery::Scope;
use kube::{Client, discovery};
use serde_json::{Value, json};
use tokio::runtime::Handle;

use crate::gvk::Gvk;
use crate::write::{
    Action, EventSeries, Occurrence, Refusal, Write, Writer, event_object, field_manager,
    micro_time,
};

/// Most of an error answer read.
const MAX_ERROR_BYTES: usize = 1 << 20;

/// Most of a dry run's answer read: the object as it would be, which etcd's request bound
/// (1.5 MiB by default) keeps well below this.
const MAX_ANSWER_BYTES: usize = 4 << 20;

/// Longest one write may take, discovery included.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends plugin writes to an API server.
pub struct KubeWriter {
    sender: Arc<Sender>,
    tasks: Handle,
}

/// What sends the writes, on the runtime's threads.
struct Sender {
    client: Client,
    resources: Mutex<HashMap<Gvk, (ApiResource, bool)>>,
    series: Mutex<EventSeries>,
}

fn refusal(reason: &str, message: String, retry: bool) -> Refusal {
    Refusal {
        reason: reason.to_owned(),
        message,
        retry,
    }
}

/// The API server's answer as a refusal: conflicts, throttling and server errors may pass
/// on a later attempt; a failed delete precondition, forbidden, invalid and not found do not.
fn refused(error: kube::Error) -> Refusal {
    match error {
        kube::Error::Api(status) => {
            let precondition = status.message.contains("Precondition failed");
            let retry =
                !precondition && (status.code == 409 || status.code == 429 || status.code >= 500);
            let reason = if status.reason.is_empty() {
                format!("HTTP {}", status.code)
            } else {
                status.reason.clone()
            };
            refusal(&reason, status.message.clone(), retry)
        }
        kube::Error::Discovery(e) => refusal("NotFound", e.to_string(), false),
        other => refusal("Unavailable", other.to_string(), true),
    }
}

tokio::task_local! {
    /// The traced write this task sends: the header its requests carry, and the status of
    /// the last answer.
    static TRACED: Arc<Traced>;
}

/// See [`TRACED`].
struct Traced {
    traceparent: http::HeaderValue,
    status: AtomicU16,
}

impl KubeWriter {
    /// Writes through `client`, on `tasks` (call [`Writer::send`] off the runtime).
    pub fn new(client: Client, tasks: Handle) -> Self {
        Self {
            sender: Arc::new(Sender {
                client,
                resources: Mutex::default(),
                series: Mutex::default(),
            }),
            tasks,
        }
    }
}

impl Sender {
    /// Requests for `gvk` in `namespace`, its resource found through discovery once per type.
    async fn api(&self, gvk: &Gvk, namespace: Option<&str>) -> Result<Request, Refusal> {
        let known = self
            .resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(gvk)
            .cloned();
        let (resource, namespaced) = match known {
            Some(found) => found,
            None => {
                let wanted = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
                let (resource, caps) = discovery::pinned_kind(&self.client, &wanted)
                    .await
                    .map_err(refused)?;
                let found = (resource, caps.scope == Scope::Namespaced);
                self.resources
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(gvk.clone(), found.clone());
                found
            }
        };
        match (namespaced, namespace) {
            (true, Some(ns)) => Ok(Request::new(DynamicObject::url_path(&resource, Some(ns)))),
            (false, None) => Ok(Request::new(DynamicObject::url_path(&resource, None))),
            (true, None) => Err(refusal(
                "Invalid",
                format!("{gvk} is namespaced: the write names no namespace"),
                false,
            )),
            (false, Some(_)) => Err(refusal(
                "Invalid",
                format!("{gvk} is cluster-scoped: the write names a namespace"),
                false,
            )),
        }
    }

    /// Sends `write`; with `dry_run`, as `dryRun=All` and the answered object kept (an Event
    /// is then refused: its series would count occurrences that never were).
    async fn send_async(
        &self,
        plugin: &str,
        write: &Write,
        dry_run: bool,
    ) -> Result<Option<Vec<u8>>, Refusal> {
        let t = &write.target;
        let manager = field_manager(plugin);
        let parse = |text: &str| -> Result<Value, Refusal> {
            serde_json::from_str(text).map_err(|e| refusal("Invalid", e.to_string(), false))
        };
        let params = PatchParams {
            field_manager: Some(manager.clone()),
            dry_run,
            ..PatchParams::default()
        };
        match &write.action {
            Action::Apply(body) => {
                let api = self.api(&t.gvk, t.namespace.as_deref()).await?;
                // A controller owns what it applies: conflicts with other managers are taken over.
                let mut params = PatchParams::apply(&manager).force();
                params.dry_run = dry_run;
                let body = Patch::Apply(parse(body)?);
                self.patch(&api, t, &params, &body).await
            }
            Action::MergePatch(body) => {
                let api = self.api(&t.gvk, t.namespace.as_deref()).await?;
                self.patch(&api, t, &params, &Patch::Merge(parse(body)?))
                    .await
            }
            Action::JsonPatch(body) => {
                let api = self.api(&t.gvk, t.namespace.as_deref()).await?;
                let ops: json_patch::Patch = serde_json::from_str(body)
                    .map_err(|e| refusal("Invalid", format!("JSON patch: {e}"), false))?;
                self.patch(&api, t, &params, &Patch::<Value>::Json(ops))
                    .await
            }
            Action::Create(body) => {
                let api = self.api(&t.gvk, t.namespace.as_deref()).await?;
                let object: DynamicObject = serde_json::from_str(body)
                    .map_err(|e| refusal("Invalid", e.to_string(), false))?;
                let params = PostParams {
                    field_manager: Some(manager),
                    dry_run,
                };
                let body = serde_json::to_vec(&object)
                    .map_err(|e| refusal("Invalid", e.to_string(), false))?;
                self.send(api.create(&params, body), dry_run).await
            }
            Action::Delete(options) => {
                let api = self.api(&t.gvk, t.namespace.as_deref()).await?;
                let preconditions = (options.uid.is_some() || options.resource_version.is_some())
                    .then(|| Preconditions {
                        uid: options.uid.clone(),
                        resource_version: options.resource_version.clone(),
                    });
                let propagation_policy = Some(match options.propagation {
                    crate::write::Propagation::Background => PropagationPolicy::Background,
                    crate::write::Propagation::Foreground => PropagationPolicy::Foreground,
                    crate::write::Propagation::Orphan => PropagationPolicy::Orphan,
                });
                let params = DeleteParams {
                    preconditions,
                    propagation_policy,
                    dry_run,
                    ..DeleteParams::default()
                };
                self.send(api.delete(&t.name, &params), dry_run).await
            }
            Action::RecordEvent { .. } if dry_run => Err(refusal(
                "NotSent",
                "Events are not sent in dry-run mode".into(),
                false,
            )),
            Action::RecordEvent { .. } => {
                let namespace = t.namespace.as_deref().unwrap_or("default");
                self.record(plugin, write, namespace).await.map(|()| None)
            }
        }
    }

    async fn patch(
        &self,
        api: &Request,
        t: &crate::write::Target,
        params: &PatchParams,
        body: &Patch<Value>,
    ) -> Result<Option<Vec<u8>>, Refusal> {
        let request = match &t.subresource {
            Some(sub) => api.patch_subresource(sub, &t.name, params, body),
            None => api.patch(&t.name, params, body),
        };
        self.send(request, params.dry_run).await
    }

    /// Sends `request` (with the traced write's `traceparent`, when this task sends one, and
    /// its answer noted); the API server's refusal as a refusal. With `keep`, the answer's
    /// body (at most [`MAX_ANSWER_BYTES`]) is returned.
    async fn send(
        &self,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
        keep: bool,
    ) -> Result<Option<Vec<u8>>, Refusal> {
        use http_body_util::BodyExt as _;
        let mut request = request.map_err(|e| refusal("Invalid", e.to_string(), false))?;
        let traced = TRACED.try_with(Arc::clone).ok();
        if let Some(t) = &traced {
            request
                .headers_mut()
                .insert("traceparent", t.traceparent.clone());
        }
        let response = self
            .client
            .send(request.map(kube::client::Body::from))
            .await
            .map_err(refused)?;
        let code = response.status();
        if let Some(t) = traced {
            t.status.store(code.as_u16(), Ordering::Relaxed);
        }
        if code.is_success() {
            if !keep {
                return Ok(None);
            }
            let body = http_body_util::Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| refusal("Unavailable", format!("reading the answer: {e}"), true))?;
            return Ok(Some(body.to_bytes().to_vec()));
        }
        // The server's Status, as kube reads it; a body that is none is the status line.
        let body = http_body_util::Limited::new(response.into_body(), MAX_ERROR_BYTES)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let status = serde_json::from_slice::<kube::core::Status>(&body).unwrap_or_else(|_| {
            let text = String::from_utf8_lossy(&body);
            kube::core::Status::failure(text.trim(), code.canonical_reason().unwrap_or(""))
                .with_code(code.as_u16())
        });
        Err(refused(kube::Error::Api(status.boxed())))
    }

    async fn record(&self, plugin: &str, write: &Write, namespace: &str) -> Result<(), Refusal> {
        let Action::RecordEvent { regarding, .. } = &write.action else {
            return Ok(());
        };
        let now = jiff::Timestamp::now();
        let fresh = format!("{}.{:x}", regarding.name, now.as_nanosecond());
        let occurrence = self
            .series
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .observe(plugin, write, fresh, Instant::now());
        let api = Request::new(Event::url_path(&(), Some(namespace)));
        let name = match &occurrence {
            Occurrence::New(name) | Occurrence::Repeat(name, _) => name.clone(),
        };
        let sent = match occurrence {
            Occurrence::Repeat(name, count) => {
                let body = json!({"series": {"count": count, "lastObservedTime": micro_time(now)}});
                let params = PatchParams {
                    field_manager: Some(field_manager(plugin)),
                    ..PatchParams::default()
                };
                self.send(api.patch(&name, &params, &Patch::Merge(body)), false)
                    .await
                    .map(drop)
            }
            Occurrence::New(name) => {
                let event: Event = event_object(plugin, write, &name, namespace, now)
                    .map(serde_json::from_value)
                    .transpose()
                    .map_err(|e| refusal("Invalid", e.to_string(), false))?
                    .unwrap_or_default();
                let params = PostParams {
                    field_manager: Some(field_manager(plugin)),
                    ..PostParams::default()
                };
                let body = serde_json::to_vec(&event)
                    .map_err(|e| refusal("Invalid", e.to_string(), false))?;
                self.send(api.create(&params, body), false).await.map(drop)
            }
        };
        // An Event that could not be created or raised starts afresh next time.
        if sent.is_err() {
            self.series
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .forget(&name);
        }
        sent
    }
}

impl Writer for KubeWriter {
    fn send(&self, plugin: &str, write: &Write) -> Result<(), Refusal> {
        self.send_within(plugin, write, WRITE_TIMEOUT)
    }

    fn send_within(&self, plugin: &str, write: &Write, within: Duration) -> Result<(), Refusal> {
        self.run(plugin, write, within, false).map(drop)
    }

    fn dry_run(
        &self,
        plugin: &str,
        write: &Write,
        within: Duration,
    ) -> Result<Option<Value>, Refusal> {
        let answer = self.run(plugin, write, within, true)?;
        Ok(answer.and_then(|body| serde_json::from_slice(&body).ok()))
    }
}

impl KubeWriter {
    /// Sends `write` within `within` (at most [`WRITE_TIMEOUT`]), traced, from the runtime's
    /// threads; with `dry_run`, as `dryRun=All`, returning the answer's body.
    fn run(
        &self,
        plugin: &str,
        write: &Write,
        within: Duration,
        dry_run: bool,
    ) -> Result<Option<Vec<u8>>, Refusal> {
        let bound = within.min(WRITE_TIMEOUT);
        let span = crate::traces::WriteSpan::start(plugin, write);
        let traced = span.as_ref().and_then(|s| {
            Some(Arc::new(Traced {
                traceparent: http::HeaderValue::from_str(s.traceparent()).ok()?,
                status: AtomicU16::new(0),
            }))
        });
        // Sent from the runtime's own threads, not polled on this (plugin) thread: a thread
        // the request starts there, such as the blocking pool's for a name lookup, would
        // inherit this thread's lowered priority and go on serving the host with it.
        let (sender, plugin, write) = (self.sender.clone(), plugin.to_owned(), write.clone());
        let scoped = traced.clone();
        let sending = self.tasks.spawn(async move {
            let send = tokio::time::timeout(bound, sender.send_async(&plugin, &write, dry_run));
            match scoped {
                Some(traced) => TRACED.scope(traced, send).await,
                None => send.await,
            }
        });
        let outcome = ended_as(self.tasks.block_on(sending), bound);
        if let Some(span) = span {
            let status = traced.map_or(0, |t| t.status.load(Ordering::Relaxed));
            span.end(status, &outcome.as_ref().map(|_| ()).map_err(Clone::clone));
        }
        outcome
    }
}

/// What a write's task ended with, as the write's outcome: `bound` is the time it was given.
fn ended_as<T>(
    ended: Result<Result<Result<T, Refusal>, tokio::time::error::Elapsed>, tokio::task::JoinError>,
    bound: Duration,
) -> Result<T, Refusal> {
    match ended {
        Ok(Ok(sent)) => sent,
        Ok(Err(_)) if bound < WRITE_TIMEOUT => Err(refusal(
            "Abandoned",
            format!(
                "no answer within {bound:?}, when this replica's Lease was confirmed until: abandoned, as another replica may lead by then (a request already on its way may still land)"
            ),
            true,
        )),
        Ok(Err(_)) => Err(refusal(
            "Timeout",
            format!("no answer from the API server within {WRITE_TIMEOUT:?}"),
            true,
        )),
        Err(e) => Err(refusal(
            "Unavailable",
            format!("the write's task ended: {e}"),
            true,
        )),
    }
}
