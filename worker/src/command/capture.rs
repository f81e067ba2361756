//! A capped excerpt of one output stream: the first and the last bytes of it.
//!
//! A command may print anything, gigabytes included, and must never block on a full pipe:
//! the stream is read to its end as it comes, and only `max / 2` bytes from its start and
//! `max / 2` from its end are kept, so memory stays bounded whatever the command prints. The
//! start says what the command set out to do, the end how it finished (errors are usually
//! printed last); the middle is counted, and the excerpt says how much of it was cut.

use std::collections::VecDeque;

use tokio::io::{AsyncRead, AsyncReadExt};

/// The kept start and end of a stream and how long it was.
#[derive(Debug)]
pub(crate) struct Excerpt {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_max: usize,
    tail_max: usize,
    total: u64,
}

impl Excerpt {
    /// An empty excerpt keeping at most `max` bytes.
    pub(crate) fn new(max: usize) -> Self {
        let head_max = max / 2;
        Excerpt {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_max,
            tail_max: max - head_max,
            total: 0,
        }
    }

    /// Takes the next bytes of the stream.
    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_max - self.head.len();
        if room > 0 {
            let n = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if bytes.len() >= self.tail_max {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_max..]);
        } else {
            let over = (self.tail.len() + bytes.len()).saturating_sub(self.tail_max);
            self.tail.drain(..over);
            self.tail.extend(bytes);
        }
    }

    /// Whether bytes between the head and the tail were dropped.
    pub(crate) fn is_cut(&self) -> bool {
        self.total > (self.head.len() + self.tail.len()) as u64
    }

    /// The excerpt as bytes: the whole stream if it fit, else its head, a line saying how
    /// many bytes were cut, and its tail.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut out = self.head.clone();
        if self.is_cut() {
            let cut = self.total - (self.head.len() + self.tail.len()) as u64;
            out.extend_from_slice(format!("\n[... {cut} bytes cut ...]\n").as_bytes());
        }
        out.extend(self.tail.iter());
        out
    }

    /// The last line or so of the stream, for an error message: at most `max` bytes from
    /// the tail, trimmed of surrounding white space.
    pub(crate) fn last(&self, max: usize) -> String {
        let all = self.bytes();
        let start = all.len().saturating_sub(max);
        String::from_utf8_lossy(&all[start..]).trim().to_owned()
    }
}

/// Reads `stream` to its end into `excerpt`. A read error ends the stream (what came is
/// kept): the command's result is its exit status, not its pipes.
pub(crate) async fn drain(mut stream: impl AsyncRead + Unpin, excerpt: &mut Excerpt) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => excerpt.push(&buf[..n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_stream_is_kept_whole() {
        let mut e = Excerpt::new(16);
        e.push(b"hello ");
        e.push(b"world");
        assert!(!e.is_cut());
        assert_eq!(e.bytes(), b"hello world");
    }

    #[test]
    fn a_long_stream_keeps_its_start_and_end() {
        let mut e = Excerpt::new(8);
        for chunk in [&b"abc"[..], b"defgh", b"ijklmnopq", b"r", b"stuvwxyz"] {
            e.push(chunk);
        }
        assert!(e.is_cut());
        assert_eq!(
            String::from_utf8(e.bytes()).unwrap(),
            "abcd\n[... 18 bytes cut ...]\nwxyz"
        );
        assert_eq!(e.last(4), "wxyz");
        // Exactly the cap: nothing cut.
        let mut e = Excerpt::new(8);
        e.push(b"12345678");
        assert_eq!(e.bytes(), b"12345678");
        // Byte by byte gives the same as one chunk.
        let mut one = Excerpt::new(10);
        let mut bytes = Excerpt::new(10);
        let text: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        one.push(&text);
        for b in &text {
            bytes.push(std::slice::from_ref(b));
        }
        assert_eq!(one.bytes(), bytes.bytes());
    }

    #[tokio::test]
    async fn draining_a_big_stream_keeps_memory_to_the_cap() {
        let big = vec![b'x'; 10 * 1024 * 1024];
        let mut e = Excerpt::new(1024);
        drain(&big[..], &mut e).await;
        assert_eq!(e.total, big.len() as u64);
        assert!(e.head.capacity() <= 1024 && e.tail.len() == 512);
        assert!(e.bytes().len() < 1100);
    }
}
