//! The pure helpers of the registry: page sizing and prefix ranges (the etcd paths are
//! covered by the integration tests).

use super::*;

#[test]
fn listing_pages_grow_to_a_few_megabytes_of_keys() {
    // Small specs: pages of about 8 MiB, within the cap.
    assert_eq!(next_page_limit(1000, 170_000, 1000), 49_344);
    // Tiny values: capped.
    assert_eq!(next_page_limit(1000, 20_000, 1000), 100_000);
    // Large specs (40 KB): never below the configured size.
    assert_eq!(next_page_limit(1000, 40_000_000, 1000), 1000);
    // Nothing read yet, or an empty page: the configured size.
    assert_eq!(next_page_limit(1000, 0, 0), 1000);
}

#[test]
fn prefix_end_increments_last_byte() {
    assert_eq!(prefix_end(b"/a/"), b"/a0".to_vec());
    assert_eq!(prefix_end(&[b'a', 0xff]), b"b".to_vec());
    assert_eq!(prefix_end(&[0xff]), vec![0]);
}
