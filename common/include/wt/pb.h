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
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

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
/* What unpacking a message of N bytes may allocate at most: N times the
 * factor plus the slack (each allocation counted with malloc's header).
 * Past it, RESOURCE_EXHAUSTED naming the message, before any more is
 * allocated: empty repeated entries or unknown fields by the thousand cost
 * a caller its request, not the server dozens of times its bytes. */
#define WT_PB_UNPACK_FACTOR 8
#define WT_PB_UNPACK_SLACK (1u << 20)

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

/* A deep copy of `msg` (packed, then unpacked), of its type; the caller
 * owns *out and releases it with wt_pb_free. RESOURCE_EXHAUSTED naming the
 * type when memory runs out. */
wt_status *wt_pb_copy(const ProtobufCMessage *msg, ProtobufCMessage **out);

/* The bytes of `bb` as one slice: a new reference to the buffer's own slice
 * when it holds exactly one uncompressed slice (no copy), else a joined copy.
 * The caller owns *out and releases it with grpc_slice_unref(); a NULL `bb`
 * gives the empty slice. */
wt_status *wt_pb_flatten(grpc_byte_buffer *bb, grpc_slice *out);

/* JSON (common/src/core/pb_json.c), for the language bindings and the
 * control planes that speak dicts: proto3's JSON mapping with the proto's
 * own field names (not lowerCamelCase). Scalars are JSON numbers and
 * booleans (64-bit integers above 2^63 as strings; strings accepted on
 * input), bytes are standard base64, enums their value's name, map<string,
 * string> an object, repeated fields arrays, messages objects; fields at
 * their default are left out.
 *
 * wt_pb_to_json: *out is a malloc'd NUL-terminated compact JSON object (the
 * caller frees it with free()).
 * wt_pb_from_json: a new message of type `desc` from the JSON object `text`;
 * the caller frees *out with wt_pb_free(). An unknown field, a value of the
 * wrong type or range, two members of one oneof, bad base64 or invalid
 * UTF-8 is INVALID_ARGUMENT naming the field's path, starting at `what`
 * (NULL: the message's name): "init_info.ucx.trainer_port: expected an
 * unsigned integer, got a string". Input is at most 64 MiB, 32 deep. */
wt_status *wt_pb_to_json(const ProtobufCMessage *msg, char **out);
/* wt_pb_merge_json: the fields the JSON object `text` names set in `msg`
 * (a message wt built with malloc'd fields, or unpacked), each replacing
 * msg's: scalars, strings, bytes and repeated fields replaced whole; a
 * message field merged when msg holds one (else read anew); a map's keys
 * replaced or added; a oneof member ends the member set before; null
 * clears the field. The fields it does not name stay. Errors as
 * wt_pb_from_json's; after one, msg holds what was merged so far (still a
 * valid message to free). */
wt_status *wt_pb_merge_json(ProtobufCMessage *msg, const char *text,
                            const char *what);
wt_status *wt_pb_from_json(const ProtobufCMessageDescriptor *desc,
                           const char *text, const char *what,
                           ProtobufCMessage **out);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_PB_H */
