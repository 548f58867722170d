/* reflection.c: gRPC server reflection (grpc.reflection.v1 and v1alpha,
 * the same messages in two packages), so that grpcurl and other stock
 * clients list and describe wt-server's services without the proto files.
 *
 * What it serves is the descriptor set protoc-c wrote at build time
 * (proto/CMakeLists.txt: every file with a service of this server and what
 * they import), embedded as wt_descriptor_set. It is indexed once, on the
 * first request: each file's name, dependencies and the symbols it
 * declares (messages, nested ones, enums, services, methods). A request
 * names a file or a symbol; the answer is that file and every file it
 * depends on, as serialized FileDescriptorProtos. The data is the build's
 * own, never a client's; the index still checks every length it reads.
 *
 * The stream is a client's like any other call: it needs a token of the
 * reader scope, runs in its own admission class (a few at once, two per
 * peer), and one silent for REFLECTION_IDLE_MS is ended. */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/reflection/v1/reflection.pb-c.h"
#include "server_state.h"
#include "wt/log.h"
#include "wt/pb.h"
#include "wt_descriptors.h" /* libwt_proto's, generated */

#define REFLECTION_IDLE_MS 10000

/* ---- the index ----------------------------------------------------------- */

typedef struct refl_span {
  const uint8_t *p;
  size_t n;
} refl_span;

typedef struct refl_file {
  refl_span bytes; /* the serialized FileDescriptorProto */
  char *name;
  char **deps;
  size_t ndeps;
} refl_file;

typedef struct refl_symbol {
  char *name; /* fully qualified, no leading dot */
  size_t file;
  bool service;
} refl_symbol;

typedef struct refl_index {
  refl_file *files;
  size_t nfiles;
  refl_symbol *syms;
  size_t nsyms, capsyms;
  bool ok;
} refl_index;

static refl_index g_index;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* One field of a message's wire form: its number, wire type and, for
 * length-delimited ones, the bytes. */
typedef struct refl_field {
  uint32_t number;
  int wire;
  refl_span value;
} refl_field;

static bool varint(refl_span *s, uint64_t *out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (s->n == 0) return false;
    uint8_t b = *s->p++;
    s->n--;
    v |= (uint64_t)(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      *out = v;
      return true;
    }
  }
  return false;
}

/* The next field of `s`; false at the end or on malformed bytes (*bad). */
static bool next_field(refl_span *s, refl_field *f, bool *bad) {
  if (s->n == 0) return false;
  uint64_t tag = 0, len = 0;
  if (!varint(s, &tag)) goto bad;
  f->number = (uint32_t)(tag >> 3);
  f->wire = (int)(tag & 7);
  f->value = (refl_span){NULL, 0};
  switch (f->wire) {
    case 0:
      if (!varint(s, &len)) goto bad;
      return true;
    case 1:
    case 5: {
      size_t k = f->wire == 1 ? 8 : 4;
      if (s->n < k) goto bad;
      s->p += k;
      s->n -= k;
      return true;
    }
    case 2:
      if (!varint(s, &len) || len > s->n) goto bad;
      f->value = (refl_span){s->p, (size_t)len};
      s->p += len;
      s->n -= (size_t)len;
      return true;
    default:
      goto bad;
  }
bad:
  *bad = true;
  return false;
}

static char *span_str(refl_span v) {
  char *s = malloc(v.n + 1);
  if (s) {
    memcpy(s, v.p, v.n);
    s[v.n] = '\0';
  }
  return s;
}

static char *join(const char *scope, refl_span name) {
  size_t a = strlen(scope);
  char *s = malloc(a + 1 + name.n + 1);
  if (s == NULL) return NULL;
  memcpy(s, scope, a);
  size_t k = a;
  if (a) s[k++] = '.';
  memcpy(s + k, name.p, name.n);
  s[k + name.n] = '\0';
  return s;
}

static bool add_symbol(refl_index *ix, char *name, size_t file, bool service) {
  if (name == NULL) return false;
  if (ix->nsyms == ix->capsyms) {
    size_t cap = ix->capsyms ? ix->capsyms * 2 : 64;
    refl_symbol *m = realloc(ix->syms, cap * sizeof(*m));
    if (m == NULL) {
      free(name);
      return false;
    }
    ix->syms = m;
    ix->capsyms = cap;
  }
  ix->syms[ix->nsyms++] = (refl_symbol){name, file, service};
  return true;
}

/* The `name` (field 1) of a descriptor message. */
static refl_span name_of(refl_span msg, bool *bad) {
  refl_field f;
  while (next_field(&msg, &f, bad))
    if (f.number == 1 && f.wire == 2) return f.value;
  return (refl_span){NULL, 0};
}

/* A DescriptorProto (message) in `scope`: it, its nested messages (3) and
 * enums (4). */
static bool index_message(refl_index *ix, size_t file, const char *scope,
                          refl_span msg, int depth, bool *bad) {
  if (depth > 32) return false;
  char *full = join(scope, name_of(msg, bad));
  if (full == NULL || !add_symbol(ix, full, file, false)) return false;
  refl_field f;
  while (next_field(&msg, &f, bad)) {
    if (f.wire != 2) continue;
    if (f.number == 3 &&
        !index_message(ix, file, full, f.value, depth + 1, bad))
      return false;
    if (f.number == 4 &&
        !add_symbol(ix, join(full, name_of(f.value, bad)), file, false))
      return false;
  }
  return !*bad;
}

static bool index_file(refl_index *ix, size_t k) {
  refl_file *file = &ix->files[k];
  bool bad = false;
  refl_field f;
  refl_span s = file->bytes;
  char *package = NULL;
  /* The package (2) first: symbols are named in it. */
  while (next_field(&s, &f, &bad))
    if (f.number == 2 && f.wire == 2) {
      free(package);
      package = span_str(f.value);
    }
  if (package == NULL) package = strdup("");
  if (package == NULL || bad) goto fail;
  s = file->bytes;
  while (next_field(&s, &f, &bad)) {
    if (f.wire != 2) continue;
    if (f.number == 1) {
      free(file->name);
      file->name = span_str(f.value);
    } else if (f.number == 3) {
      char **d = realloc(file->deps, (file->ndeps + 1) * sizeof(*d));
      if (d == NULL) goto fail;
      file->deps = d;
      if ((d[file->ndeps] = span_str(f.value)) == NULL) goto fail;
      file->ndeps++;
    } else if (f.number == 4) {
      if (!index_message(ix, k, package, f.value, 0, &bad)) goto fail;
    } else if (f.number == 5) {
      if (!add_symbol(ix, join(package, name_of(f.value, &bad)), k, false))
        goto fail;
    } else if (f.number == 6) { /* a service and its methods (2) */
      char *svc = join(package, name_of(f.value, &bad));
      if (svc == NULL || !add_symbol(ix, svc, k, true)) goto fail;
      refl_span m = f.value;
      refl_field g;
      while (next_field(&m, &g, &bad))
        if (g.number == 2 && g.wire == 2 &&
            !add_symbol(ix, join(svc, name_of(g.value, &bad)), k, false))
          goto fail;
    }
  }
  free(package);
  return !bad && file->name != NULL;
fail:
  free(package);
  return false;
}

static void build_index(void) {
  refl_index *ix = &g_index;
  refl_span set = {wt_descriptor_set, wt_descriptor_set_len};
  refl_field f;
  bool bad = false;
  size_t n = 0;
  for (refl_span s = set; next_field(&s, &f, &bad);) n += f.number == 1;
  if (bad || n == 0 || (ix->files = calloc(n, sizeof(*ix->files))) == NULL)
    goto fail;
  for (refl_span s = set; next_field(&s, &f, &bad);)
    if (f.number == 1 && f.wire == 2) ix->files[ix->nfiles++].bytes = f.value;
  for (size_t k = 0; k < ix->nfiles; k++)
    if (!index_file(ix, k)) goto fail;
  ix->ok = true;
  return;
fail:
  WT_LOGE("reflection",
          "the embedded descriptor set does not parse; "
          "reflection answers UNAVAILABLE");
}

static const refl_index *the_index(void) {
  pthread_once(&g_once, build_index);
  return g_index.ok ? &g_index : NULL;
}

static long file_named(const refl_index *ix, const char *name) {
  for (size_t k = 0; k < ix->nfiles; k++)
    if (strcmp(ix->files[k].name, name) == 0) return (long)k;
  return -1;
}

static long file_of_symbol(const refl_index *ix, const char *name) {
  if (*name == '.') name++;
  for (size_t i = 0; i < ix->nsyms; i++)
    if (strcmp(ix->syms[i].name, name) == 0) return (long)ix->syms[i].file;
  return -1;
}

/* File k and, before it, everything it depends on, each once, into
 * out[] (ix->nfiles entries). */
static void closure(const refl_index *ix, size_t k, bool *seen,
                    ProtobufCBinaryData *out, size_t *n, int depth) {
  if (seen[k] || depth > 64) return;
  seen[k] = true;
  for (size_t d = 0; d < ix->files[k].ndeps; d++) {
    long j = file_named(ix, ix->files[k].deps[d]);
    if (j >= 0) closure(ix, (size_t)j, seen, out, n, depth + 1);
  }
  out[(*n)++] = (ProtobufCBinaryData){ix->files[k].bytes.n,
                                      (uint8_t *)ix->files[k].bytes.p};
}

/* ---- the stream ------------------------------------------------------------
 */

/* Answers one request into *resp (its parts in the caller's storage). */
static wt_status *answer(const refl_index *ix,
                         Grpc__Reflection__V1__ServerReflectionRequest *req,
                         Grpc__Reflection__V1__ServerReflectionResponse *resp,
                         Grpc__Reflection__V1__FileDescriptorResponse *fd,
                         Grpc__Reflection__V1__ListServiceResponse *ls,
                         Grpc__Reflection__V1__ExtensionNumberResponse *en,
                         Grpc__Reflection__V1__ErrorResponse *er, char *why,
                         size_t whylen) {
  resp->valid_host = req->host;
  resp->original_request = req;
  long k = -1;
  const char *what = NULL;
  switch (req->message_request_case) {
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES: {
      size_t n = 0;
      for (size_t i = 0; i < ix->nsyms; i++) n += ix->syms[i].service;
      ls->service = calloc(n ? n : 1, sizeof(*ls->service));
      Grpc__Reflection__V1__ServiceResponse *items =
          calloc(n ? n : 1, sizeof(*items));
      if (ls->service == NULL || items == NULL) {
        free(items);
        return wt_status_new(WT_RESOURCE_EXHAUSTED,
                             "reflection: out of memory");
      }
      if (n == 0) { /* a build without services: an empty list */
        free(items);
        free(ls->service);
        ls->service = NULL;
      }
      for (size_t i = 0, j = 0; n > 0 && i < ix->nsyms; i++)
        if (ix->syms[i].service) {
          grpc__reflection__v1__service_response__init(&items[j]);
          items[j].name = ix->syms[i].name;
          ls->service[j] = &items[j];
          j++;
        }
      ls->n_service = n;
      resp->message_response_case =
          GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
      resp->list_services_response = ls;
      return NULL;
    }
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
      k = file_named(ix, req->file_by_filename);
      what = "file";
      snprintf(why, whylen, "file '%.200s' not found", req->file_by_filename);
      break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
      k = file_of_symbol(ix, req->file_containing_symbol);
      what = "symbol";
      snprintf(why, whylen, "symbol '%.200s' not found",
               req->file_containing_symbol);
      break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE:
      if (file_of_symbol(ix, req->all_extension_numbers_of_type) >= 0) {
        /* wt's protos declare no extensions */
        en->base_type_name = req->all_extension_numbers_of_type;
        resp->message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE;
        resp->all_extension_numbers_response = en;
        return NULL;
      }
      snprintf(why, whylen, "type '%.200s' not found",
               req->all_extension_numbers_of_type);
      break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION:
      snprintf(why, whylen, "no extension %d of '%.200s' (wt declares none)",
               req->file_containing_extension
                   ? req->file_containing_extension->extension_number
                   : 0,
               req->file_containing_extension
                   ? req->file_containing_extension->containing_type
                   : "");
      break;
    default:
      er->error_code = WT_INVALID_ARGUMENT;
      er->error_message = "the request names nothing to look up";
      resp->message_response_case =
          GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
      resp->error_response = er;
      return NULL;
  }
  if (what != NULL && k >= 0) {
    bool *seen = calloc(ix->nfiles, sizeof(*seen));
    fd->file_descriptor_proto = calloc(ix->nfiles, sizeof(ProtobufCBinaryData));
    if (seen == NULL || fd->file_descriptor_proto == NULL) {
      free(seen);
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "reflection: out of memory");
    }
    closure(ix, (size_t)k, seen, fd->file_descriptor_proto,
            &fd->n_file_descriptor_proto, 0);
    free(seen);
    resp->message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
    resp->file_descriptor_response = fd;
    return NULL;
  }
  er->error_code = WT_NOT_FOUND;
  er->error_message = why;
  resp->message_response_case =
      GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
  resp->error_response = er;
  return NULL;
}

wt_status *wt_srv_reflection(wt_rpc_call *call, const ProtobufCMessage *request,
                             void *user) {
  (void)request;
  (void)user;
  const refl_index *ix = the_index();
  if (ix == NULL)
    return wt_status_new(WT_UNAVAILABLE,
                         "reflection: this build's descriptors do not parse");
  for (;;) {
    grpc_byte_buffer *bb = NULL;
    wt_status *st = wt_rpc_call_read_raw_within(
        call, REFLECTION_IDLE_MS, "the next reflection request", &bb);
    if (st != NULL) return st;
    if (bb == NULL) return NULL; /* the client is done */
    ProtobufCMessage *m = NULL;
    st = wt_pb_unpack(
        bb, &grpc__reflection__v1__server_reflection_request__descriptor, &m);
    grpc_byte_buffer_destroy(bb);
    if (st != NULL) return wt_status_prefix(st, "reflection request");
    Grpc__Reflection__V1__ServerReflectionRequest *req = (void *)m;
    Grpc__Reflection__V1__ServerReflectionResponse resp =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__INIT;
    Grpc__Reflection__V1__FileDescriptorResponse fd =
        GRPC__REFLECTION__V1__FILE_DESCRIPTOR_RESPONSE__INIT;
    Grpc__Reflection__V1__ListServiceResponse ls =
        GRPC__REFLECTION__V1__LIST_SERVICE_RESPONSE__INIT;
    Grpc__Reflection__V1__ExtensionNumberResponse en =
        GRPC__REFLECTION__V1__EXTENSION_NUMBER_RESPONSE__INIT;
    Grpc__Reflection__V1__ErrorResponse er =
        GRPC__REFLECTION__V1__ERROR_RESPONSE__INIT;
    char why[512];
    st = answer(ix, req, &resp, &fd, &ls, &en, &er, why, sizeof(why));
    if (st == NULL) st = wt_rpc_call_write(call, &resp.base);
    free(fd.file_descriptor_proto);
    if (ls.service) free(ls.service[0]);
    free(ls.service);
    wt_pb_free(m);
    if (st != NULL) return st;
  }
}
