//! Names of the indexes every cache has, for `cache::by_index`, `index_keys` and
//! `index_values`. Plugins declare more (JSON-pointer indexes) in their manifest.

/// Objects by namespace (cluster-scoped objects are not in it).
pub const NAMESPACE: &str = "namespace";
/// Objects by the uid of each of their owner references.
pub const OWNER_UID: &str = "owner-uid";
/// Objects by each of their label keys.
pub const LABEL_KEY: &str = "label-key";
/// Objects by each of their labels, as `key=value`.
pub const LABEL: &str = "label";

/// Every built-in index name.
pub const BUILTIN: [&str; 4] = [NAMESPACE, OWNER_UID, LABEL_KEY, LABEL];
