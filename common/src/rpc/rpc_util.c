/* rpc_util.c: the small helpers every file of the RPC layer uses
 * (gRPC deadlines, kind names, status details; see
 * rpc_internal.h). */

#include <string.h>
#include <time.h>

#include "rpc_internal.h"

gpr_timespec rpc_deadline_after_ms(int64_t ms) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_millis(ms, GPR_TIMESPAN));
}

const char *rpc_kind_name(wt_rpc_kind kind) {
  switch (kind) {
    case WT_RPC_UNARY:
      return "unary";
    case WT_RPC_CLIENT_STREAM:
      return "client stream";
    case WT_RPC_SERVER_STREAM:
      return "server stream";
    case WT_RPC_WATCH:
      return "watch stream";
    case WT_RPC_BIDI_STREAM:
      return "bidirectional stream";
  }
  return "unknown kind";
}

/* Status messages may quote what a client sent (a name, a version); gRPC
 * carries the message in a header block of a few KiB and answers a larger
 * one with an unrelated RESOURCE_EXHAUSTED. Longer messages keep their
 * start (the call, the parameter) and end (what was wrong) around "...". */
#define MAX_STATUS_BYTES 1024

/* Moves `i` back to the start of the UTF-8 sequence it points into. */
static size_t utf8_start(const char *s, size_t i) {
  while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
  return i;
}

grpc_slice rpc_status_details(const char *msg) {
  size_t len = strlen(msg);
  if (len <= MAX_STATUS_BYTES) return grpc_slice_from_copied_string(msg);
  static const char cut[] = " ... ";
  size_t half = (MAX_STATUS_BYTES - (sizeof(cut) - 1)) / 2;
  size_t head = utf8_start(msg, half);
  size_t tail = utf8_start(msg, len - half);
  if (tail < head) tail = head;
  grpc_slice out = grpc_slice_malloc(head + (sizeof(cut) - 1) + (len - tail));
  char *p = (char *)GRPC_SLICE_START_PTR(out);
  memcpy(p, msg, head);
  memcpy(p + head, cut, sizeof(cut) - 1);
  memcpy(p + head + sizeof(cut) - 1, msg + tail, len - tail);
  return out;
}
