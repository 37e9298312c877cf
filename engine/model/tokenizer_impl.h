/* tokenizer_impl.h — the tokenizer's internals, shared by its source files
 * (tokenizer.c: interface and byte-level; tokenizer_bpe.c: tokenizer.json and
 * BPE merges; tokenizer_split.c: pre-tokenization). Not for other modules. */
#ifndef RH_TOKENIZER_IMPL_H
#define RH_TOKENIZER_IMPL_H

#include <stdbool.h>

#include "engine/model/tokenizer.h"
#include "util/hashmap.h"

enum tok_kind {
    TOK_BYTES = 0,
    TOK_BPE_BYTELEVEL,    /* bytes mapped to printable characters, regex split, BPE */
    TOK_BPE_SPM,          /* spaces as U+2581, BPE over characters, <0xXX> fallback */
};

enum tok_split {
    TOK_SPLIT_NONE = 0,   /* the whole segment is one word */
    TOK_SPLIT_GPT2,       /* 's|'t|..| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    TOK_SPLIT_LLAMA3,     /* (?i:'s|..)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,k}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    TOK_SPLIT_DIGITS,     /* \p{N}{1,k} */
    TOK_SPLIT_CJK,        /* [\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+ */
    TOK_SPLIT_DEEPSEEK,   /* DeepSeek-V3's third stage (tokenizer_split.c) */
};
#define TOK_MAX_STAGES 4
#define TOK_N_SPECIAL_TEXT 4

typedef struct tok_added {
    char *text;
    size_t len;
    int32_t id;
} tok_added;

struct tokenizer {
    int kind;
    int n_stages;             /* pre-tokenizer Splits, applied in order, each to the pieces of the one before */
    int stage[TOK_MAX_STAGES];        /* enum tok_split */
    int stage_digits[TOK_MAX_STAGES]; /* LLAMA3, DIGITS: most digits in one piece (3 for Llama 3, 1 for Qwen2) */
    bool nfc;                 /* the normalizer composes text to NFC first (Qwen2, Qwen3) */
    uint32_t vocab_size;
    int32_t bos, eos, unk;

    char **piece;             /* [vocab_size] decoded bytes of each id, NULL when unknown */
    uint32_t *piece_len;
    uint32_t max_piece;       /* the longest piece (tok_note_pieces) */
    uint8_t *special;         /* [vocab_size] 1 for added special tokens */

    rh_strmap vocab;          /* token text as in the file -> id */
    rh_map64 merges;          /* (left id << 32 | right id) -> (rank << 32 | merged id) */
    int32_t byte_id[256];     /* id of each byte's single-symbol token (byte-level char or <0xXX>); -1: none */
    bool ignore_merges;       /* a pre-token found whole in the vocabulary is taken as is */
    bool spm_prefix_space;    /* SentencePiece: "▁" is prepended, and stripped when decoding */

    tok_added *added;         /* added tokens, longest first */
    size_t n_added;

    /* From tokenizer_config.json (tokenizer_chat.c); NULL when absent. */
    char *special_text[TOK_N_SPECIAL_TEXT];   /* bos_token, eos_token, unk_token, pad_token */
    struct chat_template *chat;
};

/* Notes the longest piece, for tok_fewest_tokens; once the vocabulary is in. */
void tok_note_pieces(tokenizer *t);

/* Reads tokenizer_config.json beside tokenizer_file when there is one. */
int tok_load_config(tokenizer *t, const char *tokenizer_file, rh_err *e);
void tok_free_config(tokenizer *t);

/* Pre-tokenization: calls emit(ctx, start, len) for each piece of text[0..len);
 * stops at and returns the first non-zero value emit returns. */
typedef int (*tok_emit_fn)(void *ctx, const char *s, size_t len);
int tok_split_text(int split, int digit_group, const char *s, size_t len, tok_emit_fn emit, void *ctx);
/* Every stage of t in order. */
int tok_pretokenize(const tokenizer *t, const char *s, size_t len, tok_emit_fn emit, void *ctx);

/* BPE over one pre-token; appends ids through the growable output.
 * 0, -1 when out of memory, TOK_UNENCODABLE for a character without a token. */
#define TOK_UNENCODABLE (-2)
typedef struct tok_out {
    int32_t *ids;
    size_t n, cap;
} tok_out;
int tok_out_push(tok_out *o, int32_t id);
int tok_bpe_word(const tokenizer *t, const char *s, size_t len, tok_out *o);

/* GPT-2's reversible map of bytes to printable code points. */
uint32_t tok_byte_to_cp(uint8_t b);

/* UTF-8 length of the character starting with byte c (1 for invalid bytes). */
size_t tok_utf8_len(const char *s, size_t left);

#endif
