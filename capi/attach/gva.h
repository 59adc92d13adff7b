/*
 * The C flavour of goverbs' libibverbs.so.1: every gv_* function the C ABI layer
 * (the .c files of capi/) calls is implemented here in C over the attach protocol
 * (docs/attach-protocol.md) to a `goverbs serve` daemon, so that the library carries no
 * Go runtime. This header declares those gv_* functions, with the prototypes cgo
 * generates for the Go flavour's exports (the .go files of capi/), and the objects behind the
 * handles: in this flavour a handle is the address of one of the structs below.
 */
#ifndef GOVERBS_CAPI_ATTACH_GVA_H
#define GOVERBS_CAPI_ATTACH_GVA_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <infiniband/verbs.h>

/* The gv_* entry points (capi/device.go, objects.go, qp.go, xrc.go in the Go flavour). */
int gv_devices(char *names, int nameLen, uint64_t *guids, int max);
int gv_open(char *name, int asyncFD, uintptr_t *out);
int gv_close(uintptr_t h);
int gv_query_device(uintptr_t h, struct ibv_device_attr *a);
int gv_query_port(uintptr_t h, uint8_t port, struct ibv_port_attr *a);
int gv_query_gid(uintptr_t h, uint8_t port, int index, union ibv_gid *gid);
int gv_gid_count(uintptr_t h, uint8_t port);
int gv_alloc_pd(uintptr_t ch, uintptr_t *out);
int gv_dealloc_pd(uintptr_t h);
int gv_reg_mr(uintptr_t ph, void *addr, size_t length, unsigned int access, uintptr_t *out,
	      uint32_t *lkey, uint32_t *rkey);
int gv_dereg_mr(uintptr_t h);
int gv_create_comp_channel(uintptr_t ch, int wfd, uintptr_t *out);
int gv_destroy_comp_channel(uintptr_t h);
int gv_comp_channel_fd(uintptr_t h);
int gv_get_cq_event(uintptr_t h, int wait, void **cq);
int gv_create_cq(uintptr_t ch, int *cqe, uintptr_t chanH, void *cq, uintptr_t *out);
int gv_destroy_cq(uintptr_t h);
int gv_resize_cq(uintptr_t h, int *cqe);
int gv_req_notify_cq(uintptr_t h, int solicitedOnly);
int gv_poll_cq(uintptr_t h, int n, struct ibv_wc *out);
int gv_create_srq(uintptr_t ph, struct ibv_srq_attr *a, void *srq, uintptr_t *out);
int gv_modify_srq(uintptr_t h, struct ibv_srq_attr *a, int mask);
int gv_query_srq(uintptr_t h, struct ibv_srq_attr *a);
int gv_destroy_srq(uintptr_t h);
int gv_create_ah(uintptr_t ph, struct ibv_ah_attr *a, uintptr_t *out);
int gv_destroy_ah(uintptr_t h);
int gv_init_ah_from_wc(uint8_t port, struct ibv_wc *wc, void *grh, struct ibv_ah_attr *out);
int gv_alloc_mw(uintptr_t ph, int typ, uintptr_t *out, uint32_t *rkey);
int gv_dealloc_mw(uintptr_t h);
int gv_bind_mw(uintptr_t qh, uintptr_t mwh, struct ibv_mw_bind *bind, uint32_t *rkey);
int gv_create_qp(uintptr_t ph, uintptr_t sendCQ, uintptr_t recvCQ, uintptr_t srqH, int typ, int sigAll,
		 struct ibv_qp_cap *cap, void *qp, uintptr_t *out, uint32_t *qpn);
int gv_destroy_qp(uintptr_t h);
int gv_modify_qp(uintptr_t h, struct ibv_qp_attr *a, int mask);
int gv_query_qp(uintptr_t h, struct ibv_qp_attr *a, struct ibv_qp_init_attr *init);
int gv_post_send(uintptr_t h, struct ibv_send_wr *wr, int *bad);
int gv_post_recv(uintptr_t h, int srq, struct ibv_recv_wr *wr, int *bad);
int gv_mcast(uintptr_t qh, void *gid, uint16_t lid, int attach);
int gv_open_xrcd(uintptr_t ch, int fd, int oflags, uintptr_t *out);
int gv_close_xrcd(uintptr_t h);
int gv_create_xrc_srq(uintptr_t ph, uintptr_t xh, uintptr_t cqh, struct ibv_srq_attr *a, void *srq, uintptr_t *out);
int gv_get_srq_num(uintptr_t h, uint32_t *num);
int gv_create_xrc_recv_qp(uintptr_t xh, void *qp, uintptr_t *out, uint32_t *qpn);

/* The protocol's numbers (docs/attach-protocol.md, "Commands"). */
enum {
	GVA_VERSION = 1,
	GVA_MAX_MSG = 4096,
	GVA_HDR = 16,
	GVA_REPLY = 0x8000,
	GVA_MAX_FDS = 8,
	GVA_MAX_SGE = 32,
	GVA_SEND_HDR = 96,
	GVA_RECV_HDR = 16,
	GVA_SGE = 16,
	GVA_CQE = 64,
	GVA_RING_CTRL = 256,
	GVA_OFF_HEAD = 0,
	GVA_OFF_TAIL = 128,
	GVA_OFF_SLEEPING = 192,
	/* WQEs the daemon may hold taken from a send ring but not yet posted (its batch) */
	GVA_DAEMON_BATCH = 32,
};

enum gva_op {
	GVA_HELLO = 1, GVA_QUERY_DEVICE, GVA_QUERY_PORT, GVA_QUERY_GID, GVA_ALLOC_PD, GVA_DEALLOC_PD,
	GVA_REG_MR, GVA_DEREG_MR, GVA_CREATE_CQ, GVA_RESIZE_CQ, GVA_DESTROY_CQ, GVA_CREATE_QP,
	GVA_MODIFY_QP, GVA_QUERY_QP, GVA_DESTROY_QP, GVA_CREATE_SRQ, GVA_ARM_SRQ, GVA_QUERY_SRQ,
	GVA_DESTROY_SRQ, GVA_CREATE_AH, GVA_DESTROY_AH, GVA_ALLOC_MW, GVA_DEALLOC_MW, GVA_BIND_MW,
	GVA_ATTACH_MCAST, GVA_DETACH_MCAST, GVA_QP_COUNTERS, GVA_DEVICE_COUNTERS,
	/* 29-45: rdma_cm (capi/rdmacm) */
	GVA_OPEN_XRCD = 46, GVA_CLOSE_XRCD, GVA_CREATE_XRC_SRQ, GVA_CREATE_XRC_RECV_QP,
};

/* The kinds of object an async event names. */
enum { GVA_EV_PORT, GVA_EV_QP, GVA_EV_CQ, GVA_EV_SRQ, GVA_EV_LEN = 16 };

/* A message being written: the header's room, then the payload. */
struct gva_msg {
	uint8_t b[GVA_MAX_MSG];
	size_t n;
};

/* A reply's payload being read; short is set once a field ran past its end. */
struct gva_rd {
	const uint8_t *p;
	size_t n;
	int short_;
};

void gva_msg_init(struct gva_msg *m);
void gva_put8(struct gva_msg *m, uint8_t v);
void gva_put16(struct gva_msg *m, uint16_t v);
void gva_put32(struct gva_msg *m, uint32_t v);
void gva_put64(struct gva_msg *m, uint64_t v);
void gva_putn(struct gva_msg *m, const void *p, size_t n);
uint8_t gva_get8(struct gva_rd *r);
uint16_t gva_get16(struct gva_rd *r);
uint32_t gva_get32(struct gva_rd *r);
uint64_t gva_get64(struct gva_rd *r);
void gva_getn(struct gva_rd *r, void *dst, size_t n);
/* gva_getstr reads a string into dst (NUL-terminated, truncated to cap - 1). */
void gva_getstr(struct gva_rd *r, char *dst, size_t cap);

/*
 * A device context: one connection to the daemon (ibv_open_device), used by one
 * command at a time. pid is the process that opened it: after fork() a child's copy is
 * dead (its sockets were closed in the child), and the child opens the device anew.
 */
struct gva_dev {
	pthread_mutex_t mu; /* one command at a time */
	int sock;	    /* the control socket */
	int evsock;	    /* the event socket */
	int doorbell;	    /* the daemon's doorbell eventfd */
	int async_wfd;	    /* where async events go (the context's async_fd pipe) */
	int stopfd;	    /* eventfd that stops the event thread */
	pthread_t evthr;
	int have_thr;
	uint32_t seq;
	int dead; /* the daemon is gone (atomic) */
	pid_t pid;
	char name[64];
	/* what the device is: read once at open, as it does not change */
	struct ibv_device_attr attr;
	struct ibv_port_attr port;
	union ibv_gid gids[16];
	int gid_index[16], ngids;
	/* handle -> C object, for async events */
	pthread_mutex_t objmu;
	struct gva_objref { uint32_t h, kind; void *obj; } *objs;
	size_t nobjs, capobjs;
	struct gva_mr *mrs; /* live regions, whose pages go back at close (under objmu) */
	struct gva_dev *next; /* the process's list of devices (fork) */
};

/*
 * gva_call sends op with the payload of req (whose header it fills) and descriptors
 * fds, and waits for the reply: 0 with the payload in *rep (backed by buf, GVA_MAX_MSG
 * bytes) and exactly want_fds descriptors in rfds, or an errno. A refusal's message is
 * printed when GOVERBS_DEBUG is set.
 */
int gva_call(struct gva_dev *d, uint16_t op, struct gva_msg *req, const int *fds, int nfds,
	     uint8_t *buf, struct gva_rd *rep, int *rfds, int want_fds);
/* gva_simple is a command with one u32 argument and no reply payload to read. */
int gva_simple(struct gva_dev *d, uint16_t op, uint32_t h);
/* gva_getpid is getpid without a syscall after the first (gva_conn.c). */
pid_t gva_getpid(void);
/* gva_usable is 0, or the errno of a device whose daemon is gone or that a child inherited. */
int gva_usable(struct gva_dev *d);
struct gva_entry;
/* gva_connect dials the daemon serving e's address, starting one if none listens (autostart). */
int gva_connect(const struct gva_entry *e, int *sock);
void gva_track(struct gva_dev *d, uint32_t kind, uint32_t h, void *obj);
void gva_untrack(struct gva_dev *d, uint32_t kind, uint32_t h);
void *gva_lookup(struct gva_dev *d, uint32_t kind, uint32_t h);
void gva_ring_doorbell(struct gva_dev *d);
/* gva_debug says why something failed on stderr when GOVERBS_DEBUG is set. */
void gva_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The process's open contexts, whose descriptors a child closes after fork(). */
int gva_dev_register(struct gva_dev *d);
void gva_dev_unregister(struct gva_dev *d);
/*
 * gva_thread starts a library thread with every signal blocked (the program's signals
 * are for the program's threads); gva_join joins it.
 */
int gva_thread(pthread_t *t, void *(*fn)(void *), void *arg);
void gva_join(pthread_t t);
/* gva_program_threads is how many threads the program runs besides the library's (-1: unknown). */
int gva_program_threads(void);
/* Program threads parked in librdmacm (gva_private.c): they do not count as running. */
int gva_parked_threads(void);
int gva_parking_used(void);
void gva_move_begin(void);
void gva_move_end(void);

/* The device list (GOVERBS_DEVICES). */
struct gva_entry {
	char name[64];
	char addr[64]; /* as the socket path names it */
	char spec[192]; /* the entry, for a daemon the library starts (without "@serve") */
	uint64_t guid;
};
int gva_parse_devices(struct gva_entry *out, int max);

/* Objects behind handles. */
struct gva_pd {
	struct gva_dev *d;
	uint32_t h;
};

struct gva_span; /* pages moved onto a memfd (gva_mem.c) */

struct gva_mr {
	struct gva_dev *d; /* NULL once its context closed */
	uint32_t h;
	struct gva_span *span;
	struct gva_mr *prev, *next; /* the context's live regions (under d->objmu) */
};

struct gva_ah {
	struct gva_dev *d;
	uint32_t h;
};

/* An open of an XRC domain (gva_xrc.c). */
struct gva_xrcd {
	struct gva_dev *d;
	uint32_t h;
};

struct gva_mw {
	struct gva_dev *d;
	uint32_t h;
};

/* A completion channel: a thread forwards its CQs' eventfds to the program's pipe. */
struct gva_chan {
	struct gva_dev *d;
	int epfd;	    /* the channel's fd: its CQs' eventfds */
	pthread_mutex_t mu; /* an event is taken only from a CQ still listed */
	void **cqs;	    /* the C ibv_cq of each member CQ */
	size_t ncqs, capcqs;
};

struct gva_cq {
	struct gva_dev *d;
	uint32_t h;
	uint8_t *mem;
	size_t size;
	uint32_t slots, depth;
	uint32_t *arm, *overflow;
	uint64_t tail; /* private: completions taken */
	uint64_t head; /* the daemon's head as last read */
	int evfd;
	struct gva_chan *chan;
	void *cobj; /* the program's ibv_cq */
	pthread_mutex_t mu;
	unsigned empties;
	/* the QPs whose receive queue completes here, for their outstanding counts (under mu) */
	struct gva_qp **rqps;
	size_t nrqps, caprqps;
};

/* A work queue we produce WQEs into: a send queue, a receive queue or an SRQ. */
struct gva_wq {
	pthread_mutex_t mu;
	uint8_t *ring; /* the ring's control block */
	uint32_t slots, slot_size, max_sge;
	uint64_t head, tail; /* ours, and the daemon's as last read */
};

struct gva_qp {
	struct gva_dev *d;
	uint32_t h, qpn;
	int type;
	int state; /* as last set or queried (atomic) */
	struct ibv_qp_cap cap;
	uint8_t *mem;
	size_t size;
	struct gva_wq sq, rq;
	int has_rq;
	struct gva_cq *rcq;
	uint32_t rq_outstanding; /* receives posted and not yet polled (atomic) */
	void *cobj;
	/* inline staging: sq.slots + GVA_DAEMON_BATCH slots of max_inline bytes, registered */
	uint8_t *stage;
	size_t stage_size;
	uint32_t stage_slots, max_inline;
	struct gva_mr *stage_mr;
	uint32_t stage_lkey;
};

struct gva_srq {
	struct gva_dev *d;
	uint32_t h;
	uint32_t num; /* an XRC SRQ's number (ibv_get_srq_num) */
	uint8_t *mem;
	size_t size;
	struct gva_wq rq;
	void *cobj;
};

/*
 * gva_srq_create sends req (CREATE_SRQ or CREATE_XRC_SRQ) and maps the SRQ's ring from
 * the reply; an XRC SRQ's reply ends with its number.
 */
int gva_srq_create(struct gva_pd *p, uint16_t op, struct gva_msg *req, struct ibv_srq_attr *a, void *srq,
		   uintptr_t *out);
int gva_wq_post_recv(struct gva_dev *d, struct gva_wq *wq, struct ibv_recv_wr *wr, int *bad,
		     uint32_t *outstanding, uint32_t max, int sync);
int gva_cq_add_rq(struct gva_cq *q, struct gva_qp *qp);
void gva_cq_remove_rq(struct gva_cq *q, struct gva_qp *qp);
int gva_map(int fd, size_t size, uint8_t **mem);
/* gva_close_mrs moves the pages of regions a closing context leaves back to private memory. */
void gva_close_mrs(struct gva_dev *d);
int gva_reg_internal(struct gva_pd *p, void *addr, size_t length, unsigned int access, struct gva_mr **out,
		     uint32_t *lkey, uint32_t *rkey);

#endif
