/* pb_json.c: protobuf-c messages to and from JSON objects (wt/pb.h), by
 * their descriptors, for the language bindings (python/) and control planes
 * that speak dicts. The mapping is proto3's JSON mapping with the proto's
 * own field names: scalars as JSON numbers and booleans, 64-bit integers as
 * numbers (strings accepted), bytes as standard base64, enums by name
 * (numbers accepted), map<string, string> as an object, repeated fields as
 * arrays, nested messages as objects. Fields left at their default are not
 * written. Reading refuses what does not fit, naming the field's path. */

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "wt/base64.h"
#include "wt/pb.h"

#define JSON_MAX_DEPTH 32
#define JSON_MAX_BYTES (64u << 20)

/* ---- helpers ----------------------------------------------------------------
 */

static bool is_map_entry(const ProtobufCFieldDescriptor *f) {
  if (f->type != PROTOBUF_C_TYPE_MESSAGE ||
      f->label != PROTOBUF_C_LABEL_REPEATED)
    return false;
  const ProtobufCMessageDescriptor *d = f->descriptor;
  size_t n = strlen(d->name);
  return d->n_fields == 2 && n > 5 && strcmp(d->name + n - 5, "Entry") == 0 &&
         strcmp(d->fields[0].name, "key") == 0 &&
         strcmp(d->fields[1].name, "value") == 0 &&
         d->fields[0].type == PROTOBUF_C_TYPE_STRING &&
         d->fields[1].type == PROTOBUF_C_TYPE_STRING;
}

static size_t elem_size(ProtobufCType t) {
  switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_ENUM:
      return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
      return 8;
    case PROTOBUF_C_TYPE_BOOL:
      return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
      return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
      return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
      return sizeof(ProtobufCMessage *);
  }
  return 0;
}

/* ---- to JSON
 * ------------------------------------------------------------------ */

static json_t *msg_to_json(const ProtobufCMessage *m, int depth);

static json_t *value_to_json(const ProtobufCFieldDescriptor *f, const void *p,
                             int depth) {
  switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
      return json_integer(*(const int32_t *)p);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
      return json_integer(*(const uint32_t *)p);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
      return json_integer(*(const int64_t *)p);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: {
      uint64_t v = *(const uint64_t *)p;
      if (v <= (uint64_t)LLONG_MAX) return json_integer((json_int_t)v);
      char buf[24];
      snprintf(buf, sizeof(buf), "%" PRIu64, v);
      return json_string(buf);
    }
    case PROTOBUF_C_TYPE_FLOAT:
      return json_real(*(const float *)p);
    case PROTOBUF_C_TYPE_DOUBLE:
      return json_real(*(const double *)p);
    case PROTOBUF_C_TYPE_BOOL:
      return json_boolean(*(const protobuf_c_boolean *)p);
    case PROTOBUF_C_TYPE_ENUM: {
      const ProtobufCEnumValue *ev =
          protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)p);
      return ev ? json_string(ev->name) : json_integer(*(const int *)p);
    }
    case PROTOBUF_C_TYPE_STRING: {
      const char *s = *(char *const *)p;
      return json_string(s ? s : "");
    }
    case PROTOBUF_C_TYPE_BYTES: {
      const ProtobufCBinaryData *b = p;
      char *out = malloc(4 * ((b->len + 2) / 3) + 1);
      if (out == NULL) return NULL;
      wt_base64_encode(b->data, b->len, out);
      json_t *j = json_string(out);
      free(out);
      return j;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
      const ProtobufCMessage *sub = *(ProtobufCMessage *const *)p;
      return sub ? msg_to_json(sub, depth + 1) : json_object();
    }
  }
  return NULL;
}

/* Whether a singular field holds something other than its default. */
static bool field_set(const ProtobufCMessage *m,
                      const ProtobufCFieldDescriptor *f) {
  const char *base = (const char *)m;
  const void *p = base + f->offset;
  if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
    return *(const uint32_t *)(base + f->quantifier_offset) == f->id;
  if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset != 0 &&
      f->type != PROTOBUF_C_TYPE_MESSAGE && f->type != PROTOBUF_C_TYPE_STRING)
    return *(const protobuf_c_boolean *)(base + f->quantifier_offset);
  switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: {
      const char *s = *(char *const *)p;
      return s != NULL && *s != '\0';
    }
    case PROTOBUF_C_TYPE_BYTES:
      return ((const ProtobufCBinaryData *)p)->len > 0;
    case PROTOBUF_C_TYPE_MESSAGE:
      return *(ProtobufCMessage *const *)p != NULL;
    default: {
      static const unsigned char zero[8];
      return memcmp(p, zero, elem_size(f->type)) != 0;
    }
  }
}

static json_t *msg_to_json(const ProtobufCMessage *m, int depth) {
  if (depth > JSON_MAX_DEPTH) return NULL;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  json_t *o = json_object();
  const char *base = (const char *)m;
  for (unsigned i = 0; o != NULL && i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    json_t *v = NULL;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(const size_t *)(base + f->quantifier_offset);
      if (n == 0) continue;
      const char *arr = *(char *const *)(base + f->offset);
      if (is_map_entry(f)) {
        v = json_object();
        for (size_t k = 0; v != NULL && k < n; k++) {
          const ProtobufCMessage *e = ((ProtobufCMessage *const *)arr)[k];
          const char *key = *(char *const *)((const char *)e +
                                             e->descriptor->fields[0].offset);
          const char *val = *(char *const *)((const char *)e +
                                             e->descriptor->fields[1].offset);
          json_object_set_new(v, key ? key : "", json_string(val ? val : ""));
        }
      } else {
        v = json_array();
        size_t sz = elem_size(f->type);
        for (size_t k = 0; v != NULL && k < n; k++) {
          json_t *e = value_to_json(f, arr + k * sz, depth);
          if (e == NULL || json_array_append_new(v, e) != 0) {
            json_decref(v);
            v = NULL;
          }
        }
      }
    } else {
      if (!field_set(m, f)) continue;
      v = value_to_json(f, base + f->offset, depth);
    }
    if (v == NULL || json_object_set_new(o, f->name, v) != 0) {
      json_decref(o);
      o = NULL;
    }
  }
  return o;
}

wt_status *wt_pb_to_json(const ProtobufCMessage *msg, char **out) {
  *out = NULL;
  if (msg == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "to JSON: no message");
  json_t *o = msg_to_json(msg, 0);
  char *s = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
  json_decref(o);
  if (s == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "%s to JSON: out of memory",
                         msg->descriptor->name);
  *out = s;
  return NULL;
}

/* ---- from JSON
 * ------------------------------------------------------------------ */

typedef struct path {
  char buf[256];
} path;

/* A field's path for messages; a path too long for the buffer is cut (the
 * message then still names where it starts). */
static void path_push(const path *in, const char *name, long idx, path *out) {
  int n = idx >= 0
              ? snprintf(out->buf, sizeof(out->buf), "%s[%ld]", in->buf, idx)
              : snprintf(out->buf, sizeof(out->buf), "%s%s%s", in->buf,
                         *in->buf ? "." : "", name ? name : "");
  if (n < 0 || (size_t)n >= sizeof(out->buf))
    memcpy(out->buf + sizeof(out->buf) - 4, "...", 4);
}

static wt_status *bad(const path *p, const char *want, const json_t *got) {
  static const char *const kinds[] = {"an object",  "an array", "a string",
                                      "an integer", "a number", "true",
                                      "false",      "null"};
  int t = got ? (int)json_typeof(got) : 7;
  return wt_status_new(WT_INVALID_ARGUMENT, "field %s: expected %s, got %s",
                       p->buf, want, t >= 0 && t < 8 ? kinds[t] : "?");
}

static wt_status *json_to_msg(const ProtobufCMessageDescriptor *d,
                              const json_t *j, const path *p, int depth,
                              ProtobufCMessage **out);

static wt_status *int_of(const json_t *v, const path *p, bool is_signed,
                         int64_t *si, uint64_t *ui) {
  if (json_is_integer(v)) {
    json_int_t x = json_integer_value(v);
    if (!is_signed && x < 0)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "field %s: %lld is negative; expected an unsigned "
                           "integer",
                           p->buf, (long long)x);
    *si = (int64_t)x;
    *ui = (uint64_t)x;
    return NULL;
  }
  if (json_is_string(v)) { /* proto3 JSON writes 64-bit integers as strings */
    const char *s = json_string_value(v);
    char *end = NULL;
    errno = 0;
    if (is_signed) {
      long long x = strtoll(s, &end, 10);
      *si = x;
      *ui = (uint64_t)x;
    } else {
      unsigned long long x = *s == '-' ? 0 : strtoull(s, &end, 10);
      if (*s == '-') end = (char *)s;
      *ui = x;
      *si = (int64_t)x;
    }
    if (end != s && *end == '\0' && errno == 0) return NULL;
  }
  return bad(p, is_signed ? "an integer" : "an unsigned integer", v);
}

static wt_status *value_from_json(const ProtobufCFieldDescriptor *f,
                                  const json_t *v, const path *p, int depth,
                                  void *dst) {
  int64_t si = 0;
  uint64_t ui = 0;
  wt_status *st = NULL;
  switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
      if ((st = int_of(v, p, true, &si, &ui)) != NULL) return st;
      if (si < INT32_MIN || si > INT32_MAX)
        return wt_status_new(WT_INVALID_ARGUMENT,
                             "field %s: %" PRId64 " does not fit 32 bits",
                             p->buf, si);
      *(int32_t *)dst = (int32_t)si;
      return NULL;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
      if ((st = int_of(v, p, false, &si, &ui)) != NULL) return st;
      if (ui > UINT32_MAX)
        return wt_status_new(WT_INVALID_ARGUMENT,
                             "field %s: %" PRIu64 " does not fit 32 bits",
                             p->buf, ui);
      *(uint32_t *)dst = (uint32_t)ui;
      return NULL;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
      if ((st = int_of(v, p, true, &si, &ui)) != NULL) return st;
      *(int64_t *)dst = si;
      return NULL;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
      if ((st = int_of(v, p, false, &si, &ui)) != NULL) return st;
      *(uint64_t *)dst = ui;
      return NULL;
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_DOUBLE: {
      if (!json_is_number(v)) return bad(p, "a number", v);
      double x = json_number_value(v);
      if (f->type == PROTOBUF_C_TYPE_FLOAT)
        *(float *)dst = (float)x;
      else
        *(double *)dst = x;
      return NULL;
    }
    case PROTOBUF_C_TYPE_BOOL:
      if (!json_is_boolean(v)) return bad(p, "true or false", v);
      *(protobuf_c_boolean *)dst = json_is_true(v);
      return NULL;
    case PROTOBUF_C_TYPE_ENUM: {
      const ProtobufCEnumDescriptor *ed = f->descriptor;
      const ProtobufCEnumValue *ev = NULL;
      if (json_is_string(v))
        ev = protobuf_c_enum_descriptor_get_value_by_name(ed,
                                                          json_string_value(v));
      else if (json_is_integer(v))
        ev = protobuf_c_enum_descriptor_get_value(ed,
                                                  (int)json_integer_value(v));
      if (ev == NULL)
        return wt_status_new(WT_INVALID_ARGUMENT, "field %s: not a value of %s",
                             p->buf, ed->name);
      *(int *)dst = ev->value;
      return NULL;
    }
    case PROTOBUF_C_TYPE_STRING: {
      if (!json_is_string(v)) return bad(p, "a string", v);
      size_t n = json_string_length(v);
      const char *s = json_string_value(v);
      if (memchr(s, '\0', n) != NULL)
        return wt_status_new(WT_INVALID_ARGUMENT,
                             "field %s: a NUL in the string", p->buf);
      char *c = strdup(s);
      if (c == NULL)
        return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
      *(char **)dst = c;
      return NULL;
    }
    case PROTOBUF_C_TYPE_BYTES: {
      if (!json_is_string(v)) return bad(p, "a base64 string", v);
      size_t len = json_string_length(v);
      ProtobufCBinaryData *b = dst;
      b->data = malloc(len / 4 * 3 + 3);
      if (b->data == NULL)
        return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
      if (len == 0) {
        b->len = 0;
        return NULL;
      }
      st = wt_base64_decode(json_string_value(v), b->data, len / 4 * 3 + 3,
                            &b->len, p->buf);
      return st;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
      if (!json_is_object(v)) return bad(p, "an object", v);
      return json_to_msg(f->descriptor, v, p, depth + 1,
                         (ProtobufCMessage **)dst);
  }
  return wt_status_new(WT_INTERNAL, "field %s: type %d", p->buf, (int)f->type);
}

static wt_status *map_from_json(const ProtobufCFieldDescriptor *f,
                                const json_t *v, const path *p, char *base) {
  if (!json_is_object(v)) return bad(p, "an object (a map)", v);
  const ProtobufCMessageDescriptor *ed = f->descriptor;
  size_t n = json_object_size(v), k = 0;
  ProtobufCMessage **arr = calloc(n ? n : 1, sizeof(*arr));
  if (arr == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  *(ProtobufCMessage ***)(base + f->offset) = arr;
  const char *key;
  json_t *val;
  json_object_foreach((json_t *)v, key, val) {
    path q;
    path_push(p, key, -1, &q);
    if (!json_is_string(val)) return bad(&q, "a string", val);
    ProtobufCMessage *e = calloc(1, ed->sizeof_message);
    if (e == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
    ed->message_init(e);
    arr[k] = e;
    *(size_t *)(base + f->quantifier_offset) = ++k;
    char *ks = strdup(key), *vs = strdup(json_string_value(val));
    if (ks) *(char **)((char *)e + ed->fields[0].offset) = ks;
    if (vs) *(char **)((char *)e + ed->fields[1].offset) = vs;
    if (ks == NULL || vs == NULL)
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  }
  return NULL;
}

/* j is an object nested at most JSON_MAX_DEPTH deep, else why not. */
static wt_status *check_object(const json_t *j, const path *p, int depth) {
  if (depth > JSON_MAX_DEPTH)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "field %s: nested more than %d deep", p->buf,
                         JSON_MAX_DEPTH);
  return json_is_object(j) ? NULL : bad(p, "an object", j);
}

/* The field `key` names in d (*f) and its path under p (*q);
 * INVALID_ARGUMENT naming it when d has none. */
static wt_status *field_named(const ProtobufCMessageDescriptor *d,
                              const char *key, const path *p, path *q,
                              const ProtobufCFieldDescriptor **f) {
  path_push(p, key, -1, q);
  *f = protobuf_c_message_descriptor_get_field_by_name(d, key);
  return *f ? NULL
            : wt_status_new(WT_INVALID_ARGUMENT,
                            "field %s: %s has no such field", q->buf, d->name);
}

/* A repeated (not map) field of the message at `base` from the array v. */
static wt_status *repeated_from_json(const ProtobufCFieldDescriptor *f,
                                     const json_t *v, const path *q, int depth,
                                     char *base) {
  if (!json_is_array(v)) return bad(q, "an array", v);
  size_t n = json_array_size(v), sz = elem_size(f->type);
  char *arr = calloc(n ? n : 1, sz);
  if (arr == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  *(char **)(base + f->offset) = arr;
  for (size_t k = 0; k < n; k++) {
    path e;
    path_push(q, NULL, (long)k, &e);
    wt_status *st =
        value_from_json(f, json_array_get(v, k), &e, depth, arr + k * sz);
    /* Count what was set, so that the free releases it. */
    if (st == NULL || f->type == PROTOBUF_C_TYPE_MESSAGE ||
        f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_BYTES)
      *(size_t *)(base + f->quantifier_offset) = k + 1;
    if (st != NULL) return st;
  }
  return NULL;
}

static wt_status *json_to_msg(const ProtobufCMessageDescriptor *d,
                              const json_t *j, const path *p, int depth,
                              ProtobufCMessage **out) {
  *out = NULL;
  wt_status *ost = check_object(j, p, depth);
  if (ost != NULL) return ost;
  ProtobufCMessage *m = calloc(1, d->sizeof_message);
  if (m == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  d->message_init(m);
  *out = m; /* the caller frees it, half-built or whole */
  char *base = (char *)m;
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)j, key, v) {
    path q;
    const ProtobufCFieldDescriptor *f = NULL;
    wt_status *fst = field_named(d, key, p, &q, &f);
    if (fst != NULL) return fst;
    if (json_is_null(v)) continue; /* as absent */
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      if (is_map_entry(f)) {
        wt_status *st = map_from_json(f, v, &q, base);
        if (st != NULL) return st;
        continue;
      }
      wt_status *st = repeated_from_json(f, v, &q, depth, base);
      if (st != NULL) return st;
      continue;
    }
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
      uint32_t *c = (uint32_t *)(base + f->quantifier_offset);
      if (*c != 0 && *c != f->id)
        return wt_status_new(WT_INVALID_ARGUMENT,
                             "field %s: another member of its oneof is set "
                             "already",
                             q.buf);
      *c = f->id;
    } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL &&
               f->quantifier_offset != 0 &&
               f->type != PROTOBUF_C_TYPE_MESSAGE &&
               f->type != PROTOBUF_C_TYPE_STRING) {
      *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
    }
    wt_status *st = value_from_json(f, v, &q, depth, base + f->offset);
    if (st != NULL) return st;
  }
  return NULL;
}

/* `text` as JSON (at most JSON_MAX_BYTES; duplicate keys refused) into *j,
 * the caller's (json_decref), and the path of its root, `what`. */
static wt_status *json_load(const char *text, const char *what, json_t **j,
                            path *root) {
  if (text == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "%s: no JSON", what);
  size_t n = strlen(text);
  if (n > JSON_MAX_BYTES)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: %zu bytes of JSON (at most %u)", what, n,
                         JSON_MAX_BYTES);
  json_error_t err;
  *j = json_loadb(text, n, JSON_REJECT_DUPLICATES, &err);
  if (*j == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "%s: not JSON (line %d: %s)",
                         what, err.line, err.text);
  snprintf(root->buf, sizeof(root->buf), "%s", what);
  return NULL;
}

wt_status *wt_pb_from_json(const ProtobufCMessageDescriptor *desc,
                           const char *text, const char *what,
                           ProtobufCMessage **out) {
  *out = NULL;
  if (what == NULL) what = desc->name;
  json_t *j = NULL;
  path root;
  wt_status *st = json_load(text, what, &j, &root);
  if (st != NULL) return st;
  ProtobufCMessage *m = NULL;
  st = json_to_msg(desc, j, &root, 0, &m);
  json_decref(j);
  if (st == NULL) st = wt_pb_check_utf8(m);
  if (st != NULL) {
    wt_pb_free(m);
    return st;
  }
  *out = m;
  return NULL;
}

/* ---- merging JSON into a message ------------------------------------------
 */

/* One value of a field's type at p, released (strings and bytes with free,
 * messages with protobuf_c_message_free_unpacked: how every message wt
 * builds or unpacks is allocated). */
static void value_free(const ProtobufCFieldDescriptor *f, void *p) {
  switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: {
      char *s = *(char **)p;
      if (s != NULL && s != protobuf_c_empty_string && s != f->default_value)
        free(s);
      break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
      ProtobufCBinaryData *b = p;
      const ProtobufCBinaryData *def = f->default_value;
      if (b->data != NULL && (def == NULL || b->data != def->data))
        free(b->data);
      break;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
      if (*(ProtobufCMessage **)p != NULL)
        protobuf_c_message_free_unpacked(*(ProtobufCMessage **)p, NULL);
      break;
    default:
      break;
  }
}

/* Field f of m back to its default (absent), its value released. */
static void field_clear(ProtobufCMessage *m,
                        const ProtobufCFieldDescriptor *f) {
  char *base = (char *)m;
  if (f->label == PROTOBUF_C_LABEL_REPEATED) {
    size_t *n = (size_t *)(base + f->quantifier_offset);
    char **arr = (char **)(base + f->offset);
    size_t sz = elem_size(f->type);
    for (size_t k = 0; *arr != NULL && k < *n; k++)
      value_free(f, *arr + k * sz);
    free(*arr);
    *arr = NULL;
    *n = 0;
    return;
  }
  if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
    uint32_t *c = (uint32_t *)(base + f->quantifier_offset);
    if (*c != f->id) return; /* another member holds the union's memory */
    *c = 0;
  } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL &&
             f->quantifier_offset != 0 && f->type != PROTOBUF_C_TYPE_MESSAGE &&
             f->type != PROTOBUF_C_TYPE_STRING) {
    *(protobuf_c_boolean *)(base + f->quantifier_offset) = 0;
  }
  value_free(f, base + f->offset);
  if (f->type == PROTOBUF_C_TYPE_STRING)
    *(const char **)(base + f->offset) =
        f->default_value ? f->default_value : protobuf_c_empty_string;
  else
    memset(base + f->offset, 0, elem_size(f->type));
}

/* The entries of the JSON object v set in the map field f of m: a key's
 * value replaced, a new key added. */
static wt_status *map_merge(ProtobufCMessage *m,
                            const ProtobufCFieldDescriptor *f, const json_t *v,
                            const path *p) {
  if (!json_is_object(v)) return bad(p, "an object (a map)", v);
  char *base = (char *)m;
  const ProtobufCMessageDescriptor *ed = f->descriptor;
  size_t *n = (size_t *)(base + f->quantifier_offset);
  ProtobufCMessage ***arr = (ProtobufCMessage ***)(base + f->offset);
  const char *key;
  json_t *val;
  json_object_foreach((json_t *)v, key, val) {
    path q;
    path_push(p, key, -1, &q);
    if (!json_is_string(val)) return bad(&q, "a string", val);
    char *vs = strdup(json_string_value(val));
    if (vs == NULL)
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
    ProtobufCMessage *e = NULL;
    for (size_t k = 0; k < *n && e == NULL; k++) {
      const char *ek = *(char **)((char *)(*arr)[k] + ed->fields[0].offset);
      if (ek != NULL && strcmp(ek, key) == 0) e = (*arr)[k];
    }
    if (e == NULL) {
      ProtobufCMessage **grown = realloc(*arr, (*n + 1) * sizeof(**arr));
      e = grown ? calloc(1, ed->sizeof_message) : NULL;
      char *ks = e ? strdup(key) : NULL;
      if (grown) *arr = grown;
      if (ks == NULL) {
        free(e);
        free(vs);
        return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
      }
      ed->message_init(e);
      *(char **)((char *)e + ed->fields[0].offset) = ks;
      (*arr)[(*n)++] = e;
    }
    value_free(&ed->fields[1], (char *)e + ed->fields[1].offset);
    *(char **)((char *)e + ed->fields[1].offset) = vs;
  }
  return NULL;
}

static wt_status *msg_merge(ProtobufCMessage *m, const json_t *j, const path *p,
                            int depth) {
  wt_status *ost = check_object(j, p, depth);
  if (ost != NULL) return ost;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  char *base = (char *)m;
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)j, key, v) {
    path q;
    const ProtobufCFieldDescriptor *f = NULL;
    wt_status *fst = field_named(d, key, p, &q, &f);
    if (fst != NULL) return fst;
    wt_status *st = NULL;
    bool oneof = (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0;
    uint32_t *c = oneof ? (uint32_t *)(base + f->quantifier_offset) : NULL;
    if (json_is_null(v)) {
      field_clear(m, f);
    } else if (f->label == PROTOBUF_C_LABEL_REPEATED && is_map_entry(f)) {
      st = map_merge(m, f, v, &q);
    } else if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      field_clear(m, f);
      st = repeated_from_json(f, v, &q, depth, base);
    } else if (f->type == PROTOBUF_C_TYPE_MESSAGE &&
               *(ProtobufCMessage **)(base + f->offset) != NULL &&
               (!oneof || *c == f->id)) {
      st =
          msg_merge(*(ProtobufCMessage **)(base + f->offset), v, &q, depth + 1);
    } else {
      /* Setting a oneof's member ends the member set before. */
      if (oneof && *c != 0 && *c != f->id)
        field_clear(m, protobuf_c_message_descriptor_get_field(d, *c));
      field_clear(m, f);
      if (oneof)
        *c = f->id;
      else if (f->label == PROTOBUF_C_LABEL_OPTIONAL &&
               f->quantifier_offset != 0 &&
               f->type != PROTOBUF_C_TYPE_MESSAGE &&
               f->type != PROTOBUF_C_TYPE_STRING)
        *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
      st = value_from_json(f, v, &q, depth, base + f->offset);
    }
    if (st != NULL) return st;
  }
  return NULL;
}

wt_status *wt_pb_merge_json(ProtobufCMessage *msg, const char *text,
                            const char *what) {
  if (what == NULL) what = msg->descriptor->name;
  json_t *j = NULL;
  path root;
  wt_status *st = json_load(text, what, &j, &root);
  if (st != NULL) return st;
  st = msg_merge(msg, j, &root, 0);
  json_decref(j);
  if (st == NULL) st = wt_pb_check_utf8(msg);
  return st;
}
