#!/bin/sh
# make-certs.sh DIR: a throw-away PKI for the trust tests, made with openssl
# at test time (nothing secret is kept in the repository):
#   ca.pem/ca.key            the test CA
#   server.pem/server.key    signed by it, for 127.0.0.1 and localhost
#   client.pem/client.key    a client certificate signed by it
#   expired.pem/expired.key  a client certificate of it that expired
#   other-ca.pem             another CA, and other.pem/other.key, a client
#                            certificate it signed
set -eu
d=$1
mkdir -p "$d"
cd "$d"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
ca() { # name subject
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=$2" 2>/dev/null
}
leaf() { # name ca days subject extfile
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$4" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial \
    -out "$1.pem" -days "$3" -extfile "$5" 2>/dev/null
  rm -f "$1.csr"
}
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
printf 'extendedKeyUsage=clientAuth\n' >client.ext
ca ca "wt test CA"
ca other-ca "wt other CA"
leaf server ca 2 "wt-server" server.ext
leaf client ca 2 "wt trainer" client.ext
leaf expired ca -1 "wt expired trainer" client.ext
leaf other other-ca 2 "wt stranger" client.ext
chmod 600 ./*.key
