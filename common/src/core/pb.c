/* pb.c: protobuf-c messages to and from gRPC byte buffers (see wt/pb.h). */

#include "wt/pb.h"

#include <grpc/byte_buffer_reader.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/secure.h"

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
  size_t left; /* what the unpacking may still allocate */
  int over;
} counting_allocator;

/* What one allocation costs beyond its size (malloc's own header). */
#define ALLOC_OVERHEAD 16

static void *counting_alloc(void *data, size_t size) {
  counting_allocator *c = data;
  if (size + ALLOC_OVERHEAD > c->left) {
    c->over = 1;
    return NULL;
  }
  c->left -= size + ALLOC_OVERHEAD;
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

/* Appends ".name" or "name[i]" to the field path being built in buf. */
static size_t path_push(char *buf, size_t cap, size_t len, const char *name,
                        long idx) {
  int n = idx < 0 ? snprintf(buf + len, cap - len, "%s%s", len ? "." : "", name)
                  : snprintf(buf + len, cap - len, "%s%s[%ld]", len ? "." : "",
                             name, idx);
  if (n < 0) return len;
  return len + (size_t)n < cap ? len + (size_t)n : cap - 1;
}

static bool check_strings(const ProtobufCMessage *m, char *path, size_t cap,
                          size_t len) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
      continue;
    const char *base = (const char *)m;
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
      uint32_t which = *(const uint32_t *)(base + f->quantifier_offset);
      if (which != f->id) continue;
    }
    size_t count = 1;
    void *const *items;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      count = *(const size_t *)(base + f->quantifier_offset);
      items = *(void *const *const *)(base + f->offset);
    } else {
      items = (void *const *)(base + f->offset);
    }
    for (size_t k = 0; k < count; k++) {
      const void *v = items[k];
      if (v == NULL) continue;
      long idx = f->label == PROTOBUF_C_LABEL_REPEATED ? (long)k : -1;
      if (f->type == PROTOBUF_C_TYPE_STRING) {
        const char *str = v;
        if (!wt_utf8_valid(str, strlen(str), NULL)) {
          path_push(path, cap, len, f->name, idx);
          return false;
        }
      } else {
        size_t l2 = path_push(path, cap, len, f->name, idx);
        if (!check_strings(v, path, cap, l2)) return false;
        path[len] = '\0';
      }
    }
  }
  return true;
}

wt_status *wt_pb_check_utf8(const ProtobufCMessage *msg) {
  char path[256] = "";
  if (msg == NULL || check_strings(msg, path, sizeof(path), 0)) return NULL;
  return wt_status_new(WT_INVALID_ARGUMENT,
                       "%s: field %s is not valid UTF-8 (proto3 strings must "
                       "be)",
                       msg->descriptor->name, path);
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
  size_t len = GRPC_SLICE_LENGTH(slice);
  /* A message may cost at most WT_PB_UNPACK_FACTOR times its bytes (plus
   * a little): thousands of empty strings or unknown fields in a few bytes
   * each would otherwise cost dozens of times their size (trust row 1). */
  size_t cap = len > (SIZE_MAX - WT_PB_UNPACK_SLACK) / WT_PB_UNPACK_FACTOR
                   ? SIZE_MAX
                   : len * WT_PB_UNPACK_FACTOR + WT_PB_UNPACK_SLACK;
  counting_allocator counter = {allocator, 0, cap, 0};
  ProtobufCAllocator wrapper = {counting_alloc, counting_free, &counter};
  const uint8_t *data = len ? GRPC_SLICE_START_PTR(slice) : (const uint8_t *)"";
  *out = protobuf_c_message_unpack(desc, &wrapper, len, data);
  if (*out == NULL) {
    if (counter.over)
      WT_FAIL(WT_RESOURCE_EXHAUSTED,
              "%s: %zu bytes would take more than %d times their size to "
              "unpack (empty entries or unknown fields by the thousand)",
              desc->name, len, WT_PB_UNPACK_FACTOR);
    if (counter.failed)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory (%zu bytes)",
              desc->name, len);
    WT_FAIL(WT_INVALID_ARGUMENT, "%s: malformed message (%zu bytes)",
            desc->name, len);
  }
  if ((st = wt_pb_check_utf8(*out)) != NULL) {
    protobuf_c_message_free_unpacked(*out, allocator);
    *out = NULL;
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

wt_status *wt_pb_copy(const ProtobufCMessage *msg, ProtobufCMessage **out) {
  size_t len = protobuf_c_message_get_packed_size(msg);
  uint8_t *buf = malloc(len ? len : 1);
  *out = NULL;
  if (buf != NULL) {
    protobuf_c_message_pack(msg, buf);
    *out = protobuf_c_message_unpack(msg->descriptor, NULL, len, buf);
    free(buf);
  }
  if (*out == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "%s: out of memory for a copy",
                         msg->descriptor->name);
  return NULL;
}
