/* lua_box.h — the sandbox a user's Lua function runs in, for every Lua hook
 * of the scheduler and the router (engine/core/policy_lua.c,
 * engine/router/router_lua.c): one copy of the rules, so a script is held
 * to the same limits wherever it plugs in.
 *
 * A script file runs in a state of its own (lbox_open_file): an allocator
 * that holds at most max_memory bytes, only base, table, string, math and
 * utf8, and without everything that could reach outside the state or run
 * beyond the count hook's reach (see sandbox() in lua_box.c for the list
 * and why); math.random seeded, so a script is deterministic for a seed.
 * A caller-owned state (lbox_wrap: a Lua experiment script's own function)
 * is the caller's: neither the cap nor the sandbox applies to it.
 *
 * Every call of the function (lbox_call) runs protected, under a budget of
 * instructions (a count hook, and a call hook charging C calls) and an
 * optional wall-clock deadline, checked at the hooks. Whatever goes wrong
 * (an error raised, the budget or the memory cap run past) comes back as
 * one message that names the script's file and line; nothing unwinds past
 * lbox_call. The hook is saved and restored around each call, so a
 * caller-owned state keeps its own hooks, and budgets nest (a policy
 * calling into a simulator that steps another core keeps its own). */
#ifndef RH_LUA_BOX_H
#define RH_LUA_BOX_H

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* What the messages call things: each front's own words and flags. */
typedef struct lbox_names {
    const char *script;         /* "policy script": the file */
    const char *function;       /* "policy": the global it defines, and who "ran past" a limit */
    const char *signature;      /* "policy(waiting, state)" */
    const char *memory_flag;    /* "--policy-max-memory", named in messages; NULL: none */
    const char *seconds_flag;   /* "--policy-max-seconds"; NULL: none */
} lbox_names;

/* The bytes an owned state holds, against its cap; the bytes it ever
 * allocated (charged to the running budget) and its longest string (which
 * sets the count hook's period). */
typedef struct lbox_mem {
    size_t used, cap;
    uint64_t allocated;
    size_t max_string;
    lua_State *L;
} lbox_mem;

typedef struct lbox {
    lua_State *L;
    bool owned;                 /* opened by lbox_open_file: capped, sandboxed, closed by lbox_close */
    lbox_mem mem;
    int ref;                    /* the function, in L's registry */
    char where[200];            /* "file:line" where it is defined */
    char src[160];              /* its "file:" alone: a message that does not start with it gets where */
    const lbox_names *names;
} lbox;

/* One call's budget. */
typedef struct lbox_budget {
    long long left, limit;
    /* The wall-clock guard, checked at the hooks, so a call stops at the
     * first hook after its deadline; every C loop of the sandbox passes a
     * hook or is charged and bounded (lua_box.c). clock NULL: no guard. */
    double (*clock)(void *ctx);
    void *clock_ctx;
    double deadline, max_seconds;
    const lbox_names *names;
    unsigned calls;
    int period;                 /* instructions between count hooks now */
    lbox_mem *mem;              /* an owned state's allocator, while armed */
    uint64_t alloc_mark;        /* mem->allocated already charged */
    int spent;                  /* raised once: every later hook raises msg again */
    char msg[300];
} lbox_budget;

/* A budget of `instructions`, and of max_seconds by clock from now when
 * both are given (max_seconds > 0). */
lbox_budget lbox_budget_make(const lbox_names *n, long long instructions, double (*clock)(void *ctx), void *ctx,
                             double max_seconds);

/* Opens path in a sandboxed state of its own, runs its chunk under `load`
 * and takes its global names->function into the registry. 0, or -1 with e
 * naming the file (and the line, for a syntax or runtime error); b is left
 * closed. */
int lbox_open_file(lbox *b, const lbox_names *n, const char *path, uint64_t max_memory, uint64_t seed,
                   lbox_budget *load, rh_err *e);

/* A function already in a caller-owned state's registry (ref): 0, or -1
 * when ref is not a function. */
int lbox_wrap(lbox *b, const lbox_names *n, lua_State *L, int ref);

/* Closes an owned state; a wrapped one stays the caller's. */
void lbox_close(lbox *b);

/* Calls f(L) protected, with ud as its one (light userdata) argument; f
 * pushes the function (lua_rawgeti(L, LUA_REGISTRYINDEX, b->ref)) and its
 * arguments, puts its budget in force (lbox_arm), calls it and reads its
 * answer. 0, or -1 with
 * err filled (naming the file and line: the error's own, else where the
 * function is defined). The stack is left as it was, the hook and the
 * running budget restored, and an owned state's garbage of a failed call
 * collected, so the next call starts with its whole cap. */
int lbox_call(lbox *b, lua_CFunction f, void *ud, char *err, size_t errn);

/* Puts the budget in force until lbox_call returns: from here on every
 * instruction and call counts. */
void lbox_arm(lua_State *L, lbox_budget *budget);

/* t[k] = v for the table on the stack's top: how the hooks build their arguments. */
static inline void lbox_set_int(lua_State *L, const char *k, long long v)
{
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, k);
}

static inline void lbox_set_num(lua_State *L, const char *k, double v)
{
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

#endif
