//! The lines of a watch response, read one at a time into one reused buffer.

use std::io;
use std::pin::Pin;
use std::str::Utf8Error;

use futures::{AsyncBufRead, AsyncBufReadExt, FutureExt};

/// Room of the buffer lines are read into (a 4 KB pod's line fits).
const LINE_BUFFER: usize = 16 << 10;

/// The lines of a response body, with a look ahead that never loses a failure.
pub struct Lines<R> {
    body: Pin<Box<R>>,
    buf: Vec<u8>,
    /// A failure met while looking ahead, reported by the next read.
    failed: Option<io::Error>,
}

impl<R: AsyncBufRead> Lines<R> {
    /// Lines of `body`.
    pub fn new(body: R) -> Self {
        Self {
            body: Box::pin(body),
            buf: Vec::with_capacity(LINE_BUFFER),
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
    pub async fn next(&mut self) -> io::Result<Option<Result<&str, Utf8Error>>> {
        loop {
            if let Some(e) = self.failed.take() {
                return Err(e);
            }
            if self.buf.capacity() > 16 * LINE_BUFFER {
                // A very large object came by: do not keep its room for the small ones.
                self.buf = Vec::with_capacity(LINE_BUFFER);
            }
            self.buf.clear();
            if self.body.read_until(b'\n', &mut self.buf).await? == 0 {
                return Ok(None);
            }
            if !self.buf.trim_ascii().is_empty() {
                return Ok(Some(std::str::from_utf8(&self.buf)));
            }
        }
    }
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
            .map(|line| line.map_or_else(|e| format!("not UTF-8: {e}"), str::to_owned)))
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
        assert!(bad.is_some_and(|b| b.starts_with("not UTF-8")));
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
}
