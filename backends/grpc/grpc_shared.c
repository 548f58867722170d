/* grpc_shared.c: what both halves of the `grpc` backend read of an init info
 * (see grpc_shared.h). */

#include "backends/grpc/grpc_shared.h"

#include <inttypes.h>

wt_status *wt_grpc_init_settings_read(
    const Wt__V1__WeightTransferInitInfo *init, uint64_t max_message_bytes,
    wt_grpc_init_settings *out) {
  *out = (wt_grpc_init_settings){.chunk_bytes = WT_GRPC_DEFAULT_CHUNK_BYTES,
                                 .buffer_bytes = WT_GRPC_DEFAULT_BUFFER_BYTES};
  const Wt__V1__GrpcInitInfo *g =
      init != NULL && init->backend_init_case ==
                          WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_GRPC
          ? init->grpc
          : NULL;
  if (g != NULL && g->chunk_size_bytes != NULL) {
    if (g->chunk_size_bytes->value == 0)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "init_info.grpc.chunk_size_bytes is 0; it must be "
                           "at least 1");
    out->chunk_bytes = g->chunk_size_bytes->value;
  }
  uint64_t max_chunk = max_message_bytes > WT_GRPC_CHUNK_FRAMING_BYTES
                           ? max_message_bytes - WT_GRPC_CHUNK_FRAMING_BYTES
                           : 0;
  if (max_chunk != 0 && out->chunk_bytes > max_chunk)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "init_info.grpc.chunk_size_bytes %" PRIu64
                         " exceeds what the server accepts in one message "
                         "(%" PRIu64 " bytes of data)",
                         out->chunk_bytes, max_chunk);
  if (g != NULL && g->packed_buffer_size_bytes != NULL) {
    if (g->packed_buffer_size_bytes->value == 0)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "init_info.grpc.packed_buffer_size_bytes is 0; it "
                           "must be at least 1");
    out->buffer_bytes = g->packed_buffer_size_bytes->value;
  }
  return NULL;
}
