// A zstd frame made without an encoder, for the block corpus's zstd pages: included (`include!`)
// by tests/it/block_detection.rs and by src/pacing/blocks/corpus.rs, the detector's unit test, so both
// serve the very same bytes. Not a module of `support`.

/// `data` as a zstd frame of raw (stored) blocks: the format every zstd decoder reads, made
/// without an encoder (none is in the tree).
fn zstd_raw_frame(data: &[u8]) -> Vec<u8> {
    // Magic, a frame header with no content size nor checksum, a 2 MiB window.
    let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58];
    let blocks: Vec<&[u8]> = data.chunks(128 * 1024).collect();
    for (i, block) in blocks.iter().enumerate() {
        let last = u32::from(i + 1 == blocks.len());
        let header = ((block.len() as u32) << 3) | last;
        frame.extend_from_slice(&header.to_le_bytes()[..3]);
        frame.extend_from_slice(block);
    }
    frame
}
