/* rpc_server.c: placeholder, being written. */
