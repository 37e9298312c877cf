/* chat_template_impl.h — what the chat template files share: tokens, the
 * syntax tree, values, scopes and the render context. Private to
 * engine/model/chat_template*.c.
 *
 * Pipeline: chat_template_lex.c (source to tokens, with Jinja's whitespace
 * rules), chat_template_parse.c and chat_template_expr.c (tokens to a tree),
 * chat_template_eval.c (tree to text), which calls chat_template_ops.c
 * (operators, attributes, subscripts), chat_template_filters.c,
 * chat_template_lists.c and chat_template_tests.c (filters, tests) and
 * chat_template_methods.c (Python methods, globals); values print and
 * compare in chat_template_value.c and become JSON in chat_template_json.c.
 *
 * A value stored in a list, dict or namespace is JSON; the other kinds
 * (namespace, loop, macro) live only in scopes, which is why a macro may
 * point at the scope it was defined in: nothing outlives that scope. */
#ifndef RH_CHAT_TEMPLATE_IMPL_H
#define RH_CHAT_TEMPLATE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/chat_template.h"

/* Bounds that keep any input from exhausting the stack, memory or time. */
#define CT_MAX_NEST       100         /* parser nesting and tree height */
#define CT_MAX_EVAL_DEPTH 1000        /* evaluator recursion, macro calls included */
#define CT_MAX_CALLS      64          /* nested macro calls */
#define CT_MAX_STEPS      10000000ull /* units of work in one render (a 2,000-message chat takes about 130,000) */
#define CT_MAX_ITEMS      1000000u    /* elements of one list, dict or range */

/* ---- tokens (chat_template_lex.c) ---- */

enum {
    TK_EOF,
    TK_TEXT,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STRING,
    TK_INT,
    TK_FLOAT,
    TK_OP,
};

/* Operators, in TK_OP tokens (op) and in E_BIN / E_CMP nodes. */
enum {
    OP_ADD = 1,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_TILDE,
    OP_EQ,
    OP_NE,
    OP_LT,
    OP_LE,
    OP_GT,
    OP_GE,
    OP_IN,
    OP_NOTIN,
    OP_LBRACKET,
    OP_RBRACKET,
    OP_LPAREN,
    OP_RPAREN,
    OP_LBRACE,
    OP_RBRACE,
    OP_ASSIGN,
    OP_DOT,
    OP_COLON,
    OP_PIPE,
    OP_COMMA,
    OP_SEMI,
};

typedef struct ct_tok {
    uint8_t kind, op;
    int line;
    char *s; /* TK_TEXT, TK_NAME, TK_STRING: malloc'd, decoded, NUL-terminated */
    size_t len;
    long long i; /* TK_INT */
    double d;    /* TK_FLOAT */
} ct_tok;

typedef struct ct_toks {
    ct_tok *v;
    size_t n, cap;
} ct_toks;

/* Splits a template into tokens, ending with TK_EOF. -1 with a message. */
int ct_lex(const char *src, size_t len, ct_toks *out, rh_err *e);
void ct_toks_free(ct_toks *t);
const char *ct_op_name(int op);

/* ---- the tree (chat_template_parse.c) ---- */

enum {
    /* statements */
    S_TEXT,  /* str, len */
    S_PRINT, /* a */
    S_IF,    /* args: S_BRANCH each (a: test, body); alt: else */
    S_BRANCH,
    S_FOR,      /* args: target names; a: iterable; b: filter or NULL; body; alt: else */
    S_SET,      /* args: targets (E_NAME, or one E_ATTR for ns.x); a: value */
    S_SETBLOCK, /* str: name; body */
    S_MACRO,    /* str: name; args: E_PARAM each; body */
    S_BREAK,
    S_CONTINUE,
    S_FILTER, /* a: filter chain over E_CAPTURE; body */
    S_WITH,   /* args: E_PARAM each (a: value); body */
    S_BODY,   /* body (generation) */
    /* expressions */
    E_LIT,     /* lit */
    E_NAME,    /* str */
    E_ATTR,    /* a: object; str: attribute */
    E_ITEM,    /* a: object; b: key */
    E_SLICE,   /* a: object; b, c, d: start, stop, step (each may be NULL) */
    E_CALL,    /* a: callee; args (E_KW for keywords) */
    E_FILTER,  /* str: filter; a: operand; args */
    E_TEST,    /* str: test; a: operand; args; op: 1 when negated */
    E_NOT,     /* a */
    E_NEG,     /* a */
    E_POS,     /* a */
    E_BIN,     /* op; a, b */
    E_AND,     /* a, b */
    E_OR,      /* a, b */
    E_CMP,     /* args: operands; ops: one operator between each pair */
    E_COND,    /* a: test; b: value; c: else value or NULL */
    E_LIST,    /* args */
    E_TUPLE,   /* args */
    E_DICT,    /* args: key, value, key, value ... */
    E_KW,      /* str: keyword; a: value */
    E_PARAM,   /* str: name; a: default or NULL */
    E_CAPTURE, /* the body text of the enclosing {% filter %} block */
};

typedef struct ct_node ct_node;
typedef struct ct_list {
    ct_node **v;
    size_t n, cap;
} ct_list;

struct ct_node {
    uint8_t kind, op;
    uint8_t deferred; /* E_FILTER / E_TEST: name checked when evaluated (Jinja does so inside ifs) */
    int line, height;
    char *str;
    size_t len;
    json_t *lit;
    ct_node *a, *b, *c, *d;
    ct_list args, body, alt;
    uint8_t *ops;
};

struct chat_template {
    ct_list body;
};

void ct_node_free(ct_node *n);

/* ---- the parser (chat_template_parse.c: helpers and statements;
 * chat_template_expr.c: expressions) ---- */

typedef struct ct_parser {
    ct_toks *t;
    size_t i;
    int depth;
    int loops; /* enclosing for loops (break / continue allowed) */
    /* Jinja refuses an unknown filter or test when compiling, except inside
     * an if statement or a conditional expression (a "soft" frame), where
     * it fails only if run. conds counts the enclosing soft frames; a loop,
     * macro or block body starts a hard one again. An unknown name in an
     * expression that may yet turn out to be a conditional's first operand
     * waits in pending until its statement ends. */
    int conds;
    int pending_line;
    char pending[96];
    rh_err *e;
} ct_parser;

ct_tok *ctp_cur(ct_parser *p);
ct_tok *ctp_peek(ct_parser *p, size_t k);
void ctp_next(ct_parser *p);
int ctp_fail(ct_parser *p, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int ctp_unexpected(ct_parser *p, const char *wanted); /* "expected WANTED, got ..." or "unexpected ..." */
int ctp_is_op(ct_parser *p, int op);
int ctp_is_name(const ct_tok *t, const char *s);
int ctp_at_name(ct_parser *p, const char *s);
int ctp_accept(ct_parser *p, int op); /* 1 (and past it) when the next token is op */
int ctp_expect(ct_parser *p, int op);
int ctp_expect_kind(ct_parser *p, int kind, const char *what);
int ctp_enter(ct_parser *p); /* one level deeper (the caller undoes it with p->depth--); -1 when too deep */
ct_node *ctp_node(ct_parser *p, int kind, int line);
int ctp_push(ct_parser *p, ct_list *l, ct_node *x); /* takes x, freeing it on failure; -1 for NULL */
int ctp_tall(ct_parser *p, ct_node *n);             /* sets n's height; -1 when the tree grows too tall */
ct_node *ctp_seal(ct_parser *p, ct_node *n);        /* ctp_tall for a detached node: NULL (freed) when too tall */
ct_node *ctp_mk(ct_parser *p, int kind, int line, ct_node *a, ct_node *b);
char *ctp_dup(ct_parser *p, const char *s, int line);
ct_node *ctp_literal(ct_parser *p, int line, json_t *j);

ct_node *ctp_expr(ct_parser *p, int condexpr);                       /* condexpr: a if b else c allowed */
ct_node *ctp_tuple(ct_parser *p, int condexpr, int explicit_parens); /* a, b makes a tuple */
ct_node *ctp_filter(ct_parser *p, ct_node *operand);                 /* after "|": name(args) */
int ctp_settle(ct_parser *p); /* at a statement's end: -1 for an unknown filter or test in a hard frame */

/* ---- values (chat_template_value.c, chat_template_json.c) ---- */

enum {
    CV_UNDEF, /* name: what was looked up (a string of the tree, or NULL); owner: cv_owner() of the object it was
                 missing from, 0 for a variable */
    CV_JSON,  /* j: one reference owned */
    CV_NS,    /* j: the namespace's attributes (an object), one reference owned */
    CV_LOOP,  /* p: the ct_loop of a running for loop */
    CV_MACRO, /* p: the S_MACRO node; q: the ct_frame it was defined in */
    CV_FUNC,  /* id: which global (CT_G_*) */
};

typedef struct ct_val {
    uint8_t kind, owner;
    int id;
    json_t *j;
    const void *p, *q;
    const char *name;
} ct_val;

typedef struct ct_loop {
    json_t *items; /* the elements, after the loop's filter */
    size_t i, n;
} ct_loop;

/* A scope: a for-loop iteration, a macro call, a with block, or the template. */
typedef struct ct_var {
    const char *name;
    ct_val v;
} ct_var;
typedef struct ct_frame {
    struct ct_frame *parent;
    ct_var *v;
    size_t n, cap;
} ct_frame;

typedef struct ct_buf {
    char *p;
    size_t n, cap;
} ct_buf;

typedef struct ct_ctx {
    const json_t *vars;
    json_t *undef;       /* stands for an undefined value inside a list, dict or namespace */
    ct_buf *out;         /* where text goes now (macro calls and captures swap it) */
    const char *capture; /* the body of the innermost {% filter %} block */
    size_t capture_len;
    unsigned long long steps;
    int depth, calls, line;
    int flow;        /* CT_FLOW_* pending from break / continue */
    json_t **tuples; /* arrays that are Python tuples (they print as (a, b)): a hash set holding a reference each */
    size_t ntuples, tuples_cap;
    rh_err *e;
} ct_ctx;

enum { CT_FLOW_NONE, CT_FLOW_BREAK, CT_FLOW_CONTINUE };

/* Arguments of a call, filter or test (the operand is not among them). */
typedef struct ct_args {
    ct_val *pos;
    size_t npos;
    const char **kwn;
    ct_val *kw;
    size_t nkw;
} ct_args;

/* Sets "chat template line N: ..." and returns -1. */
int ct_fail(ct_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Charges n units of work; -1 with a message once over CT_MAX_STEPS. */
int ct_charge(ct_ctx *c, unsigned long long n);

int ct_buf_put(ct_ctx *c, ct_buf *b, const char *p, size_t n);
int ct_buf_puts(ct_ctx *c, ct_buf *b, const char *s);

ct_val cv_undef(const char *name, int owner);
ct_val cv_of(json_t *stolen);    /* CV_JSON; NULL (out of memory) gives a CV_JSON with j NULL */
int cv_ok(ct_ctx *c, ct_val *v); /* -1 with a message when v is a failed allocation */
ct_val cv_copy(const ct_val *v);
void cv_drop(ct_val *v);
/* A new string value; -1 with a message when out of memory or too long. */
int cv_string(ct_ctx *c, const char *p, size_t n, ct_val *out);
/* An element read from a list, dict or namespace (new reference; the undefined stand-in maps back). */
ct_val cv_elem(ct_ctx *c, json_t *borrowed);
/* A new reference to store v in a list, dict or namespace; NULL with a message for kinds that cannot be stored. */
json_t *cv_store(ct_ctx *c, const ct_val *v);

int cv_is(const ct_val *v, int json_type); /* CV_JSON of that JSON_* type */
int cv_is_str(const ct_val *v);
int cv_is_num(const ct_val *v); /* int, float or bool */
int cv_truthy(const ct_val *v);
const char *cv_type(const ct_val *v); /* Python's type name */
/* Numbers: int (bool counts as int) or float. */
int cv_int(const ct_val *v, long long *i); /* 1 when an int or bool */
double cv_float(const ct_val *v);
/* What an undefined attribute of v says it was missing from (CV_UNDEF owner). */
int cv_owner(const ct_val *v);
/* The message for using an undefined value: "'x' is undefined". */
int cv_undef_fail(ct_ctx *c, const ct_val *v);

/* Python str() and repr(). */
int cv_str(ct_ctx *c, const ct_val *v, ct_buf *b);
int cv_repr(ct_ctx *c, const ct_val *v, ct_buf *b);
/* str(v) as a new string value. */
int cv_to_string(ct_ctx *c, const ct_val *v, ct_val *out);
void ct_fmt_float(double d, char *buf, size_t n); /* Python repr of a float */

/* json.dumps(v, ensure_ascii, indent, separators, sort_keys). */
typedef struct ct_json_opts {
    int ensure_ascii, sort_keys;
    const char *indent; /* the text of one level (indent=2: two spaces); NULL: all on one line */
    size_t indent_len;
    const char *item_sep, *key_sep; /* NULL: Python's defaults for the indent */
    size_t item_sep_len, key_sep_len;
} ct_json_opts;
int ct_tojson(ct_ctx *c, const ct_val *v, const ct_json_opts *o, ct_buf *b);

int cv_eq(const ct_val *a, const ct_val *b);
/* Python ordering: *r < 0, 0, > 0; -1 with a type error when unordered. */
int cv_cmp(ct_ctx *c, const ct_val *a, const ct_val *b, int op, int *r);

/* Marks a fresh array as a tuple (-1 when out of memory); whether one is. */
int ct_mark_tuple(ct_ctx *c, json_t *arr);
int ct_is_tuple(const ct_ctx *c, const json_t *arr);
void ct_tuples_free(ct_ctx *c);

/* UTF-8: invalid bytes count as one code point each. */
size_t ct_u8_next(const char *s, size_t n, size_t i); /* offset of the next code point */
int32_t ct_u8_at(const char *s, size_t n, size_t i);  /* the code point at i (-1: invalid byte) */
size_t ct_u8_count(const char *s, size_t n);
size_t ct_u8_put(int32_t cp, char *out); /* 1..4 bytes */
/* Python's str.isspace for the code point at s (byte length, 0 when not). */
size_t ct_space_at(const char *s, size_t n);
/* Byte length of s without its trailing / leading whitespace. */
size_t ct_rstrip_len(const char *s, size_t n);
size_t ct_lstrip_len(const char *s, size_t n); /* bytes of leading whitespace */

/* ---- operators and access (chat_template_ops.c) ---- */

int ct_binop(ct_ctx *c, int op, const ct_val *a, const ct_val *b, ct_val *out);
int ct_neg(ct_ctx *c, const ct_val *a, int plus, ct_val *out);
int ct_contains(ct_ctx *c, const ct_val *item, const ct_val *seq, int *r);
int ct_getattr(ct_ctx *c, const ct_val *obj, const char *name, ct_val *out);
int ct_getitem(ct_ctx *c, const ct_val *obj, const ct_val *key, ct_val *out);
/* NULL bounds are absent, as in x[a:], x[::-1]. */
int ct_slice(ct_ctx *c, const ct_val *obj, const ct_val *start, const ct_val *stop, const ct_val *step, ct_val *out);
/* The elements a for loop or a filter iterates over, as a new array. */
int ct_iter(ct_ctx *c, const ct_val *v, json_t **items);
/* len(v); -1 with a type error. */
int ct_length(ct_ctx *c, const ct_val *v, long long *n);

/* ---- filters and tests (chat_template_filters.c, chat_template_lists.c, chat_template_tests.c) ---- */

int ct_filter_known(const char *name);
int ct_test_known(const char *name);
int ct_filter(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out);
int ct_test(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, int *r);
/* Argument i by position or by keyword; NULL when not given. */
const ct_val *ct_arg(const ct_args *a, size_t i, const char *name);
/* -1 with a message when a has more than the named parameters or an unknown keyword. */
int ct_args_check(ct_ctx *c, const ct_args *a, const char *fname, const char *const *params);
/* In a function with ct_ctx *c, const ct_args *a and const char *name: returns -1 unless a fits the parameters. */
#define CT_CHECK_ARGS(...)                                                                                             \
    do {                                                                                                               \
        static const char *const params_[] = {__VA_ARGS__, NULL};                                                      \
        if (ct_args_check(c, a, name, params_)) return -1;                                                             \
    } while (0)
int ct_set(ct_ctx *c, ct_val *out, json_t *j); /* *out = j (taken); -1 with a message when j is NULL */
int ct_bool_arg(const ct_args *a, size_t i, const char *name, int dflt);
/* Argument i / name, which must be a string when given. */
int ct_str_arg(ct_ctx *c, const ct_args *a, size_t i, const char *name, const char *fname, const ct_val **out);

/* The sequence filters (chat_template_lists.c), called through ct_filter's table. */
typedef int (*ct_filter_fn)(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out);
int ctf_join(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out);
int ctf_first_last(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out);
int ctf_list(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out);
int ctf_reverse(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out);
int ctf_items(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out);
int ctf_dictsort(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out);
int ctf_sort(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out);
int ctf_unique(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out);
int ctf_minmax(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out);
int ctf_sum(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out);
int ctf_map(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out);
int ctf_select(ct_ctx *c, const char *name, const ct_val *v, const ct_args *a, ct_val *out);

/* ---- methods and globals (chat_template_methods.c) ---- */

enum { CT_G_NONE, CT_G_RANGE, CT_G_NAMESPACE, CT_G_DICT, CT_G_RAISE, CT_G_STRFTIME };
int ct_global_id(const char *name);
int ct_call_global(ct_ctx *c, int id, const ct_args *a, ct_val *out);
/* obj.name(args) for Python's str, dict and list methods and loop.cycle;
 * *found = 0 when obj has no such method. */
int ct_method(ct_ctx *c, const ct_val *obj, const char *name, const ct_args *a, ct_val *out, int *found);
/* Upper, lower, title and capitalize of a string (Python's, Unicode-aware). */
enum { CT_CASE_UPPER, CT_CASE_LOWER, CT_CASE_TITLE, CT_CASE_CAPITALIZE, CT_CASE_JINJA_TITLE };
int ct_case(ct_ctx *c, const char *s, size_t n, int how, ct_val *out);

/* ---- the evaluator (chat_template_eval.c) ---- */

/* Calls a macro value with arguments; the rendered text as a string value. */
int ct_call_macro(ct_ctx *c, const ct_val *m, const ct_args *a, ct_val *out);

#endif
