//! Reading a manifest: which layer is the component (CNCF wasm artifacts, and the older wasm
//! layer types), or which manifest of an index to follow.

use serde::Deserialize;

use crate::oci::OciError;
use crate::oci::reference::Digest;

/// The CNCF wasm artifact's config type (`wkg oci push` and others).
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The CNCF wasm artifact's layer type.
pub const WASM_LAYER: &str = "application/wasm";
/// Layer types of earlier wasm artifacts (wasm-to-oci; Istio's and Solo's WasmPlugin images).
const OLDER_WASM_LAYERS: [&str; 2] = [
    "application/vnd.wasm.content.layer.v1+wasm",
    "application/vnd.module.wasm.content.layer.v1+wasm",
];

/// A manifest's or index's fields this host reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    media_type: Option<String>,
    #[serde(default)]
    layers: Vec<Descriptor>,
    manifests: Option<Vec<Descriptor>>,
}

/// A pointer to content: its type, digest and size.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// The content's media type.
    pub media_type: String,
    /// The content's digest, as written.
    pub digest: String,
    /// The content's size in bytes.
    pub size: u64,
    /// The platform, in an index.
    pub platform: Option<Platform>,
    /// Annotations (cosign keeps its signature in one).
    #[serde(default)]
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// An index entry's platform.
#[derive(Debug, Clone, Deserialize)]
pub struct Platform {
    /// `wasm` for components.
    pub architecture: String,
    /// `wasip2` for components.
    pub os: String,
}

impl Descriptor {
    /// The digest, checked.
    pub fn digest(&self) -> Result<Digest, OciError> {
        Digest::parse(&self.digest).map_err(|e| OciError::Artifact(e.to_string()))
    }
}

/// What a manifest leads to.
#[derive(Debug)]
pub enum Content {
    /// An image manifest; its layers.
    Manifest(Vec<Descriptor>),
    /// An index: follow this manifest (the one whose platform is wasm).
    Index(Descriptor),
}

/// Reads a manifest or an index.
pub fn parse(bytes: &[u8], content_type: &str) -> Result<Content, OciError> {
    let document: Document = serde_json::from_slice(bytes)
        .map_err(|e| OciError::Artifact(format!("the manifest is not valid JSON: {e}")))?;
    let media_type = document.media_type.as_deref().unwrap_or(content_type);
    let index = media_type.contains("index") || media_type.contains("manifest.list");
    match document.manifests {
        Some(manifests) if index || document.layers.is_empty() => {
            let wasm: Vec<&Descriptor> = manifests
                .iter()
                .filter(|m| {
                    m.platform
                        .as_ref()
                        .is_some_and(|p| p.architecture == "wasm")
                })
                .collect();
            match wasm.as_slice() {
                [one] => Ok(Content::Index((*one).clone())),
                [] => Err(OciError::Artifact(format!(
                    "an index of {} manifests, none for the wasm architecture: {}",
                    manifests.len(),
                    platforms(&manifests)
                ))),
                _ => Err(OciError::Artifact(format!(
                    "an index with {} wasm manifests; reference one by digest",
                    wasm.len()
                ))),
            }
        }
        _ => Ok(Content::Manifest(document.layers)),
    }
}

/// The one component layer of an image manifest's `layers`.
pub fn wasm_layer(layers: &[Descriptor]) -> Result<&Descriptor, OciError> {
    let wasm: Vec<&Descriptor> = layers
        .iter()
        .filter(|l| {
            l.media_type == WASM_LAYER || OLDER_WASM_LAYERS.contains(&l.media_type.as_str())
        })
        .collect();
    match wasm.as_slice() {
        [one] => Ok(one),
        [] => {
            let types: Vec<&str> = layers
                .iter()
                .take(8)
                .map(|l| l.media_type.as_str())
                .collect();
            Err(OciError::Artifact(format!(
                "not a wasm artifact: no layer of type {WASM_LAYER} (layers: [{}])",
                types.join(", ")
            )))
        }
        many => Err(OciError::Artifact(format!(
            "{} wasm layers; a plugin artifact holds exactly one component",
            many.len()
        ))),
    }
}

fn platforms(manifests: &[Descriptor]) -> String {
    let list: Vec<String> = manifests
        .iter()
        .take(8)
        .map(|m| match &m.platform {
            Some(p) => format!("{}/{}", p.os, p.architecture),
            None => "(no platform)".to_owned(),
        })
        .collect();
    list.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    #[test]
    fn the_component_layer_is_found_by_its_type() {
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
            "config":{{"mediaType":"{WASM_CONFIG}","digest":"{}","size":2}},
            "layers":[{{"mediaType":"{WASM_LAYER}","digest":"{}","size":120}}]}}"#,
            digest('a'),
            digest('b')
        );
        let Content::Manifest(layers) = parse(manifest.as_bytes(), "").expect("manifest") else {
            panic!("not an index");
        };
        let layer = wasm_layer(&layers).expect("one layer");
        assert_eq!(
            (layer.size, layer.digest().expect("digest").hex()),
            (120, "b".repeat(64).as_str())
        );

        let image = r#"{"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"x","size":1}]}"#;
        let Content::Manifest(layers) = parse(image.as_bytes(), "").expect("manifest") else {
            panic!("not an index");
        };
        let error = wasm_layer(&layers)
            .expect_err("a container image")
            .to_string();
        assert!(
            error.contains("not a wasm artifact") && error.contains("tar+gzip"),
            "{error}"
        );
    }

    #[test]
    fn an_index_leads_to_its_wasm_manifest() {
        let index = format!(
            r#"{{"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[
            {{"mediaType":"m","digest":"{}","size":1,"platform":{{"architecture":"amd64","os":"linux"}}}},
            {{"mediaType":"m","digest":"{}","size":1,"platform":{{"architecture":"wasm","os":"wasip2"}}}}]}}"#,
            digest('c'),
            digest('d')
        );
        let Content::Index(entry) = parse(index.as_bytes(), "").expect("index") else {
            panic!("an index");
        };
        assert_eq!(entry.digest, digest('d'));
        let linux_only = r#"{"manifests":[{"mediaType":"m","digest":"x","size":1,"platform":{"architecture":"amd64","os":"linux"}}]}"#;
        let error = parse(
            linux_only.as_bytes(),
            "application/vnd.oci.image.index.v1+json",
        )
        .expect_err("no wasm")
        .to_string();
        assert!(error.contains("linux/amd64"), "{error}");
        assert!(parse(b"not json", "").is_err());
    }
}
