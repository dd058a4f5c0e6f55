//! Paths of the guest plugins, built for wasm32-wasip2 by this crate's build script.

include!(concat!(env!("OUT_DIR"), "/plugins.rs"));

/// The component at `path` with a custom section appended: the same behaviour under another
/// content hash, which is what a new version of a plugin looks like to the host.
pub fn variant(path: &str, tag: &str) -> Vec<u8> {
    let mut bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let name = b"kubewasm-test-version";
    let payload = tag.as_bytes();
    let size = 1 + name.len() + payload.len();
    assert!(size < 128, "one-byte LEB128 lengths keep this simple");
    bytes.push(0); // custom section id
    bytes.push(size as u8);
    bytes.push(name.len() as u8);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(payload);
    bytes
}
