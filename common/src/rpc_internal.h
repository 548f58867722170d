/* rpc_internal.h: what the client and server halves of the RPC layer share.
 * Private to common/src/rpc_*.c. */
#ifndef WT_RPC_INTERNAL_H
#define WT_RPC_INTERNAL_H

#include <grpc/grpc.h>
#include <string.h>

#include "wt/rpc.h"

/* Fills args[0] and args[1] with the receive and send message limits (0: the
 * layer's default; -1: unlimited, as gRPC reads it). Returns the number of
 * args written, 2. */
static inline size_t wt_rpc_message_limit_args(grpc_arg *args,
                                               int max_receive, int max_send) {
  memset(args, 0, 2 * sizeof(*args));
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer =
      max_receive == 0 ? WT_RPC_DEFAULT_MAX_RECEIVE_BYTES : max_receive;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer =
      max_send == 0 ? WT_RPC_DEFAULT_MAX_SEND_BYTES : max_send;
  return 2;
}

#endif /* WT_RPC_INTERNAL_H */
