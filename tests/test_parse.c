/* test_parse.c: numbers and sizes from text (common/src/core/parse.c) and
 * the backend settings built on them (common/src/core/options.c): what a
 * command line or config may say, and the error that names the option. */

#include <stdlib.h>
#include <string.h>

#include "wt/options.h"
#include "wt/parse.h"
#include "wt/pb.h"
#include "wt_test.h"

static void test_sizes(void) {
  static const struct {
    const char *text;
    uint64_t want;
  } good[] = {
      {"0", 0},
      {"4096", 4096},
      {"1k", 1024},
      {"1K", 1024},
      {"1KiB", 1024},
      {"1kb", 1024},
      {"64M", 64u << 20},
      {"64MiB", 64u << 20},
      {"2g", 2ull << 30},
      {"1Gi", 1ull << 30},
      {"18446744073709551615", UINT64_MAX},
  };
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    uint64_t v = 1;
    CU_ASSERT_TRUE(wt_parse_size(good[i].text, &v));
    CU_ASSERT_EQUAL(v, good[i].want);
  }
  /* A sign, a blank or a wrap-around negative never become a size. */
  static const char *const bad[] = {
      "",
      "-1",
      " -1",
      "+1",
      " 1",
      "1x",
      "1kk",
      "1 k",
      "k",
      "1T",
      "0x10",
      "1e3",
      "1.5M",
      "18446744073709551616",
      "17179869184G", /* 2^34 GiB is 2^64 bytes */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    uint64_t v = 7;
    CU_ASSERT_FALSE(wt_parse_size(bad[i], &v));
    CU_ASSERT_EQUAL(v, 7); /* untouched */
  }
  uint64_t v = 0;
  CU_ASSERT_FALSE(wt_parse_size(NULL, &v));
}

static void test_u64(void) {
  uint64_t v = 0;
  CU_ASSERT_TRUE(wt_parse_u64("0", &v));
  CU_ASSERT_EQUAL(v, 0);
  CU_ASSERT_TRUE(wt_parse_u64("18446744073709551615", &v));
  CU_ASSERT_EQUAL(v, UINT64_MAX);
  static const char *const bad[] = {"",   "-1", " -1", "+1",
                                    " 1", "1k", "1 ",  "18446744073709551616"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    v = 7;
    CU_ASSERT_FALSE(wt_parse_u64(bad[i], &v));
    CU_ASSERT_EQUAL(v, 7);
  }
  CU_ASSERT_FALSE(wt_parse_u64(NULL, &v));
}

/* The helpers every backend's option table uses: a bad value names the
 * option and shows what it got; an unknown key lists the ones known. */
static void test_backend_options(void) {
  uint64_t size = 0;
  uint32_t u32 = 0;
  bool b = false;
  WT_ASSERT_OK(
      wt_option_size(&(wt_backend_option){"bucket_size", "64M"}, &size));
  CU_ASSERT_EQUAL(size, 64u << 20);
  WT_ASSERT_ERR(
      wt_option_size(&(wt_backend_option){"bucket_size", "-1"}, &size),
      WT_INVALID_ARGUMENT, "option bucket_size: '-1' is not a size");
  WT_ASSERT_ERR(
      wt_option_size(&(wt_backend_option){"bucket_size", NULL}, &size),
      WT_INVALID_ARGUMENT, "option bucket_size: '' is not a size");
  WT_ASSERT_OK(
      wt_option_u32(&(wt_backend_option){"num_buffers", "4294967295"}, &u32));
  CU_ASSERT_EQUAL(u32, UINT32_MAX);
  WT_ASSERT_ERR(
      wt_option_u32(&(wt_backend_option){"num_buffers", "4294967296"}, &u32),
      WT_INVALID_ARGUMENT,
      "option num_buffers: '4294967296' is not a number from 0 to "
      "4294967295");
  WT_ASSERT_OK(wt_option_bool(&(wt_backend_option){"packed", "true"}, &b));
  CU_ASSERT_TRUE(b);
  WT_ASSERT_OK(wt_option_bool(&(wt_backend_option){"packed", "0"}, &b));
  CU_ASSERT_FALSE(b);
  WT_ASSERT_ERR(wt_option_bool(&(wt_backend_option){"packed", "yes"}, &b),
                WT_INVALID_ARGUMENT,
                "option packed: 'yes' is not 1, 0, true or false");
  static const char *const known[] = {"a", "b", NULL};
  WT_ASSERT_ERR(wt_option_unknown("ucx", &(wt_backend_option){"c", "1"}, known),
                WT_INVALID_ARGUMENT,
                "backend 'ucx' has no option 'c' (its options: a, b)");
  static const char *const none[] = {NULL};
  WT_ASSERT_ERR(wt_option_unknown("grpc", &(wt_backend_option){"c", "1"}, none),
                WT_INVALID_ARGUMENT, "(its options: none)");
  /* A value longer than a message shows is cut, not copied whole. */
  char *big = malloc(10000);
  CU_ASSERT_FATAL(big != NULL);
  memset(big, 'x', 9999);
  big[9999] = '\0';
  wt_status *st =
      wt_option_size(&(wt_backend_option){"bucket_size", big}, &size);
  CU_ASSERT_PTR_NOT_NULL(st);
  CU_ASSERT(st && strlen(wt_status_message(st)) < 200);
  wt_status_free(st);
  free(big);
  /* Into an init info's wrapper fields. */
  Wt__V1__UInt64Value *slot = NULL;
  WT_ASSERT_OK(
      wt_option_size_field(&(wt_backend_option){"bucket_size", "1K"}, &slot));
  CU_ASSERT_FATAL(slot != NULL);
  CU_ASSERT_EQUAL(slot->value, 1024);
  WT_ASSERT_OK(
      wt_option_size_field(&(wt_backend_option){"bucket_size", "2K"}, &slot));
  CU_ASSERT_EQUAL(slot->value, 2048); /* the same slot, set again */
  free(slot);
}

void wt_test_suite_parse(void);
void wt_test_suite_parse(void) {
  CU_pSuite s = CU_add_suite("parse", NULL, NULL);
  CU_add_test(s, "sizes: units, bounds, signs and blanks", test_sizes);
  CU_add_test(s, "plain numbers", test_u64);
  CU_add_test(s, "backend options: values and unknown keys",
              test_backend_options);
}
