/* fuzz_tokenizer_json.c — a model directory's tokenizer.json is outside
 * input: any bytes either load as a tokenizer or fail with a message naming
 * the file. A tokenizer that loads must encode any text without crashing,
 * give ids below its vocabulary size, and decode any ids (its own and
 * arbitrary ones) into as many bytes as it says. The input is the file up
 * to its first NUL byte; what follows is the text to encode. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/model/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char SAMPLE[] = "Hello, world! It's 2024: 12345 caf\xc3\xa9 \xe2\x96\x81x <|x|>\n\t  end";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t json_len = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : SAMPLE;
    size_t text_len = nul ? size - json_len - 1 : sizeof SAMPLE - 1;

    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz-tokjson-%d.json", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, json_len, f);
    fclose(f);
    rh_err e = {{0}};
    tokenizer *t = tok_load(path, &e);
    if (!t) {
        if (!strstr(e.msg, path) && !strstr(e.msg, "out of memory")) {
            fprintf(stderr, "refusal without the file's name: %s\n", e.msg);
            abort();
        }
        return 0;
    }
    uint32_t vocab = tok_vocab_size(t);
    int32_t *ids = NULL;
    size_t n = 0;
    if (tok_encode(t, text, text_len, 1, &ids, &n, &e) == 0) {
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || (uint32_t)ids[i] >= vocab) {
                fprintf(stderr, "id %d outside the vocabulary of %u\n", ids[i], vocab);
                abort();
            }
        size_t len;
        char *back = tok_decode(t, ids, n, 0, &len);
        if (back && strlen(back) > len) abort();
        free(back);
        free(ids);
    }
    /* Arbitrary ids, in range or not, decode and stream without a fault. */
    int32_t any[8];
    for (int i = 0; i < 8; i++) {
        uint32_t x = 0;
        for (int k = 0; k < 4; k++) x = x << 8 | (i * 4 + k < (int)text_len ? (uint8_t)text[i * 4 + k] : 0);
        any[i] = i < 4 ? (int32_t)(x % (vocab + 2)) : (int32_t)x;
        char piece[64];
        size_t m = tok_piece(t, any[i], piece, sizeof piece);
        (void)m;
        (void)tok_is_special(t, any[i]);
    }
    size_t len;
    char *s = tok_decode(t, any, 8, 1, &len);
    free(s);
    tok_free(t);
    return 0;
}
