/* fuzz_proto.c: libFuzzer target for protobuf unpacking of the wt.v1 wire.
 *
 * Every input is parsed as every request and response message of the
 * WeightTransfer service (taken from the service descriptor, so a new call
 * is covered without touching this file), both directly with protobuf-c and
 * through wt_pb_unpack from a gRPC byte buffer, as the RPC layer does. It
 * checks that the two agree (wt_pb_unpack also refuses strings that are not
 * UTF-8), and that a parsed message re-serialises to
 * bytes that parse back to the same bytes. It also feeds every input to the
 * grpc backend's own chunk parser (wt/chunk.h): whatever it accepts,
 * protobuf-c must read as the same bucket, offset and data, whole or split
 * into received slices. And it reads every input as a shard plan
 * (docs/multirank.md), a stranger's init: the server's check must end
 * without a crash; a plan it accepts has boxes whose runs stay inside their
 * tensors; and whatever the trainer's builder accepts as layouts makes a
 * plan the check accepts. */

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/grpc/grpc_shared.h"
#include "wt/pb.h"
#include "wt/adapter_spec.h"
#include "wt/shard_plan.h"
#include "wt/v1/wt.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const ProtobufCMessageDescriptor *d, const char *why) {
  fprintf(stderr, "fuzz_proto: %s: %s\n", d->name, why);
  abort();
}

/* protobuf-c 1.4.1 rejects field number 0 only when its tag is one byte;
 * an overlong tag (0x80 0x00) is kept as an unknown field, which pack then
 * writes as 0x00 and unpack refuses. Harmless to wt, which never re-sends a
 * received message's unknown fields, so such inputs skip the re-pack check
 * rather than report protobuf-c's quirk. */
static int has_field_zero(const ProtobufCMessage *m) {
  for (unsigned i = 0; i < m->n_unknown_fields; i++)
    if (m->unknown_fields[i].tag == 0) return 1;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  const char *base = (const char *)m;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    if (f->type != PROTOBUF_C_TYPE_MESSAGE) continue;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(const size_t *)(base + f->quantifier_offset);
      ProtobufCMessage *const *sub =
          *(ProtobufCMessage *const *const *)(base + f->offset);
      for (size_t k = 0; k < n; k++)
        if (has_field_zero(sub[k])) return 1;
      continue;
    }
    if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
        *(const uint32_t *)(base + f->quantifier_offset) != f->id)
      continue;
    const ProtobufCMessage *sub =
        *(const ProtobufCMessage *const *)(base + f->offset);
    if (sub != NULL && has_field_zero(sub)) return 1;
  }
  return 0;
}

/* Packs `m` into a new buffer; *len gets its size. */
static uint8_t *pack(const ProtobufCMessage *m, size_t *len) {
  *len = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(*len ? *len : 1);
  if (buf == NULL) abort();
  if (protobuf_c_message_pack(m, buf) != *len)
    fail(m->descriptor, "pack wrote a size other than get_packed_size");
  return buf;
}

/* The gRPC byte buffer the RPC layer would hand over: the input in one
 * slice, or split in two when `split` (as a message received in two
 * transport frames). */
static grpc_byte_buffer *byte_buffer(const uint8_t *data, size_t size,
                                     int split) {
  size_t cut = split ? size / 2 : size;
  grpc_slice s[2] = {
      grpc_slice_from_copied_buffer((const char *)data, cut),
      grpc_slice_from_copied_buffer((const char *)data + cut, size - cut)};
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(s, split ? 2 : 1);
  grpc_slice_unref(s[0]);
  grpc_slice_unref(s[1]);
  return bb;
}

static void one(const ProtobufCMessageDescriptor *d, const uint8_t *data,
                size_t size) {
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, size, data);

  grpc_byte_buffer *bb = byte_buffer(data, size, (size & 1) != 0);
  ProtobufCMessage *via_pb = NULL;
  wt_status *st = wt_pb_unpack(bb, d, &via_pb);
  grpc_byte_buffer_destroy(bb);
  /* wt_pb_unpack takes what protobuf-c takes, less strings that are not
   * UTF-8 (which proto3 forbids). */
  wt_status *u8 = m != NULL ? wt_pb_check_utf8(m) : NULL;
  bool want = m != NULL && u8 == NULL;
  wt_status_free(u8);
  if ((st == NULL) != want)
    fail(d, st ? wt_status_message(st)
               : "wt_pb_unpack accepted what protobuf-c rejects or what is "
                 "not UTF-8");
  if (st != NULL && wt_status_code(st) != WT_INVALID_ARGUMENT)
    fail(d, wt_status_message(st));
  wt_status_free(st);

  if (m == NULL) return;
  if (!protobuf_c_message_check(m)) fail(d, "unpacked message fails check");
  if (has_field_zero(m)) {
    protobuf_c_message_free_unpacked(m, NULL);
    wt_pb_free(via_pb);
    return;
  }
  size_t len1 = 0, len2 = 0;
  uint8_t *b1 = pack(m, &len1);
  ProtobufCMessage *again = protobuf_c_message_unpack(d, NULL, len1, b1);
  if (again == NULL) fail(d, "re-packed bytes do not unpack");
  uint8_t *b2 = pack(again, &len2);
  if (len1 != len2 || memcmp(b1, b2, len1) != 0)
    fail(d, "pack(unpack(pack(m))) != pack(m)");
  if (via_pb != NULL) {
    size_t len3 = 0;
    uint8_t *b3 = pack(via_pb, &len3);
    if (len3 != len1 || memcmp(b3, b1, len1) != 0)
      fail(d, "wt_pb_unpack and protobuf-c parsed different messages");
    free(b3);
  }
  free(b1);
  free(b2);
  protobuf_c_message_free_unpacked(again, NULL);
  protobuf_c_message_free_unpacked(m, NULL);
  wt_pb_free(via_pb);
}

static void chunk(const uint8_t *data, size_t size) {
  const ProtobufCMessageDescriptor *d = &wt__v1__push_weights_chunk__descriptor;
  uint32_t bucket = 0;
  uint64_t offset = 0;
  size_t start = 0;
  if (!wt_chunk_parse_prefix(data, size, size, &bucket, &offset, &start))
    return;
  Wt__V1__PushWeightsChunk *m =
      wt__v1__push_weights_chunk__unpack(NULL, size, data);
  if (m == NULL) fail(d, "the chunk parser accepted what protobuf-c rejects");
  if (m->payload_case != WT__V1__PUSH_WEIGHTS_CHUNK__PAYLOAD_CHUNK ||
      m->chunk->bucket != bucket || m->chunk->offset != offset ||
      m->chunk->data.len != size - start ||
      (size > start &&
       memcmp(m->chunk->data.data, data + start, size - start) != 0))
    fail(d, "the chunk parser and protobuf-c read different chunks");
  wt__v1__push_weights_chunk__free_unpacked(m, NULL);
  /* The server's view over a message in two slices finds the same bytes. */
  grpc_byte_buffer *bb = byte_buffer(data, size, 1);
  wt_chunk_view v;
  if (wt_chunk_view_of(bb, &v)) {
    size_t pos = start;
    for (size_t i = 0; i < v.iovcnt; i++) {
      if (pos + v.iov[i].iov_len > size ||
          memcmp(v.iov[i].iov_base, data + pos, v.iov[i].iov_len) != 0)
        fail(d, "the chunk view points at other bytes");
      pos += v.iov[i].iov_len;
    }
    if (pos != size || v.bucket != bucket || v.offset != offset)
      fail(d, "the chunk view differs from the parser");
  }
  grpc_byte_buffer_destroy(bb);
}

typedef struct run_bound {
  const ProtobufCMessageDescriptor *d;
  uint64_t tensor_bytes;
} run_bound;

static wt_status *in_tensor(uint64_t dst, uint64_t src, uint64_t n,
                            void *user) {
  const run_bound *b = user;
  (void)src;
  if (dst > b->tensor_bytes || n > b->tensor_bytes - dst)
    fail(b->d, "a box's run lies outside its tensor");
  return NULL;
}

static void plan(const uint8_t *data, size_t size) {
  const ProtobufCMessageDescriptor *d = &wt__v1__shard_plan__descriptor;
  Wt__V1__ShardPlan *m = wt__v1__shard_plan__unpack(NULL, size, data);
  if (m == NULL) return;
  wt_status *st = wt_shard_plan_check(m);
  if (st == NULL) {
    for (size_t r = 0; r < m->n_ranks; r++)
      for (size_t k = 0; k < m->ranks[r]->n_boxes; k++) {
        const Wt__V1__TensorBox *tb = m->ranks[r]->boxes[k];
        wt_box b = {(uint32_t)tb->n_shape, tb->shape, tb->offsets, tb->sizes,
                    1};
        run_bound rb = {d, 1};
        for (size_t i = 0; i < tb->n_shape; i++)
          rb.tensor_bytes *= (uint64_t)tb->shape[i];
        uint64_t bytes = wt_box_bytes(&b);
        if (bytes <= (1u << 16)) /* every run, for a small box */
          wt_status_free(wt_box_runs(&b, 0, bytes, in_tensor, &rb));
      }
  }
  wt_status_free(st);
  Wt__V1__ShardPlan *built = NULL;
  st = wt_shard_plan_build(m, &built);
  if (st == NULL) {
    wt_status *again = wt_shard_plan_check(built);
    if (again != NULL) fail(d, wt_status_message(again));
    wt_shard_plan_free(built);
  }
  wt_status_free(st);
  wt__v1__shard_plan__free_unpacked(m, NULL);
}

/* The input as an adapter spec (a stranger's init, docs/lora.md): the
 * server's check must not crash; a spec it accepts has the layout it says
 * (every tensor a matrix of its rank), equals itself, and completing it
 * again changes nothing the check sees. */
static void adapter(const uint8_t *data, size_t size) {
  const ProtobufCMessageDescriptor *d = &wt__v1__adapter_spec__descriptor;
  Wt__V1__AdapterSpec *m = wt__v1__adapter_spec__unpack(NULL, size, data);
  if (m == NULL) return;
  wt_tensor_meta *metas = NULL;
  size_t n = 0;
  wt_status *st = wt_adapter_spec_check(m, &metas, &n);
  if (st == NULL) {
    if (n != m->n_tensors || n == 0) fail(d, "accepted with another count");
    for (size_t i = 0; i < n; i++)
      if (metas[i].ndim != 2 || (metas[i].shape[0] != (int64_t)m->rank &&
                                 metas[i].shape[1] != (int64_t)m->rank))
        fail(d, "accepted a tensor not of the spec's rank");
    wt_status *same = wt_adapter_spec_same(m, m);
    if (same != NULL) fail(d, wt_status_message(same));
    wt_status *again = wt_adapter_spec_complete(m, NULL, 0);
    if (again != NULL) fail(d, wt_status_message(again));
  }
  wt_status_free(st);
  wt_tensor_meta_array_free(metas, n);
  wt__v1__adapter_spec__free_unpacked(m, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const ProtobufCServiceDescriptor *svc = &wt__v1__weight_transfer__descriptor;
  chunk(data, size);
  plan(data, size);
  adapter(data, size);
  for (unsigned i = 0; i < svc->n_methods; i++) {
    one(svc->methods[i].input, data, size);
    one(svc->methods[i].output, data, size);
  }
  return 0;
}
