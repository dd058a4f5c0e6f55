//! Where objects come from: the Kubernetes API, or a folder of manifests.

pub mod kube;
pub mod manifests;
pub mod scope;

pub use scope::Scope;

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
    /// A (re)list of one namespace begins (a source watching a scope's namespaces one by
    /// one): the `Listed` objects of that namespace up to its `NamespaceListDone` are its
    /// complete state.
    NamespaceListStarted(Arc<str>),
    /// One namespace's list is complete: stored objects of that namespace it did not name are
    /// gone (stale deletes); other namespaces are untouched.
    NamespaceListDone(Arc<str>),
}

/// A provider of list-and-watch streams, one per resource type.
pub trait Source: Send + Sync + 'static {
    /// Starts listing and watching the objects of `gvk` in `scope`. The stream begins with a
    /// list (of the whole scope, or one per namespace of it), is endless while the source
    /// runs, and stops when dropped. A source may send objects outside the scope (the informer
    /// drops them); errors are the source's to log and retry.
    fn watch(&self, gvk: &Gvk, scope: &Scope) -> BoxStream<'static, SourceEvent>;
}
