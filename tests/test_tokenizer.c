/* test_tokenizer.c — tokenizers against second computations: byte-level
 * round trips on random bytes; BPE encodings of tokenizer.json files this test
 * writes, against a naive merge-the-best-pair-until-none-left reference; the
 * regex pre-tokenizers against splits worked out by hand from the patterns;
 * round trips through byte-level and SentencePiece-style BPE; bad files. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/tokenizer_impl.h"
#include "kernels/kernels.h"
#include "testutil.h"

static uint64_t rng = 99;

static uint32_t urand(uint32_t n)
{
    return (uint32_t)(rh_splitmix_unit(&rng) * n);
}

/* ---- byte-level ------------------------------------------------------- */

static void test_byte_round_trip(void)
{
    tokenizer *t = tok_new_bytes();
    CU_ASSERT_FATAL(t != NULL);
    CU_ASSERT_EQUAL(tok_vocab_size(t), TOK_BYTE_VOCAB);
    rh_err e;
    for (int trial = 0; trial < 50; trial++) {
        char text[300];
        size_t n = urand(sizeof text);
        for (size_t i = 0; i < n; i++) text[i] = (char)urand(256);   /* NULs, invalid UTF-8, all of it */
        int32_t *ids;
        size_t k, len;
        CU_ASSERT_FATAL(tok_encode(t, text, n, 1, &ids, &k, &e) == 0);
        CU_ASSERT_EQUAL(k, n + 1);
        CU_ASSERT_EQUAL(ids[0], TOK_BYTE_BOS);
        char *back = tok_decode(t, ids, k, 1, &len);
        CU_ASSERT_EQUAL(len, n);
        CU_ASSERT(memcmp(back, text, n) == 0);
        free(back);
        free(ids);
    }
    int32_t ids[4] = {'h', TOK_BYTE_EOS, 'i', 9999};
    size_t len;
    char *s = tok_decode(t, ids, 4, 0, &len);
    CU_ASSERT_STRING_EQUAL(s, "h<|eos|>i\xef\xbf\xbd");   /* specials spelled out, unknown id -> U+FFFD */
    free(s);
    tok_free(t);
}

/* ---- a byte-level BPE tokenizer.json ---------------------------------- */

/* GPT-2's byte -> code point map, written independently of the library's. */
static void byte_char(int b, char *out)
{
    int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    int cp = b;
    if (!printable) {
        cp = 256;
        for (int x = 0; x < b; x++)
            if (!((x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff))) cp++;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        out[2] = 0;
    }
}

/* Merges in rank order, spelled with the byte characters (Ġ is a space). */
static const char *bl_merges[][2] = {
    {"h", "e"},   {"l", "l"},   {"Ġ", "t"},   {"Ġt", "he"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"},
    {"o", "r"},   {"Ġw", "or"}, {"l", "d"},   {"Ġwor", "ld"}, {"e", "l"}, {"Ġ", "h"},    {"1", "2"},
    {"12", "3"},  {"Ġ", "Ġ"},   {"ĊĊ", "Ġ"},  {"Ċ", "Ċ"},
};
#define N_BL_MERGES (sizeof bl_merges / sizeof bl_merges[0])

typedef struct vocab_list {
    char tok[400][24];
    int n;
} vocab_list;

static int vocab_find(const vocab_list *v, const char *s)
{
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->tok[i], s)) return i;
    return -1;
}

static void build_bytelevel_vocab(vocab_list *v)
{
    v->n = 0;
    for (int b = 0; b < 256; b++) byte_char(b, v->tok[v->n++]);
    for (size_t m = 0; m < N_BL_MERGES; m++)
        snprintf(v->tok[v->n++], sizeof v->tok[0], "%s%s", bl_merges[m][0], bl_merges[m][1]);
}

/* Writes the tokenizer.json; split_regex NULL means ByteLevel without a regex
 * (each segment is one word). */
static const char *write_bytelevel_json(const char *split_regex, char *path, size_t n)
{
    vocab_list v;
    build_bytelevel_vocab(&v);
    json_t *vocab = json_object(), *merges = json_array();
    for (int i = 0; i < v.n; i++) json_object_set_new(vocab, v.tok[i], json_integer(i));
    for (size_t m = 0; m < N_BL_MERGES; m++) {
        if (m % 2) {   /* both spellings of a merge occur in the wild */
            json_array_append_new(merges, json_pack("[s,s]", bl_merges[m][0], bl_merges[m][1]));
        } else {
            char s[64];
            snprintf(s, sizeof s, "%s %s", bl_merges[m][0], bl_merges[m][1]);
            json_array_append_new(merges, json_string(s));
        }
    }
    json_t *pre = split_regex
                      ? json_pack("{s:s,s:[{s:s,s:{s:s},s:s},{s:s,s:b}]}", "type", "Sequence", "pretokenizers", "type",
                                  "Split", "pattern", "Regex", split_regex, "behavior", "Isolated", "type", "ByteLevel",
                                  "use_regex", 0)
                      : json_pack("{s:s,s:b,s:b}", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 0);
    json_t *root = json_pack(
        "{s:s,s:[{s:i,s:s,s:b},{s:i,s:s,s:b}],s:n,s:o,s:{s:s,s:[{s:{s:s,s:i}},{s:{s:s,s:i}}]},s:{s:s},"
        "s:{s:s,s:o,s:o}}",
        "version", "1.0", "added_tokens", "id", 400, "content", "<|end|>", "special", 1, "id", 401, "content",
        "<|start|>", "special", 1, "normalizer", "pre_tokenizer", pre, "post_processor", "type", "TemplateProcessing",
        "single", "SpecialToken", "id", "<|start|>", "type_id", 0, "Sequence", "id", "A", "type_id", 0, "decoder",
        "type", "ByteLevel", "model", "type", "BPE", "vocab", vocab, "merges", merges);
    CU_ASSERT_FATAL(root != NULL);
    tu_tmp_path("tokenizer.json", path, n);
    CU_ASSERT_FATAL(json_dump_file(root, path, JSON_INDENT(1)) == 0);
    json_decref(root);
    return path;
}

/* The reference: symbols as strings, merge the best-ranked (then leftmost)
 * adjacent pair until none is in the merge list. */
static int naive_bpe(const vocab_list *v, const char *(*merges)[2], size_t n_merges, char (*sym)[24], int n,
                     int32_t *out)
{
    for (;;) {
        int best = -1;
        size_t best_rank = n_merges;
        for (int i = 0; i + 1 < n; i++)
            for (size_t m = 0; m < best_rank; m++)
                if (!strcmp(sym[i], merges[m][0]) && !strcmp(sym[i + 1], merges[m][1])) {
                    best = i;
                    best_rank = m;
                    break;
                }
        if (best < 0) break;
        size_t l0 = strlen(sym[best]), l1 = strlen(sym[best + 1]);
        memcpy(sym[best] + l0, sym[best + 1], l1 + 1);
        memmove(sym + best + 1, sym + best + 2, (size_t)(n - best - 2) * sizeof sym[0]);
        n--;
    }
    for (int i = 0; i < n; i++) out[i] = vocab_find(v, sym[i]);
    return n;
}

static void test_bytelevel_bpe_matches_naive(void)
{
    char path[512];
    rh_err e;
    tokenizer *t = tok_load(write_bytelevel_json(NULL, path, sizeof path), &e);
    if (!t) printf("\n  %s\n", e.msg);
    CU_ASSERT_FATAL(t != NULL);
    CU_ASSERT_EQUAL(tok_vocab_size(t), 402);
    CU_ASSERT_EQUAL(tok_bos(t), 401);
    vocab_list v;
    build_bytelevel_vocab(&v);
    const char alphabet[] = "helowrdt123 \n\n";
    int mismatches = 0;
    for (int trial = 0; trial < 300; trial++) {
        char text[48];
        size_t n = 1 + urand(sizeof text - 1);
        for (size_t i = 0; i < n; i++)
            text[i] = urand(10) ? alphabet[urand(sizeof alphabet - 1)] : (char)urand(256);
        static char sym[64][24];
        int32_t want[64];
        for (size_t i = 0; i < n; i++) byte_char((unsigned char)text[i], sym[i]);
        int nw = naive_bpe(&v, bl_merges, N_BL_MERGES, sym, (int)n, want);
        int32_t *ids;
        size_t k, len;
        CU_ASSERT_FATAL(tok_encode(t, text, n, 0, &ids, &k, &e) == 0);
        if (k != (size_t)nw || memcmp(ids, want, k * sizeof *ids)) {
            if (!mismatches) {
                printf("\n  text:");
                for (size_t i = 0; i < n; i++) printf(" %02x", (unsigned char)text[i]);
                printf("\n  got:");
                for (size_t i = 0; i < k; i++) printf(" %d", ids[i]);
                printf("\n  want:");
                for (int i = 0; i < nw; i++) printf(" %d", want[i]);
            }
            mismatches++;
        }
        char *back = tok_decode(t, ids, k, 0, &len);
        if (len != n || memcmp(back, text, n)) mismatches++;
        free(back);
        free(ids);
    }
    CU_ASSERT_EQUAL(mismatches, 0);

    /* Rank decides, not position: "hello" is he+ll first, then hell, hello. */
    int32_t *ids;
    size_t k;
    CU_ASSERT_FATAL(tok_encode(t, "hello the world", 15, 1, &ids, &k, &e) == 0);
    int32_t expect[] = {401, vocab_find(&v, "hello"), vocab_find(&v, "Ġthe"), vocab_find(&v, "Ġworld")};
    CU_ASSERT_EQUAL(k, 4);
    CU_ASSERT(k == 4 && memcmp(ids, expect, sizeof expect) == 0);
    free(ids);

    /* Added tokens in the text encode to their ids and decode back. */
    const char *s = "he<|end|><|end|>llo<|start|>";
    CU_ASSERT_FATAL(tok_encode(t, s, strlen(s), 0, &ids, &k, &e) == 0);
    int32_t expect2[] = {vocab_find(&v, "he"), 400, 400, vocab_find(&v, "ll"), vocab_find(&v, "o"), 401};
    CU_ASSERT(k == 6 && memcmp(ids, expect2, sizeof expect2) == 0);
    size_t len;
    char *back = tok_decode(t, ids, k, 0, &len);
    CU_ASSERT_STRING_EQUAL(back, s);
    free(back);
    back = tok_decode(t, ids, k, 1, &len);
    CU_ASSERT_STRING_EQUAL(back, "hello");
    free(back);
    char piece[16];
    CU_ASSERT_EQUAL(tok_piece(t, vocab_find(&v, "Ġworld"), piece, sizeof piece), 6);
    CU_ASSERT(memcmp(piece, " world", 6) == 0);
    free(ids);
    tok_free(t);
}

/* ---- pre-tokenization ------------------------------------------------- */

typedef struct pieces {
    char p[32][32];
    int n;
} pieces;

static int collect(void *ctx, const char *s, size_t len)
{
    pieces *ps = ctx;
    if (ps->n < 32 && len < 32) {
        memcpy(ps->p[ps->n], s, len);
        ps->p[ps->n][len] = 0;
    }
    ps->n++;
    return 0;
}

static void expect_split(int mode, int digits, const char *text, const char *const *want, int n_want)
{
    pieces ps = {.n = 0};
    tok_split_text(mode, digits, text, strlen(text), collect, &ps);
    int ok = ps.n == n_want;
    for (int i = 0; ok && i < n_want; i++) ok = !strcmp(ps.p[i], want[i]);
    if (!ok) {
        printf("\n  split of '%s' (mode %d):", text, mode);
        for (int i = 0; i < ps.n && i < 32; i++) printf(" [%s]", ps.p[i]);
    }
    CU_ASSERT(ok);
}

#define SPLIT(mode, digits, text, ...)                                                     \
    do {                                                                                   \
        const char *const w[] = {__VA_ARGS__};                                             \
        expect_split(mode, digits, text, w, (int)(sizeof w / sizeof w[0]));                \
    } while (0)

static void test_regex_splits(void)
{
    /* Worked out by hand from the two patterns, alternative by alternative. */
    const char *t1 = "Hello world's  test 12345!!\n\nend  ";
    SPLIT(TOK_SPLIT_GPT2, 0, t1, "Hello", " world", "'s", " ", " test", " 12345", "!!", "\n", "\n", "end", "  ");
    SPLIT(TOK_SPLIT_LLAMA3, 3, t1, "Hello", " world", "'s", " ", " test", " ", "123", "45", "!!\n\n", "end", "  ");
    SPLIT(TOK_SPLIT_LLAMA3, 1, "a 12", "a", " ", "1", "2");
    SPLIT(TOK_SPLIT_GPT2, 0, "I'M ok", "I", "'", "M", " ok");          /* contractions are case-sensitive */
    SPLIT(TOK_SPLIT_LLAMA3, 3, "I'M ok", "I", "'M", " ok");            /* (?i:...) */
    SPLIT(TOK_SPLIT_LLAMA3, 3, "  \n\n x", "  \n\n", " x");
    SPLIT(TOK_SPLIT_LLAMA3, 3, "(hi) [x]", "(hi", ")", " [", "x", "]");
    SPLIT(TOK_SPLIT_GPT2, 0, "(hi) [x]", "(", "hi", ")", " [", "x", "]");
    SPLIT(TOK_SPLIT_LLAMA3, 3, "h\xc3\xa9llo w\xc3\xb6rld", "h\xc3\xa9llo", " w\xc3\xb6rld");   /* non-ASCII letters */
    SPLIT(TOK_SPLIT_NONE, 0, "a b", "a b");
}

static void test_llama3_style_round_trip(void)
{
    char path[512];
    rh_err e;
    tokenizer *t = tok_load(write_bytelevel_json("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                                 "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
                                                 path, sizeof path),
                            &e);
    CU_ASSERT_FATAL(t != NULL);
    CU_ASSERT_EQUAL(t->n_stages, 1);
    CU_ASSERT_EQUAL(t->stage[0], TOK_SPLIT_LLAMA3);
    CU_ASSERT_EQUAL(t->stage_digits[0], 3);
    int bad = 0;
    for (int trial = 0; trial < 200; trial++) {
        char text[64];
        size_t n = urand(sizeof text);
        for (size_t i = 0; i < n; i++) text[i] = urand(3) ? "hello world 123'!\n\t"[urand(19)] : (char)urand(256);
        int32_t *ids;
        size_t k, len;
        CU_ASSERT_FATAL(tok_encode(t, text, n, 0, &ids, &k, &e) == 0);
        char *back = tok_decode(t, ids, k, 0, &len);
        bad += len != n || memcmp(back, text, n);
        free(back);
        free(ids);
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* The split keeps merges inside pieces: "12345" is 123 + 4 + 5, never 12+345. */
    int32_t *ids;
    size_t k;
    vocab_list v;
    build_bytelevel_vocab(&v);
    CU_ASSERT_FATAL(tok_encode(t, "12345", 5, 0, &ids, &k, &e) == 0);
    int32_t want[] = {vocab_find(&v, "123"), '4', '5'};
    CU_ASSERT(k == 3 && memcmp(ids, want, sizeof want) == 0);
    free(ids);
    tok_free(t);
}

/* ---- SentencePiece-style BPE ------------------------------------------ */

static const char *spm_merges[][2] = {
    {"▁", "t"}, {"h", "e"}, {"▁t", "he"}, {"▁", "c"}, {"a", "t"}, {"▁c", "at"}, {"▁", "a"}, {"▁a", "t"},
};
#define N_SPM_MERGES (sizeof spm_merges / sizeof spm_merges[0])

static void build_spm_vocab(vocab_list *v)
{
    v->n = 0;
    snprintf(v->tok[v->n++], 24, "<unk>");
    snprintf(v->tok[v->n++], 24, "<s>");
    snprintf(v->tok[v->n++], 24, "</s>");
    for (int b = 0; b < 256; b++) snprintf(v->tok[v->n++], 24, "<0x%02X>", b);
    snprintf(v->tok[v->n++], 24, "▁");
    for (char c = 'a'; c <= 'z'; c++) snprintf(v->tok[v->n++], 24, "%c", c);
    snprintf(v->tok[v->n++], 24, ",");
    for (size_t m = 0; m < N_SPM_MERGES; m++)
        snprintf(v->tok[v->n++], 24, "%s%s", spm_merges[m][0], spm_merges[m][1]);
}

static void test_sentencepiece_bpe(void)
{
    vocab_list v;
    build_spm_vocab(&v);
    json_t *vocab = json_object(), *merges = json_array();
    for (int i = 0; i < v.n; i++) json_object_set_new(vocab, v.tok[i], json_integer(i));
    for (size_t m = 0; m < N_SPM_MERGES; m++) {
        char s[64];
        snprintf(s, sizeof s, "%s %s", spm_merges[m][0], spm_merges[m][1]);
        json_array_append_new(merges, json_string(s));
    }
    json_t *root = json_pack(
        "{s:[{s:i,s:s,s:b},{s:i,s:s,s:b},{s:i,s:s,s:b}],"
        "s:{s:s,s:[{s:s,s:s},{s:s,s:{s:s},s:s}]},s:n,"
        "s:{s:s,s:[{s:{s:s,s:i}},{s:{s:s,s:i}}]},"
        "s:{s:s,s:b,s:s,s:o,s:o}}",
        "added_tokens", "id", 0, "content", "<unk>", "special", 1, "id", 1, "content", "<s>", "special", 1, "id", 2,
        "content", "</s>", "special", 1, "normalizer", "type", "Sequence", "normalizers", "type", "Prepend", "prepend",
        "▁", "type", "Replace", "pattern", "String", " ", "content", "▁", "pre_tokenizer", "post_processor", "type",
        "TemplateProcessing", "single", "SpecialToken", "id", "<s>", "type_id", 0, "Sequence", "id", "A", "type_id", 0,
        "model", "type", "BPE", "byte_fallback", 1, "unk_token", "<unk>", "vocab", vocab, "merges", merges);
    CU_ASSERT_FATAL(root != NULL);
    char path[512];
    tu_tmp_path("spm-tokenizer.json", path, sizeof path);
    CU_ASSERT_FATAL(json_dump_file(root, path, 0) == 0);
    json_decref(root);
    rh_err e;
    tokenizer *t = tok_load(path, &e);
    if (!t) printf("\n  %s\n", e.msg);
    CU_ASSERT_FATAL(t != NULL);
    CU_ASSERT_EQUAL(t->kind, TOK_BPE_SPM);
    CU_ASSERT_EQUAL(tok_bos(t), 1);
    CU_ASSERT_EQUAL(tok_eos(t), 2);

    /* Against the reference on the normalized text ("▁" for spaces, one in
     * front); characters without a token fall back to their bytes. */
    const char *texts[] = {"the cat at the hat", "a cat, the cat", " at  the", "\xc3\x89" "clair caf\xc3\xa9 \xf0\x9f\x98\x80",
                           "THE Cat"};
    for (size_t ti = 0; ti < sizeof texts / sizeof texts[0]; ti++) {
        const char *s = texts[ti];
        static char sym[128][24];
        int n = 0;
        strcpy(sym[n++], "▁");
        for (size_t i = 0; s[i];) {
            size_t cl = tok_utf8_len(s + i, strlen(s + i));
            if (s[i] == ' ') strcpy(sym[n], "▁");
            else {
                memcpy(sym[n], s + i, cl);
                sym[n][cl] = 0;
            }
            n++;
            i += cl;
        }
        int32_t want[256];
        int nw = naive_bpe(&v, spm_merges, N_SPM_MERGES, sym, n, want);
        /* Expand characters missing from the vocabulary into <0xXX> ids. */
        int32_t full[256];
        int nf = 0;
        for (int i = 0; i < nw; i++) {
            if (want[i] >= 0) {
                full[nf++] = want[i];
                continue;
            }
            for (const char *b = sym[i]; *b; b++) {
                char hex[8];
                snprintf(hex, sizeof hex, "<0x%02X>", (unsigned char)*b);
                full[nf++] = vocab_find(&v, hex);
            }
        }
        int32_t *ids;
        size_t k, len;
        CU_ASSERT_FATAL(tok_encode(t, s, strlen(s), 0, &ids, &k, &e) == 0);
        int same = k == (size_t)nf && !memcmp(ids, full, k * sizeof *ids);
        if (!same) printf("\n  SentencePiece encoding of '%s' differs from the reference\n", s);
        CU_ASSERT(same);
        char *back = tok_decode(t, ids, k, 1, &len);
        CU_ASSERT_STRING_EQUAL(back, s);
        free(back);
        free(ids);
    }
    tok_free(t);
}

/* ---- bad files -------------------------------------------------------- */

static void expect_bad(const char *json, const char *needle)
{
    char path[512];
    rh_err e = {{0}};
    tu_tmp_path("bad-tokenizer.json", path, sizeof path);
    tu_write_file(path, json, strlen(json));
    tokenizer *t = tok_load(path, &e);
    CU_ASSERT_PTR_NULL(t);
    tok_free(t);
    int ok = strstr(e.msg, needle) && strstr(e.msg, "bad-tokenizer.json");
    if (!ok) printf("\n  expected '%s' in: %s\n", needle, e.msg);
    CU_ASSERT(ok);
}

static void test_bad_tokenizer_files(void)
{
    expect_bad("{\"model\": ", ":1:");
    expect_bad("{}", "'model'");
    expect_bad("{\"model\": {\"type\": \"Unigram\"}}", "'model.type': 'Unigram'");
    expect_bad("{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
               "neither byte-level");
    expect_bad("{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
               "\"merges\": []}}",
               "byte 0x00");
    expect_bad("{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, "
               "\"b\": 1}, \"merges\": [\"a b\"]}}",
               "'model.merges[0]'");
    expect_bad("{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, "
               "\"merges\": []}}",
               "'model.vocab'");
    expect_bad("{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"added_tokens\": {}, \"model\": {\"type\": \"BPE\", "
               "\"vocab\": {\"a\": 0}, \"merges\": []}}",
               "'added_tokens'");
    expect_bad("{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
               "\"merges\": [7]}}",
               "'model.merges[0]'");
    rh_err e;
    CU_ASSERT_PTR_NULL(tok_load("build/tmp/no-such-tokenizer.json", &e));
    CU_ASSERT(strstr(e.msg, "no-such-tokenizer.json") != NULL);
}

void register_test_tokenizer(void)
{
    CU_pSuite s = CU_add_suite("tokenizer", NULL, NULL);
    CU_add_test(s, "byte-level round trip on random bytes", test_byte_round_trip);
    CU_add_test(s, "byte-level BPE equals the naive merge loop", test_bytelevel_bpe_matches_naive);
    CU_add_test(s, "GPT-2 and Llama 3 split patterns", test_regex_splits);
    CU_add_test(s, "Llama 3 style tokenizer round trip", test_llama3_style_round_trip);
    CU_add_test(s, "SentencePiece-style BPE with byte fallback", test_sentencepiece_bpe);
    CU_add_test(s, "malformed tokenizer.json names file and field", test_bad_tokenizer_files);
}
