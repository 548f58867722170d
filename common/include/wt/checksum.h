/* wt/checksum.h: digests of tensor bytes.
 *
 * SHA-256 (OpenSSL libcrypto) matches vLLM's weight checker; XXH3-64
 * (libxxhash) is the fast, non-cryptographic hash for transfer verification.
 * Digests are reported as lowercase hex: 64 characters for SHA-256, 16 for
 * XXH3-64 (the 64-bit value big-endian, as XXH64_canonicalFromHash writes it).
 */
#ifndef WT_CHECKSUM_H
#define WT_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

typedef enum wt_hash_alg {
  WT_HASH_SHA256 = 0, /* same numbers as wt.v1.ChecksumAlgorithm */
  WT_HASH_XXH3_64 = 1,
} wt_hash_alg;

/* Longest hex digest plus NUL. */
#define WT_DIGEST_HEX_MAX 65

/* "sha256", "xxh3_64". Static; NULL outside the enum. */
const char *wt_hash_alg_name(wt_hash_alg alg);
/* Parses "sha256" / "xxh3" / "xxh3_64" (any case). Unknown: INVALID_ARGUMENT.
 */
wt_status *wt_hash_alg_parse(const char *name, wt_hash_alg *out);

/* Streaming hasher: new, update any number of times, then final. */
typedef struct wt_hasher wt_hasher;

/* The caller owns *out and releases it with wt_hasher_free(). */
wt_status *wt_hasher_new(wt_hash_alg alg, wt_hasher **out);
void wt_hasher_update(wt_hasher *h, const void *data, size_t len);
/* Writes the hex digest into hex (WT_DIGEST_HEX_MAX bytes). The hasher may
 * not be updated afterwards; wt_hasher_reset() starts it over. */
void wt_hasher_final_hex(wt_hasher *h, char hex[WT_DIGEST_HEX_MAX]);
void wt_hasher_reset(wt_hasher *h);
void wt_hasher_free(wt_hasher *h);

/* One-shot digest of data[0..len) as hex. */
wt_status *wt_digest_hex(wt_hash_alg alg, const void *data, size_t len,
                         char hex[WT_DIGEST_HEX_MAX]);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_CHECKSUM_H */
