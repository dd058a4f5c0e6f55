//! cosign signatures checked with a public key: the signature manifest at
//! `sha256-<digest>.sig` beside the artifact, whose simple-signing payloads name the
//! artifact's manifest digest and carry a signature made with the key.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::signature::{ECDSA_P256_SHA256_ASN1, ED25519, UnparsedPublicKey, VerificationAlgorithm};

use crate::oci::OciError;
use crate::oci::artifact::{self, Content};
use crate::oci::client::RegistryClient;
use crate::oci::reference::{Digest, Reference};

/// The layer type of a cosign signature payload.
pub const PAYLOAD_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation holding a payload's base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// `critical.type` of a cosign payload.
const PAYLOAD_KIND: &str = "cosign container image signature";
/// Signatures looked at per artifact.
const MAX_SIGNATURES: usize = 16;
/// Largest payload read.
const MAX_PAYLOAD_BYTES: u64 = 64 << 10;

/// A public key that signatures must verify with (`cosign generate-key-pair`'s `cosign.pub`).
pub struct PublicKey {
    algorithm: &'static dyn VerificationAlgorithm,
    key: Vec<u8>,
    /// What kind of key it is, for messages.
    pub kind: &'static str,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.kind)
    }
}

impl PublicKey {
    /// Reads a PEM `PUBLIC KEY` (SubjectPublicKeyInfo): ECDSA P-256 or Ed25519.
    pub fn from_pem(pem: &[u8]) -> Result<Self, String> {
        use rustls::pki_types::SubjectPublicKeyInfoDer;
        use rustls::pki_types::pem::PemObject;
        let spki = SubjectPublicKeyInfoDer::from_pem_slice(pem)
            .map_err(|e| format!("not a PEM PUBLIC KEY: {e}"))?;
        Self::from_spki(spki.as_ref())
    }

    fn from_spki(der: &[u8]) -> Result<Self, String> {
        const EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
        const P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
        const P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
        const ED25519_OID: &[u8] = &[0x2b, 0x65, 0x70];
        const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
        let bad = || "a malformed SubjectPublicKeyInfo".to_owned();
        let (spki, _) = der::take(der, 0x30).ok_or_else(bad)?;
        let (algorithm, rest) = der::take(spki, 0x30).ok_or_else(bad)?;
        let (bits, _) = der::take(rest, 0x03).ok_or_else(bad)?;
        let key = match bits.split_first() {
            Some((0, key)) => key.to_vec(),
            _ => return Err(bad()),
        };
        let (oid, params) = der::take(algorithm, 0x06).ok_or_else(bad)?;
        let curve = der::take(params, 0x06).map(|(c, _)| c);
        match (oid, curve) {
            (EC_PUBLIC_KEY, Some(P256)) => Ok(Self {
                algorithm: &ECDSA_P256_SHA256_ASN1,
                key,
                kind: "ECDSA P-256",
            }),
            (ED25519_OID, _) => Ok(Self {
                algorithm: &ED25519,
                key,
                kind: "Ed25519",
            }),
            (EC_PUBLIC_KEY, Some(P384)) => {
                Err("ECDSA P-384 keys are not supported: use P-256 (cosign generate-key-pair) or Ed25519".into())
            }
            (RSA, _) => {
                Err("RSA keys are not supported: use ECDSA P-256 (cosign generate-key-pair) or Ed25519".into())
            }
            _ => Err("an unsupported key type: use ECDSA P-256 (cosign generate-key-pair) or Ed25519".into()),
        }
    }

    /// The first 16 hex digits of the SHA-256 of the key's bytes: which key, in names.
    pub fn fingerprint(&self) -> String {
        let mut hex = crate::oci::Digest::of(&self.key).hex().to_owned();
        hex.truncate(16);
        hex
    }

    /// Whether `signature` is this key's signature of `message`.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(self.algorithm, &self.key)
            .verify(message, signature)
            .is_ok()
    }
}

/// Checks that `manifest` of `reference`'s repository carries a cosign signature by `key`.
pub async fn verify(
    client: &RegistryClient,
    reference: &Reference,
    manifest: &Digest,
    key: &PublicKey,
) -> Result<(), OciError> {
    let tag = format!("sha256-{}.sig", manifest.hex());
    let signatures = match client.manifest(reference, &tag).await {
        Ok(signatures) => signatures,
        Err(OciError::Status { status: 404, .. }) => {
            return Err(OciError::Signature(format!(
                "{} is not signed: no cosign signature at tag {tag}",
                reference.at(manifest)
            )));
        }
        Err(e) => return Err(e),
    };
    let layers = match artifact::parse(&signatures.bytes, &signatures.media_type)? {
        Content::Manifest(layers) => layers,
        Content::Index(_) => {
            return Err(OciError::Signature(format!(
                "tag {tag} holds an index, not cosign signatures"
            )));
        }
    };
    let mut why = Vec::new();
    for layer in layers
        .iter()
        .filter(|l| l.media_type == PAYLOAD_TYPE)
        .take(MAX_SIGNATURES)
    {
        match check(client, reference, manifest, key, layer).await {
            Ok(()) => return Ok(()),
            Err(reason) => why.push(reason),
        }
    }
    if why.is_empty() {
        return Err(OciError::Signature(format!(
            "tag {tag} holds no cosign signature payload"
        )));
    }
    let shown: Vec<&str> = why.iter().take(3).map(String::as_str).collect();
    Err(OciError::Signature(format!(
        "{} has {} signature(s), none by the configured {} key: {}",
        reference.at(manifest),
        why.len(),
        key.kind,
        shown.join("; ")
    )))
}

/// One signature layer: its payload fetched and checked, its signature verified.
async fn check(
    client: &RegistryClient,
    reference: &Reference,
    manifest: &Digest,
    key: &PublicKey,
    layer: &artifact::Descriptor,
) -> Result<(), String> {
    let encoded = layer
        .annotations
        .get(SIGNATURE_ANNOTATION)
        .ok_or("a payload without a signature annotation")?;
    if encoded.len() > 4096 {
        return Err("a signature over 4 KiB".into());
    }
    let signature = STANDARD
        .decode(encoded.trim())
        .map_err(|_| "a signature that is not base64".to_owned())?;
    let digest = layer.digest().map_err(|e| e.to_string())?;
    if layer.size > MAX_PAYLOAD_BYTES {
        return Err(format!("a payload over {MAX_PAYLOAD_BYTES} bytes"));
    }
    let payload = client
        .blob(reference, &digest, MAX_PAYLOAD_BYTES)
        .await
        .map_err(|e| format!("payload {digest}: {e}"))?;
    if !key.verifies(&payload, &signature) {
        return Err("the signature does not verify with the key".into());
    }
    // Signed by the key: now what it signed must be this artifact.
    #[derive(serde::Deserialize)]
    struct Payload {
        critical: Critical,
    }
    #[derive(serde::Deserialize)]
    struct Critical {
        image: Image,
        #[serde(rename = "type")]
        kind: String,
    }
    #[derive(serde::Deserialize)]
    struct Image {
        #[serde(rename = "docker-manifest-digest")]
        digest: String,
    }
    let payload: Payload = serde_json::from_slice(&payload)
        .map_err(|e| format!("a signed payload that is not cosign's: {e}"))?;
    if payload.critical.kind != PAYLOAD_KIND {
        return Err(format!(
            "a signed payload of type {:?}",
            payload.critical.kind
        ));
    }
    if payload.critical.image.digest != manifest.as_str() {
        return Err(format!(
            "a valid signature of another artifact ({})",
            payload.critical.image.digest
        ));
    }
    Ok(())
}

/// Just enough DER to read a SubjectPublicKeyInfo.
mod der {
    /// The contents of the element at the start of `input` if its tag is `tag`, and what
    /// follows it.
    pub fn take(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
        let (&first, rest) = input.split_first()?;
        if first != tag {
            return None;
        }
        let (&length, rest) = rest.split_first()?;
        let (length, rest) = if length < 0x80 {
            (usize::from(length), rest)
        } else {
            let count = usize::from(length & 0x7f);
            if count == 0 || count > 4 || rest.len() < count {
                return None;
            }
            let (bytes, rest) = rest.split_at(count);
            (
                bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b)),
                rest,
            )
        };
        (rest.len() >= length).then(|| rest.split_at(length))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_read_from_pem_and_verify_their_signatures() {
        use ring::rand::SystemRandom;
        use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair};
        let rng = SystemRandom::new();
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).expect("key");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
            .expect("pair");
        // SubjectPublicKeyInfo for P-256: the fixed algorithm header, then the point.
        use ring::signature::KeyPair as _;
        let mut spki = vec![
            0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06,
            0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
        ];
        spki.extend_from_slice(pair.public_key().as_ref());
        let pem = format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            STANDARD.encode(&spki)
        );
        let key = PublicKey::from_pem(pem.as_bytes()).expect("P-256");
        assert_eq!(key.kind, "ECDSA P-256");
        let signature = pair.sign(&rng, b"payload").expect("sign");
        assert!(key.verifies(b"payload", signature.as_ref()));
        assert!(!key.verifies(b"payloaD", signature.as_ref()));
        assert!(!key.verifies(b"payload", b"\x30\x00"));

        let p384 = "-----BEGIN PUBLIC KEY-----\nMHYwEAYHKoZIzj0CAQYFK4EEACIDYgAEAAAA\n-----END PUBLIC KEY-----\n";
        let error = PublicKey::from_pem(p384.as_bytes()).expect_err("P-384");
        assert!(
            error.contains("P-384") || error.contains("malformed"),
            "{error}"
        );
        assert!(
            PublicKey::from_pem(b"not pem")
                .expect_err("junk")
                .contains("not a PEM")
        );
    }

    #[test]
    fn der_lengths_are_bounded_by_the_input() {
        assert_eq!(
            der::take(&[0x30, 0x01, 0xff], 0x30),
            Some((&[0xff][..], &[][..]))
        );
        assert_eq!(der::take(&[0x30, 0x05, 0xff], 0x30), None);
        assert_eq!(der::take(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff], 0x30), None);
        assert_eq!(der::take(&[0x31, 0x00], 0x30), None);
        assert_eq!(der::take(&[], 0x30), None);
    }
}
