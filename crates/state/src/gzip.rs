//! Bounded decompression of the concatenated chunks (concepts §16.3.3).
//!
//! Two properties matter more than speed here:
//! - **A hard cap.** The output buffer never grows past the cap: bytes are pulled from the
//!   decoder through a 64 KiB scratch buffer and the total is checked before anything is kept, so
//!   a gzip bomb (200 MiB of zeros is ~200 KB compressed) costs at most the cap plus 64 KiB.
//! - **Only the first gzip member.** [`flate2::read::GzDecoder`] stops at the end of the first
//!   member and ignores what follows, unlike `MultiGzDecoder`. When Terraform shrinks a chunked
//!   state it rewrites the lower pieces, then deletes the surplus `-part-N`; a failed delete leaves
//!   a stale trailing piece after the new stream's end. Stopping at the member end reads the new
//!   state correctly instead of misreading the leftover as more data.

use std::io::{self, Read};

use flate2::read::GzDecoder;

/// How much is pulled from the decoder per read: the slack above the cap.
const SCRATCH: usize = 64 * 1024;

/// Why the chunks did not decompress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GunzipError {
    /// The payload is empty.
    Empty,
    /// The payload does not start with the gzip magic bytes.
    NotGzip,
    /// The stream ends before the gzip member does.
    Truncated,
    /// The decompressed size exceeds the cap.
    OverCap { cap: usize },
    /// Any other decoder error (bad deflate data, checksum mismatch).
    Invalid(String),
}

impl std::fmt::Display for GunzipError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GunzipError::Empty => f.write_str("the `tfstate` data is empty"),
            GunzipError::NotGzip => f.write_str(
                "the concatenated `tfstate` data is not gzip (the backend writes `encoding: gzip`)",
            ),
            GunzipError::Truncated => f.write_str(
                "the gzip stream is truncated (a chunk is missing or was cut short, or an engine \
                 that reads only the base Secret wrote a chunked state)",
            ),
            GunzipError::OverCap { cap } => {
                write!(f, "the state decompresses to more than the {cap} byte cap")
            }
            GunzipError::Invalid(e) => write!(f, "the gzip stream is invalid: {e}"),
        }
    }
}

/// A reader over the chunks in order, without copying them into one buffer.
struct Concat<'a> {
    rest: std::slice::Iter<'a, &'a [u8]>,
    current: &'a [u8],
}

impl Read for Concat<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if !self.current.is_empty() {
                return self.current.read(buf);
            }
            match self.rest.next() {
                Some(next) => self.current = next,
                None => return Ok(0),
            }
        }
    }
}

/// Decompresses the first gzip member of `parts` (concatenated in order) into at most `cap` bytes.
pub(crate) fn gunzip_first_member(parts: &[&[u8]], cap: usize) -> Result<Vec<u8>, GunzipError> {
    let compressed: usize = parts.iter().map(|p| p.len()).sum();
    if compressed == 0 {
        return Err(GunzipError::Empty);
    }
    // Check the magic ourselves: flate2 reports a non-gzip input only as a generic error.
    let mut magic = [0u8; 2];
    let got = read_up_to(&mut concat(parts), &mut magic);
    if got < 2 {
        return Err(GunzipError::Truncated);
    }
    if magic != [0x1f, 0x8b] {
        return Err(GunzipError::NotGzip);
    }
    // State JSON compresses well; start at a few times the input and let doubling do the rest.
    let hint = compressed.saturating_mul(4).max(SCRATCH).min(cap);
    read_bounded(GzDecoder::new(concat(parts)), cap, hint).map_err(|e| match e {
        BoundedError::OverCap => GunzipError::OverCap { cap },
        BoundedError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => GunzipError::Truncated,
        BoundedError::Io(e) => GunzipError::Invalid(e.to_string()),
    })
}

fn concat<'a>(parts: &'a [&'a [u8]]) -> Concat<'a> {
    Concat {
        rest: parts.iter(),
        current: &[],
    }
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    n
}

#[derive(Debug)]
pub(crate) enum BoundedError {
    OverCap,
    Io(io::Error),
}

/// Reads `r` to its end into a buffer whose capacity never exceeds `cap`; fails as soon as more
/// than `cap` bytes come out, having pulled at most `cap + SCRATCH` bytes from `r`.
pub(crate) fn read_bounded(
    mut r: impl Read,
    cap: usize,
    hint: usize,
) -> Result<Vec<u8>, BoundedError> {
    let mut out: Vec<u8> = Vec::with_capacity(hint.min(cap));
    let mut scratch = vec![0u8; SCRATCH];
    loop {
        let n = match r.read(&mut scratch) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(BoundedError::Io(e)),
        };
        let len = out.len() + n;
        if len > cap {
            return Err(BoundedError::OverCap);
        }
        if len > out.capacity() {
            // Grow by doubling like Vec would, but never past the cap.
            let target = out.capacity().saturating_mul(2).max(len).min(cap);
            out.reserve_exact(target - out.len());
        }
        out.extend_from_slice(&scratch[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Counts the bytes a reader hands out.
    struct Counting<R> {
        inner: R,
        pulled: usize,
    }

    impl<R: Read> Read for Counting<R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.pulled += n;
            Ok(n)
        }
    }

    #[test]
    fn an_endless_source_is_cut_off_just_past_the_cap() {
        let cap = 1 << 20;
        let mut src = Counting {
            inner: io::repeat(0),
            pulled: 0,
        };
        let res = read_bounded(&mut src, cap, 0);
        assert!(matches!(res, Err(BoundedError::OverCap)), "{res:?}");
        assert!(src.pulled <= cap + SCRATCH, "pulled {}", src.pulled);
    }

    #[test]
    fn the_buffer_never_outgrows_the_cap() {
        let cap = 3 * SCRATCH + 17;
        let out = read_bounded(io::repeat(7).take(cap as u64), cap, 1).expect("fits exactly");
        assert_eq!(out.len(), cap);
        assert!(out.capacity() <= cap, "capacity {}", out.capacity());
        assert!(matches!(
            read_bounded(io::repeat(7).take(cap as u64 + 1), cap, 1),
            Err(BoundedError::OverCap)
        ));
    }

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).expect("write");
        e.finish().expect("finish")
    }

    #[test]
    fn reads_across_part_boundaries_and_stops_at_the_first_member() {
        let a = gz(b"first");
        let b = gz(b"second");
        let mut all = a.clone();
        all.extend_from_slice(&b);
        let parts: Vec<&[u8]> = all.chunks(3).collect();
        assert_eq!(gunzip_first_member(&parts, 100), Ok(b"first".to_vec()));
    }

    #[test]
    fn classifies_failures() {
        assert_eq!(gunzip_first_member(&[], 10), Err(GunzipError::Empty));
        assert_eq!(gunzip_first_member(&[b"{}"], 10), Err(GunzipError::NotGzip));
        assert_eq!(
            gunzip_first_member(&[&[0x1f]], 10),
            Err(GunzipError::Truncated)
        );
        let z = gz(b"hello world");
        assert_eq!(
            gunzip_first_member(&[&z[..z.len() - 6]], 100),
            Err(GunzipError::Truncated)
        );
        assert_eq!(
            gunzip_first_member(&[&z], 5),
            Err(GunzipError::OverCap { cap: 5 })
        );
        let mut bad_crc = z.clone();
        let at = bad_crc.len() - 8;
        bad_crc[at] ^= 0xff;
        assert!(matches!(
            gunzip_first_member(&[&bad_crc], 100),
            Err(GunzipError::Invalid(_))
        ));
    }
}
