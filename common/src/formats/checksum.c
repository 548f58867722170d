/* checksum.c: SHA-256 (OpenSSL) and XXH3-64 (libxxhash) digests (see
 * wt/checksum.h). */

#include "wt/checksum.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

#include "wt/log.h"

#define SHA256_BYTES 32

static const char *const alg_names[] = {
    [WT_HASH_SHA256] = "sha256",
    [WT_HASH_XXH3_64] = "xxh3_64",
};
#define NALGS ((int)(sizeof(alg_names) / sizeof(alg_names[0])))

/* Spellings wt_hash_alg_parse() accepts besides the canonical names. */
static const struct {
  const char *name;
  wt_hash_alg alg;
} alg_aliases[] = {
    {"xxh3", WT_HASH_XXH3_64},
};
#define NALIASES (sizeof(alg_aliases) / sizeof(alg_aliases[0]))

struct wt_hasher {
  wt_hash_alg alg;
  EVP_MD_CTX *sha;  /* WT_HASH_SHA256 */
  XXH3_state_t *xx; /* WT_HASH_XXH3_64 */
  int finalized;    /* final_hex() ran; `hex` holds its answer */
  char hex[WT_DIGEST_HEX_MAX];
};

const char *wt_hash_alg_name(wt_hash_alg alg) {
  if ((int)alg < 0 || (int)alg >= NALGS) return NULL;
  return alg_names[alg];
}

wt_status *wt_hash_alg_parse(const char *name, wt_hash_alg *out) {
  if (name == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "checksum algorithm name is missing (NULL)");
  for (int i = 0; i < NALGS; i++) {
    if (strcasecmp(name, alg_names[i]) == 0) {
      *out = (wt_hash_alg)i;
      return NULL;
    }
  }
  for (size_t i = 0; i < NALIASES; i++) {
    if (strcasecmp(name, alg_aliases[i].name) == 0) {
      *out = alg_aliases[i].alg;
      return NULL;
    }
  }
  return wt_status_new(WT_INVALID_ARGUMENT,
                       "unknown checksum algorithm '%s' (expected sha256 or "
                       "xxh3_64)",
                       name);
}

static void to_hex(const unsigned char *bytes, size_t n, char *hex) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    hex[2 * i] = digits[bytes[i] >> 4];
    hex[2 * i + 1] = digits[bytes[i] & 0xf];
  }
  hex[2 * n] = '\0';
}

static void xxh3_hex(XXH64_hash_t h, char *hex) {
  XXH64_canonical_t c;
  XXH64_canonicalFromHash(&c, h);
  to_hex(c.digest, sizeof(c.digest), hex);
}

/* OpenSSL keeps its reasons on a per-thread queue; take the newest. */
static wt_status *openssl_error(const char *what) {
  unsigned long e = ERR_get_error();
  char reason[256] = "no OpenSSL error recorded";
  if (e != 0) ERR_error_string_n(e, reason, sizeof(reason));
  ERR_clear_error();
  return wt_status_new(WT_INTERNAL, "sha256: %s failed: %s", what, reason);
}

/* For the void functions, which can only say it in the log. */
static void log_status(wt_status *st) {
  WT_LOGE("checksum", "%s", wt_status_message(st));
  wt_status_free(st);
}

static wt_status *hasher_start(wt_hasher *h) {
  h->finalized = 0;
  h->hex[0] = '\0';
  if (h->alg == WT_HASH_SHA256) {
    if (EVP_DigestInit_ex(h->sha, EVP_sha256(), NULL) != 1)
      return openssl_error("EVP_DigestInit_ex");
  } else if (XXH3_64bits_reset(h->xx) != XXH_OK) {
    return wt_status_new(WT_INTERNAL, "xxh3_64: XXH3_64bits_reset failed");
  }
  return NULL;
}

wt_status *wt_hasher_new(wt_hash_alg alg, wt_hasher **out) {
  wt_status *st = NULL;
  wt_hasher *h = NULL;
  *out = NULL;
  if (wt_hash_alg_name(alg) == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "checksum algorithm %d is not one of sha256 (0), xxh3_64 (1)",
            (int)alg);
  h = calloc(1, sizeof(*h));
  if (h == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for a hasher");
  h->alg = alg;
  if (alg == WT_HASH_SHA256) {
    h->sha = EVP_MD_CTX_new();
    if (h->sha == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "EVP_MD_CTX_new failed");
  } else {
    h->xx = XXH3_createState();
    if (h->xx == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "XXH3_createState failed");
  }
  WT_CHECK(hasher_start(h));
  *out = h;
  h = NULL;
out:
  wt_hasher_free(h);
  return st;
}

void wt_hasher_update(wt_hasher *h, const void *data, size_t len) {
  if (h == NULL || len == 0) return;
  if (h->finalized) {
    /* The contract forbids it; a silent wrong digest would be worse than a
     * loud one that stays equal to what final_hex() returned. */
    WT_LOGE("checksum",
            "%s: update after final ignored; call "
            "wt_hasher_reset() first",
            alg_names[h->alg]);
    return;
  }
  if (h->alg == WT_HASH_SHA256) {
    if (EVP_DigestUpdate(h->sha, data, len) != 1)
      log_status(openssl_error("EVP_DigestUpdate"));
  } else {
    XXH3_64bits_update(h->xx, data, len);
  }
}

void wt_hasher_final_hex(wt_hasher *h, char hex[WT_DIGEST_HEX_MAX]) {
  if (h == NULL) {
    hex[0] = '\0';
    return;
  }
  if (!h->finalized) {
    if (h->alg == WT_HASH_SHA256) {
      unsigned char md[EVP_MAX_MD_SIZE];
      unsigned int mdlen = 0;
      if (EVP_DigestFinal_ex(h->sha, md, &mdlen) == 1 &&
          mdlen == SHA256_BYTES) {
        to_hex(md, mdlen, h->hex);
      } else {
        log_status(openssl_error("EVP_DigestFinal_ex"));
        h->hex[0] = '\0';
      }
    } else {
      xxh3_hex(XXH3_64bits_digest(h->xx), h->hex);
    }
    h->finalized = 1;
  }
  memcpy(hex, h->hex, WT_DIGEST_HEX_MAX);
}

void wt_hasher_reset(wt_hasher *h) {
  if (h == NULL) return;
  wt_status *st = hasher_start(h);
  if (st != NULL) log_status(st);
}

void wt_hasher_free(wt_hasher *h) {
  if (h == NULL) return;
  EVP_MD_CTX_free(h->sha);
  if (h->xx != NULL) XXH3_freeState(h->xx);
  free(h);
}

wt_status *wt_digest_hex(wt_hash_alg alg, const void *data, size_t len,
                         char hex[WT_DIGEST_HEX_MAX]) {
  if (len > 0 && data == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "checksum of %zu bytes given a NULL buffer", len);
  switch (alg) {
    case WT_HASH_SHA256: {
      unsigned char md[EVP_MAX_MD_SIZE];
      unsigned int mdlen = 0;
      if (EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) != 1 ||
          mdlen != SHA256_BYTES)
        return openssl_error("EVP_Digest");
      to_hex(md, mdlen, hex);
      return NULL;
    }
    case WT_HASH_XXH3_64:
      xxh3_hex(XXH3_64bits(data, len), hex);
      return NULL;
  }
  return wt_status_new(WT_INVALID_ARGUMENT,
                       "checksum algorithm %d is not one of sha256 (0), "
                       "xxh3_64 (1)",
                       (int)alg);
}
