//! The Kubernetes API as a source: discovery, then kube-runtime's watcher per resource type.
//!
//! Basic for now: paging, bookmarks, 410 relists and jittered backoff come from kube-runtime's
//! watcher; a relist is reported as one `Listed` that the informer diffs into adds, updates and
//! stale deletes. A resource type the server does not serve yet (a CRD installed later) is
//! reported as empty, so it does not hold back readiness, and discovery is retried until it
//! appears; its objects then arrive as adds.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::{Api, DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, discovery};
use serde_json::Value;
use tokio::runtime::Handle;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use crate::gvk::Gvk;
use crate::object::{KubeObject, Transform};
use crate::source::{Source, SourceEvent};

/// How long to wait before resolving a resource type that discovery did not find.
const DISCOVERY_RETRY: Duration = Duration::from_secs(10);

/// A source backed by a Kubernetes API server.
pub struct KubeSource {
    client: Client,
    transform: Transform,
    runtime: Handle,
}

impl KubeSource {
    /// A source using `client`, running its watches on `runtime`.
    pub fn new(client: Client, transform: Transform, runtime: Handle) -> Self {
        Self {
            client,
            transform,
            runtime,
        }
    }
}

impl Source for KubeSource {
    fn watch(&self, gvk: &Gvk) -> BoxStream<'static, SourceEvent> {
        let (tx, mut rx) = unbounded_channel();
        self.runtime.spawn(run(
            self.client.clone(),
            gvk.clone(),
            self.transform.clone(),
            tx,
        ));
        Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}

async fn run(client: Client, gvk: Gvk, transform: Transform, tx: UnboundedSender<SourceEvent>) {
    let wanted = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
    let mut reported_absent = false;
    let resource = loop {
        match discovery::pinned_kind(&client, &wanted).await {
            Ok((resource, _)) => break resource,
            Err(e) => {
                // A type the server does not serve (yet) has no objects: say so once, so plugins
                // that also watch other types are not held back, and keep looking for it.
                let absent = matches!(&e, kube::Error::Discovery(_))
                    || matches!(&e, kube::Error::Api(s) if s.code == 404);
                if absent && !reported_absent {
                    reported_absent = true;
                    tracing::warn!(resource = %gvk, "the API server does not serve this type (yet); treating it as empty and retrying every {DISCOVERY_RETRY:?}: {e}");
                    if tx.send(SourceEvent::Listed(Vec::new())).is_err() {
                        return;
                    }
                } else if !absent {
                    tracing::error!(resource = %gvk, "cannot resolve resource type, retrying in {DISCOVERY_RETRY:?}: {e}");
                }
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(DISCOVERY_RETRY).await;
            }
        }
    };
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let mut events = watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .boxed();
    let mut listing: Vec<std::sync::Arc<KubeObject>> = Vec::new();
    let convert = |o: DynamicObject| -> Option<std::sync::Arc<KubeObject>> {
        let mut value = serde_json::to_value(&o).ok()?;
        if let Value::Object(map) = &mut value {
            map.insert("apiVersion".into(), Value::String(gvk.api_version()));
            map.insert("kind".into(), Value::String(gvk.kind.clone()));
        }
        match KubeObject::from_value(value, &transform) {
            Ok(object) => Some(std::sync::Arc::new(object)),
            Err(e) => {
                tracing::error!(resource = %gvk, "skipping malformed object: {e}");
                None
            }
        }
    };
    while let Some(event) = events.next().await {
        let out = match event {
            Ok(watcher::Event::Init) => {
                listing.clear();
                continue;
            }
            Ok(watcher::Event::InitApply(o)) => {
                listing.extend(convert(o));
                continue;
            }
            Ok(watcher::Event::InitDone) => SourceEvent::Listed(std::mem::take(&mut listing)),
            Ok(watcher::Event::Apply(o)) => match convert(o) {
                Some(o) => SourceEvent::Applied(o),
                None => continue,
            },
            Ok(watcher::Event::Delete(o)) => match convert(o) {
                Some(o) => SourceEvent::Deleted(o),
                None => continue,
            },
            Err(e) => {
                tracing::warn!(resource = %gvk, "watch error, retrying with backoff: {e}");
                continue;
            }
        };
        if tx.send(out).is_err() {
            return;
        }
    }
}
