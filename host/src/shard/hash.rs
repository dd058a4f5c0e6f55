//! The API server's shard hash: 64-bit FNV-1a of the field's bytes (`sharding.HashField` in
//! k8s.io/apimachinery 0.36).

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// 64-bit FNV-1a of `value`'s bytes.
pub fn fnv1a64(value: &str) -> u64 {
    value
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::fnv1a64;

    #[test]
    fn hashes_match_the_api_servers() {
        // Printed by k8s.io/apimachinery v0.36.6's sharding.HashField for the same strings.
        for (value, hash) in [
            ("", 0xcbf29ce484222325),
            ("a", 0xaf63dc4c8601ec8c),
            ("default", 0xebada5168620c5fe),
            ("kube-system", 0xdf65c7bc1d82b35e),
            ("bench-0", 0x652f49d9fd6a12a4),
            ("shop", 0x46dc5e18e28e2409),
            ("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", 0x93754b7248a00eb9),
        ] {
            assert_eq!(fnv1a64(value), hash, "{value:?}");
        }
    }
}
