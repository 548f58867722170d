/* backends/grpc/grpc_shared.h: what both halves of the `grpc` backend agree on:
 * its settings and how they are read from an init info. The data message's
 * wire form is wt/chunk.h (the server's PushWeights handler reads it too).
 */
#ifndef WT_BACKENDS_GRPC_H
#define WT_BACKENDS_GRPC_H

#include <stdint.h>

#include "wt/status.h"
#include "wt/v1/wt.pb-c.h"
#include "wt/chunk.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* The `grpc` backend's settings when the init info leaves them unset, and
 * the room a message keeps for a chunk's framing below the receive limit:
 * the same on both sides. */
#define WT_GRPC_DEFAULT_CHUNK_BYTES (1ull << 20)
#define WT_GRPC_DEFAULT_BUFFER_BYTES (64ull << 20)
#define WT_GRPC_CHUNK_FRAMING_BYTES 64u

/* What both halves read of an init info's grpc message. */
typedef struct wt_grpc_init_settings {
  uint64_t chunk_bytes;  /* data bytes per PushWeights message */
  uint64_t buffer_bytes; /* the shared plan's bucket size */
} wt_grpc_init_settings;

/* Fills *out from `init` (no grpc message: the defaults), the chunk bound
 * by a receive limit of `max_message_bytes` (0: none). INVALID_ARGUMENT
 * naming the field for a 0, or a chunk larger than the limit takes. */
wt_status *wt_grpc_init_settings_read(
    const Wt__V1__WeightTransferInitInfo *init, uint64_t max_message_bytes,
    wt_grpc_init_settings *out);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_BACKENDS_GRPC_H */
