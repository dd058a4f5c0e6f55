//! Plugins from OCI registries: references, a pull-only registry client, wasm artifacts,
//! cosign signatures, and a content-addressed cache.
//!
//! [`Puller`] is one plugin's source: it reads the manifest a reference names, checks the
//! expected digest and the signature, and fetches the component layer (from the cache when
//! it holds that digest). What to do with the component is the caller's (`plugins/registry.rs`).

pub mod artifact;
pub mod auth;
mod cache;
pub mod client;
pub mod cosign;
pub mod reference;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use cache::ArtifactCache;
pub use client::{ClientOptions, Manifest, RegistryClient};
pub use reference::{Digest, Reference};

use crate::oci::artifact::Content;
use crate::oci::auth::Credentials;
use crate::oci::cosign::PublicKey;

/// Why an artifact could not be pulled or was refused.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// A setting (pull secret, CA file, key) is unusable.
    #[error("{0}")]
    Setup(String),
    /// The registry could not be reached.
    #[error("cannot reach {url}: {error}")]
    Connect {
        /// The request.
        url: String,
        /// The connection error and its causes.
        error: String,
    },
    /// A request took too long.
    #[error("{url}: no complete answer within {limit:?}")]
    Timeout {
        /// The request.
        url: String,
        /// The bound.
        limit: Duration,
    },
    /// The registry answered with an error status.
    #[error("{url}: HTTP {status}: {detail}")]
    Status {
        /// The request.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The registry's reason.
        detail: String,
    },
    /// An answer was larger than its bound.
    #[error("{what} is larger than {limit} bytes")]
    TooLarge {
        /// What was read.
        what: String,
        /// The bound.
        limit: u64,
    },
    /// Content did not have the digest it was fetched by or pinned to.
    #[error("{what}: expected digest {expected}, got {got}")]
    DigestMismatch {
        /// What was checked.
        what: String,
        /// The digest asked for.
        expected: String,
        /// The digest of what came.
        got: String,
    },
    /// The registry broke the protocol.
    #[error("{0}")]
    Protocol(String),
    /// The artifact is not a wasm component artifact.
    #[error("{0}")]
    Artifact(String),
    /// The signature check failed.
    #[error("signature check failed: {0}")]
    Signature(String),
}

/// Where one plugin comes from and how it is checked (the `source` of its configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The artifact.
    pub reference: Reference,
    /// The manifest digest it must have (also taken from a `@sha256:` reference). With a
    /// tag, the tag is looked up and what it names must have this digest.
    pub digest: Option<Digest>,
    /// A Docker config (`.dockerconfigjson`) with credentials for the registry.
    pub pull_secret: Option<PathBuf>,
    /// PEM certificates to trust for the registry besides the system's.
    pub ca_file: Option<PathBuf>,
    /// A cosign public key: the artifact must carry a signature made with it.
    pub cosign_key: Option<PathBuf>,
    /// How often a tag is looked up again (a pinned digest is never).
    pub poll: Duration,
}

/// How often a tag is looked up again by default.
pub const DEFAULT_POLL: Duration = Duration::from_secs(300);

impl Source {
    /// A source for `reference` with no checks beyond its own digest, polled every 5 minutes.
    pub fn new(reference: Reference) -> Self {
        Self {
            digest: reference.digest.clone(),
            reference,
            pull_secret: None,
            ca_file: None,
            cosign_key: None,
            poll: DEFAULT_POLL,
        }
    }

    /// Whether the reference can move (a tag, not `@sha256:...`; with an expected digest,
    /// a tag that moves away is refused and one that moves back is taken).
    pub fn follows_a_tag(&self) -> bool {
        self.reference.digest.is_none()
    }
}

/// A component pulled from a registry, checked.
#[derive(Debug)]
pub struct Pulled {
    /// The manifest's digest (what a reference by digest names).
    pub manifest: Digest,
    /// The component's bytes.
    pub wasm: Vec<u8>,
    /// The key kind its signature was verified with, when a key is configured.
    pub verified_with: Option<&'static str>,
}

/// One plugin's registry source, ready to pull.
pub struct Puller {
    source: Source,
    client: RegistryClient,
    key: Option<PublicKey>,
    cache: Option<ArtifactCache>,
    max_bytes: u64,
}

impl Puller {
    /// Reads the source's files (pull secret, CA, key), each error naming its field and file.
    /// Components larger than `max_bytes` are refused from their manifest.
    pub fn new(
        source: Source,
        cache: Option<ArtifactCache>,
        max_bytes: u64,
    ) -> Result<Self, OciError> {
        let read = |field: &str, path: &Path| {
            read_small(path)
                .map_err(|e| OciError::Setup(format!("source.{field} {}: {e}", path.display())))
        };
        let mut options = ClientOptions::new();
        if let Some(path) = &source.pull_secret {
            let json = read("pullSecret", path)?;
            options.credentials =
                Credentials::from_docker_config(&json, &source.reference.registry).map_err(
                    |e| OciError::Setup(format!("source.pullSecret {}: {e}", path.display())),
                )?;
            if options.credentials.is_none() {
                return Err(OciError::Setup(format!(
                    "source.pullSecret {}: no credentials for {}",
                    path.display(),
                    source.reference.registry
                )));
            }
        }
        if let Some(path) = &source.ca_file {
            options.extra_roots = read("caFile", path)?;
        }
        let key = match &source.cosign_key {
            Some(path) => Some(PublicKey::from_pem(&read("cosignKey", path)?).map_err(|e| {
                OciError::Setup(format!("source.cosignKey {}: {e}", path.display()))
            })?),
            None => None,
        };
        let client = RegistryClient::new(options).map_err(|e| match e {
            OciError::Setup(why) => OciError::Setup(format!("source.caFile: {why}")),
            e => e,
        })?;
        Ok(Self {
            source,
            client,
            key,
            cache,
            max_bytes,
        })
    }

    /// The manifest the reference names now (from the cache when the reference pins a
    /// digest the cache holds), checked against the expected digest.
    pub async fn manifest(&self) -> Result<Manifest, OciError> {
        let reference = &self.source.reference;
        let cached = reference.digest.as_ref().and_then(|digest| {
            self.cached(digest).map(|bytes| Manifest {
                bytes,
                digest: digest.clone(),
                media_type: String::new(),
            })
        });
        let manifest = match cached {
            Some(manifest) => manifest,
            None => self.client.manifest(reference, reference.target()).await?,
        };
        if let Some(expected) = &self.source.digest
            && &manifest.digest != expected
        {
            return Err(OciError::DigestMismatch {
                what: reference.to_string(),
                expected: expected.to_string(),
                got: manifest.digest.to_string(),
            });
        }
        Ok(manifest)
    }

    /// The component `manifest` leads to: signature verified (when a key is configured),
    /// layer within the size bound and of its digest.
    pub async fn pull(&self, manifest: Manifest) -> Result<Pulled, OciError> {
        let reference = &self.source.reference;
        if let Some(key) = &self.key {
            // A pinned digest verified once is not verified again (a restart needs no
            // registry); the mark is kept beside the content it is about.
            let mark = format!("verified-{}-{}", manifest.digest.hex(), key.fingerprint());
            let pinned = reference.digest.as_ref() == Some(&manifest.digest);
            let marked = pinned && self.cache.as_ref().is_some_and(|c| c.marked(&mark));
            if !marked {
                cosign::verify(&self.client, reference, &manifest.digest, key).await?;
                if let Some(cache) = self.cache.as_ref().filter(|_| pinned) {
                    cache.mark(&mark);
                }
            }
        }
        // An index leads to one manifest; an index of indexes is refused.
        let followed = match artifact::parse(&manifest.bytes, &manifest.media_type)? {
            Content::Index(entry) => {
                let digest = entry.digest()?;
                Some(match self.cached(&digest) {
                    Some(bytes) => Manifest {
                        bytes,
                        digest,
                        media_type: entry.media_type.clone(),
                    },
                    None => self.client.manifest(reference, digest.as_str()).await?,
                })
            }
            Content::Manifest(_) => None,
        };
        let inner = followed.as_ref().unwrap_or(&manifest);
        let layers = match artifact::parse(&inner.bytes, &inner.media_type)? {
            Content::Manifest(layers) => layers,
            Content::Index(_) => {
                return Err(OciError::Artifact("an index inside an index".into()));
            }
        };
        let layer = artifact::wasm_layer(&layers)?;
        if layer.size > self.max_bytes {
            return Err(OciError::TooLarge {
                what: format!("component layer {} ({} bytes)", layer.digest, layer.size),
                limit: self.max_bytes,
            });
        }
        let digest = layer.digest()?;
        let wasm = match self.cached(&digest) {
            Some(bytes) => bytes,
            None => self.client.blob(reference, &digest, self.max_bytes).await?,
        };
        if let Some(cache) = &self.cache {
            // Content is cached once it has passed every check.
            cache.put(&manifest.digest, &manifest.bytes);
            if let Some(followed) = &followed {
                cache.put(&followed.digest, &followed.bytes);
            }
            cache.put(&digest, &wasm);
        }
        Ok(Pulled {
            manifest: manifest.digest,
            wasm,
            verified_with: self.key.as_ref().map(|k| k.kind),
        })
    }

    fn cached(&self, digest: &Digest) -> Option<Vec<u8>> {
        self.cache.as_ref().and_then(|c| c.get(digest))
    }
}

/// A small file (settings: secrets, CAs, keys), at most 1 MiB.
fn read_small(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take((1 << 20) + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() > 1 << 20 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "larger than 1 MiB",
        ));
    }
    Ok(bytes)
}
