//! Untrusted text kept to a bound: what a plugin or a server says, cut before it is stored.

/// Longest message kept from an untrusted source (a plugin's log line, error or refusal, a
/// reason a watch event was skipped); longer ones are cut (and say so).
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// `text` cut to at most `max` bytes on a character boundary, marked ` [cut]` when cut.
pub fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(" [cut]");
    }
    text
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
}
