/* safetensors.c: placeholder, being written. */
