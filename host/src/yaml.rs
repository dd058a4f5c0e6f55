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

/// Reads one YAML document into `T`; the error is one line, `line L column C: reason`, with
/// the line counted from `first_line` (the document's first line in its file).
pub fn from_str_at<T: DeserializeOwned>(text: &str, first_line: usize) -> Result<T, String> {
    serde_saphyr::from_str_with_options(text, options()).map_err(|e| {
        let message = e.to_string();
        let message = message.lines().next().unwrap_or("").trim();
        let message = message.strip_prefix("error: ").unwrap_or(message);
        // The parser's own position is within the document; the caller's is within the file.
        let reason = match message.split_once(": ") {
            Some((place, reason)) if place.starts_with("line ") => reason,
            _ => message,
        };
        let reason = reason
            .trim_end_matches(", set DuplicateKeyPolicy in Options if acceptable")
            .to_owned();
        match e.location() {
            Some(at) => {
                let line = first_line + usize::try_from(at.line()).unwrap_or(1) - 1;
                format!("line {line} column {}: {reason}", at.column())
            }
            None => reason,
        }
    })
}
