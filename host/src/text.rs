//! Untrusted text made safe to print and kept to a bound: what a plugin or a server says, cut
//! before it is stored.

use std::fmt::Write as _;

/// Longest message kept from an untrusted source (a plugin's log line, error or refusal, a
/// reason a watch event was skipped); longer ones are cut (and say so).
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// `text` made safe to print and cut to at most `max` bytes on a character boundary, marked
/// ` [cut]` when cut. Control characters (line breaks, terminal escapes), line separators and
/// bidirectional overrides are written as escapes (`\n`, `\u{1b}`): untrusted text can then
/// neither start a line of its own in the host's log nor restyle the terminal reading it. Tabs
/// are kept.
pub fn cut(mut text: String, max: usize) -> String {
    // Escaping only lengthens, so what is kept comes from the first `max` bytes: a 1 MiB
    // message is not scanned whole (its scan alone took a debug host call over 50 ms).
    let mut was_cut = truncate_at(&mut text, max);
    // Nearly every message has nothing to escape: no copy then.
    if !printable_as_is(&text) {
        text = printable(&text, max);
        was_cut |= truncate_at(&mut text, max);
    }
    if was_cut {
        text.push_str(" [cut]");
    }
    text
}

/// Cuts `text` to at most `max` bytes on a character boundary; whether it cut.
fn truncate_at(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    true
}

/// True when `text` holds nothing [`cut`] would escape: a name that may be printed as it is.
pub fn printable_as_is(text: &str) -> bool {
    !text.chars().any(needs_escape)
}

/// `text` with what [`needs_escape`] written as escapes, stopping once past `max` bytes (the
/// caller cuts there): a long text full of escapes costs no more than `max` bytes and a few.
fn printable(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 16);
    for c in text.chars() {
        if out.len() > max {
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            // Writing into a String cannot fail.
            c if needs_escape(c) => drop(write!(out, "\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// Characters that could forge or hide a line where text is printed: controls but the tab
/// (C0, DEL, C1, among them escape and the line breaks), the Unicode line and paragraph
/// separators and the bidirectional embeddings, overrides and isolates.
fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\t')
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_within_the_bound_is_kept_whole() {
        assert_eq!(cut("abc".to_owned(), 3), "abc");
        assert_eq!(cut(String::new(), 0), "");
    }

    #[test]
    fn longer_text_is_cut_on_a_char_boundary_and_marked() {
        // "é" is two bytes: a bound of 3 falls inside the second one.
        assert_eq!(cut("éé".to_owned(), 3), "é [cut]");
        assert_eq!(cut("abcdef".to_owned(), 4), "abcd [cut]");
        let long = cut("ü".repeat(MAX_MESSAGE_BYTES), MAX_MESSAGE_BYTES);
        assert!(long.len() <= MAX_MESSAGE_BYTES + " [cut]".len());
        assert!(long.ends_with(" [cut]"));
    }

    #[test]
    fn what_could_forge_or_hide_a_line_is_escaped() {
        let forged = "ok\n2026-01-01T00:00:00Z ERROR kubewasm::agent: leader lost\r\x1b[2J\u{7f}";
        assert_eq!(
            cut(forged.to_owned(), MAX_MESSAGE_BYTES),
            "ok\\n2026-01-01T00:00:00Z ERROR kubewasm::agent: leader lost\\r\\u{1b}[2J\\u{7f}"
        );
        assert_eq!(
            cut("a\u{85}b\u{2028}c\u{202e}d\u{2066}e".to_owned(), 100),
            "a\\u{85}b\\u{2028}c\\u{202e}d\\u{2066}e"
        );
        // Tabs, accents and other scripts are text, kept as they are.
        let kept = "tab\there, é, 日本, emoji 🦀";
        assert_eq!(cut(kept.to_owned(), 100), kept);
    }

    #[test]
    fn escapes_count_toward_the_bound_and_a_huge_text_is_not_copied_whole() {
        let bells = "\u{7}".repeat(1 << 20);
        let kept = cut(bells, 64);
        assert!(kept.len() <= 64 + " [cut]".len(), "{}", kept.len());
        assert!(
            kept.starts_with("\\u{7}\\u{7}") && kept.ends_with(" [cut]"),
            "{kept}"
        );
        assert_eq!(printable(&"\n".repeat(1 << 20), 64).len(), 66);
    }
}
