//! A validating JSON scanner over text already known to be UTF-8: where a value ends, and the
//! members of a mapping with their spans, without building anything.
//!
//! It accepts nothing serde_json refuses: control characters in strings, unknown escapes,
//! lone surrogates, malformed numbers and nesting deeper than serde_json's limit are refused.
//! It also refuses numbers serde_json might not represent (very long ones, large exponents),
//! so the caller's fallback, a serde_json tree, has the last word on them.

use std::borrow::Cow;
use std::ops::Range;

/// Deepest nesting accepted: serde_json stops at 128.
const MAX_DEPTH: u32 = 120;
/// Longest number accepted, in bytes.
const MAX_NUMBER_BYTES: usize = 64;
/// Largest exponent accepted: with [`MAX_NUMBER_BYTES`] digits a number stays finite.
const MAX_EXPONENT: u32 = 200;

/// Text the scanner does not accept; the caller falls back to serde_json, which names why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused;

/// What a scan gives or the refusal.
pub(crate) type Scan<T> = Result<T, Refused>;

/// One member of a mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member<'a> {
    /// The key as written between its quotes.
    pub key: &'a str,
    /// Whether the key has escapes (so `key` is not its value).
    pub escaped: bool,
    /// From the key's opening quote to the end of the value.
    pub span: Range<usize>,
    /// The value.
    pub value: Range<usize>,
}

/// The index of the first byte at or after `i` that is not JSON whitespace.
#[inline(always)]
pub(crate) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// The end of the value that starts at `i`, checking all of it.
pub(crate) fn value_end(b: &[u8], mut i: usize) -> Scan<usize> {
    // One bit per open container, the innermost lowest: set for a mapping.
    let mut mappings: u128 = 0;
    let mut depth: u32 = 0;
    loop {
        // A value starts at `i`.
        i = match b.get(i).ok_or(Refused)? {
            b'"' => string_end(b, i)?.0,
            b'{' | b'[' if depth >= MAX_DEPTH => return Err(Refused),
            b'{' => {
                i = skip_ws(b, i + 1);
                if b.get(i) == Some(&b'}') {
                    i + 1
                } else {
                    mappings = mappings << 1 | 1;
                    depth += 1;
                    i = key_then_colon(b, i)?.value;
                    continue;
                }
            }
            b'[' => {
                i = skip_ws(b, i + 1);
                if b.get(i) == Some(&b']') {
                    i + 1
                } else {
                    mappings <<= 1;
                    depth += 1;
                    continue;
                }
            }
            b't' => literal(b, i, b"true")?,
            b'f' => literal(b, i, b"false")?,
            b'n' => literal(b, i, b"null")?,
            b'-' | b'0'..=b'9' => number_end(b, i)?,
            _ => return Err(Refused),
        };
        // A value ended at `i`: close what it ends, or move to the next one.
        loop {
            if depth == 0 {
                return Ok(i);
            }
            let mapping = mappings & 1 != 0;
            i = skip_ws(b, i);
            match (b.get(i), mapping) {
                (Some(b','), true) => {
                    i = key_then_colon(b, skip_ws(b, i + 1))?.value;
                    break;
                }
                (Some(b','), false) => {
                    i = skip_ws(b, i + 1);
                    break;
                }
                (Some(b'}'), true) | (Some(b']'), false) => {
                    depth -= 1;
                    mappings >>= 1;
                    i += 1;
                }
                _ => return Err(Refused),
            }
        }
    }
}

/// A member's key and colon, read at the key's opening quote.
struct Key {
    /// After the key's closing quote.
    end: usize,
    /// Whether the key has escapes.
    escaped: bool,
    /// Where the value starts.
    value: usize,
}

/// Reads `"key" :` at `i`.
#[inline(always)]
fn key_then_colon(b: &[u8], i: usize) -> Scan<Key> {
    if b.get(i) != Some(&b'"') {
        return Err(Refused);
    }
    let (end, escaped) = string_end(b, i)?;
    let colon = skip_ws(b, end);
    if b.get(colon) != Some(&b':') {
        return Err(Refused);
    }
    Ok(Key {
        end,
        escaped,
        value: skip_ws(b, colon + 1),
    })
}

/// Calls `each` with every member of the mapping at `i`, in order; the end of the mapping.
pub(crate) fn members<'a>(
    text: &'a str,
    i: usize,
    mut each: impl FnMut(Member<'a>) -> Scan<()>,
) -> Scan<usize> {
    let b = text.as_bytes();
    members_read(text, i, |key, escaped, at, value| {
        let end = value_end(b, value)?;
        each(Member {
            key,
            escaped,
            span: at..end,
            value: value..end,
        })?;
        Ok(end)
    })
}

/// Walks the mapping at `i`, handing `read` each member's key as written, whether it has
/// escapes, where the member starts and where its value starts; `read` reads (and checks) the
/// value and says where it ends. The end of the mapping.
pub(crate) fn members_read<'a>(
    text: &'a str,
    i: usize,
    mut read: impl FnMut(&'a str, bool, usize, usize) -> Scan<usize>,
) -> Scan<usize> {
    let b = text.as_bytes();
    container(b, i, [b'{', b'}'], |at| {
        let key = key_then_colon(b, at)?;
        let written = text.get(at + 1..key.end - 1).ok_or(Refused)?;
        read(written, key.escaped, at, key.value)
    })
}

/// Walks the list at `i`, handing `read` where each element starts; `read` reads (and checks)
/// the element and says where it ends. The end of the list.
pub(crate) fn elements_read(
    b: &[u8],
    i: usize,
    read: impl FnMut(usize) -> Scan<usize>,
) -> Scan<usize> {
    container(b, i, [b'[', b']'], read)
}

/// Walks the container opened and closed by `brackets` at `i`: `entry` reads each entry from
/// where it starts and says where it ends; commas between them. The end of the container.
fn container(
    b: &[u8],
    i: usize,
    [open, close]: [u8; 2],
    mut entry: impl FnMut(usize) -> Scan<usize>,
) -> Scan<usize> {
    if b.get(i) != Some(&open) {
        return Err(Refused);
    }
    let mut at = skip_ws(b, i + 1);
    if b.get(at) == Some(&close) {
        return Ok(at + 1);
    }
    loop {
        at = skip_ws(b, entry(at)?);
        match b.get(at) {
            Some(b',') => at = skip_ws(b, at + 1),
            Some(c) if *c == close => return Ok(at + 1),
            _ => return Err(Refused),
        }
    }
}

/// The string whose opening quote is at `i`, checked in one pass, borrowed unless it has
/// escapes, and where it ends; refused when no string starts there.
pub(crate) fn string_value(text: &str, i: usize) -> Scan<(Cow<'_, str>, usize)> {
    if text.as_bytes().get(i) != Some(&b'"') {
        return Err(Refused);
    }
    let (end, escaped) = string_end(text.as_bytes(), i)?;
    let value = if escaped {
        let raw = text.get(i..end).ok_or(Refused)?;
        Cow::Owned(serde_json::from_str::<String>(raw).map_err(|_| Refused)?)
    } else {
        Cow::Borrowed(text.get(i + 1..end - 1).ok_or(Refused)?)
    };
    Ok((value, end))
}

/// The string at `value` (a whole value, checked), borrowed unless it has escapes; refused
/// when the value is no string.
pub(crate) fn string_at(text: &str, value: Range<usize>) -> Scan<Cow<'_, str>> {
    let raw = text.get(value).ok_or(Refused)?;
    let inner = raw
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .ok_or(Refused)?;
    if inner.contains('\\') {
        serde_json::from_str::<String>(raw)
            .map(Cow::Owned)
            .map_err(|_| Refused)
    } else {
        Ok(Cow::Borrowed(inner))
    }
}

/// Bytes of string content [`marks`] reads at a time.
const CHUNK: usize = 16;

/// 16 bytes in an SSE2 register, and the byte comparisons the scanners make on them.
#[cfg(target_arch = "x86_64")]
pub(super) mod sse {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };

    /// The 16 bytes of `chunk`.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(crate) fn load(chunk: &[u8; 16]) -> __m128i {
        // SAFETY: reads the 16 bytes of `chunk` (unaligned loads allowed); SSE2 is part of
        // every x86_64 target.
        unsafe { _mm_loadu_si128(chunk.as_ptr().cast()) }
    }

    /// Bit `k` set where byte `k`, with the bits of `fold` set, equals `byte`.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(crate) fn equal(v: __m128i, byte: u8, fold: u8) -> u16 {
        // SAFETY: SSE2, which these need, is part of every x86_64 target.
        unsafe {
            let folded = _mm_or_si128(v, _mm_set1_epi8(fold as i8));
            _mm_movemask_epi8(_mm_cmpeq_epi8(folded, _mm_set1_epi8(byte as i8))) as u16
        }
    }

    /// Bit `k` set where byte `k` is below 0x20.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(crate) fn below_0x20(v: __m128i) -> u16 {
        // Below 0x20 exactly when the unsigned maximum with 0x1f is 0x1f.
        // SAFETY: SSE2, which these need, is part of every x86_64 target.
        unsafe {
            let low = _mm_set1_epi8(0x1f);
            _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(v, low), low)) as u16
        }
    }
}

/// The 16 bytes at `j`, one bit per byte (bit 0 first): where the quotes are, and where the
/// backslashes and control characters are; `None` when fewer than 16 bytes are left.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn marks(b: &[u8], j: usize) -> Option<(u32, u32)> {
    let v = sse::load(b.get(j..)?.first_chunk::<CHUNK>()?);
    let others = sse::equal(v, b'\\', 0) | sse::below_0x20(v);
    Some((u32::from(sse::equal(v, b'"', 0)), u32::from(others)))
}

/// [`marks`] a byte at a time, for other targets (and to check the vector one against).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn marks_bytewise(b: &[u8], j: usize) -> Option<(u32, u32)> {
    let chunk = b.get(j..)?.first_chunk::<CHUNK>()?;
    Some(
        chunk
            .iter()
            .enumerate()
            .fold((0, 0), |(q, o), (k, c)| match c {
                b'"' => (q | 1 << k, o),
                b'\\' | 0..0x20 => (q, o | 1 << k),
                _ => (q, o),
            }),
    )
}

#[cfg(not(target_arch = "x86_64"))]
use marks_bytewise as marks;

/// The end (after the closing quote) of the string whose opening quote is at `i`, and whether
/// it has escapes.
#[inline(always)]
fn string_end(b: &[u8], i: usize) -> Scan<(usize, bool)> {
    let mut j = i + 1;
    let mut escaped = false;
    loop {
        // Plain content 16 bytes at a time, then byte by byte near the end.
        if let Some((quotes, others)) = marks(b, j) {
            let first_quote = quotes & quotes.wrapping_neg();
            if first_quote != 0 && others & (first_quote - 1) == 0 {
                return Ok((j + quotes.trailing_zeros() as usize + 1, escaped));
            }
            let found = quotes | others;
            if found == 0 {
                j += CHUNK;
                continue;
            }
            j += found.trailing_zeros() as usize;
        }
        match b.get(j).ok_or(Refused)? {
            b'"' => return Ok((j + 1, escaped)),
            b'\\' => {
                escaped = true;
                // Two-byte escapes (`\"` in managedFields' keys, mostly) without a call.
                j = match b.get(j + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => j + 2,
                    _ => escape_end(b, j)?,
                };
            }
            c if *c < 0x20 => return Err(Refused),
            _ => j += 1,
        }
    }
}

/// The end of the escape whose backslash is at `i`.
fn escape_end(b: &[u8], i: usize) -> Scan<usize> {
    match b.get(i + 1).ok_or(Refused)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Ok(i + 2),
        b'u' => {
            let unit = hex4(b, i + 2)?;
            match unit {
                0xD800..=0xDBFF => {
                    // A high surrogate pairs with the low one that must follow.
                    if b.get(i + 6..i + 8) != Some(b"\\u") {
                        return Err(Refused);
                    }
                    match hex4(b, i + 8)? {
                        0xDC00..=0xDFFF => Ok(i + 12),
                        _ => Err(Refused),
                    }
                }
                0xDC00..=0xDFFF => Err(Refused),
                _ => Ok(i + 6),
            }
        }
        _ => Err(Refused),
    }
}

/// The four hex digits at `i`.
fn hex4(b: &[u8], i: usize) -> Scan<u16> {
    let digits = b.get(i..i + 4).ok_or(Refused)?;
    digits.iter().try_fold(0u16, |n, d| {
        let v = (*d as char).to_digit(16).ok_or(Refused)?;
        Ok(n << 4 | v as u16)
    })
}

/// The end of `word` at `i`.
fn literal(b: &[u8], i: usize, word: &[u8]) -> Scan<usize> {
    match b.get(i..i + word.len()) {
        Some(w) if w == word => Ok(i + word.len()),
        _ => Err(Refused),
    }
}

/// The end of the digits starting at `i`, at least one.
fn digits_end(b: &[u8], i: usize) -> Scan<usize> {
    let n = b
        .get(i..)
        .map_or(0, |r| r.iter().take_while(|c| c.is_ascii_digit()).count());
    if n == 0 { Err(Refused) } else { Ok(i + n) }
}

/// The end of the number at `i`, by JSON's grammar.
fn number_end(b: &[u8], start: usize) -> Scan<usize> {
    let mut i = start + usize::from(b.get(start) == Some(&b'-'));
    i = match b.get(i) {
        Some(b'0') => i + 1,
        Some(b'1'..=b'9') => digits_end(b, i)?,
        _ => return Err(Refused),
    };
    if b.get(i) == Some(&b'.') {
        i = digits_end(b, i + 1)?;
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        let end = digits_end(b, i)?;
        let exponent = b.get(i..end).ok_or(Refused)?;
        let value = exponent.iter().try_fold(0u32, |n, d| {
            n.checked_mul(10)?.checked_add(u32::from(d - b'0'))
        });
        if value.is_none_or(|v| v > MAX_EXPONENT) {
            return Err(Refused);
        }
        i = end;
    }
    if i - start > MAX_NUMBER_BYTES {
        return Err(Refused);
    }
    Ok(i)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A repeatable pseudo-random source: each call gives a number below its argument.
    pub(crate) fn random_below() -> impl FnMut(usize) -> usize {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        }
    }

    /// Whether the scanner takes `text` as one value (with whitespace around).
    fn takes(text: &str) -> bool {
        let b = text.as_bytes();
        value_end(b, skip_ws(b, 0)).is_ok_and(|end| skip_ws(b, end) == b.len())
    }

    #[test]
    fn accepts_what_json_allows() {
        for text in [
            "0",
            "-0",
            "-12.5e+10",
            "1E-7",
            "3.25",
            "true",
            "false",
            "null",
            r#""""#,
            r#""a \"quoted\" \\ \/ \b\f\n\r\t \u00e9 \ud83d\ude00 é ☃""#,
            "[]",
            "{}",
            " [ 1 , [ ] , { } , \"x\" ] ",
            r#"{"a":{"b":[{"c":null}]},"d":"}","e":"]"}"#,
            "\"\u{7f}\"",
        ] {
            assert!(takes(text), "{text}");
            assert!(
                serde_json::from_str::<serde_json::Value>(text).is_ok(),
                "{text}"
            );
        }
    }

    #[test]
    fn string_bytes_are_marked_as_byte_by_byte() {
        let mut next = random_below();
        let alphabet = [b'"', b'\\', 0, 0x1f, 0x20, b'a', 0x7f, 0x80, 0xe9, 0xff];
        for _ in 0..2000 {
            let bytes: Vec<u8> = (0..40).map(|_| alphabet[next(alphabet.len())]).collect();
            for j in 0..=bytes.len() {
                assert_eq!(
                    marks(&bytes, j),
                    marks_bytewise(&bytes, j),
                    "{bytes:?} at {j}"
                );
            }
        }
    }

    #[test]
    fn refuses_what_serde_json_refuses() {
        for text in [
            "",
            "01",
            "-",
            "1.",
            ".5",
            "1e",
            "+1",
            "tru",
            "nul",
            "[1,]",
            "[1 2]",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{a:1}",
            "{\"a\":1]",
            "[1}",
            "\"unterminated",
            "\"tab\there\"",
            "\"nl\nhere\"",
            r#""\x""#,
            r#""\u12""#,
            r#""\u12g4""#,
            r#""\ud800""#,
            r#""\ud800\u0041""#,
            r#""\udc00""#,
            "[1] 2",
        ] {
            assert!(!takes(text), "{text}");
            assert!(
                serde_json::from_str::<serde_json::Value>(text).is_err(),
                "{text}"
            );
        }
    }

    #[test]
    fn leaves_numbers_and_depths_near_serde_json_limits_to_it() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(takes(&deep(MAX_DEPTH as usize)));
        assert!(!takes(&deep(MAX_DEPTH as usize + 1)));
        let deep_maps = format!("{}1{}", "{\"a\":".repeat(200), "}".repeat(200));
        assert!(!takes(&deep_maps));
        assert!(serde_json::from_str::<serde_json::Value>(&deep_maps).is_err());
        for text in ["1e400", "1e999999999999", &"9".repeat(400)] {
            assert!(!takes(text), "{text}");
        }
        assert!(takes("1e200"));
    }

    #[test]
    fn finds_strings_ends_at_every_offset_of_the_word() {
        // The quote, a backslash or a control byte at each position of an eight-byte word.
        for n in 0..20 {
            let plain = "x".repeat(n);
            assert!(takes(&format!("\"{plain}\"")), "{n}");
            assert!(takes(&format!("\"{plain}\\n{plain}\"")), "{n}");
            assert!(!takes(&format!("\"{plain}\u{1}{plain}\"")), "{n}");
            assert!(takes(&format!("\"{plain}é\u{7f}{plain}\"")), "{n}");
        }
    }

    #[test]
    fn agrees_with_serde_json_on_mutated_text_at_every_offset() {
        // Every kind of token, shifted across the eight-byte words strings are read in, with
        // bytes changed, put in or taken out at random: the scanner takes exactly what
        // serde_json parses (the numbers are short and the nesting shallow, so no limit of
        // its own refuses them).
        let base = "{\"a\":[1,-2.5e3,0,true,false,null,{}],\"b\\\"c\":\"x\\\\y\\u00e9\\ud83d\\ude00\\n\",\n\t\"d\" : { \"e\" : [ [ ] , \"\" ] },\r\"f\":\"\u{e9}\u{2603}\"}";
        let alphabet = b"\"\\{}[],:0-.eE1tfnu \t\n\r\x01\x1fx";
        let mut next = random_below();
        let (mut taken, mut refused) = (0, 0);
        for shift in 0..64 {
            let text = format!("[\"{}\",{base},{base}]", "x".repeat(shift));
            assert!(takes(&text), "{text}");
            for _ in 0..100 {
                let mut bytes = text.clone().into_bytes();
                for _ in 0..1 + next(3) {
                    let at = next(bytes.len());
                    match next(4) {
                        0 => {
                            bytes.remove(at);
                        }
                        1 => bytes.insert(at, alphabet[next(alphabet.len())]),
                        _ => bytes[at] = alphabet[next(alphabet.len())],
                    }
                }
                let Ok(mutated) = String::from_utf8(bytes) else {
                    continue;
                };
                let json = serde_json::from_str::<serde_json::Value>(&mutated).is_ok();
                assert_eq!(takes(&mutated), json, "{mutated:?}");
                if json {
                    taken += 1;
                } else {
                    refused += 1;
                }
            }
        }
        assert!(taken > 100 && refused > 1000, "{taken} {refused}");
    }

    #[test]
    fn walks_members_with_their_spans() {
        let text = r#"{ "a" : 1 , "b\n" : {"x":[1]}, "c":"}" }"#;
        let mut seen = Vec::new();
        let end = members(text, 0, |m| {
            seen.push((m.key, m.escaped, &text[m.span], &text[m.value]));
            Ok(())
        });
        assert_eq!(end, Ok(text.len()));
        assert_eq!(
            seen,
            [
                ("a", false, r#""a" : 1"#, "1"),
                (r"b\n", true, r#""b\n" : {"x":[1]}"#, r#"{"x":[1]}"#),
                ("c", false, r#""c":"}""#, r#""}""#),
            ]
        );
        assert_eq!(members("{}", 0, |_| Err(Refused)), Ok(2));
        assert_eq!(members("[]", 0, |_| Ok(())), Err(Refused));
        assert_eq!(members(r#"{"a":1,}"#, 0, |_| Ok(())), Err(Refused));
    }

    #[test]
    fn walks_elements_read_by_the_caller() {
        let text = r#"[ {"a":[1]} , "]" ,3]"#;
        let b = text.as_bytes();
        let mut seen = Vec::new();
        let end = elements_read(b, 0, |at| {
            let end = value_end(b, at)?;
            seen.push(&text[at..end]);
            Ok(end)
        });
        assert_eq!(end, Ok(text.len()));
        assert_eq!(seen, [r#"{"a":[1]}"#, r#""]""#, "3"]);
        assert_eq!(elements_read(b"[]", 0, |_| Err(Refused)), Ok(2));
        // The reader's end is checked: what follows must be a comma or the list's end.
        assert_eq!(elements_read(b"[1,2]", 0, Ok), Err(Refused));
        assert_eq!(
            elements_read(b"[1,]", 0, |at| value_end(b"[1,]", at)),
            Err(Refused)
        );
        assert_eq!(elements_read(b"{}", 0, Ok), Err(Refused));
    }

    #[test]
    fn reads_strings_borrowed_or_unescaped() {
        let text = r#"["plain","w\u00e9b",3]"#;
        assert!(matches!(string_at(text, 1..8), Ok(Cow::Borrowed("plain"))));
        assert_eq!(string_at(text, 9..19).as_deref(), Ok("wéb"));
        assert_eq!(string_at(text, 20..21), Err(Refused));
    }
}
