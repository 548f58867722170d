/* pb.c: protobuf-c messages to and from gRPC byte buffers (see wt/pb.h). */

#include "wt/pb.h"

#include <grpc/byte_buffer_reader.h>
#include <stdlib.h>

wt_status *wt_pb_pack(const ProtobufCMessage *msg, grpc_byte_buffer **out) {
  wt_status *st = NULL;
  *out = NULL;
  if (msg == NULL || msg->descriptor == NULL ||
      msg->descriptor->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC)
    WT_FAIL(WT_INTERNAL, "cannot pack: not a protobuf-c message");
  /* protobuf-c crashes on, say, a NULL element of a repeated string; catch
   * such a message here and name its type instead. */
  if (!protobuf_c_message_check(msg))
    WT_FAIL(WT_INTERNAL, "cannot pack %s: a field is unset or invalid",
            msg->descriptor->name);
  size_t size = protobuf_c_message_get_packed_size(msg);
  grpc_slice slice = size ? grpc_slice_malloc(size) : grpc_empty_slice();
  if (size) {
    size_t written = protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(slice));
    if (written != size) {
      grpc_slice_unref(slice);
      WT_FAIL(WT_INTERNAL, "cannot pack %s: wrote %zu bytes, expected %zu",
              msg->descriptor->name, written, size);
    }
  }
  *out = grpc_raw_byte_buffer_create(&slice, 1); /* takes its own ref */
  grpc_slice_unref(slice);
out:
  return st;
}

wt_status *wt_pb_flatten(grpc_byte_buffer *bb, grpc_slice *out) {
  *out = grpc_empty_slice();
  if (bb == NULL) return NULL;
  if (bb->type == GRPC_BB_RAW &&
      bb->data.raw.compression == GRPC_COMPRESS_NONE &&
      bb->data.raw.slice_buffer.count == 1) {
    *out = grpc_slice_ref(bb->data.raw.slice_buffer.slices[0]);
    return NULL;
  }
  grpc_byte_buffer_reader reader;
  if (!grpc_byte_buffer_reader_init(&reader, bb))
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "cannot read a message: decompression failed");
  *out = grpc_byte_buffer_reader_readall(&reader);
  grpc_byte_buffer_reader_destroy(&reader);
  return NULL;
}

/* protobuf_c_message_unpack returns NULL both for bad bytes and for a failed
 * allocation; this wrapper tells the two apart. */
typedef struct counting_allocator {
  ProtobufCAllocator *inner;
  int failed;
} counting_allocator;

static void *counting_alloc(void *data, size_t size) {
  counting_allocator *c = data;
  void *p =
      c->inner ? c->inner->alloc(c->inner->allocator_data, size) : malloc(size);
  if (p == NULL) c->failed = 1;
  return p;
}

static void counting_free(void *data, void *p) {
  counting_allocator *c = data;
  if (c->inner)
    c->inner->free(c->inner->allocator_data, p);
  else
    free(p);
}

wt_status *wt_pb_unpack_with(grpc_byte_buffer *bb,
                             const ProtobufCMessageDescriptor *desc,
                             ProtobufCAllocator *allocator,
                             ProtobufCMessage **out) {
  wt_status *st = NULL;
  grpc_slice slice = grpc_empty_slice();
  *out = NULL;
  if (desc == NULL || desc->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC)
    WT_FAIL(WT_INTERNAL, "cannot unpack: not a protobuf-c message descriptor");
  st = wt_pb_flatten(bb, &slice);
  if (st != NULL) {
    st = wt_status_prefix(st, "%s", desc->name);
    goto out;
  }
  counting_allocator counter = {allocator, 0};
  ProtobufCAllocator wrapper = {counting_alloc, counting_free, &counter};
  size_t len = GRPC_SLICE_LENGTH(slice);
  const uint8_t *data = len ? GRPC_SLICE_START_PTR(slice) : (const uint8_t *)"";
  *out = protobuf_c_message_unpack(desc, &wrapper, len, data);
  if (*out == NULL) {
    if (counter.failed)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory (%zu bytes)",
              desc->name, len);
    WT_FAIL(WT_INVALID_ARGUMENT, "%s: malformed message (%zu bytes)",
            desc->name, len);
  }
out:
  grpc_slice_unref(slice);
  return st;
}

wt_status *wt_pb_unpack(grpc_byte_buffer *bb,
                        const ProtobufCMessageDescriptor *desc,
                        ProtobufCMessage **out) {
  return wt_pb_unpack_with(bb, desc, NULL, out);
}

void wt_pb_free(ProtobufCMessage *msg) {
  if (msg != NULL) protobuf_c_message_free_unpacked(msg, NULL);
}
