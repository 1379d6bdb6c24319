//! Gzip bombs: a tiny payload that inflates far past the cap must fail as `StateCorrupt` without
//! inflating past the cap (the bounded-buffer property itself is unit-tested in `gzip.rs`).

mod common;

use std::time::{Duration, Instant};

use captf_state::{Chunk, Limits, StateError, decode};
use common::{BASE, zeros_bomb};

/// 258 * 812_850 + 1 bytes = 200 MiB of zeros.
const REPEATS_200_MIB: usize = 812_850;

#[test]
fn the_bomb_builder_makes_valid_gzip() {
    // Checks the hand-built stream with a full trailer against flate2, so the big bomb below is
    // a real gzip stream and not just garbage the decoder rejects early.
    use std::io::Read;
    let bomb = zeros_bomb(1000, true);
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&bomb[..])
        .read_to_end(&mut out)
        .expect("valid gzip");
    assert_eq!(out.len(), 1 + 258 * 1000);
    assert!(out.iter().all(|b| *b == 0));
}

#[test]
fn a_200_mib_bomb_is_corrupt_under_the_default_cap() {
    let bomb = zeros_bomb(REPEATS_200_MIB, false);
    assert!(bomb.len() < 2 * 1024 * 1024, "{} bytes", bomb.len());
    let start = Instant::now();
    let err = decode(BASE, &[Chunk::new(BASE, bomb)], Limits::default()).expect_err("bomb");
    assert!(matches!(err, StateError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("67108864 byte cap"), "{err}");
    // Generous bound for an unoptimised test build: it inflates 64 MiB, not 200.
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_bomb_stops_at_a_small_custom_cap() {
    let bomb = zeros_bomb(REPEATS_200_MIB, false);
    let limits = Limits {
        max_chunks: 32,
        max_decompressed_bytes: 256 * 1024,
        ..Limits::DEFAULT
    };
    let start = Instant::now();
    let err = decode(BASE, &[Chunk::new(BASE, bomb)], limits).expect_err("bomb");
    assert!(err.to_string().contains("262144 byte cap"), "{err}");
    // 256 KiB of output takes milliseconds; reading 200 MiB would take far longer.
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}
