/* rpc_client.c: placeholder, being written. */
