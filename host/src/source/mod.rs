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
    /// A (re)list begins: the `Listed` objects up to `ListDone` are the complete state.
    ListStarted,
    /// One object of the list in progress; the informer applies it at once (new: add,
    /// changed: update, unchanged: nothing).
    Listed(Arc<KubeObject>),
    /// The list is complete: stored objects it did not name are gone (stale deletes).
    ListDone,
    /// An object was created or modified.
    Applied(Arc<KubeObject>),
    /// An object was deleted; this is its final state.
    Deleted(Arc<KubeObject>),
}

/// A provider of list-and-watch streams, one per resource type.
pub trait Source: Send + Sync + 'static {
    /// Starts listing and watching `gvk`. The stream begins with a list, is endless while
    /// the source runs, and stops when dropped. Errors are the source's to log and retry.
    fn watch(&self, gvk: &Gvk) -> BoxStream<'static, SourceEvent>;
}
