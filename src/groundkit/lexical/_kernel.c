/*
 * groundkit's compiled BM25 kernel: one segment's exact top k, pruned.
 *
 * Document-at-a-time MaxScore with block-max skipping over a segment's postings
 * (adr/0047-compiled-lexical-kernel.md). It computes exactly what the numpy path in
 * groundkit/lexical/bm25.py computes: each term's weight is
 *     scale * (tf / (tf + (base + per_length * length)))
 * in IEEE double, the weights of a document are added in term-id order starting
 * from 0.0, and the sum is rounded to float once. Compiled with -ffp-contract=off,
 * so no fused multiply-add changes a bit; pruned, exhaustive, compiled and numpy
 * searches therefore return the same scores.
 *
 * Pruning never drops a document that could enter the top k: every bound is an
 * upper bound of a weight under any statistics (a weight grows with tf and shrinks
 * with length), stretched by SLACK, and compared with the threshold shrunk by it.
 *
 * Inputs are buffers (numpy arrays, often read-only memory maps) that the caller
 * has shape-checked; everything is checked again here before it is used
 * (adr/0051-kernel-input-validation.md): each term's span and block range, its scale
 * (finite and positive) and the length normalisation once per call, and every
 * document number and frequency as it is read. A damaged segment raises ValueError
 * and is never read or written out of bounds, whatever the arrays hold.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 128
#define SLACK (1.0 + 1e-6)
#define NO_DOC ((int64_t)1 << 40)
/* Segments of up to this many documents per posting read are scored term at a time. */
#define DENSE_RATIO 4
/* The rarest term gives a first threshold when it has at most this many postings. */
#define FIRST_THRESHOLD_MAX 65536
/* Term at a time, frequencies are checked for 0 this many postings at a time, just
   before they are added: checking a whole term first cost about 9% more time on the
   heaviest term-at-a-time queries at 1M documents (its frequencies read twice from
   memory), runs of this size 2-3%. */
#define CHECK_RUN 2048

#if defined(__GNUC__) || defined(__clang__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE
#endif

typedef struct {
    Py_buffer view;
    int width; /* bytes per item: 1, 2 or 4 (unsigned) */
    Py_ssize_t len;
    int held;
} Counts;

typedef struct {
    Py_ssize_t lo, hi, p; /* postings [lo, hi); p: cursor */
    int64_t cur;          /* the cursor's document, NO_DOC past the end */
    Py_ssize_t b0, nb, blk; /* first block, block count, current block (relative) */
    double scale, ub, w, bb_now;
    double *bb; /* per-block bounds */
    int in_window;
} Term;

typedef struct {
    float s;
    uint32_t d;
} Entry;

static inline uint32_t
count_at(const Counts *c, Py_ssize_t i)
{
    const void *p = c->view.buf;
    switch (c->width) {
    case 1:
        return ((const uint8_t *)p)[i];
    case 2:
        return ((const uint16_t *)p)[i];
    default:
        return ((const uint32_t *)p)[i];
    }
}

static char
kind_of(const Py_buffer *b)
{
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    if (f[0] == '\0' || f[1] != '\0')
        return 0;
    return f[0];
}

static int
unsigned_kind(char k)
{
    return k == 'B' || k == 'H' || k == 'I' || k == 'L' || k == 'Q';
}

static int
get_counts(PyObject *obj, Counts *c, const char *name)
{
    c->held = 0;
    if (PyObject_GetBuffer(obj, &c->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    c->held = 1;
    Py_ssize_t size = c->view.itemsize;
    if (!unsigned_kind(kind_of(&c->view)) || c->view.ndim != 1 ||
        (size != 1 && size != 2 && size != 4)) {
        PyErr_Format(PyExc_TypeError, "%s must be a 1-d uint8, uint16 or uint32 array", name);
        return -1;
    }
    c->width = (int)size;
    c->len = c->view.shape[0];
    return 0;
}

static int
get_typed(PyObject *obj, Py_buffer *b, int *held, char want, Py_ssize_t itemsize,
          int writable, const char *name)
{
    *held = 0;
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, b, flags) < 0)
        return -1;
    *held = 1;
    char k = kind_of(b);
    int ok = b->itemsize == itemsize;
    if (want == 'u')
        ok = ok && unsigned_kind(k);
    else if (want == 'i')
        ok = ok && (k == 'i' || k == 'l' || k == 'q');
    else
        ok = ok && k == want;
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s has the wrong element type", name);
        return -1;
    }
    return 0;
}

/* Bounds of one posting's weight: what pruning compares with the threshold. */
static inline double
bound(double scale, double tf, double len, double base, double per_length)
{
    return scale * (tf / (tf + (base + per_length * len))) * SLACK;
}

/* Worse entries first: lower score, or the same score and a later document. */
static inline int
worse(Entry a, Entry b)
{
    return a.s < b.s || (a.s == b.s && a.d > b.d);
}

static void
heap_down(Entry *h, Py_ssize_t n, Py_ssize_t i)
{
    for (;;) {
        Py_ssize_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && worse(h[l], h[m]))
            m = l;
        if (r < n && worse(h[r], h[m]))
            m = r;
        if (m == i)
            return;
        Entry t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void
heap_up(Entry *h, Py_ssize_t i)
{
    while (i > 0) {
        Py_ssize_t parent = (i - 1) / 2;
        if (!worse(h[i], h[parent]))
            return;
        Entry t = h[i];
        h[i] = h[parent];
        h[parent] = t;
        i = parent;
    }
}

/* The k-th largest of v[0..n) (1 <= k <= n), reordering v: Hoare's selection. */
static double
kth_largest(double *v, Py_ssize_t n, Py_ssize_t k)
{
    Py_ssize_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        double pivot = v[lo + (hi - lo) / 2];
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] > pivot)
                i++;
            while (v[j] < pivot)
                j--;
            if (i <= j) {
                double t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                j--;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            return v[want];
    }
    return v[want];
}

/* What a search found wrong with a segment (Seg.bad), each with its message. */
enum { FINE, BAD_DOC, BAD_TF, BAD_BOUND };

static const char *const damage[] = {
    NULL,
    "a posting names a document the segment does not hold",
    "a posting has a term frequency of 0",
    "a block's largest term frequency is 0",
};

typedef struct {
    const uint32_t *docs;
    Py_ssize_t n_postings;
    Counts tfs, lengths, bmax, bmin;
    const uint8_t *allow1, *allow2;
    double base, per_length;
    int bad; /* FINE, or what was found wrong: the search stops there */
} Seg;

static inline int
allowed(const Seg *s, uint32_t d)
{
    return (!s->allow1 || s->allow1[d]) && (!s->allow2 || s->allow2[d]);
}

static inline uint32_t
doc_at(Seg *s, Py_ssize_t i)
{
    uint32_t d = s->docs[i];
    if ((Py_ssize_t)d >= s->lengths.len) {
        s->bad = BAD_DOC;
        return 0;
    }
    return d;
}

/* The weight of posting i (document d, checked by the caller). A frequency of 0 is
   damage: it would score a document that holds no such term. */
static inline double
weight_at(Seg *s, const Term *t, Py_ssize_t i, uint32_t d)
{
    uint32_t count = count_at(&s->tfs, i);
    if (count == 0)
        s->bad = BAD_TF;
    double tf = (double)count;
    double len = (double)count_at(&s->lengths, d);
    return t->scale * (tf / (tf + (s->base + s->per_length * len)));
}

static inline Py_ssize_t
block_end(const Term *t, Py_ssize_t j)
{
    Py_ssize_t e = t->lo + (j + 1) * BLOCK;
    return e < t->hi ? e : t->hi;
}

/* First posting of t at or after position from, inside block j, whose document is >= d. */
static inline Py_ssize_t
seek_in_block(Seg *s, const Term *t, Py_ssize_t from, Py_ssize_t j, uint32_t d)
{
    Py_ssize_t lo = t->lo + j * BLOCK, hi = block_end(t, j);
    if (from > lo)
        lo = from;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (s->docs[mid] < d)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Move t's block to the first whose last document is >= d (never backwards);
   returns 0 when no block is left. */
static inline int
shallow(Seg *s, Term *t, int64_t d)
{
    while (t->blk < t->nb && (int64_t)s->docs[block_end(t, t->blk) - 1] < d)
        t->blk++;
    return t->blk < t->nb;
}

/* Move t's cursor to its first posting whose document is >= d. */
static inline void
seek(Seg *s, Term *t, int64_t d)
{
    if (t->cur >= d)
        return;
    if (!shallow(s, t, d)) {
        t->p = t->hi;
        t->cur = NO_DOC;
        return;
    }
    t->p = seek_in_block(s, t, t->p, t->blk, (uint32_t)d);
    t->cur = t->p < t->hi ? (int64_t)s->docs[t->p] : NO_DOC;
}

/* Move t's cursor past its current posting. */
static inline void
step(Seg *s, Term *t)
{
    t->p++;
    t->cur = t->p < t->hi ? (int64_t)s->docs[t->p] : NO_DOC;
}

static inline void
offer(Entry *heap, Py_ssize_t k, Py_ssize_t *filled, Entry entry)
{
    if (*filled < k) {
        heap[*filled] = entry;
        heap_up(heap, *filled);
        (*filled)++;
    }
    else if (worse(heap[0], entry)) {
        heap[0] = entry;
        heap_down(heap, *filled, 0);
    }
}

/* Whether any of c[lo..hi) is 0. Kept out of line: on its own the loop is vectorised,
   so the check costs little next to the scattered adds that follow (under 1% more
   instructions than adding without it; a test inside the adding loop cost 15%). */
#define HAS_ZERO(T)                                                                         \
    {                                                                                      \
        const T *v = (const T *)c->view.buf;                                               \
        unsigned char zero = 0;                                                            \
        for (Py_ssize_t p = lo; p < hi; p++)                                               \
            zero |= v[p] == 0;                                                             \
        return zero;                                                                       \
    }

static NOINLINE int
any_zero(const Counts *c, Py_ssize_t lo, Py_ssize_t hi)
{
    if (c->width == 1)
        HAS_ZERO(uint8_t)
    if (c->width == 2)
        HAS_ZERO(uint16_t)
    HAS_ZERO(uint32_t)
}

/* One term's weights added into acc; documents first touched are listed in touched.
   Every weight is above 0 here (frequencies of 0 are refused before a term is added,
   and the caller goes term at a time only when the smallest weight its statistics allow
   is a normal double), so acc[d] == 0 means d was not touched yet. Whatever the arrays
   hold, a posting appends at most one entry, and touched has a slot per posting read
   and one more (the branchless append writes one past the last it keeps): no input
   writes past it. */
#define ADD_TERM(WEIGHT)                                                                    \
    for (Py_ssize_t p = lo; p < hi; p++) {                                                 \
        uint32_t d = docs[p];                                                              \
        if ((Py_ssize_t)d >= n_docs) {                                                     \
            s->bad = BAD_DOC;                                                              \
            return 0;                                                                      \
        }                                                                                  \
        double before = acc[d];                                                            \
        touched[n_touched] = d; /* kept only if d was untouched: no branch to mispredict */ \
        n_touched += before == 0.0;                                                        \
        acc[d] = before + (WEIGHT);                                                        \
    }

#define ADD_COUNTS(TF_T, LEN_T)                                                             \
    {                                                                                      \
        const TF_T *tf = (const TF_T *)s->tfs.view.buf;                                    \
        const LEN_T *len = (const LEN_T *)s->lengths.view.buf;                             \
        ADD_TERM(scale * ((double)tf[p] / ((double)tf[p] + (base + per_length *          \
                                                              (double)len[d]))))           \
    }

#define ADD_BY_LENGTH(TF_T)                                                                 \
    switch (s->lengths.width) {                                                            \
    case 1:                                                                                \
        ADD_COUNTS(TF_T, uint8_t) break;                                                   \
    case 2:                                                                                \
        ADD_COUNTS(TF_T, uint16_t) break;                                                  \
    default:                                                                               \
        ADD_COUNTS(TF_T, uint32_t) break;                                                  \
    }

/* Term at a time into one accumulator per document: when a segment is small next to
   the postings read, cheaper than going document at a time. Terms are added in
   term-id order starting from 0.0, so every sum is the one the other paths make.
   touched has one slot more than the terms have postings. Returns how many entries the
   heap holds (0 with s->bad set when a posting is damaged). */
static Py_ssize_t
accumulate(Seg *s, Term *terms, Py_ssize_t m, double *restrict acc, uint32_t *restrict touched,
           Py_ssize_t n_docs, Entry *heap, Py_ssize_t k, double floor_score, Py_ssize_t *scored)
{
    const uint32_t *restrict docs = s->docs;
    const double base = s->base, per_length = s->per_length;
    Py_ssize_t n_touched = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        const double scale = terms[i].scale;
        /* A run at a time: its frequencies checked, then added while still in cache. */
        for (Py_ssize_t from = terms[i].lo; from < terms[i].hi; from += CHECK_RUN) {
            const Py_ssize_t lo = from;
            const Py_ssize_t hi = from + CHECK_RUN < terms[i].hi ? from + CHECK_RUN : terms[i].hi;
            if (any_zero(&s->tfs, lo, hi)) {
                s->bad = BAD_TF;
                return 0;
            }
            switch (s->tfs.width) {
            case 1:
                ADD_BY_LENGTH(uint8_t) break;
            case 2:
                ADD_BY_LENGTH(uint16_t) break;
            default:
                ADD_BY_LENGTH(uint32_t) break;
            }
        }
    }
    float floor32 = (float)floor_score;
    Py_ssize_t filled = 0, kept = 0;
    float worst = 0.0f; /* the heap's worst score once it is full */
    for (Py_ssize_t i = 0; i < n_touched; i++) {
        uint32_t d = touched[i];
        float score = (float)acc[d];
        /* Most documents lose to a full heap: one compare, before anything else. An
           equal score still goes on, since the lower document wins the tie. */
        if (filled == k && score < worst)
            continue;
        if (!allowed(s, d) || !(floor_score > 0.0 ? score >= floor32 : score > 0.0f))
            continue;
        Entry entry = {score, d};
        kept++;
        offer(heap, k, &filled, entry);
        if (filled == k)
            worst = heap[0].s;
    }
    *scored = kept;
    return filled;
}

/* The k-th best weight of the rarest term among allowed documents, or 0: each of those
   k documents scores at least that much, so it is a threshold before any is scored. */
static double
first_threshold(Seg *s, Term *terms, Py_ssize_t m, Py_ssize_t k)
{
    Py_ssize_t rare = 0;
    for (Py_ssize_t i = 1; i < m; i++)
        if (terms[i].hi - terms[i].lo < terms[rare].hi - terms[rare].lo)
            rare = i;
    Term *r = &terms[rare];
    Py_ssize_t size = r->hi - r->lo;
    if (size < k || size > FIRST_THRESHOLD_MAX)
        return 0.0;
    double *weights = PyMem_RawMalloc((size_t)size * sizeof(double));
    if (!weights)
        return 0.0; /* only a head start: the search is exact without it */
    Py_ssize_t n = 0;
    for (Py_ssize_t i = r->lo; i < r->hi; i++) {
        uint32_t d = doc_at(s, i);
        if (s->bad)
            break;
        if (allowed(s, d))
            weights[n++] = weight_at(s, r, i, d);
    }
    double limit = (n >= k && !s->bad) ? kth_largest(weights, n, k) : 0.0;
    PyMem_RawFree(weights);
    return limit;
}

/* Essential terms are order[ess..m-1]: the rest have bounds summing below cut. */
static inline Py_ssize_t
essential_from(const Term *terms, const Py_ssize_t *order, Py_ssize_t m, double cut)
{
    double run = 0.0;
    Py_ssize_t ess = 0;
    while (ess < m && (run += terms[order[ess]].ub) < cut)
        ess++;
    return ess;
}

/* Sort idx[0..n) by key ascending (ties: smaller index first); n is a query's terms. */
static void
sort_by(Py_ssize_t *idx, Py_ssize_t n, const Term *terms, int window)
{
    for (Py_ssize_t i = 1; i < n; i++) {
        Py_ssize_t x = idx[i], j = i;
        double kx = window ? terms[x].bb_now : terms[x].ub;
        while (j > 0) {
            Py_ssize_t y = idx[j - 1];
            double ky = window ? terms[y].bb_now : terms[y].ub;
            if (ky < kx || (ky == kx && y < x))
                break;
            idx[j] = y;
            j--;
        }
        idx[j] = x;
    }
}

/* Document at a time: MaxScore over windows of documents, with block-max bounds.

   A window is [d, upto]: d the next document under a globally essential term, upto
   the last document of the current block of the globally essential term whose block
   ends first. Inside it each term is bounded by its largest block bound over the
   window. A window whose bounds cannot reach the threshold is skipped whole; otherwise
   the terms are split again by their window bounds, and only documents holding a
   window-essential term are scored. */
static Py_ssize_t
maxscore(Seg *s, Term *terms, Py_ssize_t *order, Py_ssize_t m, double *bbs, Entry *heap,
         Py_ssize_t k, double theta, double floor_score, Py_ssize_t *scored)
{
    Py_ssize_t n_docs = s->lengths.len;
    Py_ssize_t *win = order + m; /* window order, the second half of the buffer */
    Py_ssize_t *hit = order + 2 * m; /* terms holding the candidate, the third */
    double *at = bbs;
    for (Py_ssize_t i = 0; i < m; i++) {
        Term *t = &terms[i];
        t->bb = at;
        for (Py_ssize_t j = 0; j < t->nb; j++) {
            uint32_t top = count_at(&s->bmax, t->b0 + j);
            if (top == 0)
                s->bad = BAD_BOUND; /* would hide the block's documents */
            at[j] = bound(t->scale, (double)top, (double)count_at(&s->bmin, t->b0 + j),
                          s->base, s->per_length);
        }
        at += t->nb;
        t->cur = t->p < t->hi ? (int64_t)s->docs[t->p] : NO_DOC;
        t->w = 0.0;
    }
    if (s->bad)
        return 0;
    sort_by(order, m, terms, 0);
    double limit = theta > floor_score ? theta : floor_score;
    if (limit <= 0.0)
        limit = first_threshold(s, terms, m, k);
    double cut = limit / SLACK;
    Py_ssize_t ess = essential_from(terms, order, m, cut);
    Py_ssize_t filled = 0;
    float floor32 = (float)floor_score;
    while (ess < m && !s->bad) {
        int64_t d = NO_DOC;
        for (Py_ssize_t e = ess; e < m; e++)
            if (terms[order[e]].cur < d)
                d = terms[order[e]].cur;
        if (d == NO_DOC)
            break;
        /* The window and each term's bound inside it. */
        int64_t upto = NO_DOC;
        for (Py_ssize_t i = 0; i < m; i++) {
            Term *t = &terms[i];
            t->in_window = t->cur != NO_DOC && shallow(s, t, d);
        }
        for (Py_ssize_t e = ess; e < m; e++) {
            Term *t = &terms[order[e]];
            if (t->in_window) {
                int64_t last = s->docs[block_end(t, t->blk) - 1];
                if (last < upto)
                    upto = last;
            }
        }
        double bsum = 0.0;
        Py_ssize_t n_win = 0;
        for (Py_ssize_t i = 0; i < m; i++) {
            Term *t = &terms[i];
            t->bb_now = 0.0;
            if (!t->in_window)
                continue;
            if ((int64_t)s->docs[t->lo + t->blk * BLOCK] > upto) {
                t->in_window = 0; /* no posting inside the window */
                continue;
            }
            double top = t->bb[t->blk];
            for (Py_ssize_t j = t->blk + 1;
                 j < t->nb && (int64_t)s->docs[t->lo + j * BLOCK] <= upto; j++)
                if (t->bb[j] > top)
                    top = t->bb[j];
            t->bb_now = top;
            bsum += top;
            win[n_win++] = i;
        }
        if (bsum >= cut && upto != NO_DOC) {
            /* Window-essential terms are win[wess..n_win-1]; rest bounds the others. */
            sort_by(win, n_win, terms, 1);
            Py_ssize_t wess = 0;
            double rest = 0.0;
            while (wess < n_win && rest + terms[win[wess]].bb_now < cut)
                rest += terms[win[wess++]].bb_now;
            int64_t x = NO_DOC;
            for (Py_ssize_t e = wess; e < n_win; e++) {
                Term *t = &terms[win[e]];
                seek(s, t, d);
                if (t->cur < x)
                    x = t->cur;
            }
            while (x <= upto) {
                if (x >= n_docs) {
                    s->bad = BAD_DOC;
                    break;
                }
                /* One pass over the window-essential cursors: the weights at x, each
                   moved past x, and the next candidate. */
                double partial = 0.0;
                Py_ssize_t n_hit = 0;
                int ok = allowed(s, (uint32_t)x);
                int64_t next = NO_DOC;
                for (Py_ssize_t e = wess; e < n_win; e++) {
                    Term *t = &terms[win[e]];
                    if (t->cur == x) {
                        if (ok) {
                            t->w = weight_at(s, t, t->p, (uint32_t)x);
                            partial += t->w;
                            hit[n_hit++] = win[e];
                        }
                        step(s, t);
                    }
                    if (t->cur < next)
                        next = t->cur;
                }
                if (ok && partial + rest >= cut) {
                    /* The others, in decreasing bound, while the rest can still reach. */
                    double left = rest;
                    int pruned = 0;
                    for (Py_ssize_t e = wess - 1; e >= 0; e--) {
                        if (partial + left < cut) {
                            pruned = 1;
                            break;
                        }
                        Term *t = &terms[win[e]];
                        left -= t->bb_now;
                        seek(s, t, x);
                        if (t->cur == x) {
                            t->w = weight_at(s, t, t->p, (uint32_t)x);
                            partial += t->w;
                            hit[n_hit++] = win[e];
                        }
                    }
                    if (!pruned && partial >= cut) {
                        (*scored)++;
                        /* The exact sum, in term-id order (every path adds in it). */
                        double exact = 0.0;
                        for (Py_ssize_t i = 0; i < m; i++)
                            exact += terms[i].w;
                        float score = (float)exact;
                        if (floor_score > 0.0 ? score >= floor32 : score > 0.0f) {
                            Entry entry = {score, (uint32_t)x};
                            offer(heap, k, &filled, entry);
                        }
                        if (filled == k && (double)heap[0].s > limit) {
                            limit = (double)heap[0].s;
                            cut = limit / SLACK;
                            ess = essential_from(terms, order, m, cut);
                            wess = 0;
                            rest = 0.0;
                            while (wess < n_win && rest + terms[win[wess]].bb_now < cut)
                                rest += terms[win[wess++]].bb_now;
                            next = NO_DOC;
                            for (Py_ssize_t e = wess; e < n_win; e++)
                                if (terms[win[e]].cur < next)
                                    next = terms[win[e]].cur;
                        }
                    }
                }
                for (Py_ssize_t h = 0; h < n_hit; h++)
                    terms[hit[h]].w = 0.0;
                if (wess == n_win)
                    break; /* the rest of the window cannot reach */
                x = next;
            }
        }
        if (s->bad)
            break;
        for (Py_ssize_t e = ess; e < m; e++)
            seek(s, &terms[order[e]], upto + 1);
    }
    return filled;
}

/* The hits best first as [(key, score, tied, document)]: tied when the score and the
   tie key equal a neighbour's (the caller orders those by their full canonical key). */
static PyObject *
ranked_hits(const Entry *heap, Py_ssize_t found, const int64_t *keys, const uint64_t *order,
            Py_ssize_t scored)
{
    PyObject *hits = PyList_New(found);
    if (!hits)
        return NULL;
    for (Py_ssize_t i = 0; i < found; i++) {
        int tied = 0;
        for (Py_ssize_t j = i - 1; j <= i + 1; j += 2) {
            if (j < 0 || j >= found || heap[j].s != heap[i].s)
                continue;
            const uint64_t *a = order + 3 * (Py_ssize_t)heap[i].d;
            const uint64_t *b = order + 3 * (Py_ssize_t)heap[j].d;
            if (a[0] == b[0] && a[1] == b[1] && a[2] == b[2])
                tied = 1;
        }
        PyObject *hit = Py_BuildValue("(LdOI)", (long long)keys[heap[i].d], (double)heap[i].s,
                                      tied ? Py_True : Py_False, (unsigned int)heap[i].d);
        if (!hit) {
            Py_DECREF(hits);
            return NULL;
        }
        PyList_SET_ITEM(hits, i, hit);
    }
    return Py_BuildValue("(Nn)", hits, scored);
}

static PyObject *
top_k(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"docs", "tfs", "lengths", "term_max_tf", "term_min_len",
                               "block_ptr", "block_max_tf", "block_min_len", "keys",
                               "order", "spans", "scales", "base", "per_length", "allow1",
                               "allow2", "k", "theta", "floor", "mode", NULL};
    PyObject *o_docs, *o_tfs, *o_len, *o_tmax, *o_tmin, *o_bptr, *o_bmax, *o_bmin, *o_keys;
    PyObject *o_order, *o_spans, *o_scales;
    PyObject *o_a1, *o_a2;
    double base, per_length, theta, floor_score;
    Py_ssize_t k;
    int mode = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOOOOddOOndd|i", keywords, &o_docs,
                                     &o_tfs, &o_len, &o_tmax, &o_tmin, &o_bptr, &o_bmax, &o_bmin,
                                     &o_keys, &o_order, &o_spans, &o_scales, &base, &per_length,
                                     &o_a1, &o_a2, &k, &theta, &floor_score, &mode))
        return NULL;

    Seg s;
    memset(&s, 0, sizeof s);
    Counts tmax = {0}, tmin = {0};
    Py_buffer b_docs, b_bptr, b_keys, b_order, b_a1, b_a2;
    int h_docs = 0, h_bptr = 0, h_keys = 0, h_order = 0, h_a1 = 0, h_a2 = 0;
    PyObject *spans_seq = NULL, *scales_seq = NULL;
    Term *terms = NULL;
    double *bbs = NULL, *acc = NULL;
    uint32_t *touched = NULL;
    Entry *heap = NULL;
    Py_ssize_t *order = NULL;
    PyObject *result = NULL;
    Py_ssize_t found = 0, scored = 0;

    if (get_typed(o_docs, &b_docs, &h_docs, 'u', 4, 0, "docs") < 0 ||
        get_counts(o_tfs, &s.tfs, "tfs") < 0 || get_counts(o_len, &s.lengths, "lengths") < 0 ||
        get_counts(o_tmax, &tmax, "term_max_tf") < 0 ||
        get_counts(o_tmin, &tmin, "term_min_len") < 0 ||
        get_typed(o_bptr, &b_bptr, &h_bptr, 'i', 8, 0, "block_ptr") < 0 ||
        get_counts(o_bmax, &s.bmax, "block_max_tf") < 0 ||
        get_counts(o_bmin, &s.bmin, "block_min_len") < 0 ||
        get_typed(o_keys, &b_keys, &h_keys, 'i', 8, 0, "keys") < 0 ||
        get_typed(o_order, &b_order, &h_order, 'u', 8, 0, "order") < 0)
        goto done;
    spans_seq = PySequence_Fast(o_spans, "spans must be a sequence of (lo, hi, term index)");
    scales_seq = PySequence_Fast(o_scales, "scales must be a sequence of floats");
    if (!spans_seq || !scales_seq)
        goto done;
    Py_ssize_t n_docs = s.lengths.len;
    if (o_a1 != Py_None) {
        if (get_typed(o_a1, &b_a1, &h_a1, '?', 1, 0, "allow1") < 0)
            goto done;
        if (b_a1.len != n_docs) {
            PyErr_SetString(PyExc_ValueError, "allow1 does not fit the segment");
            goto done;
        }
        s.allow1 = (const uint8_t *)b_a1.buf;
    }
    if (o_a2 != Py_None) {
        if (get_typed(o_a2, &b_a2, &h_a2, '?', 1, 0, "allow2") < 0)
            goto done;
        if (b_a2.len != n_docs) {
            PyErr_SetString(PyExc_ValueError, "allow2 does not fit the segment");
            goto done;
        }
        s.allow2 = (const uint8_t *)b_a2.buf;
    }
    s.docs = (const uint32_t *)b_docs.buf;
    s.n_postings = b_docs.len / 4;
    s.base = base;
    s.per_length = per_length;
    if (s.tfs.len != s.n_postings || s.bmax.len != s.bmin.len || tmax.len != tmin.len) {
        PyErr_SetString(PyExc_ValueError, "segment arrays do not fit together");
        goto done;
    }
    Py_ssize_t m = PySequence_Fast_GET_SIZE(scales_seq);
    if (PySequence_Fast_GET_SIZE(spans_seq) != m) {
        PyErr_SetString(PyExc_ValueError, "one span and one scale per term");
        goto done;
    }
    const int64_t *block_ptr = (const int64_t *)b_bptr.buf;
    Py_ssize_t n_terms = b_bptr.len / 8 - 1;
    if (b_keys.len / 8 != n_docs || b_order.len / 8 != 3 * n_docs) {
        PyErr_SetString(PyExc_ValueError, "keys and order do not fit the segment");
        goto done;
    }
    if (k < 1) {
        PyErr_SetString(PyExc_ValueError, "k must be at least 1");
        goto done;
    }
    /* Statistics the weights are computed from: a weight must be a finite number,
       never 0 or below, for the bounds and the accumulator's bookkeeping to hold. */
    if (!(base >= 0.0 && base <= DBL_MAX) || !(per_length >= 0.0 && per_length <= DBL_MAX)) {
        PyErr_SetString(PyExc_ValueError,
                        "the length normalisation is not a finite number of at least 0");
        goto done;
    }
    if (theta != theta || floor_score != floor_score) {
        PyErr_SetString(PyExc_ValueError, "a score threshold is not a number");
        goto done;
    }
    if (m == 0) {
        result = Py_BuildValue("(Nn)", PyList_New(0), (Py_ssize_t)0);
        goto done;
    }
    terms = PyMem_Calloc((size_t)m, sizeof(Term));
    order = PyMem_Calloc((size_t)(3 * m), sizeof(Py_ssize_t));
    heap = PyMem_Calloc((size_t)k, sizeof(Entry));
    if (!terms || !order || !heap) {
        PyErr_NoMemory();
        goto done;
    }
    /* The longest document the lengths can describe: with it, the smallest weight a
       term can give (a frequency of 1 in that document). */
    const double longest = s.lengths.width == 1   ? 255.0
                           : s.lengths.width == 2 ? 65535.0
                                                  : 4294967295.0;
    int positive = 1; /* every weight a normal double above 0: term at a time is safe */
    Py_ssize_t total_blocks = 0, postings = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        Term *t = &terms[i];
        Py_ssize_t j;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(spans_seq, i), "nnn", &t->lo, &t->hi, &j))
            goto done;
        t->p = t->lo;
        t->scale = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(scales_seq, i));
        if (t->scale == -1.0 && PyErr_Occurred())
            goto done;
        if (!(t->scale > 0.0 && t->scale <= DBL_MAX)) {
            PyErr_SetString(PyExc_ValueError,
                            "a query term's weight is not a finite number above 0 (the "
                            "segment's term statistics do not fit together)");
            goto done;
        }
        if (j < 0 || j >= n_terms || j >= tmax.len) {
            PyErr_SetString(PyExc_ValueError, "a term's postings do not fit the segment");
            goto done;
        }
        /* Compared before any arithmetic on them: a damaged pointer cannot overflow. */
        int64_t first = block_ptr[j], end = block_ptr[j + 1];
        if (t->lo < 0 || t->hi <= t->lo || t->hi > s.n_postings || first < 0 || end < first ||
            end > (int64_t)s.bmax.len || end - first != (t->hi - t->lo + BLOCK - 1) / BLOCK) {
            PyErr_SetString(PyExc_ValueError, "a term's postings do not fit the segment");
            goto done;
        }
        t->b0 = (Py_ssize_t)first;
        t->nb = (Py_ssize_t)(end - first);
        if (count_at(&tmax, j) == 0) {
            PyErr_SetString(PyExc_ValueError, "a term's largest frequency is 0");
            goto done;
        }
        t->ub = bound(t->scale, (double)count_at(&tmax, j), (double)count_at(&tmin, j), base,
                      per_length);
        positive &= t->scale * (1.0 / (1.0 + (base + per_length * longest))) >= DBL_MIN;
        if (t->hi - t->lo > PY_SSIZE_T_MAX / 16 - postings) {
            PyErr_SetString(PyExc_ValueError, "a query names more postings than can be counted");
            goto done;
        }
        total_blocks += t->nb;
        postings += t->hi - t->lo;
        order[i] = i;
    }
    /* Term at a time needs every weight above 0 (see ADD_TERM); statistics so extreme
       that one could round to 0 are scored document at a time, with the same result. */
    int dense = positive && (mode == 1 || (mode < 0 && n_docs <= DENSE_RATIO * postings));
    if (dense) {
        acc = PyMem_Calloc((size_t)n_docs, sizeof(double));
        /* A slot per posting, not per document: only as many are written as documents
           are touched (so no more memory is used), but no input can write past them. */
        touched = PyMem_Malloc(((size_t)postings + 1) * sizeof(uint32_t));
    }
    else
        bbs = PyMem_Malloc((size_t)total_blocks * sizeof(double));
    if (dense ? !acc || !touched : !bbs) {
        PyErr_NoMemory();
        goto done;
    }

    Py_BEGIN_ALLOW_THREADS;
    if (dense) {
        found = accumulate(&s, terms, m, acc, touched, n_docs, heap, k, floor_score, &scored);
    }
    else
        found = maxscore(&s, terms, order, m, bbs, heap, k, theta, floor_score, &scored);
    /* Best first: move the worst to the end, repeatedly. */
    for (Py_ssize_t n = found; n > 1; n--) {
        Entry t = heap[0];
        heap[0] = heap[n - 1];
        heap[n - 1] = t;
        heap_down(heap, n - 1, 0);
    }
    Py_END_ALLOW_THREADS;

    if (s.bad) {
        PyErr_SetString(PyExc_ValueError, damage[s.bad]);
        goto done;
    }
    result = ranked_hits(heap, found, (const int64_t *)b_keys.buf,
                         (const uint64_t *)b_order.buf, scored);

done:
    PyMem_Free(acc);
    PyMem_Free(touched);
    PyMem_Free(bbs);
    PyMem_Free(heap);
    PyMem_Free(order);
    PyMem_Free(terms);
    if (h_docs)
        PyBuffer_Release(&b_docs);
    if (s.tfs.held)
        PyBuffer_Release(&s.tfs.view);
    if (s.lengths.held)
        PyBuffer_Release(&s.lengths.view);
    if (tmax.held)
        PyBuffer_Release(&tmax.view);
    if (tmin.held)
        PyBuffer_Release(&tmin.view);
    if (s.bmax.held)
        PyBuffer_Release(&s.bmax.view);
    if (s.bmin.held)
        PyBuffer_Release(&s.bmin.view);
    if (h_bptr)
        PyBuffer_Release(&b_bptr);
    Py_XDECREF(spans_seq);
    Py_XDECREF(scales_seq);
    if (h_keys)
        PyBuffer_Release(&b_keys);
    if (h_order)
        PyBuffer_Release(&b_order);
    if (h_a1)
        PyBuffer_Release(&b_a1);
    if (h_a2)
        PyBuffer_Release(&b_a2);
    return result;
}

/* Where a segment holds each of a query's term ids: [(term id, index, first posting,
   end of postings)] for the ids it holds, in the order given. */
static PyObject *
locate(PyObject *self, PyObject *args)
{
    PyObject *o_terms, *o_ptr, *ids;
    if (!PyArg_ParseTuple(args, "OOO", &o_terms, &o_ptr, &ids))
        return NULL;
    Py_buffer b_terms, b_ptr;
    int h_terms = 0, h_ptr = 0;
    PyObject *out = NULL, *seq = NULL;
    if (get_typed(o_terms, &b_terms, &h_terms, 'i', 4, 0, "terms") < 0 ||
        get_typed(o_ptr, &b_ptr, &h_ptr, 'i', 8, 0, "term_ptr") < 0)
        goto done;
    seq = PySequence_Fast(ids, "ids must be a sequence");
    if (!seq)
        goto done;
    const int32_t *terms = (const int32_t *)b_terms.buf;
    const int64_t *ptr = (const int64_t *)b_ptr.buf;
    Py_ssize_t n = b_terms.len / 4;
    if (b_ptr.len / 8 != n + 1) {
        PyErr_SetString(PyExc_ValueError, "a segment's term table does not fit together");
        goto done;
    }
    out = PyList_New(0);
    if (!out)
        goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < count; i++) {
        long long id = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (id == -1 && PyErr_Occurred()) {
            Py_CLEAR(out);
            goto done;
        }
        Py_ssize_t lo = 0, hi = n;
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if ((long long)terms[mid] < id)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == n || (long long)terms[lo] != id)
            continue;
        if (ptr[lo] < 0 || ptr[lo + 1] < ptr[lo]) {
            PyErr_SetString(PyExc_ValueError, "a segment's term table does not fit together");
            Py_CLEAR(out);
            goto done;
        }
        PyObject *entry = Py_BuildValue("(LnLL)", id, lo, (long long)ptr[lo], (long long)ptr[lo + 1]);
        if (!entry || PyList_Append(out, entry) < 0) {
            Py_XDECREF(entry);
            Py_CLEAR(out);
            goto done;
        }
        Py_DECREF(entry);
    }
done:
    Py_XDECREF(seq);
    if (h_terms)
        PyBuffer_Release(&b_terms);
    if (h_ptr)
        PyBuffer_Release(&b_ptr);
    return out;
}

/* The ids of terms in a vocabulary pack: ``text`` holds every term's UTF-8 bytes in
   byte order, term i at text[starts[i]:starts[i + 1]], with id ids[i]. Returns one id
   per term given, 0 for a term the pack does not hold. */
static PyObject *
find_terms(PyObject *self, PyObject *args)
{
    PyObject *o_text, *o_starts, *o_ids, *terms;
    if (!PyArg_ParseTuple(args, "OOOO", &o_text, &o_starts, &o_ids, &terms))
        return NULL;
    Py_buffer b_text, b_starts, b_ids;
    int h_text = 0, h_starts = 0, h_ids = 0;
    PyObject *out = NULL, *seq = NULL;
    if (get_typed(o_text, &b_text, &h_text, 'u', 1, 0, "text") < 0 ||
        get_typed(o_starts, &b_starts, &h_starts, 'i', 8, 0, "starts") < 0 ||
        get_typed(o_ids, &b_ids, &h_ids, 'i', 8, 0, "ids") < 0)
        goto done;
    seq = PySequence_Fast(terms, "terms must be a sequence of str");
    if (!seq)
        goto done;
    const unsigned char *text = (const unsigned char *)b_text.buf;
    const int64_t *starts = (const int64_t *)b_starts.buf;
    const int64_t *ids = (const int64_t *)b_ids.buf;
    Py_ssize_t n = b_ids.len / 8;
    if (b_starts.len / 8 != n + 1 || (n && (starts[0] != 0 || starts[n] != b_text.len))) {
        PyErr_SetString(PyExc_ValueError, "a vocabulary pack does not fit together");
        goto done;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    out = PyList_New(count);
    if (!out)
        goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t size;
        const char *want = PyUnicode_AsUTF8AndSize(PySequence_Fast_GET_ITEM(seq, i), &size);
        if (!want) {
            Py_CLEAR(out);
            goto done;
        }
        Py_ssize_t lo = 0, hi = n;
        long long found = 0;
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            int64_t a = starts[mid], b = starts[mid + 1];
            if (a < 0 || b < a || b > b_text.len) {
                PyErr_SetString(PyExc_ValueError, "a vocabulary pack does not fit together");
                Py_CLEAR(out);
                goto done;
            }
            Py_ssize_t len = (Py_ssize_t)(b - a);
            int c = memcmp(text + a, want, (size_t)(len < size ? len : size));
            if (c == 0)
                c = (len > size) - (len < size);
            if (c < 0)
                lo = mid + 1;
            else if (c > 0)
                hi = mid;
            else {
                found = (long long)ids[mid];
                break;
            }
        }
        PyObject *id = PyLong_FromLongLong(found);
        if (!id) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, id);
    }
done:
    Py_XDECREF(seq);
    if (h_text)
        PyBuffer_Release(&b_text);
    if (h_starts)
        PyBuffer_Release(&b_starts);
    if (h_ids)
        PyBuffer_Release(&b_ids);
    return out;
}

static PyMethodDef methods[] = {
    {"find_terms", find_terms, METH_VARARGS,
     "find_terms(text, starts, ids, terms): the id of each term in a vocabulary pack, "
     "0 where it holds none."},
    {"locate", locate, METH_VARARGS,
     "locate(terms, term_ptr, ids): [(term id, index, first posting, end)] for the ids "
     "a segment holds."},
    {"top_k", (PyCFunction)(void (*)(void))top_k, METH_VARARGS | METH_KEYWORDS,
     "One segment's exact top k by (-score, document), pruned. Returns (hits, scored): "
     "[(key, score, tied, document)] best first, and how many documents were scored "
     "exactly."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "groundkit.lexical._kernel",
    "groundkit's compiled BM25 kernel (adr/0047-compiled-lexical-kernel.md).", -1, methods,
};

PyMODINIT_FUNC
PyInit__kernel(void)
{
    return PyModule_Create(&module);
}
