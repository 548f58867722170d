/* test_chunk.c: the `grpc` backend's data message, both ends of it in
 * one codec (common/chunk.c): the framing the trainer writes is what
 * protobuf-c reads, protobuf-c's own encoding is what the server's parser
 * reads, the parser never accepts a message protobuf-c reads otherwise, and
 * the server's view over received slices finds the data in place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>

#include "backends/grpc/grpc_shared.h"
#include "wt/v1/wt.pb-c.h"
#include "wt_test.h"

/* A serialized chunk made with wt_chunk_prefix, in *len bytes; the caller
 * frees it. */
static uint8_t *encode(uint32_t bucket, uint64_t offset, const uint8_t *data,
                       size_t n, size_t *len) {
  size_t prefix = wt_chunk_prefix(bucket, offset, n, NULL);
  CU_ASSERT_FATAL(prefix <= WT_CHUNK_PREFIX_MAX);
  uint8_t *buf = malloc(prefix + n + 1);
  CU_ASSERT_EQUAL(wt_chunk_prefix(bucket, offset, n, buf), prefix);
  memcpy(buf + prefix, data, n);
  *len = prefix + n;
  return buf;
}

static void test_prefix_round_trip(void) {
  static const struct {
    uint32_t bucket;
    uint64_t offset;
    size_t n;
  } cases[] = {{0, 0, 1},
               {0, 0, 1000},
               {1, 0, 5},
               {0, 1, 5},
               {127, 128, 300},
               {128, 16383, 16384},
               {UINT32_MAX, UINT64_MAX, 7},
               {9, 1ull << 40, 65536},
               {0, 0, 0}};
  uint8_t *data = malloc(70000);
  for (size_t i = 0; i < 70000; i++) data[i] = (uint8_t)(i * 31 + 7);
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    size_t len = 0;
    uint8_t *msg =
        encode(cases[c].bucket, cases[c].offset, data, cases[c].n, &len);
    /* protobuf-c reads what the trainer writes ... */
    Wt__V1__PushWeightsChunk *m =
        wt__v1__push_weights_chunk__unpack(NULL, len, msg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(m->payload_case, WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_CHUNK);
    CU_ASSERT_EQUAL(m->chunk->bucket, cases[c].bucket);
    CU_ASSERT_EQUAL(m->chunk->offset, cases[c].offset);
    CU_ASSERT_EQUAL(m->chunk->data.len, cases[c].n);
    CU_ASSERT(cases[c].n == 0 ||
              memcmp(m->chunk->data.data, data, cases[c].n) == 0);
    /* ... and protobuf-c's own encoding is byte for byte the same, so the
     * server's parser reads either (but for empty data, which proto3 leaves
     * out: the server's protobuf-c path refuses that chunk anyway). */
    size_t plen = wt__v1__push_weights_chunk__get_packed_size(m);
    if (cases[c].n == 0) {
      CU_ASSERT(plen < len);
      wt__v1__push_weights_chunk__free_unpacked(m, NULL);
      free(msg);
      continue;
    }
    uint8_t *packed = malloc(plen + 1);
    wt__v1__push_weights_chunk__pack(m, packed);
    CU_ASSERT_EQUAL(plen, len);
    CU_ASSERT_EQUAL(memcmp(packed, msg, len), 0);
    wt__v1__push_weights_chunk__free_unpacked(m, NULL);
    uint32_t b = 1;
    uint64_t o = 1;
    size_t start = 0;
    CU_ASSERT_TRUE(wt_chunk_parse_prefix(packed, plen, plen, &b, &o, &start));
    CU_ASSERT_EQUAL(b, cases[c].bucket);
    CU_ASSERT_EQUAL(o, cases[c].offset);
    CU_ASSERT_EQUAL(start, len - cases[c].n);
    /* Only the framing need be in the first piece. */
    CU_ASSERT_TRUE(wt_chunk_parse_prefix(packed, start, plen, &b, &o, &start));
    if (start > 0)
      CU_ASSERT_FALSE(
          wt_chunk_parse_prefix(packed, start - 1, plen, &b, &o, &start));
    free(packed);
    free(msg);
  }
  free(data);
}

static void test_parser_refuses_other_encodings(void) {
  uint8_t data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  size_t len = 0;
  uint8_t *msg = encode(3, 17, data, 8, &len);
  uint32_t b;
  uint64_t o;
  size_t start;
  /* A message of another length than the framing says. */
  CU_ASSERT_FALSE(wt_chunk_parse_prefix(msg, len, len + 1, &b, &o, &start));
  CU_ASSERT_FALSE(wt_chunk_parse_prefix(msg, len - 1, len - 1, &b, &o, &start));
  /* A header (field 1), or an empty message. */
  uint8_t header[] = {0x0a, 0x00};
  CU_ASSERT_FALSE(wt_chunk_parse_prefix(header, 2, 2, &b, &o, &start));
  CU_ASSERT_FALSE(wt_chunk_parse_prefix(header, 0, 0, &b, &o, &start));
  /* Data before the offset, an unknown field, a varint that never ends. */
  uint8_t odd[] = {0x12, 0x05, 0x1a, 0x01, 0xaa, 0x10, 0x01};
  CU_ASSERT_FALSE(
      wt_chunk_parse_prefix(odd, sizeof(odd), sizeof(odd), &b, &o, &start));
  uint8_t unknown[] = {0x12, 0x05, 0x20, 0x07, 0x1a, 0x01, 0xaa};
  CU_ASSERT_FALSE(wt_chunk_parse_prefix(unknown, sizeof(unknown),
                                        sizeof(unknown), &b, &o, &start));
  uint8_t endless[] = {0x12, 0x0c, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff,
                       0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1a, 0x00};
  CU_ASSERT_FALSE(wt_chunk_parse_prefix(endless, sizeof(endless),
                                        sizeof(endless), &b, &o, &start));
  /* The last one wins for a field given twice, as in protobuf-c. */
  uint8_t twice[] = {0x12, 0x07, 0x08, 0x01, 0x08, 0x02, 0x1a, 0x01, 0xaa};
  CU_ASSERT_TRUE(wt_chunk_parse_prefix(twice, sizeof(twice), sizeof(twice), &b,
                                       &o, &start));
  CU_ASSERT_EQUAL(b, 2);
  Wt__V1__PushWeightsChunk *m =
      wt__v1__push_weights_chunk__unpack(NULL, sizeof(twice), twice);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  CU_ASSERT_EQUAL(m->chunk->bucket, 2);
  wt__v1__push_weights_chunk__free_unpacked(m, NULL);
  free(msg);
}

/* Random mutations of valid chunks: whenever the parser accepts one,
 * protobuf-c reads the same bucket, offset and data from it. */
static void test_parser_agrees_with_protobuf_c(void) {
  uint64_t x = 0x9e3779b97f4a7c15ull;
  unsigned accepted = 0, agreed = 0;
  uint8_t data[64];
  for (size_t i = 0; i < sizeof(data); i++) data[i] = (uint8_t)i;
  for (int round = 0; round < 20000; round++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    size_t len = 0;
    uint8_t *msg = encode((uint32_t)(x % 300), x % 5000, data,
                          (size_t)(x >> 20) % sizeof(data), &len);
    /* Flip up to three bytes. */
    for (int k = 0; k < (int)(x >> 40) % 4; k++)
      msg[(x >> (8 * k)) % len] ^= (uint8_t)(x >> (3 + k));
    uint32_t b = 0;
    uint64_t o = 0;
    size_t start = 0;
    if (wt_chunk_parse_prefix(msg, len, len, &b, &o, &start)) {
      accepted++;
      Wt__V1__PushWeightsChunk *m =
          wt__v1__push_weights_chunk__unpack(NULL, len, msg);
      bool same =
          m != NULL &&
          m->payload_case == WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_CHUNK &&
          m->chunk->bucket == b && m->chunk->offset == o &&
          m->chunk->data.len == len - start &&
          (len == start ||
           memcmp(m->chunk->data.data, msg + start, len - start) == 0);
      agreed += same;
      if (m) wt__v1__push_weights_chunk__free_unpacked(m, NULL);
    }
    free(msg);
  }
  printf(
      "\n  %u of 20000 mutated chunks parsed, %u as protobuf-c reads "
      "them\n",
      accepted, agreed);
  CU_ASSERT(accepted > 1000);
  CU_ASSERT_EQUAL(accepted, agreed);
}

/* The server's view over a message received in several slices: the data
 * pieces point into the slices, in order, nothing copied. */
static void test_view_over_slices(void) {
  uint8_t data[3000];
  for (size_t i = 0; i < sizeof(data); i++) data[i] = (uint8_t)(i % 251);
  size_t len = 0;
  uint8_t *msg = encode(4, 8192, data, sizeof(data), &len);
  size_t cut1 = 16, cut2 = 1500; /* the framing is 11 bytes */
  grpc_slice s[3] = {
      grpc_slice_from_copied_buffer((const char *)msg, cut1),
      grpc_slice_from_copied_buffer((const char *)msg + cut1, cut2 - cut1),
      grpc_slice_from_copied_buffer((const char *)msg + cut2, len - cut2)};
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(s, 3);
  wt_chunk_view v;
  CU_ASSERT_TRUE_FATAL(wt_chunk_view_of(bb, &v));
  CU_ASSERT_EQUAL(v.bucket, 4);
  CU_ASSERT_EQUAL(v.offset, 8192);
  size_t total = 0;
  for (size_t i = 0; i < v.iovcnt; i++) {
    CU_ASSERT_EQUAL(memcmp(v.iov[i].iov_base, data + total, v.iov[i].iov_len),
                    0);
    total += v.iov[i].iov_len;
  }
  CU_ASSERT_EQUAL(total, sizeof(data));
  CU_ASSERT_EQUAL(v.iovcnt, 3);
  grpc_byte_buffer_destroy(bb);
  /* Framing split across slices: not viewed (protobuf-c's path takes it). */
  grpc_slice t[2] = {
      grpc_slice_from_copied_buffer((const char *)msg, 3),
      grpc_slice_from_copied_buffer((const char *)msg + 3, len - 3)};
  bb = grpc_raw_byte_buffer_create(t, 2);
  CU_ASSERT_FALSE(wt_chunk_view_of(bb, &v));
  grpc_byte_buffer_destroy(bb);
  for (int i = 0; i < 3; i++) grpc_slice_unref(s[i]);
  for (int i = 0; i < 2; i++) grpc_slice_unref(t[i]);
  free(msg);
}

void wt_test_suite_chunk(void);
void wt_test_suite_chunk(void) {
  CU_pSuite s = CU_add_suite("chunk", NULL, NULL);
  CU_add_test(s, "chunk framing round trip with protobuf-c",
              test_prefix_round_trip);
  CU_add_test(s, "the parser refuses other encodings",
              test_parser_refuses_other_encodings);
  CU_add_test(s, "the parser agrees with protobuf-c on mutated chunks",
              test_parser_agrees_with_protobuf_c);
  CU_add_test(s, "a view over received slices", test_view_over_slices);
}
