/* fuzz_export.c: libFuzzer target for what a consumer can send the export
 * socket (server/src/export.c): the bytes go through the frame reader
 * (wt/frame.h) in pieces of the sizes the input's first byte picks, as
 * recv(2) would hand them over, and every whole frame is unpacked as an
 * ExportRequest. The reader must never hold more than a header and the
 * largest frame, never accept a frame past the limit, and a request that
 * parses must pack back to bytes that parse. */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/frame.h"
#include "wt/v1/export.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FRAME 65536

/* protobuf-c keeps an overlong tag of field number 0 (0x80 0x00) as an
 * unknown field, which pack writes as 0x00 and unpack then refuses (the
 * quirk fuzz_proto.c describes). wt never sends a received request back,
 * so such inputs skip the re-pack check. */
static int has_field_zero(const ProtobufCMessage *m) {
  if (m == NULL) return 0;
  for (unsigned i = 0; i < m->n_unknown_fields; i++)
    if (m->unknown_fields[i].tag == 0) return 1;
  return 0;
}

static int request_has_field_zero(const Wt__V1__ExportRequest *r) {
  return has_field_zero(&r->base) ||
         (r->op_case == WT__V1__EXPORT_REQUEST__OP_ACQUIRE &&
          has_field_zero(&r->acquire->base)) ||
         (r->op_case == WT__V1__EXPORT_REQUEST__OP_RELEASE &&
          has_field_zero(&r->release->base));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  size_t step = 1 + data[0] % 64;
  data++;
  size--;
  wt_frame_reader r;
  wt_frame_reader_init(&r, MAX_FRAME, "fuzz");
  size_t at = 0;
  while (at < size) {
    size_t take = wt_frame_reader_want(&r);
    if (take > step) take = step;
    if (take > size - at) take = size - at;
    wt_status *st = wt_frame_reader_feed(&r, data + at, take);
    at += take;
    if (st != NULL) { /* the server closes the connection here */
      wt_status_free(st);
      break;
    }
    if (r.len > MAX_FRAME + WT_FRAME_HEADER_BYTES) abort();
    const uint8_t *body = NULL;
    size_t len = 0;
    if (!wt_frame_reader_frame(&r, &body, &len)) continue;
    if (len == 0 || len > MAX_FRAME) abort();
    Wt__V1__ExportRequest *req =
        wt__v1__export_request__unpack(NULL, len, body);
    if (req == NULL) continue;
    if (request_has_field_zero(req)) {
      wt__v1__export_request__free_unpacked(req, NULL);
      continue;
    }
    size_t n = wt__v1__export_request__get_packed_size(req);
    uint8_t *out = malloc(n ? n : 1);
    wt__v1__export_request__pack(req, out);
    Wt__V1__ExportRequest *again = wt__v1__export_request__unpack(NULL, n, out);
    if (again == NULL) {
      fprintf(stderr,
              "fuzz_export: a parsed request packed to bytes that "
              "do not parse\n");
      abort();
    }
    wt__v1__export_request__free_unpacked(again, NULL);
    free(out);
    wt__v1__export_request__free_unpacked(req, NULL);
  }
  wt_frame_reader_free(&r);
  return 0;
}
