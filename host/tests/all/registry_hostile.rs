//! A registry that misbehaves cannot make the host's pull use unbounded memory or time: every
//! answer is bounded in size and every request in time, and each failure names what was wrong.
//! The registry is a double (`kubewasm_testenv::hostile_registry`): a real one will not
//! misbehave on demand.

use std::time::{Duration, Instant};

use kubewasm::oci::{ClientOptions, Digest, OciError, Reference, RegistryClient};
use kubewasm_testenv::hostile_registry::{HostileRegistry, Misbehaviour};

const REQUEST: Duration = Duration::from_millis(800);
const BLOB: Duration = Duration::from_millis(1500);

async fn client(registry: &HostileRegistry) -> (RegistryClient, Reference) {
    let options = ClientOptions {
        extra_roots: registry.ca_pem.clone().into_bytes(),
        request_timeout: REQUEST,
        blob_timeout: BLOB,
        ..ClientOptions::new()
    };
    let reference =
        Reference::parse(&format!("oci://{}/plugins/x:v1", registry.address)).expect("reference");
    (RegistryClient::new(options).expect("client"), reference)
}

/// Pulls the manifest (or, with `blob`, a blob) from a registry that does `misbehaviour`;
/// the error and how long it took.
async fn pull(misbehaviour: Misbehaviour, blob: bool) -> (OciError, Duration) {
    let registry = HostileRegistry::start(misbehaviour).await.expect("double");
    let (client, reference) = client(&registry).await;
    let start = Instant::now();
    let error = if blob {
        client
            .blob(&reference, &Digest::of(b"wanted"), 1 << 20)
            .await
            .expect_err("refused")
    } else {
        client
            .manifest(&reference, "v1")
            .await
            .expect_err("refused")
    };
    (error, start.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_answers_are_refused_by_their_bound() {
    let (error, _) = pull(Misbehaviour::DeclaredLength(10 << 30), false).await;
    assert!(
        matches!(error, OciError::TooLarge { limit: 4194304, .. }),
        "a 10 GiB manifest, from its declared length: {error}"
    );
    let (error, _) = pull(Misbehaviour::EndlessChunks, false).await;
    assert!(
        error.to_string().contains("larger than 4194304 bytes"),
        "an endless manifest: {error}"
    );
    let (error, _) = pull(Misbehaviour::EndlessChunks, true).await;
    assert!(
        error.to_string().contains("larger than 1048576 bytes"),
        "an endless blob, past the plugin size bound: {error}"
    );
    let (error, _) = pull(Misbehaviour::EndlessToken, false).await;
    assert!(
        error.to_string().contains("token") && error.to_string().contains("larger than 65536"),
        "an endless token answer: {error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_or_silent_registries_are_given_up_at_the_deadline() {
    for (misbehaviour, blob, bound) in [
        (
            Misbehaviour::Drip(Duration::from_millis(100)),
            false,
            REQUEST,
        ),
        (Misbehaviour::Silent, false, REQUEST),
        (Misbehaviour::Drip(Duration::from_millis(100)), true, BLOB),
    ] {
        let what = format!("{misbehaviour:?} (blob: {blob})");
        let (error, took) = pull(misbehaviour, blob).await;
        assert!(matches!(error, OciError::Timeout { .. }), "{what}: {error}");
        assert!(
            took < bound + Duration::from_millis(500),
            "{what}: took {took:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_loops_and_content_of_another_digest_are_refused() {
    let (error, _) = pull(Misbehaviour::RedirectLoop, true).await;
    assert!(
        error.to_string().contains("more than 5 redirects"),
        "{error}"
    );
    let (error, _) = pull(Misbehaviour::Body(b"not what was asked".to_vec()), true).await;
    assert!(
        matches!(error, OciError::DigestMismatch { .. }),
        "a blob of another digest: {error}"
    );
    // A manifest asked for by digest must have it.
    let registry = HostileRegistry::start(Misbehaviour::Body(b"{}".to_vec()))
        .await
        .expect("double");
    let (client, reference) = client(&registry).await;
    let wanted = Digest::of(b"another manifest");
    let error = client
        .manifest(&reference, wanted.as_str())
        .await
        .expect_err("refused");
    assert!(
        error
            .to_string()
            .contains(&format!("expected digest {wanted}")),
        "{error}"
    );
}
