// Reading GGUF weight bytes from uint-typed storage buffers. Blocks of most formats are not a
// multiple of four bytes long, so a field may straddle two words.

// Byte `i` of the uint array `buf`.
#define GK_BYTE(buf, i) ((buf[(i) >> 2u] >> (((i) & 3u) * 8u)) & 0xFFu)
// The little-endian 16-bit value at byte offset `i` (any alignment).
#define GK_U16(buf, i) (GK_BYTE(buf, i) | (GK_BYTE(buf, (i) + 1u) << 8u))
// The f16 value at byte offset `i`, widened.
#define GK_F16(buf, i) gk_unpack_half2(GK_U16(buf, i)).x
