//! The lines of a watch response, read one at a time into one reused buffer.
//!
//! A line is kept up to [`MAX_LINE`] bytes: a longer one is read to its end without being kept
//! and reported as [`Unreadable::TooLong`], so a broken or hostile server (or a proxy in front of
//! it) cannot grow the agent's memory with one endless line.

use std::io;
use std::pin::Pin;
use std::str::Utf8Error;

use futures::{AsyncBufRead, AsyncBufReadExt, FutureExt};

/// Room of the buffer lines are read into (a 4 KB pod's line fits).
const LINE_BUFFER: usize = 16 << 10;

/// Longest line kept: client-go's streaming decoder refuses objects past the same size. An
/// object the API server stores (etcd takes 1.5 MiB by default) is far below it.
pub const MAX_LINE: usize = 16 << 20;

/// Why a line was read but cannot be decoded.
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    /// The line is not UTF-8.
    #[error("not UTF-8 ({0})")]
    NotUtf8(Utf8Error),
    /// The line is longer than the longest kept.
    #[error("line of {bytes} bytes is longer than the {max} kept; dropped unread")]
    TooLong {
        /// Its length, newline included.
        bytes: usize,
        /// The longest kept.
        max: usize,
    },
}

/// The lines of a response body, with a look ahead that never loses a failure.
pub struct Lines<R> {
    body: Pin<Box<R>>,
    buf: Vec<u8>,
    /// Longest line kept ([`MAX_LINE`] but in tests).
    max: usize,
    /// A failure met while looking ahead, reported by the next read.
    failed: Option<io::Error>,
}

impl<R: AsyncBufRead> Lines<R> {
    /// Lines of `body`.
    pub fn new(body: R) -> Self {
        Self {
            body: Box::pin(body),
            buf: Vec::with_capacity(LINE_BUFFER),
            max: MAX_LINE,
            failed: None,
        }
    }

    /// True when more of the body has arrived, so the next read will not wait.
    pub fn ready(&mut self) -> bool {
        if self.failed.is_some() {
            return false;
        }
        match self.body.fill_buf().now_or_never() {
            Some(Ok(bytes)) => !bytes.is_empty(),
            Some(Err(e)) => {
                // The body ends after reporting a failure once: keep it for `next`.
                self.failed = Some(e);
                false
            }
            None => false,
        }
    }

    /// The next line that is not blank, `None` at the end of the body.
    pub async fn next(&mut self) -> io::Result<Option<Result<&str, Unreadable>>> {
        loop {
            if let Some(e) = self.failed.take() {
                return Err(e);
            }
            if self.buf.capacity() > 16 * LINE_BUFFER {
                // A very large object came by: do not keep its room for the small ones.
                self.buf = Vec::with_capacity(LINE_BUFFER);
            }
            self.buf.clear();
            let bytes = self.read_line().await?;
            if bytes == 0 {
                return Ok(None);
            }
            if bytes > self.max {
                let max = self.max;
                return Ok(Some(Err(Unreadable::TooLong { bytes, max })));
            }
            if !self.buf.trim_ascii().is_empty() {
                return Ok(Some(utf8(&self.buf).map_err(Unreadable::NotUtf8)));
            }
        }
    }

    /// Reads one line, its newline included, into `buf` if it is at most `max` bytes long;
    /// longer, `buf` is left empty. The line's length, 0 at the end of the body; a body that
    /// ends without a newline ends its last line.
    async fn read_line(&mut self) -> io::Result<usize> {
        let mut bytes = 0;
        loop {
            // A failure mid-line loses the part read: it could not be decoded anyway.
            let chunk = self.body.fill_buf().await?;
            if chunk.is_empty() {
                return Ok(bytes);
            }
            let (take, ended) = match memchr::memchr(b'\n', chunk) {
                Some(at) => (at + 1, true),
                None => (chunk.len(), false),
            };
            bytes += take;
            if bytes <= self.max {
                self.buf.extend_from_slice(&chunk[..take]);
            } else if !self.buf.is_empty() {
                self.buf = Vec::new();
            }
            self.body.as_mut().consume(take);
            if ended {
                return Ok(bytes);
            }
        }
    }
}

/// `bytes` as text, checked with SIMD instructions; the standard library checks again only to
/// say where a failing line goes wrong.
fn utf8(bytes: &[u8]) -> Result<&str, Utf8Error> {
    simdutf8::basic::from_utf8(bytes).or_else(|_| std::str::from_utf8(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;

    fn body(chunks: Vec<io::Result<Vec<u8>>>) -> Lines<impl AsyncBufRead> {
        Lines::new(futures::stream::iter(chunks).into_async_read())
    }

    async fn text<R: AsyncBufRead>(lines: &mut Lines<R>) -> io::Result<Option<String>> {
        Ok(lines
            .next()
            .await?
            .map(|line| line.map_or_else(|e| e.to_string(), str::to_owned)))
    }

    #[tokio::test]
    async fn a_failure_met_while_looking_ahead_is_reported_not_taken_for_the_end() -> io::Result<()>
    {
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        let mut lines = body(vec![Ok(b"{\"a\":1}\n".to_vec()), Err(reset)]);
        assert_eq!(text(&mut lines).await?.as_deref(), Some("{\"a\":1}\n"));
        assert!(!lines.ready(), "nothing readable after the line");
        let after = text(&mut lines).await;
        assert_eq!(
            after.map_err(|e| e.kind()),
            Err(io::ErrorKind::ConnectionReset),
            "the cut, not a clean end"
        );
        Ok(())
    }

    #[tokio::test]
    async fn lines_split_across_chunks_come_whole_and_blank_ones_are_skipped() -> io::Result<()> {
        let mut lines = body(vec![
            Ok(b"one\n\n  \r\ntw".to_vec()),
            Ok(vec![b'o', b'\n', 0xff, b'\n']),
            Ok(b"last".to_vec()),
        ]);
        assert_eq!(text(&mut lines).await?.as_deref(), Some("one\n"));
        assert!(lines.ready(), "the rest of the chunk is there");
        assert_eq!(text(&mut lines).await?.as_deref(), Some("two\n"));
        let bad = text(&mut lines).await?;
        assert!(
            bad.as_deref().is_some_and(|b| b.starts_with("not UTF-8")),
            "{bad:?}"
        );
        assert_eq!(text(&mut lines).await?.as_deref(), Some("last"));
        assert!(!lines.ready(), "the end");
        assert_eq!(text(&mut lines).await?, None);
        Ok(())
    }

    #[tokio::test]
    async fn a_huge_line_does_not_keep_its_room() -> io::Result<()> {
        let mut huge = vec![b'x'; 40 * LINE_BUFFER];
        huge.push(b'\n');
        let mut lines = body(vec![Ok(huge), Ok(b"small\n".to_vec())]);
        assert_eq!(
            text(&mut lines).await?.map(|l| l.len()),
            Some(40 * LINE_BUFFER + 1)
        );
        assert_eq!(text(&mut lines).await?.as_deref(), Some("small\n"));
        assert!(
            lines.buf.capacity() <= 16 * LINE_BUFFER,
            "{}",
            lines.buf.capacity()
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_line_past_the_longest_kept_is_dropped_and_the_next_comes_whole() -> io::Result<()> {
        let mut lines = body(vec![
            Ok(b"first\n".to_vec()),
            Ok(vec![b'x'; 30]),
            Ok(vec![b'x'; 30]),
            Ok(b"x\nnext\n".to_vec()),
            Ok(b"twenty bytes, kept!\n".to_vec()),
            Ok(b"twenty-one bytes, no\n".to_vec()),
        ]);
        lines.max = 20;
        assert_eq!(text(&mut lines).await?.as_deref(), Some("first\n"));
        match lines.next().await? {
            Some(Err(Unreadable::TooLong { bytes, max })) => assert_eq!((bytes, max), (62, 20)),
            other => panic!("the long line: {other:?}"),
        }
        assert_eq!(text(&mut lines).await?.as_deref(), Some("next\n"));
        assert_eq!(
            text(&mut lines).await?.as_deref(),
            Some("twenty bytes, kept!\n"),
            "a line of the longest length is kept"
        );
        let over = text(&mut lines).await?;
        assert_eq!(
            over.as_deref(),
            Some("line of 21 bytes is longer than the 20 kept; dropped unread"),
        );
        assert_eq!(text(&mut lines).await?, None);
        Ok(())
    }

    #[tokio::test]
    async fn an_endless_line_holds_no_more_than_the_longest_kept() {
        let (send, receive) = futures::channel::mpsc::unbounded::<io::Result<Vec<u8>>>();
        let mut lines = Lines::new(receive.into_async_read());
        let chunk = vec![b'x'; 64 << 10];
        for _ in 0..(MAX_LINE / chunk.len() + 64) {
            send.unbounded_send(Ok(chunk.clone()))
                .expect("the receiver is alive");
        }
        // 20 MiB of one line so far, and more may come: the read waits for it.
        assert!(
            lines.next().now_or_never().is_none(),
            "the line has not ended"
        );
        assert!(
            lines.buf.capacity() <= MAX_LINE,
            "{} bytes held",
            lines.buf.capacity()
        );
    }

    #[test]
    fn the_utf8_check_agrees_with_the_standard_library() {
        let mut cases: Vec<Vec<u8>> = vec![
            "plain ascii, long enough to fill several vector lanes of the check".into(),
            "é, ü, 漢字, 🦀 and more text after them to cross a 32-byte block".into(),
            vec![0xc3],                   // cut two-byte sequence
            vec![0xe2, 0x82],             // cut three-byte sequence
            vec![0xc0, 0xaf],             // overlong
            vec![0xed, 0xa0, 0x80],       // a surrogate
            vec![0xf4, 0x90, 0x80, 0x80], // past U+10FFFF
            vec![0xff],
        ];
        // Each broken sequence again at every offset of a 64-byte block.
        for bad in cases.clone().into_iter().skip(2) {
            for at in 0..64 {
                let mut text = vec![b'a'; at];
                text.extend_from_slice(&bad);
                text.extend_from_slice(&[b'z'; 40]);
                cases.push(text);
            }
        }
        for case in &cases {
            let ours = utf8(case).map_err(|e| e.valid_up_to());
            let std = std::str::from_utf8(case).map_err(|e| e.valid_up_to());
            assert_eq!(ours, std, "{case:?}");
        }
    }

    #[tokio::test]
    async fn lines_come_as_the_text_has_them_however_it_is_cut() -> io::Result<()> {
        let mut seed = 0x9e37_79b9_u64;
        let mut draw = |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % n
        };
        for _ in 0..200 {
            let mut text = Vec::new();
            for _ in 0..draw(12) {
                match draw(4) {
                    0 => text.extend_from_slice(b" \r"),
                    _ => text.extend((0..draw(40)).map(|i| b'a' + (i % 26) as u8)),
                }
                text.push(b'\n');
            }
            if draw(2) == 0 {
                text.extend_from_slice(b"no newline");
            }
            let expected: Vec<&[u8]> = text
                .split_inclusive(|&b| b == b'\n')
                .filter(|l| !l.trim_ascii().is_empty())
                .collect();
            let mut chunks = Vec::new();
            let mut rest = text.as_slice();
            while !rest.is_empty() {
                let take = (draw(30) as usize + 1).min(rest.len());
                chunks.push(Ok(rest[..take].to_vec()));
                rest = &rest[take..];
            }
            let mut lines = body(chunks);
            let mut got = Vec::new();
            while let Some(line) = lines.next().await? {
                got.push(
                    line.map_err(|e| io::Error::other(e.to_string()))?
                        .as_bytes()
                        .to_vec(),
                );
                if draw(2) == 0 {
                    // Looking ahead reads nothing twice and loses nothing.
                    lines.ready();
                }
            }
            assert_eq!(got, expected, "{:?}", String::from_utf8_lossy(&text));
        }
        Ok(())
    }
}
