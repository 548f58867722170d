/* rpc_tls.c: PEM files, the client's TLS credentials and bearer-token
 * metadata (see wt/rpc.h). A server's TLS is wt's own: rpc_relay.c. */

#include <grpc/grpc_security.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_internal.h"

#define MAX_PEM_BYTES (1 << 20)

wt_status *rpc_read_pem(const char *what, const char *path, char **out) {
  wt_status *st = wt_read_small_file(what, path, MAX_PEM_BYTES, false, out);
  if (st != NULL) return st;
  if (strstr(*out, "-----BEGIN ") == NULL) {
    wt_secret_free(*out);
    *out = NULL;
    return wt_status_new(WT_INVALID_ARGUMENT, "%s '%s': no PEM block in it",
                         what, path);
  }
  return NULL;
}

wt_status *rpc_channel_credentials(const wt_rpc_tls *tls,
                                   grpc_channel_credentials **out) {
  wt_status *st = NULL;
  char *cert = NULL, *key = NULL, *ca = NULL;
  *out = NULL;
  if (tls == NULL) {
    *out = grpc_insecure_credentials_create();
    return NULL;
  }
  if ((tls->cert_file == NULL) != (tls->key_file == NULL))
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "--tls-cert and --tls-key go together (the client's "
                         "certificate and its key)");
  if (tls->ca_file) WT_CHECK(rpc_read_pem("--tls-ca", tls->ca_file, &ca));
  if (tls->cert_file) {
    WT_CHECK(rpc_read_pem("--tls-cert", tls->cert_file, &cert));
    WT_CHECK(rpc_read_pem("--tls-key", tls->key_file, &key));
  }
  grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
  *out = grpc_ssl_credentials_create(ca, cert ? &pair : NULL, NULL, NULL);
  if (*out == NULL) WT_FAIL(WT_INVALID_ARGUMENT, "TLS credentials: rejected");
out:
  free(cert);
  wt_secret_free(key);
  free(ca);
  return st;
}

uint32_t rpc_token_scope(const wt_token *tokens, size_t n,
                         const grpc_metadata_array *md, bool *presented) {
  *presented = false;
  static const char prefix[] = "Bearer ";
  const size_t plen = sizeof(prefix) - 1;
  for (size_t i = 0; i < md->count; i++) {
    const grpc_slice *k = &md->metadata[i].key;
    if (GRPC_SLICE_LENGTH(*k) != 13 ||
        memcmp(GRPC_SLICE_START_PTR(*k), "authorization", 13) != 0)
      continue;
    *presented = true;
    const grpc_slice *v = &md->metadata[i].value;
    size_t len = GRPC_SLICE_LENGTH(*v);
    const char *p = (const char *)GRPC_SLICE_START_PTR(*v);
    if (len <= plen || strncasecmp(p, prefix, plen) != 0) return 0;
    return wt_tokens_match(tokens, n, p + plen, len - plen);
  }
  return 0;
}
