//! Where objects come from: the Kubernetes API, or a folder of manifests.

pub mod kube;
pub mod manifests;

use std::sync::Arc;

use futures::stream::BoxStream;

use crate::gvk::Gvk;
use crate::object::KubeObject;

/// What a source reports about one resource type.
#[derive(Debug, Clone)]
pub enum SourceEvent {
    /// The complete current state (initial list or relist). The informer diffs it against its
    /// store: new objects are adds, changed ones updates, missing ones stale deletes.
    Listed(Vec<Arc<KubeObject>>),
    /// An object was created or modified.
    Applied(Arc<KubeObject>),
    /// An object was deleted; this is its final state.
    Deleted(Arc<KubeObject>),
}

/// A provider of list-and-watch streams, one per resource type.
pub trait Source: Send + Sync + 'static {
    /// Starts listing and watching `gvk`. The stream begins with a `Listed`, is endless while
    /// the source runs, and stops when dropped. Errors are the source's to log and retry.
    fn watch(&self, gvk: &Gvk) -> BoxStream<'static, SourceEvent>;
}
