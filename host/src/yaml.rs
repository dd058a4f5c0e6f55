//! How kubewasm reads manifests' YAML: as kubectl resolves scalars
//! (`0644` is octal, `yes` is a boolean, `<<` merges), with a key written twice in one
//! mapping an error naming it.

use serde::de::DeserializeOwned;

/// The reader's settings.
pub fn options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::Error;
    options.merge_keys = serde_saphyr::MergeKeyPolicy::Merge;
    options.legacy_octal_numbers = true;
    options
}

/// Reads one YAML document into `T`; the error is one line, with the line it happened on
/// counted from `first_line`.
pub fn from_str_at<T: DeserializeOwned>(text: &str, first_line: usize) -> Result<T, String> {
    serde_saphyr::from_str_with_options(text, options()).map_err(|e| {
        let message = e.to_string();
        let message = message.lines().next().unwrap_or("").trim().to_owned();
        match e.location() {
            Some(at) => {
                let line = first_line + usize::try_from(at.line()).unwrap_or(1) - 1;
                format!("{message} (line {line})")
            }
            None => message,
        }
    })
}
