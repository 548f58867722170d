/* wt/pb.h: protobuf-c messages to and from gRPC byte buffers.
 *
 * The RPC layer moves opaque byte buffers; these two functions are the only
 * place where a message becomes bytes and back.
 *
 * Copies, so that a reader of the PushWeights path knows what a 1 MiB chunk
 * costs:
 *   - wt_pb_pack serialises straight into one freshly allocated slice: one
 *     copy of every `bytes` field (protobuf-c has no scatter output).
 *   - wt_pb_unpack parses in place when the buffer is one uncompressed slice;
 *     otherwise (the usual case for a message received in several transport
 *     frames) the slices are first joined into one, which is one copy. Then
 *     protobuf-c copies every `bytes` field into the message (a second copy).
 *   A caller that wants to avoid the second copy uses wt_pb_flatten() and
 *   parses the bytes itself.
 */
#ifndef WT_PB_H
#define WT_PB_H

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>
#include <protobuf-c/protobuf-c.h>

#include "wt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Serialises `msg` into a new byte buffer of one slice. The caller owns *out
 * and releases it with grpc_byte_buffer_destroy(). Needs grpc_init() to have
 * been called (a channel or server being alive is enough). */
wt_status *wt_pb_pack(const ProtobufCMessage *msg, grpc_byte_buffer **out);

/* Parses `bb` as a message of type `desc`. A NULL or empty buffer yields the
 * default message. Bytes that do not parse give INVALID_ARGUMENT naming the
 * type ("wt.v1.ServerInfo: malformed message (12 bytes)"), never a crash;
 * a string field that is not UTF-8 is INVALID_ARGUMENT naming the field.
 * `bb` stays the caller's; the caller owns *out and releases it with
 * wt_pb_free(). */
wt_status *wt_pb_unpack(grpc_byte_buffer *bb,
                        const ProtobufCMessageDescriptor *desc,
                        ProtobufCMessage **out);

/* As wt_pb_unpack, with `allocator` (NULL: the default) for the message, so
 * that tests can fail an allocation; release with
 * protobuf_c_message_free_unpacked(*out, allocator). An allocation failure
 * gives RESOURCE_EXHAUSTED. */
wt_status *wt_pb_unpack_with(grpc_byte_buffer *bb,
                             const ProtobufCMessageDescriptor *desc,
                             ProtobufCAllocator *allocator,
                             ProtobufCMessage **out);

/* INVALID_ARGUMENT naming the first string field of `msg` (nested
 * messages, repeated fields and map entries included) that is not valid
 * UTF-8, e.g. "wt.v1.FinishWeightUpdateRequest: field weight_version is not
 * valid UTF-8"; NULL when all are. wt_pb_unpack checks every message it
 * parses with it, so no string a stranger sent reaches a handler, a log or
 * a reply unchecked. */
wt_status *wt_pb_check_utf8(const ProtobufCMessage *msg);

/* Releases a message from wt_pb_unpack (or any protobuf-c unpack with the
 * default allocator). NULL is ignored. */
void wt_pb_free(ProtobufCMessage *msg);

/* The bytes of `bb` as one slice: a new reference to the buffer's own slice
 * when it holds exactly one uncompressed slice (no copy), else a joined copy.
 * The caller owns *out and releases it with grpc_slice_unref(); a NULL `bb`
 * gives the empty slice. */
wt_status *wt_pb_flatten(grpc_byte_buffer *bb, grpc_slice *out);

#ifdef __cplusplus
}
#endif

#endif /* WT_PB_H */
