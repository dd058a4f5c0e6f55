//! A controller's children: what the host adds to a child a reconcile applies (the parent's
//! controller ownerReference and the apply-set label of KEP-3659, as `kubectl apply --prune`
//! writes them), and which children a reconcile that returned Ok no longer wants.

use base64::Engine as _;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::gvk::Gvk;
use crate::object::KubeObject;

/// The label naming the apply set a child belongs to.
pub const PART_OF: &str = "applyset.kubernetes.io/part-of";

/// The apply-set id of a parent, as KEP-3659 derives it: `applyset-` and the unpadded
/// URL-safe base64 of the SHA-256 of `<name>.<namespace>.<Kind>.<group>`, then `-v1`.
pub fn applyset_id(parent: &KubeObject) -> String {
    let gvk = parent.gvk();
    let text = format!(
        "{}.{}.{}.{}",
        parent.name(),
        parent.namespace().unwrap_or(""),
        gvk.kind,
        gvk.group
    );
    let digest = Sha256::digest(text.as_bytes());
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
    format!("applyset-{encoded}-v1")
}

/// The `label=value` the built-in `label` index files a parent's children under.
pub fn part_of_value(id: &str) -> String {
    format!("{PART_OF}={id}")
}

/// `body` (an apply of a child) with `parent` as its controller (blocking the parent's
/// foreground deletion) and the parent's apply-set label. An ownerReference to another
/// controller is an error: a child has one controller.
pub fn adopt(body: &str, parent: &KubeObject, id: &str) -> Result<String, String> {
    let mut value: Value =
        serde_json::from_str(body).map_err(|e| format!("the child's apply body: {e}"))?;
    let Some(meta) = value
        .as_object_mut()
        .and_then(|o| o.get_mut("metadata"))
        .and_then(Value::as_object_mut)
    else {
        return Err("the child's apply body has no metadata".into());
    };
    let gvk = parent.gvk();
    let owner = json!({
        "apiVersion": gvk.api_version(),
        "kind": gvk.kind,
        "name": parent.name(),
        "uid": parent.uid(),
        "controller": true,
        "blockOwnerDeletion": true,
    });
    let refs = meta
        .entry("ownerReferences")
        .or_insert_with(|| Value::Array(Vec::new()));
    let Some(refs) = refs.as_array_mut() else {
        return Err("the child's metadata.ownerReferences is not a list".into());
    };
    let other = refs.iter().find(|r| {
        r.get("controller") == Some(&Value::Bool(true))
            && r.get("uid").and_then(Value::as_str) != Some(parent.uid())
    });
    if let Some(other) = other {
        return Err(format!(
            "the child already names another controller ({} {})",
            other.get("kind").and_then(Value::as_str).unwrap_or("?"),
            other.get("name").and_then(Value::as_str).unwrap_or("?")
        ));
    }
    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(parent.uid()));
    refs.push(owner);
    let labels = meta
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(labels) = labels.as_object_mut() else {
        return Err("the child's metadata.labels is not a map".into());
    };
    labels.insert(PART_OF.into(), Value::String(id.to_owned()));
    Ok(value.to_string())
}

/// Whether `child` is one of `parent`'s: its controller is the parent (by uid) and it
/// carries the parent's apply-set label. Nothing else is ever pruned.
pub fn is_child_of(child: &KubeObject, parent: &KubeObject, id: &str) -> bool {
    child.label(PART_OF) == Some(id) && child.controller().is_some_and(|o| o.uid == parent.uid())
}

/// Whether a child of type `gvk` at `namespace/name` is among those a reconcile applied.
pub fn applied(applies: &[(Gvk, Option<String>, String)], child: &KubeObject) -> bool {
    applies.iter().any(|(gvk, namespace, name)| {
        gvk == child.gvk() && namespace.as_deref() == child.namespace() && name == child.name()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Transform;

    fn parent() -> KubeObject {
        let text = r#"{"apiVersion":"example.com/v1","kind":"App","metadata":{"name":"web","namespace":"shop","uid":"u-1"}}"#;
        KubeObject::from_json(text, &Transform::default()).expect("an object")
    }

    #[test]
    fn the_applyset_id_is_the_keps() {
        // KEP-3659's derivation, computed independently: sha256("web.shop.App.example.com").
        let digest = Sha256::digest(b"web.shop.App.example.com");
        let expected = format!(
            "applyset-{}-v1",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
        );
        assert_eq!(applyset_id(&parent()), expected);
        assert!(!expected.contains('='), "unpadded");
    }

    #[test]
    fn an_adopted_child_names_its_controller_and_apply_set() {
        let p = parent();
        let id = applyset_id(&p);
        let body = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","labels":{"app":"web"}}}"#;
        let adopted: Value =
            serde_json::from_str(&adopt(body, &p, &id).expect("adopted")).expect("json");
        let owner = &adopted["metadata"]["ownerReferences"][0];
        assert_eq!(owner["uid"], "u-1");
        assert_eq!(owner["apiVersion"], "example.com/v1");
        assert_eq!(owner["controller"], true);
        assert_eq!(owner["blockOwnerDeletion"], true);
        assert_eq!(adopted["metadata"]["labels"][PART_OF], id.as_str());
        assert_eq!(
            adopted["metadata"]["labels"]["app"], "web",
            "its own labels stay"
        );
        let twice = adopt(&adopted.to_string(), &p, &id).expect("adopted again");
        let twice: Value = serde_json::from_str(&twice).expect("json");
        assert_eq!(
            twice["metadata"]["ownerReferences"]
                .as_array()
                .map(Vec::len),
            Some(1)
        );
    }

    #[test]
    fn a_child_of_another_controller_is_refused() {
        let p = parent();
        let body = r#"{"metadata":{"name":"web","ownerReferences":[{"apiVersion":"v1","kind":"Other","name":"x","uid":"u-2","controller":true}]}}"#;
        let error = adopt(body, &p, "id").expect_err("refused");
        assert!(error.contains("another controller (Other x)"), "{error}");
        assert!(adopt("[]", &p, "id").is_err());
    }

    #[test]
    fn only_a_labelled_child_controlled_by_the_parent_is_its() {
        let p = parent();
        let id = applyset_id(&p);
        let child = |labels: &str, uid: &str| {
            let text = format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"c","namespace":"shop","labels":{labels},"ownerReferences":[{{"apiVersion":"example.com/v1","kind":"App","name":"web","uid":"{uid}","controller":true}}]}}}}"#
            );
            KubeObject::from_json(&text, &Transform::default()).expect("an object")
        };
        let labelled = format!(r#"{{"{PART_OF}":"{id}"}}"#);
        assert!(is_child_of(&child(&labelled, "u-1"), &p, &id));
        assert!(
            !is_child_of(&child("{}", "u-1"), &p, &id),
            "no label: not ours"
        );
        assert!(
            !is_child_of(&child(&labelled, "u-9"), &p, &id),
            "another parent's"
        );
        let applies = vec![(
            Gvk::new("", "v1", "ConfigMap"),
            Some("shop".to_owned()),
            "c".to_owned(),
        )];
        assert!(applied(&applies, &child(&labelled, "u-1")));
        assert!(!applied(&applies[..0], &child(&labelled, "u-1")));
    }
}
