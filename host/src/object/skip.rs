//! The end of a value the decoder drops (managedFields), found 64 bytes at a time.
//!
//! What is dropped is never stored or read, so it is checked only for what finding its end
//! needs: its strings close, hold no control characters, and its brackets balance outside
//! them. Its grammar (commas, colons, bracket kinds, numbers, escapes) is not checked, unlike
//! every member that is kept (`scan`). managedFields are about a third of a pod as the API
//! server sends it and the densest part to check (docs/BENCHMARKS.md, section 1, decoding).
//!
//! Each block of 64 bytes becomes bit masks (one bit per byte): quotes not escaped, then by
//! a running XOR the bytes inside strings, then the brackets outside them, whose count gives
//! the depth. A byte is escaped when the run of backslashes before it has odd length.

#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

#[cfg(target_arch = "x86_64")]
use crate::object::scan::sse;
use crate::object::scan::{Refused, Scan, value_end};

/// The end of the value at `i`. A mapping or a list is skipped as the module says; any other
/// value is checked fully.
#[cfg(target_arch = "x86_64")]
pub(crate) fn skip_end(b: &[u8], i: usize) -> Scan<usize> {
    if !matches!(b.get(i), Some(b'{' | b'[')) {
        return value_end(b, i);
    }
    let mut at = i;
    let mut carry = Carry::default();
    let mut depth: usize = 0;
    let mut padded;
    loop {
        let block = match b.get(at..).and_then(<[u8]>::first_chunk::<64>) {
            Some(block) => block,
            None => {
                // The last bytes, padded with spaces (which are neither strings nor brackets).
                let rest = b.get(at..).filter(|r| !r.is_empty()).ok_or(Refused)?;
                padded = [b' '; 64];
                padded[..rest.len()].copy_from_slice(rest);
                &padded
            }
        };
        let masks = Masks::of(block, &mut carry);
        if let Some(after) = open_throughout(depth, masks.opens, masks.closes) {
            if masks.bad != 0 {
                return Err(Refused);
            }
            depth = after;
            at += 64;
            continue;
        }
        // The depth after each byte of brackets; a byte's worth at once when it cannot
        // close the value (fewer closing brackets than are open).
        for byte in 0..8 {
            let opens = (masks.opens >> (8 * byte)) as u8;
            let closes = (masks.closes >> (8 * byte)) as u8;
            let closing = usize::from(ONES[usize::from(closes)]);
            if depth > closing {
                depth = depth + usize::from(ONES[usize::from(opens)]) - closing;
                continue;
            }
            let mut brackets = opens | closes;
            while brackets != 0 {
                let bit = brackets.trailing_zeros();
                brackets &= brackets - 1;
                if closes >> bit & 1 == 0 {
                    depth += 1;
                    continue;
                }
                depth -= 1;
                if depth == 0 {
                    let end = 8 * byte + bit as usize;
                    // Only what lies in the value counts.
                    if masks.bad & (u64::MAX >> (63 - end)) != 0 {
                        return Err(Refused);
                    }
                    return Ok(at + end + 1);
                }
            }
        }
        if masks.bad != 0 {
            return Err(Refused);
        }
        at += 64;
    }
}

/// The depth after a block with these brackets when no byte of it can close the value: every
/// byte has fewer closing brackets than are open before it (what the byte loop checks first,
/// for the eight bytes at once); `None` otherwise.
///
/// In lane `k` (byte `k` of a `u64`): 64 plus the depth (63 counted for 64: fewer is
/// stricter), plus the opening brackets of the bytes before `k`, less the closing ones up to
/// and including `k`. No lane carries or borrows (it stays within 0 to 183), and a lane above
/// 64 means byte `k` cannot close the value.
fn open_throughout(depth: usize, opens: u64, closes: u64) -> Option<usize> {
    const LANES: u64 = 0x0101_0101_0101_0101;
    if depth > 64 {
        // A block has 64 bytes: it cannot close this many.
        return Some(depth + opens.count_ones() as usize - closes.count_ones() as usize);
    }
    let (o, c) = (byte_counts(opens), byte_counts(closes));
    // Counts up to and including each byte (at most 64 in a lane).
    let (o_to, c_to) = (o.wrapping_mul(LANES), c.wrapping_mul(LANES));
    let counted = depth.min(63) as u64;
    let lanes = (64 + counted) * LANES + (o_to - o) - c_to;
    let all_above_64 = (lanes + 63 * LANES) & (0x80 * LANES) == 0x80 * LANES;
    all_above_64.then(|| depth + (o_to >> 56) as usize - (c_to >> 56) as usize)
}

/// The set bits of each byte of `x`, in that byte.
fn byte_counts(x: u64) -> u64 {
    let x = x - ((x >> 1) & 0x5555_5555_5555_5555);
    let x = (x & 0x3333_3333_3333_3333) + ((x >> 2) & 0x3333_3333_3333_3333);
    (x + (x >> 4)) & 0x0f0f_0f0f_0f0f_0f0f
}

/// Set bits of each byte value: x86_64 has no instruction for it before `popcnt`, which not
/// every x86_64 machine has (nearly twice as fast as `u8::count_ones` here).
static ONES: [u8; 256] = {
    let mut ones = [0; 256];
    let mut i = 0;
    while i < 256 {
        ones[i] = (i as u8).count_ones() as u8;
        i += 1;
    }
    ones
};

/// Elsewhere the value is checked fully.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn skip_end(b: &[u8], i: usize) -> Scan<usize> {
    value_end(b, i)
}

/// What one block hands the next.
#[derive(Default)]
struct Carry {
    /// 1 when the block's first byte is escaped.
    escaped: u64,
    /// All ones when the block starts inside a string.
    in_string: u64,
}

/// One bit per byte of a block.
struct Masks {
    /// Opening brackets outside strings.
    opens: u64,
    /// Closing brackets outside strings.
    closes: u64,
    /// Control characters inside strings, or outside them other than tab, newline or return.
    bad: u64,
}

#[cfg(target_arch = "x86_64")]
impl Masks {
    fn of(block: &[u8; 64], carry: &mut Carry) -> Self {
        let (lanes, _) = block.as_chunks::<16>();
        let v: [_; 4] = std::array::from_fn(|k| sse::load(&lanes[k]));
        let backslashes = equal(&v, b'\\', 0);
        let mut quotes = equal(&v, b'"', 0);
        if backslashes | carry.escaped != 0 {
            quotes &= !escaped(backslashes, &mut carry.escaped);
        }
        // Set from each opening quote up to its closing one (which is not set).
        let strings = prefix_xor(quotes) ^ carry.in_string;
        carry.in_string = ((strings as i64) >> 63) as u64;
        // `{` and `[` differ only in bit 0x20, and so do `}` and `]`.
        let opens = equal(&v, b'{', 0x20) & !strings;
        let closes = equal(&v, b'}', 0x20) & !strings;
        let controls = below_0x20(&v);
        let bad = if controls == 0 {
            0
        } else {
            let blanks = equal(&v, b'\t', 0) | equal(&v, b'\n', 0) | equal(&v, b'\r', 0);
            controls & (strings | !blanks)
        };
        Self { opens, closes, bad }
    }
}

/// [`sse::equal`] over the block's four lanes: bit `k` for byte `k`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn equal(v: &[std::arch::x86_64::__m128i; 4], byte: u8, fold: u8) -> u64 {
    lanes(v, |x| sse::equal(x, byte, fold))
}

/// [`sse::below_0x20`] over the block's four lanes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn below_0x20(v: &[std::arch::x86_64::__m128i; 4]) -> u64 {
    lanes(v, sse::below_0x20)
}

/// The four lanes' 16-bit masks side by side, the first lowest.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn lanes(
    v: &[std::arch::x86_64::__m128i; 4],
    mask: impl Fn(std::arch::x86_64::__m128i) -> u16,
) -> u64 {
    v.iter()
        .enumerate()
        .fold(0, |all, (k, x)| all | u64::from(mask(*x)) << (16 * k))
}

/// The bytes a backslash escapes, given a block's backslashes and whether its first byte is
/// escaped (`first`, 0 or 1), which is updated for the next block.
///
/// A backslash escapes the next byte unless it is escaped itself, so in a run of backslashes
/// those at even offsets from the run's start escape the byte after them. Adding each run
/// that starts at an odd bit to itself moves it just past its end; XOR with the even bits
/// then gives, after every backslash, whether it lies at an even offset of its run.
fn escaped(backslashes: u64, first: &mut u64) -> u64 {
    const EVEN: u64 = 0x5555_5555_5555_5555;
    // A backslash that is escaped starts nothing.
    let live = backslashes & !*first;
    let after = live << 1 | *first;
    let odd_starts = live & !EVEN & !after;
    let (moved, out) = odd_starts.overflowing_add(live);
    *first = u64::from(out);
    (EVEN ^ moved << 1) & after
}

/// Bit `k` of the result is the XOR of bits 0 to `k` of `x`.
fn prefix_xor(mut x: u64) -> u64 {
    for shift in [1, 2, 4, 8, 16, 32] {
        x ^= x << shift;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::scan::tests::random_below;

    /// Escapes byte by byte, the plain way.
    fn escaped_bytewise(text: &[u8]) -> Vec<bool> {
        let mut out = vec![false; text.len()];
        let mut k = 0;
        while k < text.len() {
            if text[k] == b'\\' && k + 1 < text.len() {
                out[k + 1] = true;
                k += 2;
            } else {
                k += 1;
            }
        }
        out
    }

    #[test]
    fn escapes_are_found_across_blocks_as_byte_by_byte() {
        let mut next = random_below();
        for _ in 0..2000 {
            // Runs of backslashes of every length, at every offset, over three blocks.
            let text: Vec<u8> = (0..192)
                .map(|_| if next(3) == 0 { b'a' } else { b'\\' })
                .collect();
            let want = escaped_bytewise(&text);
            let mut first = 0;
            for (n, block) in text.chunks(64).enumerate() {
                let backslashes = block
                    .iter()
                    .enumerate()
                    .fold(0u64, |m, (k, c)| m | u64::from(*c == b'\\') << k);
                let got = escaped(backslashes, &mut first);
                for k in 0..64 {
                    assert_eq!(got >> k & 1 == 1, want[64 * n + k], "byte {}", 64 * n + k);
                }
            }
        }
    }

    /// Valid JSON containers: generated pods, and what is hard on the masks (backslash runs
    /// at every length, brackets and quotes in strings, blanks, deep nesting).
    fn corpus() -> Vec<String> {
        let mut texts: Vec<String> = [(1, 1024), (2, 4096), (3, 16384)]
            .iter()
            .map(|&(i, size)| kubewasm_testenv::generate::pod(i, size, 7).to_string())
            .collect();
        for run in 0..9 {
            let slashes = "\\".repeat(2 * run);
            texts.push(format!(
                r#"{{"k{slashes}":"{slashes}\"}}]{{[","l":[ "x{slashes}" ,{{}} ]}}"#
            ));
        }
        texts.push(format!("{}1{}", "[".repeat(100), "]".repeat(100)));
        texts.push("{ \"a\" :\t[ 1 ,\r\n{ } ] , \"b\" : \"\\u00e9 ☃\" }".to_owned());
        texts
    }

    #[test]
    fn ends_agree_with_the_full_check_on_valid_json() {
        let mut next = random_below();
        let mut checked = 0;
        for text in corpus() {
            // Every alignment against the 64-byte blocks, and text after the value.
            for pad in 0..70 {
                let padded = format!("{}{text},\"after\":\"\\\"]\"}}", " ".repeat(pad));
                let b = padded.as_bytes();
                // Every container that starts a value, sampled in the long ones.
                for p in (0..b.len()).filter(|&p| matches!(b[p], b'{' | b'[')) {
                    if b.len() > 2000 && next(8) != 0 {
                        continue;
                    }
                    if let Ok(end) = value_end(b, p) {
                        assert_eq!(skip_end(b, p), Ok(end), "{padded} at {p}");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    #[test]
    fn what_finding_the_end_needs_is_checked() {
        let long = "x".repeat(100);
        for (text, want) in [
            (r#"{"a":"b"}"#.to_owned(), Ok(9)),
            (r#"{"a":"b}"#.to_owned(), Err(Refused)),
            (r#"{"a":[1}"#.to_owned(), Err(Refused)),
            (format!(r#"[[{{"{long}":1}}]"#), Err(Refused)),
            ("{\"a\":\"\u{1}\"}".to_owned(), Err(Refused)),
            (format!("{{\"{long}\":\"\n\"}}"), Err(Refused)),
            ("[\u{1}]".to_owned(), Err(Refused)),
            (format!("[\t\"{long}\"\r\n]"), Ok(107)),
            // What follows the value is not its business.
            ("{}\"\u{1}".to_owned(), Ok(2)),
            (format!("[\"{long}\"]\u{1}"), Ok(104)),
            // Its grammar is not checked: it is dropped.
            (r#"[1 2 "a" : , }"#.to_owned(), Ok(14)),
            (r#"{"a":01,"b":tru,"c":"\x"]"#.to_owned(), Ok(25)),
            // Not a container: checked fully.
            ("-x".to_owned(), Err(Refused)),
            (r#""a""#.to_owned(), Ok(3)),
        ] {
            assert_eq!(skip_end(text.as_bytes(), 0), want, "{text:?}");
        }
    }

    #[test]
    fn skipping_takes_whatever_the_full_check_takes_with_the_same_end() {
        // managedFields of a pod with bytes changed at random.
        let pod = kubewasm_testenv::generate::pod(5, 4096, 7).to_string();
        let start = pod.find(r#""managedFields":"#).expect("managedFields") + 16;
        let mut next = random_below();
        let bytes = b"\"\\{}[],:0 \x01ab";
        let (mut both, mut skipped_only) = (0, 0);
        for _ in 0..4000 {
            let mut text = pod.clone().into_bytes();
            for _ in 0..1 + next(3) {
                let at = start + next(1600);
                text[at] = bytes[next(bytes.len())];
            }
            match (value_end(&text, start), skip_end(&text, start)) {
                (Ok(full), skipped) => {
                    assert_eq!(skipped, Ok(full));
                    both += 1;
                }
                (Err(_), Ok(end)) => {
                    assert!(matches!(text[end - 1], b'}' | b']'));
                    skipped_only += 1;
                }
                (Err(_), Err(_)) => {}
            }
        }
        assert!(both > 100 && skipped_only > 100, "{both} {skipped_only}");
    }

    #[test]
    fn a_block_is_taken_at_once_only_when_no_byte_can_close_the_value() {
        let mut next = random_below();
        for _ in 0..20_000 {
            let (mut opens, mut closes) = (0u64, 0u64);
            for k in 0..64 {
                match next(6) {
                    0 => opens |= 1 << k,
                    1 => closes |= 1 << k,
                    _ => {}
                }
            }
            let depth = 1 + next(12);
            // Byte by byte, as the loop does.
            let mut d = depth;
            let mut ok = true;
            for byte in 0..8 {
                let o = (opens >> (8 * byte) & 0xff).count_ones() as usize;
                let c = (closes >> (8 * byte) & 0xff).count_ones() as usize;
                if d <= c {
                    ok = false;
                    break;
                }
                d = d + o - c;
            }
            let want = ok.then_some(d);
            assert_eq!(
                open_throughout(depth, opens, closes),
                want,
                "{opens:#x} {closes:#x} {depth}"
            );
        }
        assert_eq!(open_throughout(1000, 0, u64::MAX), Some(936));
        assert_eq!(open_throughout(64, 0, u64::MAX), None);
    }

    #[test]
    fn prefix_xor_is_the_running_parity() {
        let mut next = random_below();
        for _ in 0..200 {
            let x = (next(1 << 32) as u64) << 32 | next(1 << 32) as u64;
            let got = prefix_xor(x);
            let mut parity = 0;
            for k in 0..64 {
                parity ^= x >> k & 1;
                assert_eq!(got >> k & 1, parity, "{x:#x} bit {k}");
            }
        }
    }
}
