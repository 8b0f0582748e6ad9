/* The compiled data path of the link delayer (see testbed/emulation/delayer/).
 *
 * One thread per process runs an epoll loop over every TAP of every link plus a timerfd:
 * it reads each ready TAP in batches, applies the direction's loss, queue cap, delay and
 * jitter (never reordering), and writes frames to the peer TAP when they are due. The
 * Python delayer keeps the control plane (control socket, TAP creation, validation) and
 * calls the functions below; they take the same mutex as the loop, so a control change
 * lands between two batches. TAPs opened with IFF_VNET_HDR carry a virtio-net header in
 * front of every frame; it is forwarded untouched, so a 64 KB TSO frame crosses a link in
 * one read and one write.
 *
 * Semantics match the Python data path: per-direction FIFO with release time
 * max(now + delay + U[-J, J], previous release), Bernoulli loss from a per-direction PRNG
 * seeded by the caller, drop-tail at `limit` held packets (a GSO frame counts as its
 * segments), a down direction drops every frame (held ones included). Lateness (write time - due time) goes to a per-direction
 * ring of the last 4096 values and to one process-wide log-bucket histogram whose bucket
 * scheme is LatenessHistogram's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define LATE_SAMPLES 4096
#define LATE_SUB_BITS 5
#define HIST_BUCKETS (64 << LATE_SUB_BITS)
#define BIG_FRAME (65536 + 1024)
#define SMALL_FRAME 4096
#define READ_BATCH 16
#define POOL_MAX 256
/* Polling takes at most POLL_SHARE of the thread's time: a token bucket earns
 * POLL_SHARE / (1 - POLL_SHARE) ns of polling per ns the thread sleeps, spends one per ns
 * it polls, and holds at most SPIN_BURST_NS, so a polling burst lasts at most that long
 * (plus one loop iteration). A SCHED_FIFO thread busy for 95 % of a second is throttled
 * by the kernel for the rest of it, which would stall every link; relaying itself is not
 * capped (it is the work), so only polling is budgeted. */
#define POLL_SHARE 0.5
#define SPIN_BURST_NS 500000
#define MAX_EVENTS 256
#define EV_STOP UINT64_MAX
#define EV_TIMER (UINT64_MAX - 1)
#define FRAME_HDR offsetof(struct frame, data)

struct frame {
    struct frame *next;
    int64_t due;
    uint32_t len;
    uint16_t big; /* a BIG_FRAME buffer, recycled through the worker's pool */
    uint16_t segs; /* packets it carries (a GSO frame: its segments), counted in `held` */
    unsigned char data[];
};

/* The virtio-net header in front of every frame (12 bytes, little-endian on the hosts the
 * project runs on). */
#define VNET_HDR_LEN 12
#define VNET_GSO_NONE 0
#define VNET_GSO_ECN 0x80

struct direction {
    int src_fd, dst_fd;
    int watched;
    int up;
    int64_t delay_ns, jitter_ns;
    double loss_pct;
    int64_t limit;
    uint64_t rng;
    struct frame *head, *tail;
    int64_t held; /* packets held: a GSO frame counts as its number of segments */
    int64_t held_bytes; /* bytes of the held frames, virtio-net headers excluded */
    int64_t last_release;
    int64_t scheduled; /* head due time pushed on the heap, -1 if none */
    int64_t *late; /* ring of LATE_SAMPLES, allocated on first release */
    int64_t late_n; /* values written so far (ring index = late_n % LATE_SAMPLES) */
    uint64_t received, forwarded, dropped_loss, dropped_queue, dropped_down, dropped_write,
        read_errors, max_frame;
};

struct heap_item {
    int64_t due;
    int64_t id;
};

struct worker {
    pthread_mutex_t lock;
    pthread_t thread;
    int running;
    int epfd, timerfd, stopfd;
    int64_t armed_at;
    struct direction **dirs;
    int64_t ndirs, capdirs;
    struct heap_item *heap;
    int64_t heap_n, heap_cap;
    uint64_t hist[HIST_BUCKETS];
    uint64_t hist_n, hist_max;
    int sched_prio;
    int64_t spin_ns; /* poll instead of sleeping when the next release is this close */
    int sched_result; /* 0 other, >0 fifo priority obtained, -errno on refusal */
    struct frame *scratch; /* the big buffer the next read lands in */
    struct frame *pool; /* free big buffers: reused, so a 64 KB frame costs no page faults */
    int pool_n;
};

struct shaper_stats {
    uint64_t received, forwarded, dropped_loss, dropped_queue, dropped_down, dropped_write,
        read_errors, max_frame;
    int64_t held, held_bytes;
    int64_t late_p99_ns; /* -1: no frame released yet */
    int64_t late_max_ns;
    int64_t up;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* splitmix64: small, fast, and fully determined by the seed. */
static uint64_t rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *state) { return (rng_next(state) >> 11) * 0x1.0p-53; }

static void hist_add(struct worker *s, int64_t ns) {
    uint64_t v = ns < 0 ? 0 : (uint64_t)ns;
    int bits = v ? 64 - __builtin_clzll(v) : 0;
    int shift = bits > LATE_SUB_BITS ? bits - LATE_SUB_BITS : 0;
    s->hist[((uint64_t)shift << LATE_SUB_BITS) | (v >> shift)]++;
    s->hist_n++;
    if (v > s->hist_max) s->hist_max = v;
}

/* -- heap of directions' head release times (stale entries skipped on pop) -- */
static int heap_push(struct worker *s, int64_t due, int64_t id) {
    if (s->heap_n == s->heap_cap) {
        int64_t cap = s->heap_cap ? s->heap_cap * 2 : 256;
        struct heap_item *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return -ENOMEM;
        s->heap = h;
        s->heap_cap = cap;
    }
    int64_t i = s->heap_n++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (s->heap[p].due <= due) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i].due = due;
    s->heap[i].id = id;
    return 0;
}

static struct heap_item heap_pop(struct worker *s) {
    struct heap_item top = s->heap[0], last = s->heap[--s->heap_n];
    int64_t i = 0, n = s->heap_n;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && s->heap[c + 1].due < s->heap[c].due) c++;
        if (last.due <= s->heap[c].due) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

/* How many packets a frame read from a TAP carries: a GSO frame (gso_type set) is
 * ceil(payload / gso_size) segments on the wire, any other frame one. */
static uint32_t frame_segments(const unsigned char *data, ssize_t len) {
    if (len < VNET_HDR_LEN) return 1;
    unsigned gso_type = data[1] & ~VNET_GSO_ECN;
    uint32_t hdr_len = data[2] | (uint32_t)data[3] << 8;
    uint32_t gso_size = data[4] | (uint32_t)data[5] << 8;
    int64_t payload = (int64_t)len - VNET_HDR_LEN - hdr_len;
    if (gso_type == VNET_GSO_NONE || gso_size == 0 || payload <= 0) return 1;
    return (uint32_t)((payload + gso_size - 1) / gso_size);
}

static struct frame *big_alloc(struct worker *s) {
    struct frame *f = s->pool;
    if (f) {
        s->pool = f->next;
        s->pool_n--;
        return f;
    }
    f = malloc(BIG_FRAME);
    if (f) f->big = 1;
    return f;
}

static void frame_free(struct worker *s, struct frame *f) {
    if (f->big && s->pool_n < POOL_MAX) {
        f->next = s->pool;
        s->pool = f;
        s->pool_n++;
    } else {
        free(f);
    }
}

static void clear_queue(struct worker *s, struct direction *d, uint64_t *counter) {
    struct frame *f = d->head;
    while (f) {
        struct frame *next = f->next;
        frame_free(s, f);
        if (counter) (*counter)++;
        f = next;
    }
    d->head = d->tail = NULL;
    d->held = d->held_bytes = 0;
    d->scheduled = -1;
}

static void unwatch(struct worker *s, struct direction *d) {
    if (d->watched) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, d->src_fd, NULL);
        d->watched = 0;
    }
}

static void emit(struct worker *s, struct direction *d, const unsigned char *data, uint32_t len,
                 int64_t due) {
    if (write(d->dst_fd, data, len) < 0) {
        d->dropped_write++;
        return;
    }
    d->forwarded++;
    int64_t late = now_ns() - due;
    if (!d->late) d->late = malloc(LATE_SAMPLES * sizeof *d->late);
    if (d->late) d->late[d->late_n++ % LATE_SAMPLES] = late;
    hist_add(s, late);
}

/* A read error that means the device is gone (deleted, or the fd detached from it). */
static int device_gone(int err) {
    return err == EBADFD || err == ENODEV || err == EIO || err == EBADF;
}

static void read_direction(struct worker *s, int64_t id, struct direction *d) {
    for (int i = 0; i < READ_BATCH; i++) {
        ssize_t n = read(d->src_fd, s->scratch->data, BIG_FRAME - FRAME_HDR);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) return;
            d->read_errors++;
            if (device_gone(errno)) unwatch(s, d); /* stop polling a deleted TAP */
            return; /* any other error lost one frame at most: go on at the next event */
        }
        int64_t now = now_ns(); /* each frame's own arrival, not the batch's */
        d->received++;
        if ((uint64_t)n > d->max_frame) d->max_frame = (uint64_t)n;
        if (!d->up) {
            d->dropped_down++;
            continue;
        }
        if (d->loss_pct > 0 && rng_unit(&d->rng) * 100.0 < d->loss_pct) {
            d->dropped_loss++;
            continue;
        }
        uint32_t segs = frame_segments(s->scratch->data, n);
        if (d->held + segs > d->limit) {
            d->dropped_queue++;
            continue;
        }
        int64_t delay = d->delay_ns;
        if (d->jitter_ns) {
            double u = rng_unit(&d->rng);
            delay += llround(-(double)d->jitter_ns + u * 2.0 * (double)d->jitter_ns);
            if (delay < 0) delay = 0;
        }
        int64_t release = now + delay;
        if (release < d->last_release) release = d->last_release;
        d->last_release = release;
        if (release <= now && !d->head) {
            emit(s, d, s->scratch->data, (uint32_t)n, release);
            continue;
        }
        if (d->scheduled < 0) { /* the queue is empty: its head's release goes on the heap */
            if (heap_push(s, release, id) < 0) {
                d->dropped_queue++; /* no memory for the heap entry: drop, never strand */
                continue;
            }
            d->scheduled = release;
        }
        struct frame *f;
        if (n <= SMALL_FRAME) {
            f = malloc(sizeof *f + n);
            if (f) {
                f->big = 0;
                memcpy(f->data, s->scratch->data, n);
            }
        } else { /* queue the scratch buffer itself and read the next frame into another */
            struct frame *fresh = big_alloc(s);
            f = fresh ? s->scratch : NULL;
            if (fresh) s->scratch = fresh;
        }
        if (!f) {
            d->dropped_queue++;
            if (!d->head) d->scheduled = -1; /* its heap entry goes stale and is skipped */
            continue;
        }
        f->next = NULL;
        f->due = release;
        f->len = (uint32_t)n;
        f->segs = (uint16_t)(segs > UINT16_MAX ? UINT16_MAX : segs);
        if (d->tail) d->tail->next = f; else d->head = f;
        d->tail = f;
        d->held += f->segs;
        d->held_bytes += n - VNET_HDR_LEN;
    }
}

/* Write every frame now due; how many were written or dropped. */
static int64_t release_due(struct worker *s) {
    int64_t now = now_ns(), released = 0;
    while (s->heap_n && s->heap[0].due <= now) {
        struct heap_item it = heap_pop(s);
        struct direction *d = it.id < s->ndirs ? s->dirs[it.id] : NULL;
        if (!d || d->scheduled != it.due) continue; /* removed, cleared or rescheduled */
        while (d->head && d->head->due <= now) {
            struct frame *f = d->head;
            d->head = f->next;
            if (!d->head) d->tail = NULL;
            d->held -= f->segs;
            d->held_bytes -= f->len - VNET_HDR_LEN;
            emit(s, d, f->data, f->len, f->due);
            frame_free(s, f);
            released++;
        }
        d->scheduled = -1;
        if (d->head) {
            if (heap_push(s, d->head->due, it.id) == 0) d->scheduled = d->head->due;
            else clear_queue(s, d, &d->dropped_queue); /* cannot happen after a pop */
        }
        now = now_ns();
    }
    return released;
}

/* Arm the timer at absolute time `at` (CLOCK_MONOTONIC ns) unless it already is. */
static void arm(struct worker *s, int64_t at) {
    if (at == s->armed_at) return;
    struct itimerspec spec = {0};
    int64_t when = at > 0 ? at : 1;
    spec.it_value.tv_sec = when / 1000000000LL;
    spec.it_value.tv_nsec = when % 1000000000LL;
    timerfd_settime(s->timerfd, TFD_TIMER_ABSTIME, &spec, NULL);
    s->armed_at = at;
}

static void *loop(void *arg) {
    struct worker *s = arg;
    struct epoll_event evs[MAX_EVENTS];
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    int timeout = -1;
    int64_t tokens = SPIN_BURST_NS, last = now_ns(), work = 0;
    for (;;) {
        int64_t waited = timeout ? now_ns() : 0;
        int n = epoll_wait(s->epfd, evs, MAX_EVENTS, timeout);
        if (n < 0 && errno != EINTR) break;
        int64_t t = now_ns();
        if (timeout) /* slept: earn polling time; the relaying before it is neither */
            tokens += (int64_t)((t - waited) * (POLL_SHARE / (1.0 - POLL_SHARE)));
        else /* polling: the iteration since the last one is spent, less its relaying */
            tokens -= t - last - work;
        if (tokens > SPIN_BURST_NS) tokens = SPIN_BURST_NS;
        if (tokens < -SPIN_BURST_NS) tokens = -SPIN_BURST_NS; /* a debt repaid in 0.5 ms */
        last = t;
        pthread_mutex_lock(&s->lock);
        for (int i = 0; i < n; i++) {
            uint64_t key = evs[i].data.u64;
            if (key == EV_STOP) {
                pthread_mutex_unlock(&s->lock);
                return NULL;
            }
            if (key == EV_TIMER) {
                uint64_t expirations;
                if (read(s->timerfd, &expirations, sizeof expirations) < 0) { /* none yet */ }
                s->armed_at = -1;
                continue;
            }
            struct direction *d = (int64_t)key < s->ndirs ? s->dirs[key] : NULL;
            if (d && d->watched) read_direction(s, (int64_t)key, d);
        }
        int64_t released = s->heap_n ? release_due(s) : 0;
        work = n > 0 || released ? now_ns() - t : 0; /* relaying, not polling */
        /* Waking an idle (virtual) CPU costs tens of us, so the timer fires spin_ns before
         * the next release and the rest of the wait is polling (epoll_wait, no timeout). */
        timeout = -1;
        if (s->heap_n) {
            int64_t lead = tokens > 0 ? s->spin_ns : 0;
            if (s->heap[0].due - now_ns() <= lead) timeout = 0;
            else arm(s, s->heap[0].due - lead);
        }
        pthread_mutex_unlock(&s->lock);
    }
    return NULL;
}

/* -- the API called from Python (ctypes) -- */

/* A shaper: `n` workers, each a loop thread with its own epoll set, timer and heap. A
 * direction lives on one worker; its public id is local id * n + worker index. */
struct shaper {
    int n;
    int64_t adds;
    pthread_mutex_t add_lock;
    struct worker *w[];
};

static void worker_free(struct worker *s) {
    if (s->running) {
        uint64_t one = 1;
        if (write(s->stopfd, &one, sizeof one) < 0) { /* the loop still stops on join */ }
        pthread_join(s->thread, NULL);
    }
    for (int64_t i = 0; i < s->ndirs; i++) {
        if (s->dirs[i]) {
            clear_queue(s, s->dirs[i], NULL);
            free(s->dirs[i]->late);
            free(s->dirs[i]);
        }
    }
    while (s->pool) {
        struct frame *next = s->pool->next;
        free(s->pool);
        s->pool = next;
    }
    free(s->dirs);
    free(s->heap);
    free(s->scratch);
    if (s->epfd > 0) close(s->epfd);
    if (s->timerfd > 0) close(s->timerfd);
    if (s->stopfd > 0) close(s->stopfd);
    free(s);
}

static struct worker *worker_new(int fifo_prio, int64_t spin_ns) {
    struct worker *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->lock, NULL);
    s->armed_at = -1;
    s->sched_prio = fifo_prio;
    s->spin_ns = spin_ns;
    s->scratch = big_alloc(s);
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    s->stopfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!s->scratch || s->epfd < 0 || s->timerfd < 0 || s->stopfd < 0) goto fail;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_TIMER};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->timerfd, &ev) < 0) goto fail;
    ev.data.u64 = EV_STOP;
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->stopfd, &ev) < 0) goto fail;
    /* The loop thread blocks every signal, so a SIGTERM always reaches the Python thread
     * that handles it (a signal is delivered to any thread not blocking it). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int created = pthread_create(&s->thread, NULL, loop, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (created != 0) goto fail;
    s->running = 1;
    struct sched_param sp = {.sched_priority = fifo_prio > 0 ? fifo_prio : 0};
    int err = pthread_setschedparam(s->thread, fifo_prio > 0 ? SCHED_FIFO : SCHED_OTHER, &sp);
    s->sched_result = err ? -err : (fifo_prio > 0 ? fifo_prio : 0);
    return s;
fail:
    worker_free(s);
    return NULL;
}

/* A shaper with `threads` loop threads running; `fifo_prio` > 0 asks for SCHED_FIFO;
 * releases due within `spin_ns` are awaited by polling (0: always sleep until the timer
 * fires). */
struct shaper *shaper_new(int fifo_prio, int64_t spin_ns, int threads) {
    if (threads < 1) threads = 1;
    struct shaper *sh = calloc(1, sizeof *sh + threads * sizeof(struct worker *));
    if (!sh) return NULL;
    pthread_mutex_init(&sh->add_lock, NULL);
    for (int i = 0; i < threads; i++) {
        sh->w[i] = worker_new(fifo_prio, spin_ns);
        if (!sh->w[i]) {
            for (int j = 0; j < i; j++) worker_free(sh->w[j]);
            free(sh);
            return NULL;
        }
        sh->n++;
    }
    return sh;
}

/* The loop threads' scheduling: FIFO priority, 0 for SCHED_OTHER, -errno if refused. */
int shaper_scheduling(struct shaper *sh) { return sh->w[0]->sched_result; }

/* How many loop threads relay frames. */
int shaper_threads(struct shaper *sh) { return sh->n; }

/* Start forwarding frames read from src_fd to dst_fd; returns the direction's id or -errno.
 * Directions are spread over the workers so that link k's two directions land on workers
 * k and k + 1 (mod n): a chain of links splits its heavy direction across threads. */
int64_t shaper_add(struct shaper *sh, int src_fd, int dst_fd) {
    pthread_mutex_lock(&sh->add_lock);
    int64_t nth = sh->adds++;
    pthread_mutex_unlock(&sh->add_lock);
    int wi = (int)((nth / 2 + nth % 2) % sh->n);
    struct worker *s = sh->w[wi];
    struct direction *d = calloc(1, sizeof *d);
    if (!d) return -ENOMEM;
    d->src_fd = src_fd;
    d->dst_fd = dst_fd;
    d->up = 1;
    d->limit = 1000;
    d->scheduled = -1;
    pthread_mutex_lock(&s->lock);
    if (s->ndirs == s->capdirs) {
        int64_t cap = s->capdirs ? s->capdirs * 2 : 64;
        struct direction **dirs = realloc(s->dirs, cap * sizeof *dirs);
        if (!dirs) {
            pthread_mutex_unlock(&s->lock);
            free(d);
            return -ENOMEM;
        }
        s->dirs = dirs;
        s->capdirs = cap;
    }
    int64_t id = s->ndirs++;
    s->dirs[id] = d;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)id};
    int64_t ret = id * sh->n + wi;
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, src_fd, &ev) < 0) {
        ret = -errno;
        s->dirs[id] = NULL;
        free(d);
    } else {
        d->watched = 1;
    }
    pthread_mutex_unlock(&s->lock);
    return ret;
}

/* The worker of public id `id`, locked, and the direction (NULL if there is none). */
static struct direction *get(struct shaper *sh, int64_t id, struct worker **out) {
    struct worker *s = sh->w[id >= 0 ? id % sh->n : 0];
    pthread_mutex_lock(&s->lock);
    *out = s;
    if (id < 0) return NULL;
    int64_t local = id / sh->n;
    return local < s->ndirs ? s->dirs[local] : NULL;
}

/* Set a direction's shaping; `reseed` restarts its PRNG from `seed`. */
int shaper_configure(struct shaper *sh, int64_t id, int64_t delay_ns, int64_t jitter_ns,
                     double loss_pct, int64_t limit, int reseed, uint64_t seed) {
    struct worker *s;
    struct direction *d = get(sh, id, &s);
    if (d) {
        d->delay_ns = delay_ns;
        d->jitter_ns = jitter_ns;
        d->loss_pct = loss_pct;
        d->limit = limit;
        if (reseed) d->rng = seed;
    }
    pthread_mutex_unlock(&s->lock);
    return d ? 0 : -ENOENT;
}

/* Bring a direction up or down; going down drops its held frames (dropped_down). */
int shaper_set_up(struct shaper *sh, int64_t id, int up) {
    struct worker *s;
    struct direction *d = get(sh, id, &s);
    if (d) {
        d->up = up;
        if (!up) clear_queue(s, d, &d->dropped_down);
    }
    pthread_mutex_unlock(&s->lock);
    return d ? 0 : -ENOENT;
}

/* Forget a direction: stop polling its fd (the caller closes the fds afterwards). */
int shaper_remove(struct shaper *sh, int64_t id) {
    struct worker *s;
    struct direction *d = get(sh, id, &s);
    if (d) {
        unwatch(s, d);
        clear_queue(s, d, NULL);
        free(d->late);
        free(d);
        s->dirs[id / sh->n] = NULL;
    }
    pthread_mutex_unlock(&s->lock);
    return d ? 0 : -ENOENT;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Counters, held frames and the p99/max of the last LATE_SAMPLES lateness values. */
int shaper_stats(struct shaper *sh, int64_t id, struct shaper_stats *out) {
    int64_t *copy = malloc(LATE_SAMPLES * sizeof *copy);
    if (!copy) return -ENOMEM;
    int64_t n = 0;
    struct worker *s;
    struct direction *d = get(sh, id, &s);
    if (d) {
        out->received = d->received;
        out->forwarded = d->forwarded;
        out->dropped_loss = d->dropped_loss;
        out->dropped_queue = d->dropped_queue;
        out->dropped_down = d->dropped_down;
        out->dropped_write = d->dropped_write;
        out->read_errors = d->read_errors;
        out->max_frame = d->max_frame;
        out->held = d->held;
        out->held_bytes = d->held_bytes;
        out->up = d->up;
        n = d->late_n < LATE_SAMPLES ? d->late_n : LATE_SAMPLES;
        if (n) memcpy(copy, d->late, n * sizeof *copy);
    }
    pthread_mutex_unlock(&s->lock);
    if (!d) {
        free(copy);
        return -ENOENT;
    }
    out->late_p99_ns = out->late_max_ns = -1;
    if (n) {
        qsort(copy, n, sizeof *copy, cmp_i64);
        int64_t rank = (int64_t)ceil(0.99 * (double)n) - 1;
        if (rank > n - 1) rank = n - 1;
        if (rank < 0) rank = 0;
        out->late_p99_ns = copy[rank];
        out->late_max_ns = copy[n - 1];
    }
    free(copy);
    return 0;
}

/* Sum the workers' lateness histograms (HIST_BUCKETS counts); `reset` zeroes them. */
int shaper_histogram(struct shaper *sh, uint64_t *counts, uint64_t *n, uint64_t *max,
                     int reset) {
    memset(counts, 0, HIST_BUCKETS * sizeof *counts);
    *n = *max = 0;
    for (int i = 0; i < sh->n; i++) {
        struct worker *s = sh->w[i];
        pthread_mutex_lock(&s->lock);
        for (int b = 0; b < HIST_BUCKETS; b++) counts[b] += s->hist[b];
        *n += s->hist_n;
        if (s->hist_max > *max) *max = s->hist_max;
        if (reset) {
            memset(s->hist, 0, sizeof s->hist);
            s->hist_n = s->hist_max = 0;
        }
        pthread_mutex_unlock(&s->lock);
    }
    return HIST_BUCKETS;
}

/* Stop the loop threads and free everything (the caller closes the TAP fds). */
void shaper_free(struct shaper *sh) {
    if (!sh) return;
    for (int i = 0; i < sh->n; i++) worker_free(sh->w[i]);
    free(sh);
}

/* The ABI version the Python binding checks before use. */
int shaper_abi_version(void) { return 4; }
