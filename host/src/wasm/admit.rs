//! The `admit` export: an admission request as the host holds it, and the plugin's answer.
//!
//! Objects under review are lent as handles for the call, like an event's; cache queries
//! and state reads work, writes and state changes are refused (the call is not open for
//! them), and the call's CPU deadline is the plugin's or the webhook's timeout, the shorter.

use std::sync::Arc;
use std::time::Duration;

use crate::gvk::Gvk;
use crate::object::KubeObject;
use crate::text;
use crate::wasm::Instance;
use crate::wasm::bindings::kubewasm::plugin::types as wit;

/// An operation admission reviews.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    /// CREATE.
    Create,
    /// UPDATE.
    Update,
    /// DELETE.
    Delete,
    /// CONNECT.
    Connect,
}

impl Operation {
    /// As AdmissionReview and webhook rules spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }

    /// The operation AdmissionReview spells `text`.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "CREATE" => Operation::Create,
            "UPDATE" => Operation::Update,
            "DELETE" => Operation::Delete,
            "CONNECT" => Operation::Connect,
            _ => return None,
        })
    }

    fn wit(self) -> wit::Operation {
        match self {
            Operation::Create => wit::Operation::Create,
            Operation::Update => wit::Operation::Update,
            Operation::Delete => wit::Operation::Delete,
            Operation::Connect => wit::Operation::Connect,
        }
    }
}

/// One admission request (AdmissionReview v1's `request`), decoded.
#[derive(Debug, Clone)]
pub struct AdmitRequest {
    /// The review's uid.
    pub uid: String,
    /// What is being done.
    pub operation: Operation,
    /// The object's type.
    pub gvk: Gvk,
    /// The resource's plural name.
    pub plural: String,
    /// The subresource, if any.
    pub subresource: Option<String>,
    /// The namespace; none for cluster-scoped objects.
    pub namespace: Option<String>,
    /// The object's name (empty for a create with `generateName`).
    pub name: String,
    /// The object as it would be.
    pub object: Option<Arc<KubeObject>>,
    /// The object as it was.
    pub old_object: Option<Arc<KubeObject>>,
    /// Who asks.
    pub username: String,
    /// Their uid.
    pub user_uid: String,
    /// Their groups.
    pub groups: Vec<String>,
    /// The request will not be persisted.
    pub dry_run: bool,
}

impl AdmitRequest {
    /// The object reviewed as reports name it: its type and `namespace/name`.
    pub fn object_name(&self) -> String {
        let key = crate::object::object_key(self.namespace.as_deref(), &self.name);
        format!("{} {key}", self.gvk)
    }
}

/// A change a mutating plugin asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// The whole changed object, as JSON.
    Object(String),
    /// An RFC 6902 JSON patch against the object under review.
    JsonPatch(String),
}

/// A plugin's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The request may go on.
    pub allowed: bool,
    /// Why not.
    pub message: String,
    /// The HTTP code of a refusal.
    pub code: u16,
    /// The change to make.
    pub mutation: Option<Mutation>,
    /// Warnings for the user.
    pub warnings: Vec<String>,
}

/// Most warnings one answer carries (the API server shows each to the user).
pub const MAX_WARNINGS: usize = 16;
/// Longest warning kept, in bytes.
pub const MAX_WARNING_BYTES: usize = 512;

impl Verdict {
    fn from_wit(r: wit::AdmissionResponse) -> Self {
        let code = match r.code {
            0 => 403,
            c if (400..600).contains(&c) => c,
            _ => 403,
        };
        Self {
            allowed: r.allowed,
            message: text::cut(r.message, text::MAX_MESSAGE_BYTES),
            code,
            mutation: r.mutation.map(|m| match m {
                wit::Mutation::Object(json) => Mutation::Object(json),
                wit::Mutation::JsonPatch(patch) => Mutation::JsonPatch(patch),
            }),
            warnings: r
                .warnings
                .into_iter()
                .take(MAX_WARNINGS)
                .map(|w| text::cut(w, MAX_WARNING_BYTES))
                .collect(),
        }
    }
}

impl Instance {
    /// Calls `admit` with `request`'s objects lent for the call, under a CPU deadline of
    /// `deadline` (the plugin's own deadline is restored after). A component built for 0.2
    /// has no `admit`: an error.
    pub fn admit(
        &mut self,
        request: &AdmitRequest,
        deadline: Duration,
    ) -> wasmtime::Result<Verdict> {
        let own = self.store.data().ctx.limits.deadline;
        self.store.data_mut().clock.set_deadline(deadline.min(own));
        self.arm();
        let state = self.store.data_mut();
        let handles = &mut state.handles;
        let wit_request = wit::AdmissionRequest {
            uid: request.uid.clone(),
            operation: request.operation.wit(),
            gvk: wit::Gvk {
                group: request.gvk.group.clone(),
                version: request.gvk.version.clone(),
                kind: request.gvk.kind.clone(),
            },
            plural: request.plural.clone(),
            subresource: request.subresource.clone(),
            namespace: request.namespace.clone(),
            name: request.name.clone(),
            object: request.object.as_ref().map(|o| handles.lend_uncached(o)),
            old_object: request
                .old_object
                .as_ref()
                .map(|o| handles.lend_uncached(o)),
            user_info: wit::UserInfo {
                username: request.username.clone(),
                uid: request.user_uid.clone(),
                groups: request.groups.clone(),
            },
            dry_run: request.dry_run,
        };
        let answer = self.plugin.admit(&mut self.store, wit_request);
        let state = self.store.data_mut();
        state.clock.finish();
        state.handles.end_call();
        state.clock.set_deadline(own);
        let outcome = answer.ok_or_else(|| {
            wasmtime::Error::msg(format!(
                "built for contract {}, which has no admit: rebuild it against {}",
                self.plugin.contract().version(),
                crate::wasm::version::CONTRACT
            ))
        })?;
        outcome.map(Verdict::from_wit)
    }
}
