/* tool_format.c: output formatting shared by wt-push and wt-ctl. */
#include "tool_format.h"

#include "wt/log.h"

#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

const char *wt_tool_human_bytes(uint64_t bytes, char *buf, size_t len) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(buf, len, "%" PRIu64 " B", bytes);
  else
    snprintf(buf, len, "%.1f %s", v, units[u]);
  return buf;
}

bool wt_tool_security_option(wt_tool_security *s, const char *name,
                             const char *value) {
  if (strcmp(name, "tls-ca") == 0)
    s->tls.ca_file = value;
  else if (strcmp(name, "tls-cert") == 0)
    s->tls.cert_file = value;
  else if (strcmp(name, "tls-key") == 0)
    s->tls.key_file = value;
  else if (strcmp(name, "tls-server-name") == 0)
    s->tls.server_name = value;
  else if (strcmp(name, "token-file") == 0)
    s->token_file = value;
  else
    return false;
  if (strncmp(name, "tls-", 4) == 0) s->tls_on = true;
  return true;
}

void wt_tool_security_apply(const wt_tool_security *s, wt_client_options *o) {
  o->tls = s->tls_on ? &s->tls : NULL;
  o->token_file = s->token_file;
  const char *env = getenv("WT_TOKEN_FILE");
  if (o->token_file == NULL && env != NULL && *env != '\0') o->token_file = env;
  /* Where a server of this user keeps the tokens it generated. */
  o->runtime_base = getenv("XDG_RUNTIME_DIR");
}

void wt_tool_log_level(void) {
  wt_log_level_from(getenv("WT_LOG"), "WT_LOG");
}

char *wt_tool_printable(char *s) {
  for (char *p = s; p && *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
  return s;
}

void wt_tool_printable_pb(ProtobufCMessage *m) {
  if (m == NULL) return;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  char *base = (char *)m;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
      continue;
    /* A oneof's members share storage: only the set one is this type. */
    if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
        *(const uint32_t *)(base + f->quantifier_offset) != f->id)
      continue;
    size_t n = 1;
    void **items = (void **)(base + f->offset);
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      n = *(const size_t *)(base + f->quantifier_offset);
      items = *(void ***)(base + f->offset);
    }
    for (size_t k = 0; items != NULL && k < n; k++) {
      if (f->type == PROTOBUF_C_TYPE_STRING) {
        char *s = items[k];
        /* protobuf-c's shared empty string is read-only, and clean */
        if (s != NULL && *s != '\0') wt_tool_printable(s);
      } else {
        wt_tool_printable_pb(items[k]);
      }
    }
  }
}
