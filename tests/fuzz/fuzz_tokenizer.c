/* fuzz_tokenizer.c — any bytes as text through a byte-level BPE tokenizer
 * (tests/fuzz/corpus/tokenizer.json shape, written once): encoding must not
 * fail, and decoding must give the bytes back exactly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/model/tokenizer.h"

/* A byte-level BPE with a Llama 3 split, a few merges and a special token. */
static tokenizer *make(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz-tok-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) abort();
    fprintf(f, "{\"added_tokens\": [{\"id\": 300, \"content\": \"<|x|>\", \"special\": true}],"
               " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\":"
               " {\"Regex\": \"(?i:'s|'t)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}\"}},"
               " {\"type\": \"ByteLevel\", \"use_regex\": false}]},"
               " \"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"vocab\": {");
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174, cp = b;
        if (!printable) {
            cp = 256;
            for (int x = 0; x < b; x++) cp += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
        }
        fprintf(f, "\"\\u%04x\": %d, ", cp, b);
    }
    fprintf(f, "\"he\": 256, \"ll\": 257, \"hell\": 258, \"\\u0120t\": 259}, \"merges\": [\"h e\", \"l l\","
               " \"he ll\", \"\\u0120 t\"]}}");
    fclose(f);
    rh_err e;
    tokenizer *t = tok_load(path, &e);
    if (!t) {
        fprintf(stderr, "%s\n", e.msg);
        abort();
    }
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tokenizer *t;
    if (!t) t = make();
    int32_t *ids;
    size_t n, len;
    rh_err e;
    if (tok_encode(t, (const char *)data, size, 1, &ids, &n, &e) != 0) abort();
    char *back = tok_decode(t, ids, n, 0, &len);
    if (!back || len != size || memcmp(back, data, size)) abort();
    free(back);
    free(ids);
    return 0;
}
