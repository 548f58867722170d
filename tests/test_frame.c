/* test_frame.c: length-prefixed frames (wt/frame.h), fed whole, byte by
 * byte and back to back, and the headers a stranger would send: a length
 * of 0, of 4 GiB, one past the limit. */

#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "wt/frame.h"
#include "wt_test.h"

/* Feeds `n` bytes in pieces of at most `step` (as wanted); counts frames,
 * checking each is "frame-K" for K = 0, 1, ... */
static wt_status *feed_all(wt_frame_reader *r, const uint8_t *data, size_t n,
                           size_t step, int *frames) {
  size_t at = 0;
  while (at < n) {
    size_t want = wt_frame_reader_want(r);
    size_t take = want < step ? want : step;
    if (take > n - at) take = n - at;
    wt_status *st = wt_frame_reader_feed(r, data + at, take);
    if (st != NULL) return st;
    at += take;
    const uint8_t *body = NULL;
    size_t len = 0;
    if (wt_frame_reader_frame(r, &body, &len)) {
      char want_body[32];
      snprintf(want_body, sizeof(want_body), "frame-%d", *frames);
      CU_ASSERT_EQUAL(len, strlen(want_body));
      CU_ASSERT(len == strlen(want_body) && memcmp(body, want_body, len) == 0);
      (*frames)++;
    }
  }
  return NULL;
}

static size_t put_frame(uint8_t *out, const char *body) {
  wt_frame_header((uint32_t)strlen(body), out);
  memcpy(out + WT_FRAME_HEADER_BYTES, body, strlen(body));
  return WT_FRAME_HEADER_BYTES + strlen(body);
}

static void test_frames_in_pieces(void) {
  uint8_t stream[256];
  size_t n = 0;
  char body[32];
  for (int k = 0; k < 5; k++) {
    snprintf(body, sizeof(body), "frame-%d", k);
    n += put_frame(stream + n, body);
  }
  const size_t steps[] = {1, 3, 4, 1000};
  for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
    wt_frame_reader r;
    wt_frame_reader_init(&r, 64, "test");
    int frames = 0;
    WT_ASSERT_OK(feed_all(&r, stream, n, steps[s], &frames));
    CU_ASSERT_EQUAL(frames, 5);
    wt_frame_reader_free(&r);
  }
}

static void test_strangers_headers(void) {
  /* 0 bytes, 4 GiB - 1, one past the limit: refused at the header, before
   * anything is allocated for the body. */
  const uint32_t lens[] = {0, 0xffffffffu, 65};
  for (size_t i = 0; i < 3; i++) {
    wt_frame_reader r;
    wt_frame_reader_init(&r, 64, "consumer pid 7");
    uint8_t h[WT_FRAME_HEADER_BYTES];
    wt_frame_header(lens[i], h);
    WT_ASSERT_ERR(wt_frame_reader_feed(&r, h, sizeof(h)), WT_INVALID_ARGUMENT,
                  "consumer pid 7: a frame of");
    wt_frame_reader_free(&r);
  }
  /* The limit itself is fine; more than asked for is the caller's bug. */
  wt_frame_reader r;
  wt_frame_reader_init(&r, 64, NULL);
  uint8_t h[WT_FRAME_HEADER_BYTES];
  wt_frame_header(64, h);
  WT_ASSERT_OK(wt_frame_reader_feed(&r, h, sizeof(h)));
  CU_ASSERT_EQUAL(wt_frame_reader_want(&r), 64);
  uint8_t big[65] = {0};
  WT_ASSERT_ERR(wt_frame_reader_feed(&r, big, 65), WT_INVALID_ARGUMENT,
                "65 bytes fed, 64 wanted");
  WT_ASSERT_OK(wt_frame_reader_feed(&r, big, 64));
  const uint8_t *body = NULL;
  size_t len = 0;
  CU_ASSERT(wt_frame_reader_frame(&r, &body, &len) && len == 64);
  /* A frame cut short is simply not a frame yet. */
  wt_frame_header(10, h);
  WT_ASSERT_OK(wt_frame_reader_feed(&r, h, sizeof(h)));
  WT_ASSERT_OK(wt_frame_reader_feed(&r, big, 3));
  CU_ASSERT_FALSE(wt_frame_reader_frame(&r, &body, &len));
  CU_ASSERT_EQUAL(wt_frame_reader_want(&r), 7);
  wt_frame_reader_free(&r);
}

/* Random bytes: every header is checked, nothing crashes or grows past
 * the limit. */
static void test_garbage(void) {
  srand(20);
  for (int trial = 0; trial < 200; trial++) {
    wt_frame_reader r;
    wt_frame_reader_init(&r, 1024, "garbage");
    uint8_t junk[4096];
    for (size_t i = 0; i < sizeof(junk); i++) junk[i] = (uint8_t)rand();
    size_t at = 0;
    wt_status *st = NULL;
    while (at < sizeof(junk) && st == NULL) {
      size_t take = wt_frame_reader_want(&r);
      if (take > sizeof(junk) - at) take = sizeof(junk) - at;
      st = wt_frame_reader_feed(&r, junk + at, take);
      at += take;
      CU_ASSERT(r.len <= 1024 + WT_FRAME_HEADER_BYTES);
    }
    wt_status_free(st);
    wt_frame_reader_free(&r);
  }
}

void wt_test_suite_frame(void) {
  CU_pSuite s = CU_add_suite("frame", NULL, NULL);
  CU_add_test(s, "frames in pieces", test_frames_in_pieces);
  CU_add_test(s, "strangers' headers", test_strangers_headers);
  CU_add_test(s, "garbage", test_garbage);
}
