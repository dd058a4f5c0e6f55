//! AdmissionReview v1 in and out: a request body decoded into what `admit` takes, and the
//! answer written back, with a mutating plugin's change turned into a checked JSON patch.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine as _;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::gvk::Gvk;
use crate::object::{KubeObject, Transform};
use crate::wasm::admit::{AdmitRequest, Mutation, Operation};

/// Largest review body read (an object and its old state, each up to the API server's
/// 3 MiB request limit).
pub const MAX_BODY_BYTES: usize = 7 << 20;

/// The only AdmissionReview version served.
pub const API_VERSION: &str = "admission.k8s.io/v1";

/// Why a review body is not one the host answers.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Not JSON, or not of AdmissionReview's shape.
    #[error("not an AdmissionReview: {0}")]
    Shape(String),
    /// Another version than v1.
    #[error("AdmissionReview {0}: only {API_VERSION} is served")]
    Version(String),
    /// A field is missing or of the wrong type.
    #[error("AdmissionReview request.{field}: {problem}")]
    Field {
        /// The field, under `request`.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

/// A decoded review: the request `admit` is called with.
#[derive(Debug)]
pub struct Review {
    /// What `admit` is called with.
    pub request: AdmitRequest,
}

impl Review {
    /// `request.object` as lent to the plugin (the host's transform applied), as a JSON tree:
    /// what a mutation is compared with. Built only when one is.
    pub fn object(&self) -> Option<Value> {
        let object = self.request.object.as_ref()?;
        serde_json::from_str(&object.json()).ok()
    }
}

fn text(request: &Map<String, Value>, field: &'static str) -> Result<String, ReviewError> {
    match request.get(field) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(ReviewError::Field {
            field,
            problem: "not a string".into(),
        }),
        None => Err(ReviewError::Field {
            field,
            problem: "missing".into(),
        }),
    }
}

fn optional_text(request: &Map<String, Value>, field: &'static str) -> Option<String> {
    request
        .get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn group_version_kind(request: &Map<String, Value>) -> Result<(Gvk, String), ReviewError> {
    let kind = request
        .get("kind")
        .and_then(Value::as_object)
        .ok_or(ReviewError::Field {
            field: "kind",
            problem: "missing".into(),
        })?;
    let resource =
        request
            .get("resource")
            .and_then(Value::as_object)
            .ok_or(ReviewError::Field {
                field: "resource",
                problem: "missing".into(),
            })?;
    let get = |m: &Map<String, Value>, f: &str| {
        m.get(f)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Ok((
        Gvk::new(
            &get(kind, "group"),
            &get(kind, "version"),
            &get(kind, "kind"),
        ),
        get(resource, "resource"),
    ))
}

/// The object at `field`, with the request's name and namespace where it has none (a create
/// sent without a namespace; a create with `generateName` gets that prefix as its name until
/// the API server names it), as the plugin will see it. Decoded as the reflector decodes a
/// watch line when it names itself fully (no JSON tree); else through a tree, filled in.
fn decode_object(
    raw: Option<&RawValue>,
    field: &'static str,
    gvk: &Arc<Gvk>,
    name: &str,
    namespace: Option<&str>,
) -> Result<Option<Arc<KubeObject>>, ReviewError> {
    let Some(raw) = raw.filter(|r| r.get() != "null") else {
        return Ok(None);
    };
    let transform = Transform::default();
    if let Ok(object) = KubeObject::from_server_json(raw.get(), gvk, &transform)
        && (namespace.is_none() || object.namespace().is_some())
    {
        return Ok(Some(Arc::new(object)));
    }
    let mut value: Value = serde_json::from_str(raw.get()).map_err(|e| ReviewError::Field {
        field,
        problem: e.to_string(),
    })?;
    let Some(map) = value.as_object_mut() else {
        return Err(ReviewError::Field {
            field,
            problem: "not an object".into(),
        });
    };
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        let stand_in = match meta.get("generateName").and_then(Value::as_str) {
            Some(prefix) if name.is_empty() => prefix.to_owned(),
            _ => name.to_owned(),
        };
        meta.entry("name").or_insert(Value::String(stand_in));
        if let Some(ns) = namespace {
            meta.entry("namespace")
                .or_insert_with(|| Value::String(ns.to_owned()));
        }
    }
    for (member, text) in [
        ("apiVersion", gvk.api_version()),
        ("kind", gvk.kind.clone()),
    ] {
        map.entry(member).or_insert(Value::String(text));
    }
    let object = KubeObject::from_value(value, &transform).map_err(|e| ReviewError::Field {
        field,
        problem: e.to_string(),
    })?;
    Ok(Some(Arc::new(object)))
}

/// Decodes a review body. The objects in it are read as the reflector reads them; the rest of
/// the request, a few small members, through a JSON tree.
pub fn parse(body: &[u8]) -> Result<Review, ReviewError> {
    let shape = |e: serde_json::Error| ReviewError::Shape(e.to_string());
    let top: HashMap<String, &RawValue> = serde_json::from_slice(body).map_err(shape)?;
    let version: String = match top.get("apiVersion") {
        Some(v) => serde_json::from_str(v.get()).unwrap_or_default(),
        None => String::new(),
    };
    if version != API_VERSION {
        return Err(ReviewError::Version(version));
    }
    let members: HashMap<String, &RawValue> = match top.get("request") {
        Some(r) if r.get().starts_with('{') => serde_json::from_str(r.get()).map_err(shape)?,
        _ => return Err(ReviewError::Shape("no request".into())),
    };
    let mut request = Map::new();
    let (mut object_raw, mut old_raw) = (None, None);
    for (key, raw) in members {
        match key.as_str() {
            "object" => object_raw = Some(raw),
            "oldObject" => old_raw = Some(raw),
            _ => {
                let value: Value = serde_json::from_str(raw.get()).map_err(shape)?;
                request.insert(key, value);
            }
        }
    }
    let operation_text = text(&request, "operation")?;
    let operation = Operation::parse(&operation_text).ok_or(ReviewError::Field {
        field: "operation",
        problem: format!("{operation_text:?} is none of CREATE, UPDATE, DELETE, CONNECT"),
    })?;
    let (gvk, plural) = group_version_kind(&request)?;
    let name = optional_text(&request, "name").unwrap_or_default();
    let namespace = optional_text(&request, "namespace");
    let typed = Arc::new(gvk.clone());
    let now = decode_object(object_raw, "object", &typed, &name, namespace.as_deref())?;
    let old_object = decode_object(old_raw, "oldObject", &typed, &name, namespace.as_deref())?;
    let user = request.get("userInfo").and_then(Value::as_object);
    let user_text = |f: &str| {
        user.and_then(|u| u.get(f))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let groups = user
        .and_then(|u| u.get("groups"))
        .and_then(Value::as_array)
        .map(|g| {
            g.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    Ok(Review {
        request: AdmitRequest {
            uid: text(&request, "uid")?,
            operation,
            gvk,
            plural,
            subresource: optional_text(&request, "subResource"),
            namespace,
            name,
            object: now,
            old_object,
            username: user_text("username"),
            user_uid: user_text("uid"),
            groups,
            dry_run: request
                .get("dryRun")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        },
    })
}

/// The uid of a body that may not decode as a whole (to answer it anyway), if it has one.
pub fn uid_of(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    value
        .pointer("/request/uid")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Largest mutation a plugin may answer with, and largest object its JSON patch may make: as
/// much as a review carries.
pub const MAX_MUTATION_BYTES: usize = MAX_BODY_BYTES;

/// `patch` applied to a copy of `before`, refused before a `copy` would take the object past
/// [`MAX_MUTATION_BYTES`] (each copy may double it: forty of them would ask for terabytes).
fn apply_bounded(before: &Value, patch: &json_patch::Patch) -> Result<Value, String> {
    let mut after = before.clone();
    let mut grown = 0;
    for (i, op) in patch.0.iter().enumerate() {
        if let json_patch::PatchOperation::Copy(copy) = op
            && let Some(value) = after.pointer(copy.from.as_str())
        {
            grown += encoded_len(value, MAX_MUTATION_BYTES - grown).ok_or_else(|| {
                format!(
                    "the JSON patch's operation {i} (copy from {}) makes an object of more than \
                     {MAX_MUTATION_BYTES} bytes",
                    copy.from
                )
            })?;
        }
        json_patch::patch(&mut after, std::slice::from_ref(op)).map_err(|e| {
            format!("the JSON patch does not apply to the object: operation {i}: {e}")
        })?;
    }
    Ok(after)
}

/// The length of `value` as JSON text, `None` when it is longer than `max`; reads no further.
fn encoded_len(value: &Value, max: usize) -> Option<usize> {
    /// Counts bytes and fails past its bound.
    struct Counter {
        len: usize,
        max: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.len += buf.len();
            if self.len > self.max {
                return Err(std::io::ErrorKind::FileTooLarge.into());
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { len: 0, max };
    serde_json::to_writer(&mut counter, value).ok()?;
    Some(counter.len)
}

/// The first field naming the object (its type, name and namespace) that differs between
/// `before` and `after`: a mutation may not make it another object.
fn identity_changed(before: &Value, after: &Value) -> Option<&'static str> {
    [
        "/apiVersion",
        "/kind",
        "/metadata/name",
        "/metadata/namespace",
    ]
    .into_iter()
    .find(|field| after.pointer(field) != before.pointer(field))
}

/// The JSON patch for `mutation` of `review`'s object: worked out from a whole object, or
/// checked to apply when the plugin wrote it. `None` when it changes nothing. The error says
/// what is wrong with the plugin's mutation.
pub fn patch_for(review: &Review, mutation: &Mutation) -> Result<Option<Value>, String> {
    let Some(before) = &review.object() else {
        return Err("there is no object to mutate (a delete or connect)".into());
    };
    let (Mutation::Object(text) | Mutation::JsonPatch(text)) = mutation;
    if text.len() > MAX_MUTATION_BYTES {
        return Err(format!(
            "the mutation is {} bytes, more than the {MAX_MUTATION_BYTES} a review carries",
            text.len()
        ));
    }
    let patch: json_patch::Patch = match mutation {
        Mutation::Object(text) => {
            let after: Value = serde_json::from_str(text)
                .map_err(|e| format!("the changed object is not JSON: {e}"))?;
            if let Some(field) = identity_changed(before, &after) {
                return Err(format!("the changed object changes {field}"));
            }
            json_patch::diff(before, &after)
        }
        Mutation::JsonPatch(text) => {
            let patch: json_patch::Patch = serde_json::from_str(text)
                .map_err(|e| format!("not an RFC 6902 JSON patch: {e}"))?;
            let after = apply_bounded(before, &patch)?;
            if let Some(field) = identity_changed(before, &after) {
                return Err(format!("the JSON patch changes {field}"));
            }
            patch
        }
    };
    if patch.0.is_empty() {
        return Ok(None);
    }
    serde_json::to_value(&patch)
        .map(Some)
        .map_err(|e| format!("the JSON patch does not encode: {e}"))
}

/// What the host answers one review with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    /// The review's uid.
    pub uid: String,
    /// Whether the request may go on.
    pub allowed: bool,
    /// The refusal's message.
    pub message: String,
    /// The refusal's HTTP code.
    pub code: u16,
    /// The JSON patch to make.
    pub patch: Option<Value>,
    /// Warnings for the user.
    pub warnings: Vec<String>,
}

impl Answer {
    /// The AdmissionReview body that carries it.
    pub fn to_body(&self) -> Vec<u8> {
        let mut response = json!({ "uid": self.uid, "allowed": self.allowed });
        if !self.allowed {
            response["status"] = json!({
                "code": self.code,
                "message": self.message,
                "reason": if self.code == 403 { "Forbidden" } else { "" },
            });
        }
        if let Some(patch) = &self.patch {
            let text = serde_json::to_vec(patch).unwrap_or_default();
            response["patchType"] = "JSONPatch".into();
            response["patch"] = base64::engine::general_purpose::STANDARD
                .encode(text)
                .into();
        }
        if !self.warnings.is_empty() {
            response["warnings"] = self.warnings.clone().into();
        }
        serde_json::to_vec(&json!({
            "apiVersion": API_VERSION,
            "kind": "AdmissionReview",
            "response": response,
        }))
        .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(request: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": API_VERSION, "kind": "AdmissionReview", "request": request,
        }))
        .expect("json")
    }

    fn create_pod() -> Value {
        json!({
            "uid": "u-1", "operation": "CREATE",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop",
            "userInfo": {"username": "alice", "groups": ["dev", "system:authenticated"]},
            "dryRun": true,
            "object": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "web-", "labels": {"app": "web"},
                             "managedFields": [{"manager": "kubectl"}]},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}
            }
        })
    }

    #[test]
    fn a_create_with_generate_name_decodes_with_the_requests_namespace() {
        let review = parse(&body(create_pod())).expect("decodes");
        let r = &review.request;
        assert_eq!((r.uid.as_str(), r.operation), ("u-1", Operation::Create));
        assert_eq!((r.gvk.kind.as_str(), r.plural.as_str()), ("Pod", "pods"));
        assert_eq!(r.namespace.as_deref(), Some("shop"));
        assert!(r.dry_run && r.old_object.is_none());
        assert_eq!(r.groups, ["dev", "system:authenticated"]);
        let object = r.object.as_ref().expect("an object");
        assert_eq!(
            (object.key(), object.label("app")),
            ("shop/web-", Some("web"))
        );
        let seen = review.object().expect("seen");
        assert!(seen.pointer("/metadata/managedFields").is_none(), "{seen}");
    }

    #[test]
    fn an_object_that_names_itself_decodes_as_the_tree_path_would() {
        let pod = kubewasm_testenv::generate::pod(2, 4096, 9);
        let mut request = create_pod();
        request["object"] = pod.clone();
        request["oldObject"] = pod.clone();
        request["operation"] = "UPDATE".into();
        request["namespace"] = pod["metadata"]["namespace"].clone();
        let review = parse(&body(request)).expect("a review");
        let tree = KubeObject::from_value(pod, &Transform::default()).expect("pod");
        let tree: Value = serde_json::from_str(&tree.json()).expect("json");
        for decoded in [&review.request.object, &review.request.old_object] {
            let decoded = decoded.as_ref().expect("decoded");
            let decoded: Value = serde_json::from_str(&decoded.json()).expect("json");
            assert_eq!(decoded, tree);
        }
        assert_eq!(review.object(), Some(tree));
    }

    #[test]
    fn bodies_that_are_not_v1_reviews_say_what_is_wrong() {
        let old =
            serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1beta1", "request": {}}))
                .expect("json");
        assert!(matches!(parse(&old), Err(ReviewError::Version(_))));
        let mut no_op = create_pod();
        no_op["operation"] = "PATCH".into();
        let e = parse(&body(no_op))
            .expect_err("unknown operation")
            .to_string();
        assert!(
            e.contains("request.operation") && e.contains("PATCH"),
            "{e}"
        );
        assert!(parse(b"{").is_err());
    }

    #[test]
    fn a_changed_object_becomes_a_patch_of_only_what_changed() {
        let review = parse(&body(create_pod())).expect("decodes");
        let mut after = review.object().expect("object");
        after["metadata"]["labels"]["team"] = "shop".into();
        let patch = patch_for(&review, &Mutation::Object(after.to_string()))
            .expect("valid")
            .expect("a change");
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/metadata/labels/team", "value": "shop"}])
        );
        let same = review.object().expect("object").to_string();
        assert_eq!(patch_for(&review, &Mutation::Object(same)), Ok(None));
    }

    #[test]
    fn a_plugins_patch_must_apply_and_keep_the_objects_identity() {
        let review = parse(&body(create_pod())).expect("decodes");
        let bad = r#"[{"op": "replace", "path": "/spec/nothing/here", "value": 1}]"#;
        let e = patch_for(&review, &Mutation::JsonPatch(bad.into())).expect_err("does not apply");
        assert!(e.contains("does not apply"), "{e}");
        let renames = r#"[{"op": "replace", "path": "/kind", "value": "Service"}]"#;
        let e = patch_for(&review, &Mutation::JsonPatch(renames.into())).expect_err("kind");
        assert!(e.contains("/kind"), "{e}");
        let ok = r#"[{"op": "add", "path": "/metadata/labels/x", "value": "1"}]"#;
        assert!(matches!(
            patch_for(&review, &Mutation::JsonPatch(ok.into())),
            Ok(Some(_))
        ));
    }

    #[test]
    fn a_patch_that_doubles_the_object_is_refused_before_it_grows_past_a_review() {
        let review = parse(&body(create_pod())).expect("decodes");
        // Each copy doubles /spec: forty would need terabytes.
        let mut ops = vec![json!({"op": "add", "path": "/spec/pad", "value": "x".repeat(4096)})];
        for i in 0..40 {
            ops.push(json!({"op": "copy", "from": "/spec", "path": format!("/spec/c{i}")}));
        }
        let doubling = Value::Array(ops).to_string();
        let e = patch_for(&review, &Mutation::JsonPatch(doubling)).expect_err("bounded");
        assert!(
            e.contains("copy from /spec") && e.contains("more than"),
            "{e}"
        );
        // A few copies stay well within the bound and apply.
        let few =
            r#"[{"op": "copy", "from": "/metadata/labels", "path": "/metadata/annotations"}]"#;
        assert!(matches!(
            patch_for(&review, &Mutation::JsonPatch(few.into())),
            Ok(Some(_))
        ));
        let huge = "x".repeat(MAX_MUTATION_BYTES + 1);
        let e = patch_for(&review, &Mutation::Object(huge)).expect_err("too large");
        assert!(e.contains("bytes, more than"), "{e}");
    }

    #[test]
    fn answers_carry_the_status_and_the_patch_as_the_api_server_reads_them() {
        let answer = Answer {
            uid: "u-1".into(),
            allowed: false,
            message: "no".into(),
            code: 403,
            patch: None,
            warnings: vec!["careful".into()],
        };
        let v: Value = serde_json::from_slice(&answer.to_body()).expect("json");
        assert_eq!(v["response"]["status"]["message"], "no");
        assert_eq!(v["response"]["warnings"][0], "careful");
        let patched = Answer {
            allowed: true,
            patch: Some(json!([{"op": "remove", "path": "/a"}])),
            ..answer
        };
        let v: Value = serde_json::from_slice(&patched.to_body()).expect("json");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(v["response"]["patch"].as_str().expect("patch"))
            .expect("base64");
        assert_eq!(decoded, br#"[{"op":"remove","path":"/a"}]"#);
        assert!(v["response"].get("status").is_none());
    }
}
