/* test_checksum.c: SHA-256 and XXH3-64 digests, one-shot and streaming. */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "wt/checksum.h"
#include "wt/log.h"
#include "wt_test.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* FIPS 180-2 / NIST CSRC example vectors for SHA-256. */
#define SHA256_EMPTY \
  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SHA256_ABC \
  "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define SHA256_448BIT \
  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
#define SHA256_MILLION_A \
  "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"

static char *hex_of(wt_hash_alg alg, const void *data, size_t len,
                    char hex[WT_DIGEST_HEX_MAX]) {
  memset(hex, 'x', WT_DIGEST_HEX_MAX);
  wt_status *st = wt_digest_hex(alg, data, len, hex);
  CU_ASSERT_PTR_NULL(st);
  if (st != NULL) {
    fprintf(stderr, "\n  wt_digest_hex: %s\n", wt_status_message(st));
    wt_status_free(st);
    hex[0] = '\0';
  }
  return hex;
}

/* Feeds data to a fresh hasher in pieces of `piece` bytes. */
static char *streamed_hex(wt_hash_alg alg, const unsigned char *data,
                          size_t len, size_t piece,
                          char hex[WT_DIGEST_HEX_MAX]) {
  wt_hasher *h = NULL;
  wt_status *st = wt_hasher_new(alg, &h);
  CU_ASSERT_PTR_NULL_FATAL(st);
  for (size_t off = 0; off < len; off += piece)
    wt_hasher_update(h, data + off, len - off < piece ? len - off : piece);
  wt_hasher_final_hex(h, hex);
  wt_hasher_free(h);
  return hex;
}

/* The canonical (big-endian) hex of a 64-bit hash, spelled by printf. */
static char *u64_hex(uint64_t v, char hex[WT_DIGEST_HEX_MAX]) {
  snprintf(hex, WT_DIGEST_HEX_MAX, "%016" PRIx64, v);
  return hex;
}

static unsigned char *pattern(size_t len) {
  unsigned char *p = malloc(len ? len : 1);
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < len; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (unsigned char)x;
  }
  return p;
}

static void test_alg_names(void) {
  CU_ASSERT_STRING_EQUAL(wt_hash_alg_name(WT_HASH_SHA256), "sha256");
  CU_ASSERT_STRING_EQUAL(wt_hash_alg_name(WT_HASH_XXH3_64), "xxh3_64");
  CU_ASSERT_PTR_NULL(wt_hash_alg_name((wt_hash_alg)2));
  CU_ASSERT_PTR_NULL(wt_hash_alg_name((wt_hash_alg)-1));
  static const struct {
    const char *name;
    wt_hash_alg alg;
  } ok[] = {
      {"sha256", WT_HASH_SHA256},   {"SHA256", WT_HASH_SHA256},
      {"xxh3", WT_HASH_XXH3_64},    {"xxh3_64", WT_HASH_XXH3_64},
      {"XXH3_64", WT_HASH_XXH3_64}, {"Xxh3", WT_HASH_XXH3_64},
  };
  for (size_t i = 0; i < NELEM(ok); i++) {
    wt_hash_alg alg = (wt_hash_alg)99;
    WT_ASSERT_OK(wt_hash_alg_parse(ok[i].name, &alg));
    CU_ASSERT_EQUAL(alg, ok[i].alg);
  }
  wt_hash_alg alg = WT_HASH_SHA256;
  WT_ASSERT_ERR(wt_hash_alg_parse("md5", &alg), WT_INVALID_ARGUMENT,
                "unknown checksum algorithm 'md5'");
  WT_ASSERT_ERR(wt_hash_alg_parse("sha-256", &alg), WT_INVALID_ARGUMENT,
                "'sha-256'");
  WT_ASSERT_ERR(wt_hash_alg_parse("", &alg), WT_INVALID_ARGUMENT, "''");
  WT_ASSERT_ERR(wt_hash_alg_parse(NULL, &alg), WT_INVALID_ARGUMENT, "NULL");
  CU_ASSERT_EQUAL(alg, WT_HASH_SHA256);
}

static void test_sha256_nist(void) {
  char hex[WT_DIGEST_HEX_MAX];
  CU_ASSERT_STRING_EQUAL(hex_of(WT_HASH_SHA256, "", 0, hex), SHA256_EMPTY);
  CU_ASSERT_STRING_EQUAL(hex_of(WT_HASH_SHA256, NULL, 0, hex), SHA256_EMPTY);
  CU_ASSERT_STRING_EQUAL(hex_of(WT_HASH_SHA256, "abc", 3, hex), SHA256_ABC);
  const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CU_ASSERT_STRING_EQUAL(hex_of(WT_HASH_SHA256, m448, strlen(m448), hex),
                         SHA256_448BIT);
  CU_ASSERT_EQUAL(strlen(hex), 64);

  CU_ASSERT_STRING_EQUAL(
      streamed_hex(WT_HASH_SHA256, (const unsigned char *)"abc", 3, 1, hex),
      SHA256_ABC);
  CU_ASSERT_STRING_EQUAL(
      streamed_hex(WT_HASH_SHA256, (const unsigned char *)"", 0, 1, hex),
      SHA256_EMPTY);

  size_t n = 1000000;
  unsigned char *a = malloc(n);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  memset(a, 'a', n);
  CU_ASSERT_STRING_EQUAL(hex_of(WT_HASH_SHA256, a, n, hex), SHA256_MILLION_A);
  CU_ASSERT_STRING_EQUAL(streamed_hex(WT_HASH_SHA256, a, n, 1000, hex),
                         SHA256_MILLION_A);
  CU_ASSERT_STRING_EQUAL(streamed_hex(WT_HASH_SHA256, a, n, 999983, hex),
                         SHA256_MILLION_A);
  free(a);
}

static void test_xxh3_known(void) {
  char hex[WT_DIGEST_HEX_MAX];
  /* Upstream xxHash's anchors (xsum_sanity_check.c: empty input; "a"). */
  CU_ASSERT_STRING_EQUAL(hex_of(WT_HASH_XXH3_64, "", 0, hex),
                         "2d06800538d394c2");
  CU_ASSERT_STRING_EQUAL(hex_of(WT_HASH_XXH3_64, NULL, 0, hex),
                         "2d06800538d394c2");
  CU_ASSERT_STRING_EQUAL(hex_of(WT_HASH_XXH3_64, "a", 1, hex),
                         "e6c632b61e964e1f");
  CU_ASSERT_EQUAL(strlen(hex), 16);

  /* LLVM's xxhashTest vectors over a xorshift64 buffer (x = 1; x ^= x << 13;
   * x ^= x >> 7; x ^= x << 17; byte = x), one per code path of XXH3 (0-16,
   * 17-128, 129-240, long input). */
  enum { SIZE = 2243 };
  unsigned char buf[SIZE];
  uint64_t x = 1;
  for (size_t i = 0; i < SIZE; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    buf[i] = (unsigned char)x;
  }
  static const struct {
    size_t len;
    const char *hex;
  } llvm[] = {
      {3, "6ea2d59aca5c3778"},   {9, "8bc89400bfed51f6"},
      {17, "ed4be912ba5f836d"},  {129, "bc7138129bf065da"},
      {403, "cefeb3ffa532ad8c"},
  };
  for (size_t i = 0; i < NELEM(llvm); i++) {
    CU_ASSERT_STRING_EQUAL(hex_of(WT_HASH_XXH3_64, buf, llvm[i].len, hex),
                           llvm[i].hex);
    CU_ASSERT_STRING_EQUAL(
        streamed_hex(WT_HASH_XXH3_64, buf, llvm[i].len, 5, hex), llvm[i].hex);
  }
}

static void test_xxh3_matches_library(void) {
  static const size_t lens[] = {0,   1,   3,   16,   17,   128,
                                129, 240, 241, 1024, 4096, 100003};
  unsigned char *p = pattern(100003);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  for (size_t i = 0; i < NELEM(lens); i++) {
    uint64_t v = XXH3_64bits(p, lens[i]);
    char want[WT_DIGEST_HEX_MAX], hex[WT_DIGEST_HEX_MAX];
    u64_hex(v, want);
    CU_ASSERT_STRING_EQUAL(hex_of(WT_HASH_XXH3_64, p, lens[i], hex), want);
    /* The same as the bytes of xxHash's canonical (big-endian) form. */
    XXH64_canonical_t c;
    XXH64_canonicalFromHash(&c, v);
    char canon[WT_DIGEST_HEX_MAX];
    for (size_t b = 0; b < sizeof(c.digest); b++)
      snprintf(canon + 2 * b, 3, "%02x", c.digest[b]);
    CU_ASSERT_STRING_EQUAL(hex, canon);
  }
  free(p);
}

/* Streaming in pieces of any size gives the one-shot digest, both algs. */
static void test_streaming_equals_one_shot(void) {
  size_t n = 70001; /* not a multiple of any block size */
  unsigned char *p = pattern(n);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  static const size_t pieces[] = {1, 7, 63, 64, 65, 4096, 70000, 1 << 20};
  static const wt_hash_alg algs[] = {WT_HASH_SHA256, WT_HASH_XXH3_64};
  for (size_t a = 0; a < NELEM(algs); a++) {
    char want[WT_DIGEST_HEX_MAX], hex[WT_DIGEST_HEX_MAX];
    hex_of(algs[a], p, n, want);
    CU_ASSERT_EQUAL(strlen(want), algs[a] == WT_HASH_SHA256 ? 64 : 16);
    for (size_t i = 0; i < NELEM(pieces); i++)
      CU_ASSERT_STRING_EQUAL(streamed_hex(algs[a], p, n, pieces[i], hex), want);
  }
  free(p);
}

static void test_hasher_lifecycle(void) {
  static const wt_hash_alg algs[] = {WT_HASH_SHA256, WT_HASH_XXH3_64};
  for (size_t a = 0; a < NELEM(algs); a++) {
    char abc[WT_DIGEST_HEX_MAX], xyz[WT_DIGEST_HEX_MAX];
    char hex[WT_DIGEST_HEX_MAX], again[WT_DIGEST_HEX_MAX];
    hex_of(algs[a], "abc", 3, abc);
    hex_of(algs[a], "xyz", 3, xyz);
    wt_hasher *h = NULL;
    WT_ASSERT_OK(wt_hasher_new(algs[a], &h));
    wt_hasher_update(h, "ab", 2);
    wt_hasher_update(h, NULL, 0); /* empty updates change nothing */
    wt_hasher_update(h, "c", 1);
    wt_hasher_final_hex(h, hex);
    CU_ASSERT_STRING_EQUAL(hex, abc);
    /* Final again gives the same digest. */
    wt_hasher_final_hex(h, again);
    CU_ASSERT_STRING_EQUAL(again, abc);
    /* Updating a finished hasher breaks the contract; it is refused (with an
     * error in the log) rather than yielding a digest of nothing useful. */
    wt_log_level saved = wt_log_get_level();
    wt_log_set_level(WT_LOG_OFF);
    wt_hasher_update(h, "zzz", 3);
    wt_log_set_level(saved);
    wt_hasher_final_hex(h, again);
    CU_ASSERT_STRING_EQUAL(again, abc);
    /* Reset starts over, from nothing. */
    wt_hasher_reset(h);
    wt_hasher_update(h, "xyz", 3);
    wt_hasher_final_hex(h, hex);
    CU_ASSERT_STRING_EQUAL(hex, xyz);
    wt_hasher_reset(h);
    wt_hasher_final_hex(h, hex);
    CU_ASSERT_STRING_EQUAL(hex, hex_of(algs[a], "", 0, again));
    wt_hasher_free(h);
  }
  wt_hasher_free(NULL);
  wt_hasher_reset(NULL);
  wt_hasher_update(NULL, "a", 1);
}

static void test_errors(void) {
  wt_hasher *h = (wt_hasher *)&h; /* must be reset to NULL */
  WT_ASSERT_ERR(wt_hasher_new((wt_hash_alg)7, &h), WT_INVALID_ARGUMENT,
                "checksum algorithm 7");
  CU_ASSERT_PTR_NULL(h);
  char hex[WT_DIGEST_HEX_MAX];
  WT_ASSERT_ERR(wt_digest_hex((wt_hash_alg)-1, "a", 1, hex),
                WT_INVALID_ARGUMENT, "checksum algorithm -1");
  WT_ASSERT_ERR(wt_digest_hex(WT_HASH_SHA256, NULL, 4, hex),
                WT_INVALID_ARGUMENT, "4 bytes");
}

void wt_test_suite_checksum(void) {
  CU_pSuite s = CU_add_suite("checksum", NULL, NULL);
  CU_add_test(s, "algorithm names", test_alg_names);
  CU_add_test(s, "SHA-256 NIST vectors", test_sha256_nist);
  CU_add_test(s, "XXH3-64 known vectors", test_xxh3_known);
  CU_add_test(s, "XXH3-64 equals XXH3_64bits, big-endian hex",
              test_xxh3_matches_library);
  CU_add_test(s, "streaming in pieces equals one-shot",
              test_streaming_equals_one_shot);
  CU_add_test(s, "final twice, update after final, reset",
              test_hasher_lifecycle);
  CU_add_test(s, "bad algorithm and NULL buffer", test_errors);
}
